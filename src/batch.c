/*
 * batch.c - many streams of one direction advanced together (struct mimi_batch).
 *
 * Each slot owns its streaming memory (conv histories, transposed-conv tails, attention rings);
 * the scratch is shared and sized for the full capacity. A step gathers the listed slots'
 * memories layer by layer and runs each layer once over all of them, so every weight is read
 * once per step whatever the number of slots.
 */
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "batch.h"
#include "cpu/cpu.h"
#include "cpu/threadpool.h"
#include "gpu.h"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

// ---- layout ----

static int ring_capacity(const struct mimi_batch *b, const struct transformer *t) {
    // the reference's ring holds exactly the context; an exact window needs room for one frame
    // (models whose reference keeps a linear cache always get the exact window)
    int ring = b->attention == MIMI_ATTENTION_RING && !b->model->exact_window;
    return ring ? t->context : t->context + b->model->steps_per_frame;
}

static void layout(struct mimi_batch *b, struct arena *a) {
    const struct mimi_model *m = b->model;
    const int cap = b->capacity, d = m->latent_dim, steps = m->steps_per_frame;
    const int encode = b->direction == MIMI_DIRECTION_ENCODE;
    const struct transformer *tr = encode ? &m->enc_tr : &m->dec_tr;
    const struct seanet *sn = encode ? &m->encoder : &m->decoder;
    const struct mimi_conv *resample = encode ? &m->downsample : &m->upsample;
    const int ring = ring_capacity(b, tr);
    b->open = arena_take(a, (size_t)cap);
    b->listed = arena_take(a, (size_t)cap);
    if (encode) b->enc = arena_take(a, sizeof(struct enc_slot) * (size_t)cap);
    else b->dec = arena_take(a, sizeof(struct dec_slot) * (size_t)cap);
    for (int s = 0; s < cap; s++) {
        // per-slot memory: read the addresses only once the block exists
        struct seanet_mem tmp_sn;
        struct transformer_mem tmp_tr;
        struct conv_mem tmp_rs;
        struct seanet_mem *msn = a->base ? (encode ? &b->enc[s].seanet : &b->dec[s].seanet) : &tmp_sn;
        struct transformer_mem *mtr = a->base ? (encode ? &b->enc[s].tr : &b->dec[s].tr) : &tmp_tr;
        struct conv_mem *mrs = a->base ? (encode ? &b->enc[s].down : &b->dec[s].up) : &tmp_rs;
        seanet_mem_layout(a, sn, msn);
        transformer_mem_layout(a, tr, ring, mtr);
        conv_mem_layout(a, resample, mrs);
    }
    b->seanet_mems = arena_take(a, sizeof(struct seanet_mem *) * (size_t)cap);
    b->tr_mems = arena_take(a, sizeof(struct transformer_mem *) * (size_t)cap);
    b->resample_mems = arena_take(a, sizeof(struct conv_mem *) * (size_t)cap);
    seanet_scratch_layout(a, sn, cap, encode ? m->frame_size : steps, &b->seanet_scratch);
    transformer_scratch_layout(a, tr, cap, steps, ring, &b->tr_scratch);
    b->resample_work = arena_floats(a, conv_work_floats(resample, cap, encode ? steps : 1));
    b->latent = arena_floats(a, (size_t)(d > m->frame_dim ? d : m->frame_dim) * cap);
    b->upsampled = arena_floats(a, (size_t)d * cap * steps);
    b->q_work = arena_floats(a, quantizer_work_floats(&m->quantizer, cap));
}

static void slot_reset(struct mimi_batch *b, int s) {
    if (b->gpu) {
        mimi_cuda_slot_reset(b, s);  // a failure poisons the batch: its next step reports it
        return;
    }
    const struct mimi_model *m = b->model;
    if (b->direction == MIMI_DIRECTION_ENCODE) {
        seanet_reset(&m->encoder, &b->enc[s].seanet);
        transformer_reset(&m->enc_tr, &b->enc[s].tr);
        conv_mem_reset(&m->downsample, &b->enc[s].down);
    } else {
        seanet_reset(&m->decoder, &b->dec[s].seanet);
        transformer_reset(&m->dec_tr, &b->dec[s].tr);
        conv_mem_reset(&m->upsample, &b->dec[s].up);
    }
}

// ---- lifetime ----

void mimi_batch_params_default(struct mimi_batch_params *p) {
    if (!p) return;
    memset(p, 0, sizeof *p);
    p->direction = MIMI_DIRECTION_ENCODE;
    p->capacity = 1;
    p->n_codebooks = 8;
    p->attention = MIMI_ATTENTION_RING;
}

struct mimi_batch *mimi_batch_create(const struct mimi_model *model,
                                     const struct mimi_batch_params *params, int *err) {
    struct mimi_batch_params defaults;
    if (!params) {
        mimi_batch_params_default(&defaults);
        params = &defaults;
    }
    int rc = MIMI_OK;
    if (!model || params->capacity < 1 || params->capacity > 65536 ||
        (params->direction != MIMI_DIRECTION_ENCODE && params->direction != MIMI_DIRECTION_DECODE) ||
        (params->attention != MIMI_ATTENTION_RING && params->attention != MIMI_ATTENTION_WINDOW))
        rc = MIMI_EINVAL;
    else
        rc = mimi_batch_check_codebooks(model, params->n_codebooks);
    if (!rc && model->cuda) return mimi_cuda_batch_create(model, params, err);  // on the device
    struct mimi_batch *b = rc ? NULL : calloc(1, sizeof *b);
    if (!rc && !b) rc = MIMI_ENOMEM;
    if (b) {
        b->model = model;
        b->direction = params->direction;
        b->capacity = params->capacity;
        b->n_codebooks = model->quantizer.n_q ? params->n_codebooks : 0;
        b->attention = params->attention;
        b->tap = params->tap;
        b->tap_user = params->tap_user;
        struct arena measure = {0};
        layout(b, &measure);
        struct arena block = {.base = aligned_alloc(64, (measure.used + 63) & ~(size_t)63)};
        b->block = block.base;
        if (!block.base) rc = MIMI_ENOMEM;
        else {
            layout(b, &block);
            memset(b->open, 0, (size_t)b->capacity);
            memset(b->listed, 0, (size_t)b->capacity);
        }
    }
    if (rc) {
        mimi_batch_destroy(b);
        if (err) *err = rc;
        return NULL;
    }
    if (err) *err = MIMI_OK;
    return b;
}

void mimi_batch_destroy(struct mimi_batch *b) {
    if (!b) return;
    mimi_batch_backend_free(b);
    free(b->block);
    free(b);
}

int mimi_batch_open(struct mimi_batch *b) {
    if (!b) return MIMI_EINVAL;
    for (int s = 0; s < b->capacity; s++)
        if (!b->open[s]) {
            slot_reset(b, s);
            b->open[s] = 1;
            return s;
        }
    return MIMI_EFULL;
}

static int valid_open(const struct mimi_batch *b, int slot) {
    return b && slot >= 0 && slot < b->capacity && b->open[slot];
}

int mimi_batch_close(struct mimi_batch *b, int slot) {
    if (!valid_open(b, slot)) return MIMI_EINVAL;
    b->open[slot] = 0;
    return MIMI_OK;
}

int mimi_batch_reset(struct mimi_batch *b, int slot) {
    if (!valid_open(b, slot)) return MIMI_EINVAL;
    slot_reset(b, slot);
    return MIMI_OK;
}

void mimi_batch_error(struct mimi_batch *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(b->errmsg, sizeof b->errmsg, fmt, ap);
    va_end(ap);
}

const char *mimi_batch_errmsg(const struct mimi_batch *b) { return b ? b->errmsg : ""; }

// ---- steps ----

static void tap(const struct mimi_batch *b, const char *name, const float *data, int channels,
                int steps) {
    if (b->tap) b->tap(b->tap_user, name, data, channels, steps);
}

int mimi_batch_encode_unchecked(struct mimi_batch *b, int n, const int *slots, const float *pcm,
                                int32_t *codes, float *latents) {
    if (b->gpu) return mimi_cuda_step(b, n, slots, pcm, codes ? (void *)codes : (void *)latents);
    const struct mimi_model *m = b->model;
    const int d = m->latent_dim, fd = m->frame_dim;
    int steps;
    for (int k = 0; k < n; k++) {
        b->seanet_mems[k] = &b->enc[slots[k]].seanet;
        b->tr_mems[k] = &b->enc[slots[k]].tr;
        b->resample_mems[k] = &b->enc[slots[k]].down;
    }
    // SEANet: (1, n, frame) -> (d, n, steps); transformer in place; downsample -> (fd, n)
    mimi_cpu_stage("enc.seanet");
    float *x = seanet_forward(&m->encoder, b->seanet_mems, n, &b->seanet_scratch, pcm,
                              m->frame_size, &steps);
    tap(b, "enc_seanet", x, d, n * steps);
    mimi_cpu_stage("enc.transformer");
    transformer_forward(&m->enc_tr, b->tr_mems, n, &b->tr_scratch, x, steps);
    tap(b, "enc_transformer", x, d, n * steps);
    mimi_cpu_stage("enc.downsample");
    conv1d_stream(&m->downsample, b->resample_mems, n, x, steps, b->latent, b->resample_work);
    tap(b, "latent", b->latent, fd, n);
    mimi_cpu_stage("enc.quantizer");
    if (codes) {
        quantizer_encode(&m->quantizer, b->latent, n, b->n_codebooks, codes, b->q_work);
    } else {
        // continuous latents: (fd, n) -> (n, fd)
        for (int c = 0; c < fd; c++)
            for (int k = 0; k < n; k++) latents[(size_t)k * fd + c] = b->latent[(size_t)c * n + k];
    }
    mimi_cpu_stage(NULL);
    return MIMI_OK;
}

int mimi_batch_decode_unchecked(struct mimi_batch *b, int n, const int *slots,
                                const int32_t *codes, const float *latents, float *pcm) {
    if (b->gpu) return mimi_cuda_step(b, n, slots, codes ? (const void *)codes : (const void *)latents, pcm);
    const struct mimi_model *m = b->model;
    const int d = m->latent_dim, fd = m->frame_dim, steps = m->steps_per_frame;
    int T;
    for (int k = 0; k < n; k++) {
        b->seanet_mems[k] = &b->dec[slots[k]].seanet;
        b->tr_mems[k] = &b->dec[slots[k]].tr;
        b->resample_mems[k] = &b->dec[slots[k]].up;
    }
    // codes or latents -> (d, n) -> upsample (d, n, steps) -> transformer -> SEANet (1, n, frame)
    mimi_cpu_stage("dec.quantizer");
    if (codes)
        quantizer_decode(&m->quantizer, codes, n, b->n_codebooks, b->latent, b->q_work);
    else
        mimi_linear_apply(m->quantizer.lin_projection, n, latents, fd, b->latent, n, 1);
    tap(b, "dec_latent", b->latent, d, n);
    mimi_cpu_stage("dec.upsample");
    convtr_stream(&m->upsample, b->resample_mems, n, b->latent, 1, b->upsampled, b->resample_work);
    tap(b, "dec_upsample", b->upsampled, d, n * steps);
    mimi_cpu_stage("dec.transformer");
    transformer_forward(&m->dec_tr, b->tr_mems, n, &b->tr_scratch, b->upsampled, steps);
    tap(b, "dec_transformer", b->upsampled, d, n * steps);
    mimi_cpu_stage("dec.seanet");
    float *out = seanet_forward(&m->decoder, b->seanet_mems, n, &b->seanet_scratch, b->upsampled,
                                steps, &T);
    memcpy(pcm, out, sizeof(float) * (size_t)n * m->frame_size);
    mimi_cpu_stage(NULL);
    return MIMI_OK;
}

int mimi_batch_check_codebooks(const struct mimi_model *model, int n_codebooks) {
    if (!model->quantizer.n_q || (n_codebooks >= 1 && n_codebooks <= model->quantizer.n_q)) return MIMI_OK;
    mimi_log(model, MIMI_LOG_ERROR, "n_codebooks %d is outside 1..%d", n_codebooks, model->quantizer.n_q);
    return MIMI_EINVAL;
}

int mimi_batch_check_kind(struct mimi_batch *b, int want_codes) {
    int has_codes = b->model->quantizer.n_q > 0;
    if (has_codes == want_codes) return MIMI_OK;
    mimi_batch_error(b, has_codes ? "this model produces codes: use the code API, not the latent API"
                                  : "this %s model has no quantizer: its frames are continuous "
                                    "latents, use the latent API",
                     b->model->family);
    return MIMI_EUNSUPPORTED;
}

// dst[0 .. bytes) = src[..]. With `stream` (the threaded copies of a large step, whose megabytes
// are not read again by the host) the 16-byte-aligned part of dst is written with non-temporal
// stores where the target has them: no line of dst is read first (the copy moves two bytes of
// memory per byte instead of three: 55 MB with 2 threads, 5.7 -> 4.2 ms on a 2-core x86 host).
// The caller fences (stream_fence) before another thread reads dst.
static void copy_bytes(void *dst, const void *src, size_t bytes, int stream) {
#if defined(__SSE2__)
    if (stream && bytes >= 64) {
        const size_t head = (16 - (uintptr_t)dst % 16) % 16, body = (bytes - head) / 64 * 64;
        memcpy(dst, src, head);
        char *d = (char *)dst + head;
        const char *s = (const char *)src + head;
        for (size_t i = 0; i < body; i += 64) {
            const __m128i a = _mm_loadu_si128((const __m128i *)(s + i)), b = _mm_loadu_si128((const __m128i *)(s + i + 16));
            const __m128i c = _mm_loadu_si128((const __m128i *)(s + i + 32)), e = _mm_loadu_si128((const __m128i *)(s + i + 48));
            _mm_stream_si128((__m128i *)(d + i), a), _mm_stream_si128((__m128i *)(d + i + 16), b);
            _mm_stream_si128((__m128i *)(d + i + 32), c), _mm_stream_si128((__m128i *)(d + i + 48), e);
        }
        memcpy(d + body, s + body, bytes - head - body);
        return;
    }
#endif
    (void)stream;
    memcpy(dst, src, bytes);
}

static void stream_fence(void) {
#if defined(__SSE2__)
    _mm_sfence();
#endif
}

// Blocks of CHECK_BLOCK values are tested without a branch per value (the compiler turns the
// inner loop into vector compares); a block that holds a NaN or infinity is then searched for the
// first one. A large batch's PCM is megabytes: a branch per value cost milliseconds of a step,
// and a separate pass over it before the copy another millisecond or two. `stream`: copy_bytes's.
#define CHECK_BLOCK 256
static size_t copy_finite(float *dst, const float *src, size_t n, int stream) {
    size_t i = 0;
    for (; i + CHECK_BLOCK <= n; i += CHECK_BLOCK) {
        uint32_t bad = 0;
        for (int k = 0; k < CHECK_BLOCK; k++) {
            uint32_t u;
            memcpy(&u, src + i + k, sizeof u);
            bad |= (u & 0x7f800000u) == 0x7f800000u;  // exponent all ones: infinity or NaN
        }
        if (bad) break;
        if (dst) copy_bytes(dst + i, src + i, sizeof(float) * CHECK_BLOCK, stream);
    }
    for (; i < n; i++) {
        if (!isfinite(src[i])) return i;
        if (dst) dst[i] = src[i];
    }
    return n;
}

// ---- host copies of a large step ----

// Below this many bytes one thread copies: waking the pool costs more than it saves.
#define HOST_COPY_SPLIT (1u << 20)

struct host_copy {
    void *dst;
    const void *src;
    size_t n;      // floats (checked; dst may then be NULL) or bytes
    int check;
    size_t first;  // the lowest index of a NaN or infinity found, else n
    pthread_mutex_t lock;
};

// Thread ith of nth copies its share, cut at CHECK_BLOCK floats.
static void host_copy_task(void *ctx, int ith, int nth) {
    struct host_copy *c = ctx;
    const size_t unit = c->check ? CHECK_BLOCK : 64, units = (c->n + unit - 1) / unit;
    size_t begin = units * ith / nth * unit, end = units * (ith + 1) / nth * unit;
    if (end > c->n) end = c->n;
    if (begin >= end) return;
    if (!c->check) {
        copy_bytes((char *)c->dst + begin, (const char *)c->src + begin, end - begin, 1);
        stream_fence();
        return;
    }
    float *dst = c->dst ? (float *)c->dst + begin : NULL;
    size_t bad = begin + copy_finite(dst, (const float *)c->src + begin, end - begin, 1);
    stream_fence();
    if (bad == end) return;
    pthread_mutex_lock(&c->lock);
    if (bad < c->first) c->first = bad;
    pthread_mutex_unlock(&c->lock);
}

static size_t host_copy(const struct mimi_model *m, void *dst, const void *src, size_t n, int check) {
    struct mimi_pool *pool = m->cpu ? m->cpu->pool : NULL;
    const size_t bytes = check ? n * sizeof(float) : n;
    if (!pool || bytes < HOST_COPY_SPLIT) {
        if (check) return copy_finite(dst, src, n, 0);
        memcpy(dst, src, n);
        return n;
    }
    struct host_copy c = {dst, src, n, check, n, PTHREAD_MUTEX_INITIALIZER};
    mimi_pool_run(pool, mimi_pool_size(pool), host_copy_task, &c);
    return c.first;
}

void mimi_host_copy(const struct mimi_model *m, void *dst, const void *src, size_t bytes) {
    host_copy(m, dst, src, bytes, 0);
}

int mimi_batch_copy_finite(struct mimi_batch *b, float *dst, const float *x, size_t n, size_t first,
                           const char *what) {
    const size_t i = host_copy(b->model, dst, x, n, 1);
    if (i == n) return MIMI_OK;
    mimi_batch_error(b, "%s value %zu is NaN or infinite", what, first + i);
    return MIMI_EINVAL;
}

int mimi_batch_check_finite(struct mimi_batch *b, const float *x, size_t n, const char *what) {
    return mimi_batch_copy_finite(b, NULL, x, n, 0, what);
}

// Checks a step's slot list: 0 <= n <= capacity, every slot open and listed once.
static int check_slots(struct mimi_batch *b, int direction, int n, const int *slots) {
    if (b->direction != direction) {
        mimi_batch_error(b, "this batch %s; it cannot %s", b->direction ? "decodes" : "encodes",
                         direction ? "decode" : "encode");
        return MIMI_ESTATE;
    }
    if (n < 0 || n > b->capacity || (n && !slots)) {
        mimi_batch_error(b, "%d slots listed, capacity %d", n, b->capacity);
        return MIMI_EINVAL;
    }
    int rc = MIMI_OK;
    for (int k = 0; k < n && rc == MIMI_OK; k++) {
        if (!valid_open(b, slots[k])) {
            mimi_batch_error(b, "slot %d is not open", slots[k]);
            rc = MIMI_EINVAL;
        } else if (b->listed[slots[k]]) {
            mimi_batch_error(b, "slot %d is listed twice", slots[k]);
            rc = MIMI_EINVAL;
        } else {
            b->listed[slots[k]] = 1;
        }
    }
    for (int k = 0; k < n; k++)
        if (slots[k] >= 0 && slots[k] < b->capacity) b->listed[slots[k]] = 0;
    return rc;
}

// Shared checks of the four step entry points; 1 when there is nothing to do.
static int step_checks(struct mimi_batch *b, int direction, int want_codes, int n, const int *slots,
                       const void *in, const void *out, int *rc) {
    *rc = b ? check_slots(b, direction, n, slots) : MIMI_EINVAL;
    if (*rc == MIMI_OK) *rc = mimi_batch_check_kind(b, want_codes);
    if (*rc == MIMI_OK && n > 0 && (!in || !out)) *rc = MIMI_EINVAL;
    return *rc != MIMI_OK || n == 0;
}

int mimi_batch_check_step(struct mimi_batch *b, int direction, int want_codes, int n,
                          const int *slots, const void *input) {
    int rc;
    step_checks(b, direction, want_codes, n, slots, input, input, &rc);
    return rc;
}

static int encode(struct mimi_batch *b, int n, const int *slots, const float *pcm, int want_codes,
                  int32_t *codes, float *latents) {
    int rc;
    if (step_checks(b, MIMI_DIRECTION_ENCODE, want_codes, n, slots, pcm,
                    want_codes ? (const void *)codes : (const void *)latents, &rc))
        return rc;
    // a device batch checks the samples as it stages them, unless they were written in place
    if (!b->gpu || (const void *)pcm == mimi_cuda_input_rows(b))
        rc = mimi_batch_check_finite(b, pcm, (size_t)n * b->model->frame_size, "sample");
    if (rc == MIMI_OK) rc = mimi_batch_encode_unchecked(b, n, slots, pcm, codes, latents);
    return rc;
}

int mimi_batch_encode(struct mimi_batch *b, int n, const int *slots, const float *pcm,
                      int32_t *codes) {
    return encode(b, n, slots, pcm, 1, codes, NULL);
}

int mimi_batch_encode_latent(struct mimi_batch *b, int n, const int *slots, const float *pcm,
                             float *latents) {
    return encode(b, n, slots, pcm, 0, NULL, latents);
}

int mimi_batch_check_codes(struct mimi_batch *b, const int32_t *codes, int64_t n_frames) {
    const int n = b->n_codebooks, bins = b->model->quantizer.bins;
    for (int64_t f = 0; f < n_frames; f++)
        for (int q = 0; q < n; q++) {
            int32_t v = codes[f * n + q];
            if (v < 0 || v >= bins) {
                mimi_batch_error(b, "code %d at frame %lld, codebook %d is outside [0, %d)", (int)v,
                                 (long long)f, q, bins);
                return MIMI_EINVAL;
            }
        }
    return MIMI_OK;
}

int mimi_batch_decode(struct mimi_batch *b, int n, const int *slots, const int32_t *codes,
                      float *pcm) {
    int rc;
    if (step_checks(b, MIMI_DIRECTION_DECODE, 1, n, slots, codes, pcm, &rc)) return rc;
    rc = mimi_batch_check_codes(b, codes, n);
    if (rc == MIMI_OK) rc = mimi_batch_decode_unchecked(b, n, slots, codes, NULL, pcm);
    return rc;
}

int mimi_batch_decode_latent(struct mimi_batch *b, int n, const int *slots, const float *latents,
                             float *pcm) {
    int rc;
    if (step_checks(b, MIMI_DIRECTION_DECODE, 0, n, slots, latents, pcm, &rc)) return rc;
    if (!b->gpu || (const void *)latents == mimi_cuda_input_rows(b))
        rc = mimi_batch_check_finite(b, latents, (size_t)n * b->model->frame_dim, "latent");
    if (rc == MIMI_OK) rc = mimi_batch_decode_unchecked(b, n, slots, NULL, latents, pcm);
    return rc;
}
