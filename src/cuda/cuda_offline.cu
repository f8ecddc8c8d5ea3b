/*
 * cuda_offline.cu - whole-signal encode and decode on the device (gpu.h): one slot of a batch
 * whose step advances it OFFLINE_FRAMES frames at once (plan.c with L.frames > 1: the convs see
 * that many more samples, the transformer that many more positions under the exact window, the
 * quantizer that many latents as rows). The last step is zero-padded: every op is causal, so the
 * padding changes none of the outputs that are kept, and the taps hand over the real frames only.
 */
#include <stdlib.h>
#include <string.h>

#include "cuda/cuda_batch.cuh"

// Frames per step at most, and transformer positions per step at most (Mimi: 64 frames of 2
// positions; Pocket TTS's Mimi: 8 frames of 16).
#define OFFLINE_FRAMES 64
#define OFFLINE_POSITIONS 128

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

// A one-slot batch stepping `frames` frames, its slot open; NULL with *rc on failure.
static struct mimi_batch *offline_batch(const struct mimi_model *m, int direction, int n_codebooks, mimi_tap_fn tap,
                                        void *tap_user, int frames, int *rc) {
    struct mimi_batch_params bp;
    mimi_batch_params_default(&bp);
    bp.direction = direction;
    bp.n_codebooks = n_codebooks > 0 ? n_codebooks : bp.n_codebooks;
    bp.attention = MIMI_ATTENTION_WINDOW;
    bp.tap = tap;
    bp.tap_user = tap_user;
    struct mimi_batch *b = mimi_cuda_offline_create(m, &bp, frames, rc);
    if (b && mimi_batch_open(b) != 0) {
        mimi_batch_destroy(b);
        *rc = MIMI_ESTATE;
        return NULL;
    }
    return b;
}

static int finish(const struct mimi_model *m, struct mimi_batch *b, int rc, void *in, void *out) {
    if (rc && b) mimi_log(m, MIMI_LOG_ERROR, "cuda: whole-signal pass: %s", b->errmsg);
    mimi_batch_destroy(b);
    free(in);
    free(out);
    return rc;
}

extern "C" int mimi_cuda_offline_encode(const struct mimi_model *m, int n_codebooks, mimi_tap_fn tap, void *tap_user,
                                        const float *pcm, int64_t n_samples, int64_t n_frames, int32_t *codes,
                                        float *latents) {
    const int F = frames_per_step(m, n_frames), frame = m->frame_size;
    const int per_frame = codes ? n_codebooks : m->frame_dim, slot = 0;
    int rc = MIMI_OK;
    struct mimi_batch *b = offline_batch(m, MIMI_DIRECTION_ENCODE, n_codebooks, tap, tap_user, F, &rc);
    float *in = (float *)malloc(sizeof(float) * (size_t)F * frame);
    void *out = malloc(sizeof(float) * (size_t)F * per_frame);  // int32 codes or float latents
    if (!rc && (!in || !out)) rc = MIMI_ENOMEM;
    for (int64_t f0 = 0; !rc && f0 < n_frames; f0 += F) {
        // samples [f0 * frame, (f0 + F) * frame), zeros past the end of the signal
        const int valid = n_frames - f0 < F ? (int)(n_frames - f0) : F;
        const int64_t start = f0 * frame, left = n_samples - start;
        const int64_t take = left < (int64_t)F * frame ? left : (int64_t)F * frame;
        memcpy(in, pcm + start, sizeof(float) * (size_t)take);
        memset(in + take, 0, sizeof(float) * (size_t)((int64_t)F * frame - take));
        b->gpu->tap_frames = valid;
        rc = mimi_cuda_step(b, 1, &slot, in, out);
        for (int f = 0; !rc && f < valid; f++)
            for (int q = 0; q < per_frame; q++) {
                if (codes) codes[q * n_frames + f0 + f] = ((const int32_t *)out)[f * per_frame + q];
                else latents[q * n_frames + f0 + f] = ((const float *)out)[f * per_frame + q];
            }
    }
    return finish(m, b, rc, in, out);
}

extern "C" int mimi_cuda_offline_decode(const struct mimi_model *m, int n_codebooks, mimi_tap_fn tap, void *tap_user,
                                        const int32_t *codes, const float *latents, int64_t n_frames, float *pcm) {
    const int F = frames_per_step(m, n_frames), frame = m->frame_size;
    const int per_frame = codes ? n_codebooks : m->frame_dim, slot = 0;
    int rc = MIMI_OK;
    struct mimi_batch *b = offline_batch(m, MIMI_DIRECTION_DECODE, n_codebooks, tap, tap_user, F, &rc);
    void *in = malloc(sizeof(float) * (size_t)F * per_frame);  // frame-major codes or latents
    float *out = (float *)malloc(sizeof(float) * (size_t)F * frame);
    if (!rc && (!in || !out)) rc = MIMI_ENOMEM;
    for (int64_t f0 = 0; !rc && f0 < n_frames; f0 += F) {
        // frames f0 .. f0 + F - 1, code 0 (or zero latents) past the last one
        const int valid = n_frames - f0 < F ? (int)(n_frames - f0) : F;
        memset(in, 0, sizeof(float) * (size_t)F * per_frame);
        for (int f = 0; f < valid; f++)
            for (int q = 0; q < per_frame; q++) {
                if (codes) ((int32_t *)in)[f * per_frame + q] = codes[q * n_frames + f0 + f];
                else ((float *)in)[f * per_frame + q] = latents[q * n_frames + f0 + f];
            }
        b->gpu->tap_frames = valid;
        rc = mimi_cuda_step(b, 1, &slot, in, out);
        if (!rc) memcpy(pcm + f0 * frame, out, sizeof(float) * (size_t)valid * frame);
    }
    return finish(m, b, rc, in, out);
}
