/*
 * cuda_offline.cu - whole-signal encode and decode on the device (gpu.h): batches whose step
 * advances each slot OFFLINE_FRAMES frames at once (plan.c with L.frames > 1: the convs see that
 * many more samples, the transformer that many more positions under the exact window, the
 * quantizer that many latents as rows), scheduled by src/offline_sched.c. One signal takes one
 * slot of one batch (its taps hand over the real frames only); many signals share two batches
 * ("lanes") of up to OFFLINE_SLOTS slots each, so that the host stages one lane's step while the
 * device runs the other's.
 */
#include <stdlib.h>
#include <string.h>

#include "cuda/cuda_batch.cuh"

extern "C" {
#include "offline_sched.h"
}

// Frames per step at most, and transformer positions per step at most (Mimi: 64 frames of 2
// positions; Pocket TTS's Mimi: 8 frames of 16).
#define OFFLINE_FRAMES 64
#define OFFLINE_POSITIONS 128
// Lanes and slots per lane of a many-signal pass: 16 slots of 64 frames make a step of 1024
// frames per lane, where the products are as efficient as they get; fewer when the device's
// free memory is short.
#define OFFLINE_LANES 2
#define OFFLINE_SLOTS 16

// The most frames per step, up to OFFLINE_FRAMES, OFFLINE_POSITIONS and n_frames, whose attention
// fits the device's shared memory per block (the two-pass kernel of head sizes other than 64
// holds all the step's positions of a row in one block).
static int frames_per_step(const struct mimi_model *m, int64_t n_frames) {
    int limit = 48 * 1024;
    cudaDeviceGetAttribute(&limit, cudaDevAttrMaxSharedMemoryPerBlockOptin, m->cuda->device);
    int F = n_frames < OFFLINE_FRAMES ? (int)n_frames : OFFLINE_FRAMES;
    const struct transformer *t = &m->enc_tr;  // the decoder's has the same geometry
    for (; F > 1; F--) {
        const int steps = m->steps_per_frame * F;
        if (steps > OFFLINE_POSITIONS) continue;
        if (mimi_cuda_attention_smem(steps, t->head_dim, t->context + steps) + 1024 <= (size_t)limit) break;
    }
    return F;
}

// Slots per lane for n signals of `frames` frames per step: at most OFFLINE_SLOTS x
// OFFLINE_FRAMES frames per step, and all lanes' state and scratch within half the device's
// free memory.
static int slots_per_lane(const struct mimi_model *m, const struct mimi_batch_params *bp, int lanes, int n,
                          int frames) {
    size_t free_bytes = 0, total = 0;
    if (cudaSetDevice(m->cuda->device) != cudaSuccess || cudaMemGetInfo(&free_bytes, &total) != cudaSuccess) {
        cudaGetLastError();
        return 1;
    }
    // as many frames per step as OFFLINE_SLOTS slots of OFFLINE_FRAMES
    int slots = (n + lanes - 1) / lanes, most = OFFLINE_SLOTS * OFFLINE_FRAMES / frames;
    if (slots > most) slots = most;
    for (; slots > 1; slots /= 2) {
        struct gpu_layout L;
        if (gpu_layout_init(&L, m, bp->direction, slots, bp->n_codebooks, bp->attention, frames)) break;
        if (sizeof(float) * (L.scratch_elems + L.slot_elems * slots) * lanes <= free_bytes / 2) break;
    }
    return slots;
}

// The lanes of one pass. Lane 0 is made before the first step; the others when their first step
// is staged, so that making them (host work, 2-5 ms each) overlaps the steps already queued.
struct lanes {
    struct mimi_batch *lane[OFFLINE_LANES];
    const struct mimi_model *m;
    struct mimi_batch_params bp;
    int frames;
};

static int lane_make(struct lanes *c, int l) {
    int rc = MIMI_OK;
    c->lane[l] = mimi_cuda_offline_create(c->m, &c->bp, c->frames, &rc);
    for (int s = 0; rc == MIMI_OK && s < c->bp.capacity; s++)
        if (mimi_batch_open(c->lane[l]) != s) rc = MIMI_ESTATE;
    return rc;
}

// A lane's input rows are its pinned stage (the scheduler writes each row once, unchecked:
// samples were checked by the caller's check, codes and latents before the pass).
static int lane_input(void *ctx, int lane, void **rows) {
    struct lanes *c = (struct lanes *)ctx;
    int rc = c->lane[lane] ? MIMI_OK : lane_make(c, lane);
    if (rc == MIMI_OK && !(*rows = mimi_cuda_input_rows(c->lane[lane]))) {
        mimi_batch_error(c->lane[lane], "cuda: a whole-signal lane needs exactly one plan");
        rc = MIMI_ESTATE;
    }
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

static int lane_reset(void *ctx, int lane, int slot) {
    return mimi_cuda_slot_reset(((struct lanes *)ctx)->lane[lane], slot);
}

static void lane_retire(void *ctx, int lane) {
    struct lanes *c = (struct lanes *)ctx;
    mimi_batch_destroy(c->lane[lane]);
    c->lane[lane] = NULL;
}

// Frames per step for many signals: of 16, 32 and 64 (at most the longest signal), the one with
// the least estimated work, each signal's frames padded to whole steps and weighed by a step
// size's cost per frame. A step re-reads its attention window (context + F positions) for its F
// frames; attention was about 10% of a 64-frame step (strict, H200), so 32 frames are estimated
// at 1.08 and 16 at 1.24 times 64's cost per frame. Many short signals then waste less on padding
// (a 22-frame signal is 64 frames of work at F = 64, 32 at F = 32).
static int frames_for_many(const struct mimi_model *m, int n, const struct offline_signal *sig, int64_t longest) {
    static const int sizes[3] = {64, 32, 16};
    static const double cost[3] = {1.0, 1.08, 1.24};
    int best = frames_per_step(m, longest);
    double best_work = -1;
    for (int k = 0; k < 3; k++) {
        const int F = frames_per_step(m, sizes[k] < longest ? sizes[k] : longest);
        double work = 0;
        for (int i = 0; i < n; i++) work += (double)((sig[i].n_frames + F - 1) / F) * F * cost[k];
        if (best_work < 0 || work < best_work) best = F, best_work = work;
    }
    return best;
}

extern "C" int mimi_cuda_offline(const struct mimi_model *m, int direction, int n_codebooks, mimi_tap_fn tap,
                                 void *tap_user, int want_codes, int n, const struct offline_signal *sig,
                                 int (*check)(void *, int), void *check_ctx) {
    int64_t longest = 0;
    for (int i = 0; i < n; i++) longest = sig[i].n_frames > longest ? sig[i].n_frames : longest;
    struct mimi_batch_params bp;
    mimi_batch_params_default(&bp);
    bp.direction = direction;
    bp.n_codebooks = n_codebooks > 0 ? n_codebooks : bp.n_codebooks;
    bp.attention = MIMI_ATTENTION_WINDOW;
    bp.tap = tap;
    bp.tap_user = tap_user;
    struct offline_lanes d;
    d.n_lanes = n > 1 ? OFFLINE_LANES : 1;
    d.frames = n > 1 ? frames_for_many(m, n, sig, longest) : frames_per_step(m, longest);
    d.slots = n > 1 ? slots_per_lane(m, &bp, d.n_lanes, n, d.frames) : 1;
    d.encode = direction == MIMI_DIRECTION_ENCODE;
    d.frame_size = m->frame_size;
    d.per_frame = want_codes ? n_codebooks : m->frame_dim;
    d.input = lane_input, d.submit = lane_submit, d.collect = lane_collect, d.reset = lane_reset;
    d.retire = lane_retire;
    d.check = check, d.check_ctx = check_ctx;
    bp.capacity = d.slots;
    struct lanes c = {{NULL}, m, bp, d.frames};
    d.ctx = &c;
    int rc = lane_make(&c, 0);
    if (rc == MIMI_OK) rc = mimi_offline_schedule(&d, n, sig);
    for (int l = 0; l < d.n_lanes; l++) {
        struct mimi_batch *b = c.lane[l];
        if (rc && b && b->errmsg[0]) mimi_log(m, MIMI_LOG_ERROR, "cuda: whole-signal pass: %s", b->errmsg);
        mimi_batch_destroy(b);
    }
    return rc;
}
