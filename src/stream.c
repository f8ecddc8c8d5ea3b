/*
 * stream.c - encoders and decoders: one stream each, a frame per step, plus the sample buffering
 * of push/flush and the offline (whole-signal) helpers built on them.
 *
 * Each object owns one block of memory laid out at create time (streaming memory and scratch);
 * steps allocate nothing. Offline is streaming with the exact 250-step attention window over a
 * zero-padded signal, which is what the reference's offline path computes.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "nn/nn.h"

// ---- shared parts ----

struct stream_core {
    const struct mimi_model *model;
    int n_codebooks;
    int attention;
    mimi_tap_fn tap;
    void *tap_user;
    char errmsg[MIMI_ERRMSG_LEN];
    void *block;  // everything below points into this
};

struct mimi_encoder {
    struct stream_core core;
    struct seanet_mem seanet;
    struct seanet_scratch seanet_scratch;
    struct transformer_mem tr;
    struct transformer_scratch tr_scratch;
    struct conv_mem down;
    float *down_work;
    float *latent;    // (latent_dim)
    float *q_scratch;
    float *pending;   // (frame_size) samples waiting for a whole frame
    int n_pending;
};

struct mimi_decoder {
    struct stream_core core;
    struct seanet_mem seanet;
    struct seanet_scratch seanet_scratch;
    struct transformer_mem tr;
    struct transformer_scratch tr_scratch;
    struct conv_mem up;
    float *up_work;
    float *latent;     // (latent_dim)
    float *upsampled;  // (latent_dim, steps_per_frame)
    float *q_scratch;
};

void mimi_stream_params_default(struct mimi_stream_params *params) {
    if (!params) return;
    memset(params, 0, sizeof *params);
    params->n_codebooks = 8;
    params->attention = MIMI_ATTENTION_RING;
}

static int core_init(struct stream_core *c, const struct mimi_model *model,
                     const struct mimi_stream_params *params) {
    struct mimi_stream_params defaults;
    if (!params) {
        mimi_stream_params_default(&defaults);
        params = &defaults;
    }
    if (!model) return MIMI_EINVAL;
    if (params->n_codebooks < 1 || params->n_codebooks > model->quantizer.n_q) {
        mimi_log(model, MIMI_LOG_ERROR, "n_codebooks %d is outside 1..%d", params->n_codebooks,
                 model->quantizer.n_q);
        return MIMI_EINVAL;
    }
    if (params->attention != MIMI_ATTENTION_RING && params->attention != MIMI_ATTENTION_WINDOW)
        return MIMI_EINVAL;
    c->model = model;
    c->n_codebooks = params->n_codebooks;
    c->attention = params->attention;
    c->tap = params->tap;
    c->tap_user = params->tap_user;
    return MIMI_OK;
}

static void core_error(struct stream_core *c, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
static void core_error(struct stream_core *c, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->errmsg, sizeof c->errmsg, fmt, ap);
    va_end(ap);
}

static void tap(const struct stream_core *c, const char *name, const float *data, int channels,
                int steps) {
    if (c->tap) c->tap(c->tap_user, name, data, channels, steps);
}

static int ring_capacity(const struct stream_core *c, const struct transformer *t) {
    // the reference's ring holds exactly the context; an exact window needs room for one frame
    return c->attention == MIMI_ATTENTION_RING ? t->context
                                               : t->context + c->model->steps_per_frame;
}

static size_t max_size(size_t a, size_t b) { return a > b ? a : b; }

// ---- encoder ----

static void encoder_layout(struct mimi_encoder *e, struct arena *a) {
    const struct mimi_model *m = e->core.model;
    const int d = m->latent_dim, steps = m->steps_per_frame;
    seanet_layout(a, &m->encoder, m->frame_size, &e->seanet, &e->seanet_scratch);
    transformer_layout(a, &m->enc_tr, steps, ring_capacity(&e->core, &m->enc_tr), &e->tr,
                       &e->tr_scratch);
    conv_mem_layout(a, &m->downsample, &e->down);
    e->down_work = arena_floats(a, conv_work_floats(&m->downsample, steps));
    e->latent = arena_floats(a, d);
    e->q_scratch = arena_floats(a, 2 * (size_t)m->quantizer.dim + m->quantizer.bins);
    e->pending = arena_floats(a, m->frame_size);
}

void mimi_encoder_reset(struct mimi_encoder *e) {
    if (!e) return;
    const struct mimi_model *m = e->core.model;
    seanet_reset(&m->encoder, &e->seanet);
    transformer_reset(&m->enc_tr, &e->tr);
    conv_mem_reset(&m->downsample, &e->down);
    e->n_pending = 0;
    e->core.errmsg[0] = 0;
}

struct mimi_encoder *mimi_encoder_create(const struct mimi_model *model,
                                         const struct mimi_stream_params *params, int *err) {
    struct mimi_encoder *e = calloc(1, sizeof *e);
    int rc = e ? core_init(&e->core, model, params) : MIMI_ENOMEM;
    if (rc == MIMI_OK) {
        struct arena measure = {0};
        encoder_layout(e, &measure);
        struct arena block = {.base = aligned_alloc(64, (measure.used + 63) & ~(size_t)63)};
        e->core.block = block.base;
        if (block.base) encoder_layout(e, &block);
        else rc = MIMI_ENOMEM;
    }
    if (rc != MIMI_OK) {
        mimi_encoder_destroy(e);
        if (err) *err = rc;
        return NULL;
    }
    mimi_encoder_reset(e);
    if (err) *err = MIMI_OK;
    return e;
}

void mimi_encoder_destroy(struct mimi_encoder *e) {
    if (!e) return;
    free(e->core.block);
    free(e);
}

// One frame: frame_size samples -> n_codebooks codes.
static void encode_frame(struct mimi_encoder *e, const float *pcm, int32_t *codes) {
    const struct mimi_model *m = e->core.model;
    const int d = m->latent_dim;
    int steps;
    // SEANet: (1, frame_size) -> (d, steps); transformer in place; downsample -> (d, 1)
    float *x = seanet_forward(&m->encoder, &e->seanet, &e->seanet_scratch, pcm, m->frame_size, &steps);
    tap(&e->core, "enc_seanet", x, d, steps);
    transformer_forward(&m->enc_tr, &e->tr, &e->tr_scratch, x, steps);
    tap(&e->core, "enc_transformer", x, d, steps);
    conv1d_stream(&m->downsample, &e->down, x, steps, e->latent, e->down_work);
    tap(&e->core, "latent", e->latent, d, 1);
    quantizer_encode(&m->quantizer, e->latent, e->core.n_codebooks, codes, e->q_scratch);
}

static int all_finite(const float *x, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!isfinite(x[i])) return 0;
    return 1;
}

int mimi_encoder_step(struct mimi_encoder *e, const float *pcm, int32_t *codes) {
    if (!e || !pcm || !codes) return MIMI_EINVAL;
    if (e->n_pending) {
        core_error(&e->core, "step called with %d samples pending from push", e->n_pending);
        return MIMI_ESTATE;
    }
    if (!all_finite(pcm, (size_t)e->core.model->frame_size)) {
        core_error(&e->core, "the frame holds a NaN or infinite sample");
        return MIMI_EINVAL;
    }
    encode_frame(e, pcm, codes);
    return MIMI_OK;
}

int mimi_encoder_push(struct mimi_encoder *e, const float *pcm, size_t n_samples, int32_t *codes,
                      int max_frames) {
    if (!e || (!pcm && n_samples)) return MIMI_EINVAL;
    const int frame = e->core.model->frame_size, n = e->core.n_codebooks;
    size_t total = (size_t)e->n_pending + n_samples;
    size_t frames = total / (size_t)frame;
    if (frames > 0 && (!codes || frames > (size_t)(max_frames < 0 ? 0 : max_frames))) {
        core_error(&e->core, "%zu frames complete but room for %d", frames, max_frames);
        return codes ? MIMI_EBUFFER : MIMI_EINVAL;
    }
    if (n_samples && !all_finite(pcm, n_samples)) {
        core_error(&e->core, "the input holds a NaN or infinite sample");
        return MIMI_EINVAL;
    }
    size_t used = 0;
    for (size_t f = 0; f < frames; f++) {
        // complete the pending frame, or encode straight from the input when nothing is pending
        if (e->n_pending == 0) {
            encode_frame(e, pcm + used, codes + f * (size_t)n);
            used += (size_t)frame;
        } else {
            size_t take = (size_t)(frame - e->n_pending);
            memcpy(e->pending + e->n_pending, pcm + used, sizeof(float) * take);
            used += take;
            e->n_pending = 0;
            encode_frame(e, e->pending, codes + f * (size_t)n);
        }
    }
    memcpy(e->pending + e->n_pending, pcm + used, sizeof(float) * (n_samples - used));
    e->n_pending += (int)(n_samples - used);
    return (int)frames;
}

int mimi_encoder_pending(const struct mimi_encoder *e) { return e ? e->n_pending : MIMI_EINVAL; }

int mimi_encoder_flush(struct mimi_encoder *e, int32_t *codes, int max_frames) {
    if (!e) return MIMI_EINVAL;
    if (e->n_pending == 0) return 0;
    if (!codes || max_frames < 1) return codes ? MIMI_EBUFFER : MIMI_EINVAL;
    // zero-pad the partial frame, as the reference pads the end of the audio
    memset(e->pending + e->n_pending, 0, sizeof(float) * (e->core.model->frame_size - e->n_pending));
    e->n_pending = 0;
    encode_frame(e, e->pending, codes);
    return 1;
}

const char *mimi_encoder_errmsg(const struct mimi_encoder *e) { return e ? e->core.errmsg : ""; }

// ---- decoder ----

static void decoder_layout(struct mimi_decoder *dc, struct arena *a) {
    const struct mimi_model *m = dc->core.model;
    const int d = m->latent_dim, steps = m->steps_per_frame;
    seanet_layout(a, &m->decoder, steps, &dc->seanet, &dc->seanet_scratch);
    transformer_layout(a, &m->dec_tr, steps, ring_capacity(&dc->core, &m->dec_tr), &dc->tr,
                       &dc->tr_scratch);
    conv_mem_layout(a, &m->upsample, &dc->up);
    dc->up_work = arena_floats(a, conv_work_floats(&m->upsample, 1));
    dc->latent = arena_floats(a, d);
    dc->upsampled = arena_floats(a, (size_t)d * steps);
    dc->q_scratch = arena_floats(a, max_size((size_t)m->quantizer.dim + d, 1));
}

void mimi_decoder_reset(struct mimi_decoder *dc) {
    if (!dc) return;
    const struct mimi_model *m = dc->core.model;
    seanet_reset(&m->decoder, &dc->seanet);
    transformer_reset(&m->dec_tr, &dc->tr);
    conv_mem_reset(&m->upsample, &dc->up);
    dc->core.errmsg[0] = 0;
}

struct mimi_decoder *mimi_decoder_create(const struct mimi_model *model,
                                         const struct mimi_stream_params *params, int *err) {
    struct mimi_decoder *dc = calloc(1, sizeof *dc);
    int rc = dc ? core_init(&dc->core, model, params) : MIMI_ENOMEM;
    if (rc == MIMI_OK) {
        struct arena measure = {0};
        decoder_layout(dc, &measure);
        struct arena block = {.base = aligned_alloc(64, (measure.used + 63) & ~(size_t)63)};
        dc->core.block = block.base;
        if (block.base) decoder_layout(dc, &block);
        else rc = MIMI_ENOMEM;
    }
    if (rc != MIMI_OK) {
        mimi_decoder_destroy(dc);
        if (err) *err = rc;
        return NULL;
    }
    mimi_decoder_reset(dc);
    if (err) *err = MIMI_OK;
    return dc;
}

void mimi_decoder_destroy(struct mimi_decoder *dc) {
    if (!dc) return;
    free(dc->core.block);
    free(dc);
}

// Checks n_frames frames of codes; records the first bad one.
static int check_codes(struct stream_core *c, const int32_t *codes, int64_t n_frames) {
    const int n = c->n_codebooks, bins = c->model->quantizer.bins;
    for (int64_t f = 0; f < n_frames; f++)
        for (int q = 0; q < n; q++) {
            int32_t v = codes[f * n + q];
            if (v < 0 || v >= bins) {
                core_error(c, "code %d at frame %lld, codebook %d is outside [0, %d)", (int)v,
                           (long long)f, q, bins);
                return MIMI_EINVAL;
            }
        }
    return MIMI_OK;
}

// One frame: n_codebooks checked codes -> frame_size samples.
static void decode_frame(struct mimi_decoder *dc, const int32_t *codes, float *pcm) {
    const struct mimi_model *m = dc->core.model;
    const int d = m->latent_dim, steps = m->steps_per_frame;
    int T;
    // codes -> latent (d, 1) -> upsample (d, steps) -> transformer -> SEANet (1, frame_size)
    quantizer_decode(&m->quantizer, codes, dc->core.n_codebooks, dc->latent, dc->q_scratch);
    tap(&dc->core, "dec_latent", dc->latent, d, 1);
    convtr_stream(&m->upsample, &dc->up, dc->latent, 1, dc->upsampled, dc->up_work);
    tap(&dc->core, "dec_upsample", dc->upsampled, d, steps);
    transformer_forward(&m->dec_tr, &dc->tr, &dc->tr_scratch, dc->upsampled, steps);
    tap(&dc->core, "dec_transformer", dc->upsampled, d, steps);
    float *out = seanet_forward(&m->decoder, &dc->seanet, &dc->seanet_scratch, dc->upsampled, steps, &T);
    memcpy(pcm, out, sizeof(float) * m->frame_size);
}

int mimi_decoder_step(struct mimi_decoder *dc, const int32_t *codes, float *pcm) {
    if (!dc || !codes || !pcm) return MIMI_EINVAL;
    int rc = check_codes(&dc->core, codes, 1);
    if (rc != MIMI_OK) return rc;
    decode_frame(dc, codes, pcm);
    return MIMI_OK;
}

int mimi_decoder_push(struct mimi_decoder *dc, const int32_t *codes, int n_frames, float *pcm,
                      size_t max_samples) {
    if (!dc || n_frames < 0 || (n_frames && (!codes || !pcm))) return MIMI_EINVAL;
    const int frame = dc->core.model->frame_size;
    if ((size_t)n_frames * frame > max_samples) {
        core_error(&dc->core, "%d frames need %zu samples, room for %zu", n_frames,
                   (size_t)n_frames * frame, max_samples);
        return MIMI_EBUFFER;
    }
    if ((int64_t)n_frames * frame > INT32_MAX) return MIMI_EINVAL;
    int rc = check_codes(&dc->core, codes, n_frames);
    if (rc != MIMI_OK) return rc;
    for (int f = 0; f < n_frames; f++)
        decode_frame(dc, codes + (size_t)f * dc->core.n_codebooks, pcm + (size_t)f * frame);
    return n_frames * frame;
}

const char *mimi_decoder_errmsg(const struct mimi_decoder *dc) { return dc ? dc->core.errmsg : ""; }

// ---- offline ----

// Offline streams: the caller's parameters with the exact attention window.
static struct mimi_stream_params offline_params(const struct mimi_stream_params *params) {
    struct mimi_stream_params p;
    if (params) p = *params;
    else mimi_stream_params_default(&p);
    p.attention = MIMI_ATTENTION_WINDOW;
    return p;
}

int64_t mimi_encode_offline(const struct mimi_model *model, const struct mimi_stream_params *params,
                            const float *pcm, int64_t n_samples, int32_t *codes, int64_t max_codes) {
    if (!model || !pcm || !codes || n_samples <= 0) return MIMI_EINVAL;
    struct mimi_stream_params p = offline_params(params);
    int64_t n_frames = mimi_frames_for_samples(model, n_samples);
    if (p.n_codebooks < 1 || p.n_codebooks > model->quantizer.n_q) return MIMI_EINVAL;
    if (n_frames * p.n_codebooks > max_codes) return MIMI_EBUFFER;
    if (!all_finite(pcm, (size_t)n_samples)) return MIMI_EINVAL;
    int rc;
    struct mimi_encoder *e = mimi_encoder_create(model, &p, &rc);
    int32_t *frame_codes = malloc(sizeof(int32_t) * p.n_codebooks);
    if (!e || !frame_codes) {
        mimi_encoder_destroy(e);
        free(frame_codes);
        return e ? MIMI_ENOMEM : rc;
    }
    const int frame = model->frame_size;
    for (int64_t f = 0; f < n_frames; f++) {
        // whole frames straight from the input, the last one zero-padded
        int64_t start = f * frame, left = n_samples - start;
        if (left >= frame) {
            encode_frame(e, pcm + start, frame_codes);
        } else {
            memcpy(e->pending, pcm + start, sizeof(float) * (size_t)left);
            memset(e->pending + left, 0, sizeof(float) * (size_t)(frame - left));
            encode_frame(e, e->pending, frame_codes);
        }
        for (int q = 0; q < p.n_codebooks; q++) codes[q * n_frames + f] = frame_codes[q];
    }
    mimi_encoder_destroy(e);
    free(frame_codes);
    return n_frames;
}

int64_t mimi_decode_offline(const struct mimi_model *model, const struct mimi_stream_params *params,
                            const int32_t *codes, int64_t n_frames, float *pcm, int64_t max_samples) {
    if (!model || !codes || !pcm || n_frames <= 0) return MIMI_EINVAL;
    struct mimi_stream_params p = offline_params(params);
    const int frame = model->frame_size;
    if (n_frames * frame > max_samples) return MIMI_EBUFFER;
    int rc;
    struct mimi_decoder *dc = mimi_decoder_create(model, &p, &rc);
    int32_t *frame_codes = malloc(sizeof(int32_t) * (p.n_codebooks > 0 ? p.n_codebooks : 1));
    if (!dc || !frame_codes) {
        mimi_decoder_destroy(dc);
        free(frame_codes);
        return dc ? MIMI_ENOMEM : rc;
    }
    // every code is checked before anything is decoded
    const int bins = model->quantizer.bins;
    for (int64_t i = 0; rc == MIMI_OK && i < n_frames * p.n_codebooks; i++)
        if (codes[i] < 0 || codes[i] >= bins) {
            mimi_log(model, MIMI_LOG_ERROR, "code %d at frame %lld, codebook %lld is outside [0, %d)",
                     (int)codes[i], (long long)(i % n_frames), (long long)(i / n_frames), bins);
            rc = MIMI_EINVAL;
        }
    for (int64_t f = 0; rc == MIMI_OK && f < n_frames; f++) {
        for (int q = 0; q < p.n_codebooks; q++) frame_codes[q] = codes[q * n_frames + f];
        decode_frame(dc, frame_codes, pcm + f * frame);
    }
    mimi_decoder_destroy(dc);
    free(frame_codes);
    return rc == MIMI_OK ? n_frames * frame : rc;
}
