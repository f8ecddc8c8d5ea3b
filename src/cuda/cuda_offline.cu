/*
 * cuda_offline.cu - whole-signal encode and decode on the device (gpu.h): batches whose step
 * advances each slot many frames at once (plan.c with L.frames > 1: the convs see that many more
 * samples, the transformer that many more positions under the exact window, the quantizer that
 * many latents as rows), scheduled by src/offline_sched.c. One signal takes one slot of one batch
 * (its taps hand over the real frames only); many signals share two batches ("lanes") of several
 * slots each, so that the host stages one lane's step while the device runs the other's.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/cuda_batch.cuh"

extern "C" {
#include "offline_sched.h"
}

// A lane's step: at most OFFLINE_ROWS frames (slots x frames per step: 164 s of audio) and
// OFFLINE_POSITIONS transformer positions per slot (Mimi: 1024 frames of 2 positions; Pocket TTS's
// Mimi: 128 frames of 16). The products are about as efficient at 1024 frames; the ~100 launches
// of a step and their tails are not: 64 files of 60 s in bf16 went from 17,228-17,342 /
// 17,394-17,421x to 17,912-18,166 / 18,843-18,875x real time (H200). Frames per step are powers
// of two from OFFLINE_MIN_FRAMES, so that calls of different lengths share a few product shapes
// (and their tuning).
#define OFFLINE_ROWS 2048
#define OFFLINE_POSITIONS 2048
#define OFFLINE_MIN_FRAMES 16
#define OFFLINE_LANES 2
// The cost of a step apart from its frames, in frames of work (a 512-frame step of 16 signals ran
// at 0.93 times the rate per frame of a 1024-frame one on an H200, strict), and the extra cost
// per frame of short steps, which re-read the attention window (context + F positions) for F
// frames (attention was about 10% of a 64-frame step).
#define OFFLINE_STEP_COST 64.0
static double frame_cost(int frames) { return frames >= 64 ? 1.0 : frames >= 32 ? 1.08 : 1.24; }

// The most frames per step of `slots` slots whose attention fits the device's shared memory per
// block (the two-pass kernel of head sizes other than 64 holds all the step's positions of a row
// in one block).
static int most_frames(const struct mimi_model *m, int slots) {
    int limit = 48 * 1024;
    cudaDeviceGetAttribute(&limit, cudaDevAttrMaxSharedMemoryPerBlockOptin, m->cuda->device);
    const struct transformer *t = &m->enc_tr;  // the decoder's has the same geometry
    int F = OFFLINE_ROWS / slots;
    if (F > OFFLINE_POSITIONS / m->steps_per_frame) F = OFFLINE_POSITIONS / m->steps_per_frame;
    for (; F > 1; F--) {
        const int steps = m->steps_per_frame * F;
        if (mimi_cuda_attention_smem(steps, t->head_dim, t->context + steps) + 1024 <= (size_t)limit) break;
    }
    return F > 1 ? F : 1;
}

static size_t free_memory(const struct mimi_model *m) {
    size_t free_bytes = 0, total = 0;
    if (cudaSetDevice(m->cuda->device) != cudaSuccess || cudaMemGetInfo(&free_bytes, &total) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return free_bytes;
}

// The device memory of a lane: its slots' state and its scratch.
static size_t lane_bytes(const struct gpu_layout *L) {
    return sizeof(float) * (L->scratch_elems + L->slot_elems * (size_t)L->capacity);
}

// Whether `lanes` lanes of `slots` slots stepping `frames` frames fit in half the device's free
// memory.
static int lanes_fit(const struct mimi_model *m, const struct mimi_batch_params *bp, int lanes, int slots, int frames,
                     size_t free_bytes) {
    struct gpu_layout L;
    if (gpu_layout_init(&L, m, bp->direction, slots, bp->n_codebooks, bp->attention, frames)) return 1;
    return lane_bytes(&L) * lanes <= free_bytes / 2;
}

// ---- lanes kept between calls ----

// A model keeps the lanes of its last whole-signal calls (healthy, without taps; at most
// OFFLINE_KEPT) for a later call of the same shape: making a lane of 1024 frames takes 2-5 ms and
// freeing it 2.5-4 ms, about as long as a 20 s signal's one step. mimi_model_trim frees them, and
// so does a streaming batch of any model on the device that does not fit otherwise: every
// model's kept lanes are listed in `kept_models` (locked before any model's `lock`, and before
// the batches' setup lock that destroying a lane takes).
#define OFFLINE_KEPT (2 * OFFLINE_LANES)
struct offline_kept {
    pthread_mutex_t lock;
    struct mimi_batch *b[OFFLINE_KEPT];
    int device;
    struct offline_kept *next;  // in kept_models
};

static pthread_mutex_t kept_models_lock = PTHREAD_MUTEX_INITIALIZER;
static struct offline_kept *kept_models;

extern "C" struct offline_kept *mimi_cuda_kept_new(int device) {
    struct offline_kept *k = (struct offline_kept *)calloc(1, sizeof *k);
    if (k && pthread_mutex_init(&k->lock, NULL)) free(k), k = NULL;
    if (!k) return NULL;
    k->device = device;
    pthread_mutex_lock(&kept_models_lock);
    k->next = kept_models, kept_models = k;
    pthread_mutex_unlock(&kept_models_lock);
    return k;
}

static int same_shape(const struct mimi_batch *b, const struct mimi_batch_params *bp, int frames) {
    const struct gpu_layout *L = &b->gpu->L;
    return L->direction == bp->direction && L->capacity == bp->capacity && L->frames == frames &&
           L->n_codebooks == bp->n_codebooks;
}

// Destroys the kept lanes that are not of this shape: of this direction, or of any when `all`;
// every kept lane when bp is NULL. Returns how many.
static int kept_evict(struct offline_kept *k, const struct mimi_batch_params *bp, int frames, int all) {
    struct mimi_batch *gone[OFFLINE_KEPT] = {NULL};
    int n = 0;
    pthread_mutex_lock(&k->lock);
    for (int i = 0; i < OFFLINE_KEPT; i++) {
        const struct mimi_batch *b = k->b[i];
        if (b && (!bp || (!same_shape(b, bp, frames) && (all || b->gpu->L.direction == bp->direction))))
            gone[i] = k->b[i], k->b[i] = NULL, n++;
    }
    pthread_mutex_unlock(&k->lock);
    for (int i = 0; i < OFFLINE_KEPT; i++) mimi_batch_destroy(gone[i]);
    return n;
}

// The device memory of the kept lanes (of this shape only, when bp is given).
static size_t kept_bytes(struct offline_kept *k, const struct mimi_batch_params *bp, int frames) {
    size_t bytes = 0;
    pthread_mutex_lock(&k->lock);
    for (int i = 0; i < OFFLINE_KEPT; i++)
        if (k->b[i] && (!bp || same_shape(k->b[i], bp, frames))) bytes += lane_bytes(&k->b[i]->gpu->L);
    pthread_mutex_unlock(&k->lock);
    return bytes;
}

// A kept lane of this shape, taken out of the model (NULL: none).
static struct mimi_batch *kept_take(struct offline_kept *k, const struct mimi_batch_params *bp, int frames) {
    struct mimi_batch *b = NULL;
    pthread_mutex_lock(&k->lock);
    for (int i = 0; !b && i < OFFLINE_KEPT; i++)
        if (k->b[i] && same_shape(k->b[i], bp, frames)) b = k->b[i], k->b[i] = NULL;
    pthread_mutex_unlock(&k->lock);
    return b;
}

// Keeps a lane whose pass ended well for a later call, or destroys it (taps, a failure, no room).
static void kept_give(struct offline_kept *k, struct mimi_batch *b) {
    if (!b) return;
    if (!b->tap && !b->gpu->poisoned && !b->gpu->pending) {
        pthread_mutex_lock(&k->lock);
        for (int i = 0; b && i < OFFLINE_KEPT; i++)
            if (!k->b[i]) k->b[i] = b, b = NULL;
        pthread_mutex_unlock(&k->lock);
    }
    mimi_batch_destroy(b);
}

extern "C" int mimi_cuda_offline_trim(const struct mimi_model *m) { return kept_evict(m->cuda->kept, NULL, 0, 1); }

extern "C" int mimi_cuda_offline_trim_device(int device) {
    int n = 0;
    pthread_mutex_lock(&kept_models_lock);
    for (struct offline_kept *k = kept_models; k; k = k->next)
        if (k->device == device) n += kept_evict(k, NULL, 0, 1);
    pthread_mutex_unlock(&kept_models_lock);
    return n;
}

extern "C" void mimi_cuda_kept_free(struct offline_kept *k) {
    if (!k) return;
    pthread_mutex_lock(&kept_models_lock);
    struct offline_kept **p = &kept_models;
    while (*p && *p != k) p = &(*p)->next;
    if (*p) *p = k->next;
    pthread_mutex_unlock(&kept_models_lock);
    kept_evict(k, NULL, 0, 1);
    pthread_mutex_destroy(&k->lock);
    free(k);
}

// ---- the shape of a pass ----

// Frames per step and slots per lane for n signals: of the power-of-two frames per step (at most
// the longest signal's, rounded up), the one with the least estimated time, with as many slots
// as the signals need up to OFFLINE_ROWS frames per step. A step costs OFFLINE_STEP_COST + slots x
// frames x frame_cost; a pass takes at least the longest signal's steps, and at least its
// padded frames over a step's. Then slots (or, with one slot, frames) are halved until the lanes
// fit the device's free memory. One long signal steps 1024 frames at a time; 64 signals of 60 s
// 32 slots of 64 frames, 16 of them 8 slots of 256; many short ones many slots of few frames.
static void offline_shape(const struct mimi_model *m, const struct mimi_batch_params *bp, int lanes, int n,
                          const struct offline_signal *sig, int *frames, int *slots) {
    int64_t longest = 1;
    for (int i = 0; i < n; i++) longest = sig[i].n_frames > longest ? sig[i].n_frames : longest;
    const int wanted = (n + lanes - 1) / lanes;
    double best = -1;
    *frames = 1, *slots = 1;
    for (int F = OFFLINE_MIN_FRAMES; F <= OFFLINE_ROWS; F *= 2) {
        const int S = wanted < OFFLINE_ROWS / F ? wanted : OFFLINE_ROWS / F, most = most_frames(m, S);
        const int f = F < most ? F : most;
        int64_t padded = 0;
        for (int i = 0; i < n; i++) padded += (sig[i].n_frames + f - 1) / f * f;
        int64_t steps = (padded + (int64_t)S * f - 1) / ((int64_t)S * f);
        if (steps < (longest + f - 1) / f) steps = (longest + f - 1) / f;
        const double t = (double)steps * (OFFLINE_STEP_COST + (double)S * f * frame_cost(f));
        if (best < 0 || t < best) best = t, *frames = f, *slots = S;
        if (f < F || F >= longest) break;  // larger steps are not possible, or only pad more
    }
    // the lanes kept from earlier calls count as free: they are freed when not of this shape
    struct offline_kept *k = m->cuda->kept;
    const size_t free_bytes = free_memory(m) + kept_bytes(k, NULL, 0);
    while ((*slots > 1 || *frames > 1) && !lanes_fit(m, bp, lanes, *slots, *frames, free_bytes)) {
        if (*slots > 1) *slots /= 2;
        else *frames /= 2;
    }
    struct mimi_batch_params shape = *bp;
    shape.capacity = *slots;
    kept_evict(k, &shape, *frames, 0);
    if (!lanes_fit(m, &shape, lanes, *slots, *frames, free_memory(m) + kept_bytes(k, &shape, *frames)))
        kept_evict(k, &shape, *frames, 1);
}

// ---- one pass ----

// The lanes of one pass. Lane 0 is made before the first step; the others when their first step
// is staged, so that making them (host work, 2-5 ms each) overlaps the steps already queued.
struct lanes {
    struct mimi_batch *lane[OFFLINE_LANES];
    const struct mimi_model *m;
    struct mimi_batch_params bp;
    int frames;
};

// A kept lane of the pass's shape, its slots reset, or a new one.
static int lane_make(struct lanes *c, int l) {
    int rc = MIMI_OK;
    struct mimi_batch *b = c->bp.tap ? NULL : kept_take(c->m->cuda->kept, &c->bp, c->frames);
    if (b) {
        c->lane[l] = b;
        b->errmsg[0] = 0;
        for (int s = 0; rc == MIMI_OK && s < c->bp.capacity; s++) rc = mimi_cuda_slot_reset(b, s);
        return rc;
    }
    c->lane[l] = mimi_cuda_offline_create(c->m, &c->bp, c->frames, &rc);
    for (int s = 0; rc == MIMI_OK && s < c->bp.capacity; s++)
        if (mimi_batch_open(c->lane[l]) != s) rc = MIMI_ESTATE;
    return rc;
}

// A lane's input rows are its pinned stage (the scheduler writes each row once, unchecked:
// samples were checked by the caller's check, codes and latents before the pass), free once the
// queued step's input copy is done.
static int lane_input(void *ctx, int lane, void **rows) {
    struct lanes *c = (struct lanes *)ctx;
    int rc = c->lane[lane] ? mimi_cuda_input_free(c->lane[lane]) : lane_make(c, lane);
    if (rc == MIMI_OK) *rows = mimi_cuda_input_rows(c->lane[lane]);
    return rc;
}

static int lane_submit(void *ctx, int lane, int n, const int *slots, const void *in, int valid) {
    struct mimi_batch *b = ((struct lanes *)ctx)->lane[lane];
    b->gpu->tap_frames = valid;
    return mimi_cuda_submit(b, n, slots, in);
}

static int lane_collect(void *ctx, int lane, const void **out) {
    struct mimi_batch *b = ((struct lanes *)ctx)->lane[lane];
    const int rc = mimi_cuda_collect(b, NULL);
    *out = mimi_cuda_output_rows(b);
    return rc;
}

static void lane_copy(void *ctx, void *dst, const void *src, size_t bytes) {
    mimi_host_copy(((struct lanes *)ctx)->m, dst, src, bytes);
}

static int lane_reset(void *ctx, int lane, int slot) {
    return mimi_cuda_slot_reset(((struct lanes *)ctx)->lane[lane], slot);
}

static void lane_retire(void *ctx, int lane) {
    struct lanes *c = (struct lanes *)ctx;
    kept_give(c->m->cuda->kept, c->lane[lane]);
    c->lane[lane] = NULL;
}

extern "C" int mimi_cuda_offline(const struct mimi_model *m, int direction, int n_codebooks, mimi_tap_fn tap,
                                 void *tap_user, int want_codes, int n, const struct offline_signal *sig,
                                 int (*check)(void *, int), void *check_ctx) {
    struct mimi_batch_params bp;
    mimi_batch_params_default(&bp);
    bp.direction = direction;
    bp.n_codebooks = n_codebooks > 0 ? n_codebooks : bp.n_codebooks;
    bp.attention = MIMI_ATTENTION_WINDOW;
    bp.tap = tap;
    bp.tap_user = tap_user;
    struct offline_lanes d;
    d.n_lanes = n > 1 ? OFFLINE_LANES : 1;
    offline_shape(m, &bp, d.n_lanes, n, sig, &d.frames, &d.slots);
    d.encode = direction == MIMI_DIRECTION_ENCODE;
    d.frame_size = m->frame_size;
    d.per_frame = want_codes ? n_codebooks : m->frame_dim;
    d.input = lane_input, d.submit = lane_submit, d.collect = lane_collect, d.reset = lane_reset;
    d.retire = lane_retire, d.copy = lane_copy;
    d.check = check, d.check_ctx = check_ctx;
    bp.capacity = d.slots;
    struct lanes c = {{NULL}, m, bp, d.frames};
    d.ctx = &c;
    int rc = lane_make(&c, 0);
    if (rc == MIMI_OK) rc = mimi_offline_schedule(&d, n, sig);
    for (int l = 0; l < d.n_lanes; l++) {
        struct mimi_batch *b = c.lane[l];
        if (rc && b && b->errmsg[0]) mimi_log(m, MIMI_LOG_ERROR, "cuda: whole-signal pass: %s", b->errmsg);
        if (rc) mimi_batch_destroy(b);
        else kept_give(m->cuda->kept, b);
    }
    return rc;
}
