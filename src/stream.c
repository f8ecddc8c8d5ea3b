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

#include "batch.h"
#include "cpu/offline.h"
#include "gpu.h"
#include "offline_sched.h"

// ---- shared parts ----

static const int SLOT0 = 0;

struct mimi_encoder {
    struct mimi_batch *batch;  // capacity 1, slot 0 open
    float *pending;            // (frame_size) samples waiting for a whole frame
    int n_pending;
};

struct mimi_decoder {
    struct mimi_batch *batch;  // capacity 1, slot 0 open
};

void mimi_stream_params_default(struct mimi_stream_params *params) {
    if (!params) return;
    memset(params, 0, sizeof *params);
    params->n_codebooks = 8;
    params->attention = MIMI_ATTENTION_RING;
}

// A batch of one for a stream, with its only slot open.
static struct mimi_batch *single_batch(const struct mimi_model *model,
                                       const struct mimi_stream_params *params, int direction,
                                       int *err) {
    struct mimi_stream_params sp;
    if (params) sp = *params;
    else mimi_stream_params_default(&sp);
    struct mimi_batch_params bp;
    mimi_batch_params_default(&bp);
    bp.direction = direction;
    bp.n_codebooks = sp.n_codebooks;
    bp.attention = sp.attention;
    bp.tap = sp.tap;
    bp.tap_user = sp.tap_user;
    struct mimi_batch *b = mimi_batch_create(model, &bp, err);
    if (b && mimi_batch_open(b) != SLOT0) {
        mimi_batch_destroy(b);
        if (err) *err = MIMI_ESTATE;
        return NULL;
    }
    return b;
}

// ---- encoder ----

struct mimi_encoder *mimi_encoder_create(const struct mimi_model *model,
                                         const struct mimi_stream_params *params, int *err) {
    struct mimi_encoder *e = calloc(1, sizeof *e);
    if (!e) {
        if (err) *err = MIMI_ENOMEM;
        return NULL;
    }
    e->batch = single_batch(model, params, MIMI_DIRECTION_ENCODE, err);
    e->pending = e->batch ? malloc(sizeof(float) * model->frame_size) : NULL;
    if (!e->pending) {
        if (e->batch && err) *err = MIMI_ENOMEM;
        mimi_encoder_destroy(e);
        return NULL;
    }
    return e;
}

void mimi_encoder_destroy(struct mimi_encoder *e) {
    if (!e) return;
    mimi_batch_destroy(e->batch);
    free(e->pending);
    free(e);
}

void mimi_encoder_reset(struct mimi_encoder *e) {
    if (!e) return;
    if (mimi_batch_reset(e->batch, SLOT0)) return;
    e->n_pending = 0;
    e->batch->errmsg[0] = 0;
}

// One frame into codes (codes != NULL) or a continuous latent, frame `f` of the output.
static int encode_frame(struct mimi_encoder *e, const float *pcm, int32_t *codes, float *latents,
                        size_t f) {
    const struct mimi_batch *b = e->batch;
    return mimi_batch_encode_unchecked(e->batch, 1, &SLOT0, pcm,
                                codes ? codes + f * (size_t)b->n_codebooks : NULL,
                                codes ? NULL : latents + f * (size_t)b->model->frame_dim);
}

static int step(struct mimi_encoder *e, const float *pcm, int want_codes, int32_t *codes,
                float *latents) {
    if (!e || !pcm || !(want_codes ? (void *)codes : (void *)latents)) return MIMI_EINVAL;
    int rc = mimi_batch_check_kind(e->batch, want_codes);
    if (rc) return rc;
    if (e->n_pending) {
        mimi_batch_error(e->batch, "step called with %d samples pending from push", e->n_pending);
        return MIMI_ESTATE;
    }
    rc = mimi_batch_check_finite(e->batch, pcm, (size_t)e->batch->model->frame_size, "sample");
    if (rc == MIMI_OK) rc = encode_frame(e, pcm, codes, latents, 0);
    return rc;
}

int mimi_encoder_step(struct mimi_encoder *e, const float *pcm, int32_t *codes) {
    return step(e, pcm, 1, codes, NULL);
}

int mimi_encoder_step_latent(struct mimi_encoder *e, const float *pcm, float *latent) {
    return step(e, pcm, 0, NULL, latent);
}

static int push(struct mimi_encoder *e, const float *pcm, size_t n_samples, int want_codes,
                int32_t *codes, float *latents, int max_frames) {
    if (!e || (!pcm && n_samples)) return MIMI_EINVAL;
    int rc = mimi_batch_check_kind(e->batch, want_codes);
    if (rc) return rc;
    const int frame = e->batch->model->frame_size;
    const void *out = want_codes ? (const void *)codes : (const void *)latents;
    size_t frames = ((size_t)e->n_pending + n_samples) / (size_t)frame;
    if (frames > 0 && (!out || frames > (size_t)(max_frames < 0 ? 0 : max_frames))) {
        mimi_batch_error(e->batch, "%zu frames complete but room for %d", frames, max_frames);
        return out ? MIMI_EBUFFER : MIMI_EINVAL;
    }
    rc = mimi_batch_check_finite(e->batch, pcm, n_samples, "sample");
    if (rc) return rc;
    size_t used = 0;
    for (size_t f = 0; f < frames; f++) {
        // complete the pending frame, or encode straight from the input when nothing is pending
        if (e->n_pending == 0) {
            rc = encode_frame(e, pcm + used, codes, latents, f);
            used += (size_t)frame;
        } else {
            size_t take = (size_t)(frame - e->n_pending);
            memcpy(e->pending + e->n_pending, pcm + used, sizeof(float) * take);
            used += take;
            e->n_pending = 0;
            rc = encode_frame(e, e->pending, codes, latents, f);
        }
        if (rc) return rc;  // a device failure (the batch is poisoned)
    }
    if (n_samples > used)
        memcpy(e->pending + e->n_pending, pcm + used, sizeof(float) * (n_samples - used));
    e->n_pending += (int)(n_samples - used);
    return (int)frames;
}

int mimi_encoder_push(struct mimi_encoder *e, const float *pcm, size_t n_samples, int32_t *codes,
                      int max_frames) {
    return push(e, pcm, n_samples, 1, codes, NULL, max_frames);
}

int mimi_encoder_push_latent(struct mimi_encoder *e, const float *pcm, size_t n_samples,
                             float *latents, int max_frames) {
    return push(e, pcm, n_samples, 0, NULL, latents, max_frames);
}

int mimi_encoder_pending(const struct mimi_encoder *e) { return e ? e->n_pending : MIMI_EINVAL; }

static int flush(struct mimi_encoder *e, int want_codes, int32_t *codes, float *latents,
                 int max_frames) {
    if (!e) return MIMI_EINVAL;
    int rc = mimi_batch_check_kind(e->batch, want_codes);
    if (rc) return rc;
    if (e->n_pending == 0) return 0;
    const void *out = want_codes ? (const void *)codes : (const void *)latents;
    if (!out || max_frames < 1) return out ? MIMI_EBUFFER : MIMI_EINVAL;
    // zero-pad the partial frame, as the reference pads the end of the audio
    const int frame = e->batch->model->frame_size;
    memset(e->pending + e->n_pending, 0, sizeof(float) * (size_t)(frame - e->n_pending));
    e->n_pending = 0;
    rc = encode_frame(e, e->pending, codes, latents, 0);
    return rc ? rc : 1;
}

int mimi_encoder_flush(struct mimi_encoder *e, int32_t *codes, int max_frames) {
    return flush(e, 1, codes, NULL, max_frames);
}

int mimi_encoder_flush_latent(struct mimi_encoder *e, float *latents, int max_frames) {
    return flush(e, 0, NULL, latents, max_frames);
}

const char *mimi_encoder_errmsg(const struct mimi_encoder *e) { return e ? e->batch->errmsg : ""; }

// ---- decoder ----

struct mimi_decoder *mimi_decoder_create(const struct mimi_model *model,
                                         const struct mimi_stream_params *params, int *err) {
    struct mimi_decoder *dc = calloc(1, sizeof *dc);
    if (!dc) {
        if (err) *err = MIMI_ENOMEM;
        return NULL;
    }
    dc->batch = single_batch(model, params, MIMI_DIRECTION_DECODE, err);
    if (!dc->batch) {
        free(dc);
        return NULL;
    }
    return dc;
}

void mimi_decoder_destroy(struct mimi_decoder *dc) {
    if (!dc) return;
    mimi_batch_destroy(dc->batch);
    free(dc);
}

void mimi_decoder_reset(struct mimi_decoder *dc) {
    if (!dc || mimi_batch_reset(dc->batch, SLOT0)) return;
    dc->batch->errmsg[0] = 0;
}

int mimi_decoder_step(struct mimi_decoder *dc, const int32_t *codes, float *pcm) {
    if (!dc || !codes || !pcm) return MIMI_EINVAL;
    return mimi_batch_decode(dc->batch, 1, &SLOT0, codes, pcm);
}

int mimi_decoder_step_latent(struct mimi_decoder *dc, const float *latent, float *pcm) {
    if (!dc || !latent || !pcm) return MIMI_EINVAL;
    return mimi_batch_decode_latent(dc->batch, 1, &SLOT0, latent, pcm);
}

// Decodes n_frames frames of codes or latents, all checked before the first is decoded.
static int decoder_push(struct mimi_decoder *dc, int want_codes, const int32_t *codes,
                        const float *latents, int n_frames, float *pcm, size_t max_samples) {
    const void *in = want_codes ? (const void *)codes : (const void *)latents;
    if (!dc || n_frames < 0 || (n_frames && (!in || !pcm))) return MIMI_EINVAL;
    struct mimi_batch *b = dc->batch;
    int rc = mimi_batch_check_kind(b, want_codes);
    if (rc) return rc;
    const int frame = b->model->frame_size, fd = b->model->frame_dim, n = b->n_codebooks;
    if ((size_t)n_frames * frame > max_samples) {
        mimi_batch_error(b, "%d frames need %zu samples, room for %zu", n_frames,
                         (size_t)n_frames * frame, max_samples);
        return MIMI_EBUFFER;
    }
    if ((int64_t)n_frames * frame > INT32_MAX) return MIMI_EINVAL;
    rc = want_codes ? mimi_batch_check_codes(b, codes, n_frames)
                    : mimi_batch_check_finite(b, latents, (size_t)n_frames * fd, "latent");
    if (rc != MIMI_OK) return rc;
    for (int f = 0; rc == MIMI_OK && f < n_frames; f++)
        rc = mimi_batch_decode_unchecked(b, 1, &SLOT0, want_codes ? codes + (size_t)f * n : NULL,
                                    want_codes ? NULL : latents + (size_t)f * fd,
                                    pcm + (size_t)f * frame);
    return rc ? rc : n_frames * frame;
}

int mimi_decoder_push(struct mimi_decoder *dc, const int32_t *codes, int n_frames, float *pcm,
                      size_t max_samples) {
    return decoder_push(dc, 1, codes, NULL, n_frames, pcm, max_samples);
}

int mimi_decoder_push_latent(struct mimi_decoder *dc, const float *latents, int n_frames,
                             float *pcm, size_t max_samples) {
    return decoder_push(dc, 0, NULL, latents, n_frames, pcm, max_samples);
}

const char *mimi_decoder_errmsg(const struct mimi_decoder *dc) { return dc ? dc->batch->errmsg : ""; }

// ---- offline ----

// Offline streams: the caller's parameters with the exact attention window.
static struct mimi_stream_params offline_params(const struct mimi_stream_params *params) {
    struct mimi_stream_params p;
    if (params) p = *params;
    else mimi_stream_params_default(&p);
    p.attention = MIMI_ATTENTION_WINDOW;
    return p;
}

// The batch fields an offline call's argument checks use (model, direction, codebooks, the
// message), without the streaming state a real batch would allocate: the whole-signal passes
// make their own. MIMI_OK, or MIMI_EINVAL for a codebook count outside the model's.
static int offline_check_batch(struct mimi_batch *b, const struct mimi_model *model,
                               const struct mimi_stream_params *p, int direction) {
    memset(b, 0, sizeof *b);
    b->model = model;
    b->direction = direction;
    b->capacity = 1;
    b->attention = p->attention;
    b->n_codebooks = model->quantizer.n_q ? p->n_codebooks : 0;
    return mimi_batch_check_codebooks(model, p->n_codebooks);
}

// An offline call's result: `rc` as it is, its message (if any) logged.
static int offline_done(const struct mimi_model *model, const struct mimi_batch *b, int rc) {
    if (rc != MIMI_OK && b->errmsg[0]) mimi_log(model, MIMI_LOG_ERROR, "%s", b->errmsg);
    return rc;
}

// Puts "signal i: " before the batch's message when a call has several signals.
static void name_signal(struct mimi_batch *b, int n, int i) {
    if (n < 2) return;
    char prefix[24];
    const size_t k = (size_t)snprintf(prefix, sizeof prefix, "signal %d: ", i), cap = sizeof b->errmsg;
    size_t len = strlen(b->errmsg);
    if (k + len >= cap) len = cap - 1 - k;  // the message's end gives way
    memmove(b->errmsg + k, b->errmsg, len);
    memcpy(b->errmsg, prefix, k);
    b->errmsg[k + len] = '\0';
}

// The checks every offline call of n signals makes before any signal: the codebook count, the
// model kind, the signal count, and no tap with several signals (taps are per signal).
static int offline_check(struct mimi_batch *b, const struct mimi_model *model, const struct mimi_stream_params *p,
                         int direction, int want_codes, int n) {
    int rc = offline_check_batch(b, model, p, direction);
    if (rc == MIMI_OK) rc = mimi_batch_check_kind(b, want_codes);
    if (rc == MIMI_OK && n > 1 && p->tap) {
        mimi_batch_error(b, "taps are per signal: pass the signals one at a time to use a tap");
        rc = MIMI_EINVAL;
    }
    return rc;
}

// Signal i's samples, finite (MIMI_OK) or not (MIMI_EINVAL, the message naming signal and sample).
struct sample_check {
    struct mimi_batch *b;
    const float *const *pcm;
    const int64_t *n_samples;
    int n;
};

static int check_samples(void *ctx, int i) {
    const struct sample_check *c = (const struct sample_check *)ctx;
    const int rc = mimi_batch_check_finite(c->b, c->pcm[i], (size_t)c->n_samples[i], "sample");
    if (rc) name_signal(c->b, c->n, i);
    return rc;
}

// Offline encode of n signals into codebook-major codes (n_codebooks, n_frames) or latents
// (frame_dim, n_frames), out[i] holding max_values[i]. Every signal's buffers and sizes are
// checked before any is encoded; its samples too on the CPU, and on a device just before its
// first step (in index order). MIMI_OK or a negative code.
static int encode_signals(const struct mimi_model *model, const struct mimi_stream_params *params, int n,
                          const float *const *pcm, const int64_t *n_samples, int32_t *const *codes,
                          float *const *latents, const int64_t *max_values) {
    const int want_codes = codes != NULL;
    if (!model || n < 1 || !pcm || !n_samples || (!codes && !latents) || !max_values) return MIMI_EINVAL;
    struct mimi_stream_params p = offline_params(params);
    struct mimi_batch b;
    int rc = offline_check(&b, model, &p, MIMI_DIRECTION_ENCODE, want_codes, n);
    const int per_frame = want_codes ? b.n_codebooks : model->frame_dim;
    struct offline_signal *sig = rc == MIMI_OK ? (struct offline_signal *)calloc((size_t)n, sizeof *sig) : NULL;
    if (rc == MIMI_OK && !sig) rc = MIMI_ENOMEM;
    struct sample_check check = {&b, pcm, n_samples, n};
    for (int i = 0; rc == MIMI_OK && i < n; i++) {
        void *out = want_codes ? (void *)codes[i] : (void *)latents[i];
        sig[i] = (struct offline_signal){pcm[i], n_samples[i], mimi_frames_for_samples(model, n_samples[i]), out};
        if (!pcm[i] || !out || n_samples[i] <= 0) {
            mimi_batch_error(&b, "no samples, or no input or output buffer");
            rc = MIMI_EINVAL;
        }
        if (rc == MIMI_OK && sig[i].n_frames * per_frame > max_values[i]) {
            mimi_batch_error(&b, "the output holds %lld values, %lld frames need %lld", (long long)max_values[i],
                             (long long)sig[i].n_frames, (long long)(sig[i].n_frames * per_frame));
            rc = MIMI_EBUFFER;
        }
        // on a device each signal's samples are checked just before its first step instead, while
        // the device runs the steps already queued (64 signals of 60 s are 368 MB: checked up
        // front, 15 ms with 4 host threads before the device started, 2% of the pass on an H200)
        if (rc) name_signal(&b, n, i);
        else if (!model->cuda) rc = check_samples(&check, i);
    }
    // many frames per pass: src/cpu/offline.h on the CPU, src/cuda/cuda_offline.cu on a device
    if (rc == MIMI_OK && model->cuda)
        rc = mimi_cuda_offline(model, MIMI_DIRECTION_ENCODE, b.n_codebooks, p.tap, p.tap_user, want_codes, n, sig,
                               check_samples, &check);
    for (int i = 0; rc == MIMI_OK && !model->cuda && i < n; i++)
        rc = mimi_offline_encode(model, b.n_codebooks, p.tap, p.tap_user, pcm[i], n_samples[i], sig[i].n_frames,
                                 want_codes ? codes[i] : NULL, want_codes ? NULL : latents[i]);
    free(sig);
    return offline_done(model, &b, rc);
}

// Offline decode of n signals of codebook-major codes (n_codebooks, n_frames[i]) or latents
// (frame_dim, n_frames[i]) into pcm[i] (max_samples[i]); every value is checked before anything
// is decoded. MIMI_OK or a negative code.
static int decode_signals(const struct mimi_model *model, const struct mimi_stream_params *params, int n,
                          const int32_t *const *codes_in, const float *const *latents_in, const int64_t *n_frames,
                          float *const *pcm, const int64_t *max_samples) {
    const int want_codes = codes_in != NULL;
    if (!model || n < 1 || (!codes_in && !latents_in) || !n_frames || !pcm || !max_samples) return MIMI_EINVAL;
    struct mimi_stream_params p = offline_params(params);
    struct mimi_batch b;
    int rc = offline_check(&b, model, &p, MIMI_DIRECTION_DECODE, want_codes, n);
    const int per_frame = want_codes ? b.n_codebooks : model->frame_dim, frame = model->frame_size;
    struct offline_signal *sig = rc == MIMI_OK ? (struct offline_signal *)calloc((size_t)n, sizeof *sig) : NULL;
    if (rc == MIMI_OK && !sig) rc = MIMI_ENOMEM;
    for (int i = 0; rc == MIMI_OK && i < n; i++) {
        const int64_t nf = n_frames[i];
        const int32_t *codes = want_codes ? codes_in[i] : NULL;
        const float *latents = want_codes ? NULL : latents_in[i];
        const void *in = want_codes ? (const void *)codes : (const void *)latents;
        sig[i] = (struct offline_signal){in, 0, nf, pcm[i]};
        if (!in || !pcm[i] || nf <= 0 || nf > INT64_MAX / frame) {
            mimi_batch_error(&b, "%lld frames, or no input or output buffer", (long long)nf);
            rc = MIMI_EINVAL;
        }
        if (rc == MIMI_OK && nf * frame > max_samples[i]) {
            mimi_batch_error(&b, "the output holds %lld samples, %lld frames need %lld", (long long)max_samples[i],
                             (long long)nf, (long long)(nf * frame));
            rc = MIMI_EBUFFER;
        }
        for (int64_t k = 0; rc == MIMI_OK && k < nf * per_frame; k++) {
            if (want_codes && (codes[k] < 0 || codes[k] >= model->quantizer.bins)) {
                mimi_batch_error(&b, "code %d at frame %lld, codebook %lld is outside [0, %d)", (int)codes[k],
                                 (long long)(k % nf), (long long)(k / nf), model->quantizer.bins);
                rc = MIMI_EINVAL;
            } else if (!want_codes && !isfinite(latents[k])) {
                mimi_batch_error(&b, "latent value %lld of frame %lld is NaN or infinite", (long long)(k / nf),
                                 (long long)(k % nf));
                rc = MIMI_EINVAL;
            }
        }
        if (rc) name_signal(&b, n, i);
    }
    // many frames per pass: src/cpu/offline.h on the CPU, src/cuda/cuda_offline.cu on a device
    if (rc == MIMI_OK && model->cuda)
        rc = mimi_cuda_offline(model, MIMI_DIRECTION_DECODE, b.n_codebooks, p.tap, p.tap_user, want_codes, n, sig,
                               NULL, NULL);
    for (int i = 0; rc == MIMI_OK && !model->cuda && i < n; i++)
        rc = mimi_offline_decode(model, b.n_codebooks, p.tap, p.tap_user, want_codes ? codes_in[i] : NULL,
                                 want_codes ? NULL : latents_in[i], n_frames[i], pcm[i]);
    free(sig);
    return offline_done(model, &b, rc);
}

// One signal: the frame count (encode) or sample count (decode), or the negative code.
static int64_t encode_one(const struct mimi_model *model, const struct mimi_stream_params *params, const float *pcm,
                          int64_t n_samples, int32_t *codes, float *latents, int64_t max_values) {
    if (!codes && !latents) return MIMI_EINVAL;
    int rc = encode_signals(model, params, 1, &pcm, &n_samples, codes ? &codes : NULL, codes ? NULL : &latents,
                            &max_values);
    return rc == MIMI_OK ? mimi_frames_for_samples(model, n_samples) : rc;
}

static int64_t decode_one(const struct mimi_model *model, const struct mimi_stream_params *params,
                          const int32_t *codes, const float *latents, int64_t n_frames, float *pcm,
                          int64_t max_samples) {
    if (!codes && !latents) return MIMI_EINVAL;
    int rc = decode_signals(model, params, 1, codes ? &codes : NULL, codes ? NULL : &latents, &n_frames, &pcm,
                            &max_samples);
    return rc == MIMI_OK ? n_frames * model->frame_size : rc;
}

int64_t mimi_encode_offline(const struct mimi_model *model, const struct mimi_stream_params *params,
                            const float *pcm, int64_t n_samples, int32_t *codes, int64_t max_codes) {
    return encode_one(model, params, pcm, n_samples, codes, NULL, max_codes);
}

int64_t mimi_encode_offline_latent(const struct mimi_model *model,
                                   const struct mimi_stream_params *params, const float *pcm,
                                   int64_t n_samples, float *latents, int64_t max_values) {
    return encode_one(model, params, pcm, n_samples, NULL, latents, max_values);
}

int64_t mimi_decode_offline(const struct mimi_model *model, const struct mimi_stream_params *params,
                            const int32_t *codes, int64_t n_frames, float *pcm, int64_t max_samples) {
    return decode_one(model, params, codes, NULL, n_frames, pcm, max_samples);
}

int64_t mimi_decode_offline_latent(const struct mimi_model *model,
                                   const struct mimi_stream_params *params, const float *latents,
                                   int64_t n_frames, float *pcm, int64_t max_samples) {
    return decode_one(model, params, NULL, latents, n_frames, pcm, max_samples);
}

int mimi_encode_offline_many(const struct mimi_model *model, const struct mimi_stream_params *params,
                             int n_signals, const float *const *pcm, const int64_t *n_samples,
                             int32_t *const *codes, const int64_t *max_codes) {
    if (!codes) return MIMI_EINVAL;
    return encode_signals(model, params, n_signals, pcm, n_samples, codes, NULL, max_codes);
}

int mimi_decode_offline_many(const struct mimi_model *model, const struct mimi_stream_params *params,
                             int n_signals, const int32_t *const *codes, const int64_t *n_frames,
                             float *const *pcm, const int64_t *max_samples) {
    if (!codes) return MIMI_EINVAL;
    return decode_signals(model, params, n_signals, codes, NULL, n_frames, pcm, max_samples);
}
