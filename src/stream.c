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

static int all_finite(const float *x, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!isfinite(x[i])) return 0;
    return 1;
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

static void encode_frame(struct mimi_encoder *e, const float *pcm, int32_t *codes) {
    mimi_batch_encode_unchecked(e->batch, 1, &SLOT0, pcm, codes);
}

int mimi_encoder_step(struct mimi_encoder *e, const float *pcm, int32_t *codes) {
    if (!e || !pcm || !codes) return MIMI_EINVAL;
    if (e->n_pending) {
        mimi_batch_error(e->batch, "step called with %d samples pending from push", e->n_pending);
        return MIMI_ESTATE;
    }
    if (!all_finite(pcm, (size_t)e->batch->model->frame_size)) {
        mimi_batch_error(e->batch, "the frame holds a NaN or infinite sample");
        return MIMI_EINVAL;
    }
    encode_frame(e, pcm, codes);
    return MIMI_OK;
}

int mimi_encoder_push(struct mimi_encoder *e, const float *pcm, size_t n_samples, int32_t *codes,
                      int max_frames) {
    if (!e || (!pcm && n_samples)) return MIMI_EINVAL;
    const int frame = e->batch->model->frame_size, n = e->batch->n_codebooks;
    size_t total = (size_t)e->n_pending + n_samples;
    size_t frames = total / (size_t)frame;
    if (frames > 0 && (!codes || frames > (size_t)(max_frames < 0 ? 0 : max_frames))) {
        mimi_batch_error(e->batch, "%zu frames complete but room for %d", frames, max_frames);
        return codes ? MIMI_EBUFFER : MIMI_EINVAL;
    }
    if (n_samples && !all_finite(pcm, n_samples)) {
        mimi_batch_error(e->batch, "the input holds a NaN or infinite sample");
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
    if (n_samples > used) memcpy(e->pending + e->n_pending, pcm + used, sizeof(float) * (n_samples - used));
    e->n_pending += (int)(n_samples - used);
    return (int)frames;
}

int mimi_encoder_pending(const struct mimi_encoder *e) { return e ? e->n_pending : MIMI_EINVAL; }

int mimi_encoder_flush(struct mimi_encoder *e, int32_t *codes, int max_frames) {
    if (!e) return MIMI_EINVAL;
    if (e->n_pending == 0) return 0;
    if (!codes || max_frames < 1) return codes ? MIMI_EBUFFER : MIMI_EINVAL;
    // zero-pad the partial frame, as the reference pads the end of the audio
    const int frame = e->batch->model->frame_size;
    memset(e->pending + e->n_pending, 0, sizeof(float) * (size_t)(frame - e->n_pending));
    e->n_pending = 0;
    encode_frame(e, e->pending, codes);
    return 1;
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

int mimi_decoder_push(struct mimi_decoder *dc, const int32_t *codes, int n_frames, float *pcm,
                      size_t max_samples) {
    if (!dc || n_frames < 0 || (n_frames && (!codes || !pcm))) return MIMI_EINVAL;
    const int frame = dc->batch->model->frame_size, n = dc->batch->n_codebooks;
    if ((size_t)n_frames * frame > max_samples) {
        mimi_batch_error(dc->batch, "%d frames need %zu samples, room for %zu", n_frames,
                         (size_t)n_frames * frame, max_samples);
        return MIMI_EBUFFER;
    }
    if ((int64_t)n_frames * frame > INT32_MAX) return MIMI_EINVAL;
    int rc = mimi_batch_check_codes(dc->batch, codes, n_frames);
    if (rc != MIMI_OK) return rc;
    for (int f = 0; f < n_frames; f++)
        mimi_batch_decode_unchecked(dc->batch, 1, &SLOT0, codes + (size_t)f * n, pcm + (size_t)f * frame);
    return n_frames * frame;
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
        mimi_batch_decode_unchecked(dc->batch, 1, &SLOT0, frame_codes, pcm + f * frame);
    }
    mimi_decoder_destroy(dc);
    free(frame_codes);
    return rc == MIMI_OK ? n_frames * frame : rc;
}
