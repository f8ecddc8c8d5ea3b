/*
 * offline.c - whole-signal encode and decode, MIMI_OFFLINE_CHUNK frames per pass (offline.h).
 *
 * One pass runs the streaming layers (src/nn/nn.h) over chunk * frame_size samples, or chunk
 * frames of codes, as a single slot with a long time axis: the convs see chunk times more steps,
 * the transformer chunk times more positions (all written to its ring before any query, the
 * ring holding context + chunk steps), the quantizer chunk latents as if they were slots. The
 * per-frame arithmetic is that of streaming; only the attention ring's slot order differs.
 * Not here: argument checks (src/stream.c), the kernels (src/cpu/, src/nn/ops_ref.c).
 */
#include <stdlib.h>
#include <string.h>

#include "nn/nn.h"
#include "nn/ops.h"
#include "offline.h"

// ---- memory ----

// One slot's memory and the scratch of a pass, laid out like a batch of one (src/batch.c).
struct offline {
    struct seanet_mem seanet;
    struct transformer_mem tr;
    struct conv_mem resample;
    struct seanet_scratch sn_scratch;
    struct transformer_scratch tr_scratch;
    float *resample_work;
    float *latent;     // (max(latent_dim, frame_dim), chunk)
    float *upsampled;  // (latent_dim, chunk * steps_per_frame)
    float *q_work;
    float *frame_in;  // encode: (chunk * frame_size) samples; decode: (chunk, per_frame) values
    int32_t *frame_codes;  // (chunk, n_codebooks)
};

static void layout(const struct mimi_model *m, int encode, int chunk, struct arena *a,
                   struct offline *o) {
    const struct seanet *sn = encode ? &m->encoder : &m->decoder;
    const struct transformer *tr = encode ? &m->enc_tr : &m->dec_tr;
    const struct mimi_conv *rs = encode ? &m->downsample : &m->upsample;
    const int steps = chunk * m->steps_per_frame, d = m->latent_dim;
    const int per_frame = m->quantizer.n_q ? m->quantizer.n_q : m->frame_dim;
    seanet_mem_layout(a, sn, &o->seanet);
    transformer_mem_layout(a, tr, tr->context + steps, &o->tr);
    conv_mem_layout(a, rs, &o->resample);
    seanet_scratch_layout(a, sn, 1, encode ? chunk * m->frame_size : steps, &o->sn_scratch);
    transformer_scratch_layout(a, tr, 1, steps, tr->context + steps, &o->tr_scratch);
    o->resample_work = arena_floats(a, conv_work_floats(rs, 1, encode ? steps : chunk));
    o->latent = arena_floats(a, (size_t)(d > m->frame_dim ? d : m->frame_dim) * chunk);
    o->upsampled = arena_floats(a, (size_t)d * steps);
    o->q_work = arena_floats(a, m->quantizer.n_q ? quantizer_work_floats(&m->quantizer, chunk) : 0);
    o->frame_in = arena_floats(a, (size_t)chunk * (encode ? m->frame_size : per_frame));
    o->frame_codes = (int32_t *)arena_floats(a, (size_t)chunk * per_frame);
}

// Allocates the block for `o`; NULL when out of memory.
static void *setup(const struct mimi_model *m, int encode, int chunk, struct offline *o) {
    struct arena measure = {0};
    layout(m, encode, chunk, &measure, o);
    struct arena block = {.base = aligned_alloc(64, (measure.used + 63) & ~(size_t)63)};
    if (!block.base) return NULL;
    layout(m, encode, chunk, &block, o);
    seanet_reset(encode ? &m->encoder : &m->decoder, &o->seanet);
    transformer_reset(encode ? &m->enc_tr : &m->dec_tr, &o->tr);
    conv_mem_reset(encode ? &m->downsample : &m->upsample, &o->resample);
    return block.base;
}

static void tap(mimi_tap_fn fn, void *user, const char *name, const float *x, int c, int steps) {
    if (fn) fn(user, name, x, c, steps);
}

// ---- encode ----

int mimi_offline_encode(const struct mimi_model *m, int n_codebooks, mimi_tap_fn tap_fn,
                        void *tap_user, const float *pcm, int64_t n_samples, int64_t n_frames,
                        int32_t *codes, float *latents) {
    const int chunk = n_frames < MIMI_OFFLINE_CHUNK ? (int)n_frames : MIMI_OFFLINE_CHUNK;
    const int frame = m->frame_size, d = m->latent_dim, fd = m->frame_dim;
    struct offline o;
    void *block = setup(m, 1, chunk, &o);
    if (!block) return MIMI_ENOMEM;
    struct seanet_mem *sn = &o.seanet;
    struct transformer_mem *tr = &o.tr;
    struct conv_mem *rs = &o.resample;
    for (int64_t f0 = 0; f0 < n_frames; f0 += chunk) {
        const int F = n_frames - f0 < chunk ? (int)(n_frames - f0) : chunk;
        // this pass's samples, the signal's end zero-padded to whole frames
        int64_t start = f0 * frame, left = n_samples - start, want = (int64_t)F * frame;
        const float *in = pcm + start;
        if (left < want) {
            memcpy(o.frame_in, in, sizeof(float) * (size_t)left);
            memset(o.frame_in + left, 0, sizeof(float) * (size_t)(want - left));
            in = o.frame_in;
        }
        // SEANet (1, F * frame) -> (d, steps); transformer; downsample -> (fd, F)
        int steps;
        float *x = seanet_forward(&m->encoder, &sn, 1, &o.sn_scratch, in, F * frame, &steps);
        tap(tap_fn, tap_user, "enc_seanet", x, d, steps);
        transformer_forward(&m->enc_tr, &tr, 1, &o.tr_scratch, x, steps);
        tap(tap_fn, tap_user, "enc_transformer", x, d, steps);
        conv1d_stream(&m->downsample, &rs, 1, x, steps, o.latent, o.resample_work);
        tap(tap_fn, tap_user, "latent", o.latent, fd, F);
        if (!codes) {
            // (fd, F) -> (fd, n_frames) columns f0 ..
            for (int c = 0; c < fd; c++)
                memcpy(latents + (size_t)c * n_frames + f0, o.latent + (size_t)c * F,
                       sizeof(float) * F);
            continue;
        }
        // the F latents quantized as F slots: (F, n_codebooks) -> codebook-major
        quantizer_encode(&m->quantizer, o.latent, F, n_codebooks, o.frame_codes, o.q_work);
        for (int f = 0; f < F; f++)
            for (int q = 0; q < n_codebooks; q++)
                codes[(size_t)q * n_frames + f0 + f] = o.frame_codes[(size_t)f * n_codebooks + q];
    }
    free(block);
    return MIMI_OK;
}

// ---- decode ----

int mimi_offline_decode(const struct mimi_model *m, int n_codebooks, mimi_tap_fn tap_fn,
                        void *tap_user, const int32_t *codes, const float *latents,
                        int64_t n_frames, float *pcm) {
    const int chunk = n_frames < MIMI_OFFLINE_CHUNK ? (int)n_frames : MIMI_OFFLINE_CHUNK;
    const int frame = m->frame_size, d = m->latent_dim, fd = m->frame_dim;
    struct offline o;
    void *block = setup(m, 0, chunk, &o);
    if (!block) return MIMI_ENOMEM;
    struct seanet_mem *sn = &o.seanet;
    struct transformer_mem *tr = &o.tr;
    struct conv_mem *rs = &o.resample;
    for (int64_t f0 = 0; f0 < n_frames; f0 += chunk) {
        const int F = n_frames - f0 < chunk ? (int)(n_frames - f0) : chunk;
        // codes or latents of F frames -> latent (d, F)
        if (codes) {
            for (int f = 0; f < F; f++)
                for (int q = 0; q < n_codebooks; q++)
                    o.frame_codes[(size_t)f * n_codebooks + q] =
                        codes[(size_t)q * n_frames + f0 + f];
            quantizer_decode(&m->quantizer, o.frame_codes, F, n_codebooks, o.latent, o.q_work);
        } else {
            for (int f = 0; f < F; f++)
                for (int c = 0; c < fd; c++)
                    o.frame_in[(size_t)f * fd + c] = latents[(size_t)c * n_frames + f0 + f];
            mimi_linear_apply(m->quantizer.lin_projection, F, o.frame_in, fd, o.latent, F, 1);
        }
        tap(tap_fn, tap_user, "dec_latent", o.latent, d, F);
        // upsample (d, 2F), transformer, SEANet -> (1, F * frame)
        const int steps = F * m->steps_per_frame;
        convtr_stream(&m->upsample, &rs, 1, o.latent, F, o.upsampled, o.resample_work);
        tap(tap_fn, tap_user, "dec_upsample", o.upsampled, d, steps);
        transformer_forward(&m->dec_tr, &tr, 1, &o.tr_scratch, o.upsampled, steps);
        tap(tap_fn, tap_user, "dec_transformer", o.upsampled, d, steps);
        int T;
        float *out = seanet_forward(&m->decoder, &sn, 1, &o.sn_scratch, o.upsampled, steps, &T);
        memcpy(pcm + f0 * frame, out, sizeof(float) * (size_t)F * frame);
    }
    free(block);
    return MIMI_OK;
}
