/*
 * gpu.h - what the library (mimi.c, model.c, batch.c, backend.c) calls of the CUDA backend.
 * Implemented in src/cuda/ when the library is built with MIMI_CUDA, and by src/cuda_stub.c
 * (every entry reports MIMI_EUNSUPPORTED) otherwise. Never installed.
 *
 * A CUDA batch is an ordinary struct mimi_batch whose `gpu` field is set: slot bookkeeping and
 * argument checks stay in batch.c, the streaming state and the arithmetic live on the device.
 */
#ifndef MIMI_GPU_H
#define MIMI_GPU_H

#include "mimi.h"

#ifdef __cplusplus
extern "C" {
#endif

struct mimi_model;
struct mimi_batch;
struct mimi_batch_params;

// Number of usable CUDA devices (0 when none, or when built without CUDA).
int mimi_cuda_device_count(void);

// Uploads the model's weights to m->device and sets m->cuda. MIMI_OK, MIMI_EUNSUPPORTED (no
// such device, or a geometry the plans do not cover) or MIMI_EDEVICE; details go to the log.
int mimi_cuda_model_init(struct mimi_model *m);
// Frees m->cuda (NULL allowed).
void mimi_cuda_model_free(struct mimi_model *m);
// Frees the whole-signal lanes the model keeps between calls (m->cuda set); returns how many.
int mimi_cuda_offline_trim(const struct mimi_model *m);

// Creates a batch whose slots live on the device: state, scratch, the plans of every row bucket
// captured as graphs. Checks on `params` are the caller's. NULL with *err on failure.
struct mimi_batch *mimi_cuda_batch_create(const struct mimi_model *m,
                                          const struct mimi_batch_params *params, int *err);
// Whole-signal encode or decode of n signals on the device (cuda_offline.cu), for the offline
// helpers: the signals as src/offline_sched.h describes them, checked by the caller (or, with
// `check`, each just before its first step), with codes (want_codes) or latents; taps with
// n = 1 only. One signal is one slot advancing many frames per step; many share two batches of
// many slots. MIMI_OK, MIMI_ENOMEM, MIMI_EUNSUPPORTED, MIMI_EDEVICE (with a message in the log)
// or what `check` returned.
struct offline_signal;
int mimi_cuda_offline(const struct mimi_model *m, int direction, int n_codebooks, mimi_tap_fn tap, void *tap_user,
                      int want_codes, int n, const struct offline_signal *sig, int (*check)(void *, int),
                      void *check_ctx);

// A batch whose step advances each listed slot `frames` frames (inputs and outputs of a step are
// `frames` frames per row), with one plan of capacity rows, for the whole-signal passes.
struct mimi_batch *mimi_cuda_offline_create(const struct mimi_model *m, const struct mimi_batch_params *params,
                                            int frames, int *err);

// Frees the device side of a batch (b->gpu); the caller frees the rest.
void mimi_cuda_batch_free(struct mimi_batch *b);
// Returns a slot to its just-created state (queued on the batch's stream).
int mimi_cuda_slot_reset(struct mimi_batch *b, int slot);

// Queues one step of the n listed slots (checked by the caller) and returns at once. `input` is
// n rows of pcm (encode), codes (decode) or latents (decode of a model without quantizer).
int mimi_cuda_submit(struct mimi_batch *b, int n, const int *slots, const void *input);
// Like mimi_cuda_submit for a decode batch whose codes are in device memory:
// code q of listed slot k is codes[offset + k * stride + q]. `wait_stream` (a cudaStream_t or
// NULL) is waited on, on the device, before the codes are read.
int mimi_cuda_submit_device_codes(struct mimi_batch *b, int n, const int *slots, const int32_t *codes,
                                  int64_t offset, int64_t stride, void *wait_stream);
// One synchronous step: submit, then collect into `output`.
int mimi_cuda_step(struct mimi_batch *b, int n, const int *slots, const void *input, void *output);

// The persistent kernels (src/cuda/grid.cuh) leave each other 64-bit words whose upper half is a
// version, the batch's launch count times the stages a launch versions (at most 64) plus the
// stage (grid_version). Every GPU_VERSION_PERIOD launches the words and the count go back to
// zero, so versions stay below 2^26 and never wrap around to one that a word left long ago could
// still carry (a larger bucket's rows, which a smaller bucket's launches do not write, keep their
// words for as long as only smaller steps run).
#define GPU_VERSION_PERIOD (1u << 20)

// Zeroes the persistent kernels' versioned words and launch counts (queued on the batch's
// stream). The steps do it every GPU_VERSION_PERIOD launches (cuda_step.cu); a test may at any
// step boundary, and the results must not change.
int mimi_cuda_clear_versions(struct mimi_batch *b);
// The plan launches since the words were last zeroed; `set` (when not NULL) replaces the count
// first, so that a test may bring a batch to the period's end without a million steps.
uint32_t mimi_cuda_launches(struct mimi_batch *b, const uint32_t *set);

// Where the input rows of a step sit in the batch's pinned stage (capacity rows, the same for
// every bucket): a caller may write them there while no step is pending, or once
// mimi_cuda_input_free returned (the pending step has read them), then submit with this as
// `input` (taken unchecked: mimi_batch_input_rows's callers are checked in backend.c).
void *mimi_cuda_input_rows(struct mimi_batch *b);
// Waits until the pending step (if any) has copied its inputs from the pinned stage.
int mimi_cuda_input_free(struct mimi_batch *b);
// The pinned output rows of the last collected step (valid until the next submit).
const void *mimi_cuda_output_rows(const struct mimi_batch *b);
// Waits for the submitted step and copies its n rows out (codes, latents or pcm; not with
// `output` NULL: mimi_cuda_output_rows has them). Runs the taps.
// MIMI_OK, MIMI_EINVAL (a device code out of range: that slot did not advance), MIMI_ESTATE
// (nothing submitted, or poisoned) or MIMI_EDEVICE.
int mimi_cuda_collect(struct mimi_batch *b, void *output);
// 1 while a submitted step has not been collected.
int mimi_cuda_pending(const struct mimi_batch *b);

// Runs one step op by op, timing each; fn gets (user, op, stage, microseconds) per op.
int mimi_cuda_profile(struct mimi_batch *b, int n, const int *slots, const void *input, void *output,
                      mimi_profile_fn fn, void *user);

// The batch's cudaStream_t (NULL for a CPU batch).
void *mimi_cuda_stream(const struct mimi_batch *b);

#ifdef __cplusplus
}
#endif

#endif
