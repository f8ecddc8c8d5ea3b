/*
 * offline.h - whole-signal encode and decode many frames per pass (time batched): each weight
 * is read once per chunk of frames instead of once per frame, which is what makes offline
 * throughput compute bound rather than bandwidth bound. The computation is the streaming one
 * (src/nn/), with an attention ring of context + chunk steps so that every position sees
 * exactly the last `context` positions: the reference's offline result.
 *
 * These do the arithmetic only: the public helpers (src/stream.c) check the arguments, the
 * model kind and the inputs first.
 */
#ifndef MIMI_OFFLINE_H
#define MIMI_OFFLINE_H

#include <stdint.h>

#include "internal.h"

// Frames per pass (memory grows with it: about 2.5 MB per frame for the default Mimi).
#define MIMI_OFFLINE_CHUNK 16

// Encodes n_frames frames of pcm (n_samples samples, zero-padded at the end) with n_codebooks
// codebooks into codebook-major codes (n_codebooks, n_frames), or for a model without a
// quantizer into latents (frame_dim, n_frames): exactly one of codes and latents is given.
// tap / tap_user as in mimi_stream_params (taps see (channels, steps of one pass)).
// Returns MIMI_OK or MIMI_ENOMEM.
int mimi_offline_encode(const struct mimi_model *m, int n_codebooks, mimi_tap_fn tap,
                        void *tap_user, const float *pcm, int64_t n_samples, int64_t n_frames,
                        int32_t *codes, float *latents);

// Decodes codebook-major codes (n_codebooks, n_frames), checked by the caller, or latents
// (frame_dim, n_frames) into n_frames * frame_size samples. Returns MIMI_OK or MIMI_ENOMEM.
int mimi_offline_decode(const struct mimi_model *m, int n_codebooks, mimi_tap_fn tap,
                        void *tap_user, const int32_t *codes, const float *latents,
                        int64_t n_frames, float *pcm);

#endif
