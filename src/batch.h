/*
 * batch.h - the batch object (many streams of one direction) shared by batch.c and stream.c,
 * where encoders and decoders are batches of one. Never installed.
 */
#ifndef MIMI_BATCH_H
#define MIMI_BATCH_H

#include "internal.h"
#include "nn/nn.h"

// One slot's streaming memory.
struct enc_slot {
    struct seanet_mem seanet;
    struct transformer_mem tr;
    struct conv_mem down;
};

struct dec_slot {
    struct seanet_mem seanet;
    struct transformer_mem tr;
    struct conv_mem up;
};

struct mimi_batch {
    const struct mimi_model *model;
    int direction, capacity, n_codebooks, attention;
    mimi_tap_fn tap;
    void *tap_user;
    char errmsg[MIMI_ERRMSG_LEN];
    void *block;              // everything below points into this one allocation
    unsigned char *open;      // (capacity)
    unsigned char *listed;    // (capacity) marks for the distinct-slot check
    struct enc_slot *enc;     // (capacity), encode batches
    struct dec_slot *dec;     // (capacity), decode batches
    struct seanet_mem **seanet_mems;   // (capacity) gathered per step
    struct transformer_mem **tr_mems;  // (capacity)
    struct conv_mem **resample_mems;   // (capacity)
    struct seanet_scratch seanet_scratch;
    struct transformer_scratch tr_scratch;
    float *resample_work;
    float *latent;     // (latent_dim, capacity)
    float *upsampled;  // (latent_dim, capacity, steps_per_frame)
    float *q_work;
    struct mimi_cuda_batch *gpu;     // the device side of a CUDA batch (src/cuda), NULL on the CPU
    struct mimi_batch_async *async;  // a CPU batch's submitted step (backend.c), made on demand
    void *input_rows;                // a CPU batch's mimi_batch_input_rows, made on demand
};

// Records a message on the batch (mimi_batch_errmsg).
void mimi_batch_error(struct mimi_batch *b, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

// The step without argument checks: slots valid, open and distinct, inputs checked. A frame is
// n_codebooks codes (models with a quantizer) or frame_dim floats (continuous latents): exactly
// one of `codes` and `latents` is given, (n, n_codebooks) or (n, frame_dim), slot-major.
// Returns MIMI_OK, or the failure of a CUDA batch's device (src/cuda).
int mimi_batch_encode_unchecked(struct mimi_batch *b, int n, const int *slots, const float *pcm,
                                int32_t *codes, float *latents);
int mimi_batch_decode_unchecked(struct mimi_batch *b, int n, const int *slots,
                                const int32_t *codes, const float *latents, float *pcm);

// MIMI_OK when the model has codes (want_codes = 1) or continuous latents (0); otherwise
// MIMI_EUNSUPPORTED with a message saying which API to use.
int mimi_batch_check_kind(struct mimi_batch *b, int want_codes);

// MIMI_OK when a batch or offline call of `model` may produce n_codebooks codebooks (any count
// for a model without a quantizer); else logs why and returns MIMI_EINVAL.
int mimi_batch_check_codebooks(const struct mimi_model *model, int n_codebooks);

// Checks that every value is finite; records the first bad one.
int mimi_batch_check_finite(struct mimi_batch *b, const float *x, size_t n, const char *what);
// The same check in one pass with a copy of x to dst (a device batch's pinned stage); a large
// one is split over the model's threads (n_threads). x[0] is value `first` of the input (for the
// message). Returns MIMI_OK or MIMI_EINVAL.
int mimi_batch_copy_finite(struct mimi_batch *b, float *dst, const float *x, size_t n, size_t first,
                           const char *what);
// memcpy, split over the model's threads when large: the host's share of a device step.
void mimi_host_copy(const struct mimi_model *m, void *dst, const void *src, size_t bytes);

// Checks codes (n frames of n_codebooks) against the codebook size; records the first bad one.
int mimi_batch_check_codes(struct mimi_batch *b, const int32_t *codes, int64_t n_frames);

// The argument checks of a step (slot list, model kind, input given) without running it:
// MIMI_OK when it may run. For the asynchronous entry points (backend.c).
int mimi_batch_check_step(struct mimi_batch *b, int direction, int want_codes, int n,
                          const int *slots, const void *input);

// Frees what a backend attached to the batch: the CUDA side, a CPU batch's submit buffer.
void mimi_batch_backend_free(struct mimi_batch *b);

#endif
