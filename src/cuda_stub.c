/*
 * cuda_stub.c - the CUDA backend's entry points (gpu.h) in a library built without MIMI_CUDA:
 * no device is ever available, so models never get a CUDA side and no batch reaches the rest.
 */
#include <stddef.h>

#include "gpu.h"

int mimi_cuda_device_count(void) { return 0; }

int mimi_cuda_model_init(struct mimi_model *m) {
    (void)m;
    return MIMI_EUNSUPPORTED;
}

void mimi_cuda_model_free(struct mimi_model *m) { (void)m; }
int mimi_cuda_offline_trim(const struct mimi_model *m) {
    (void)m;
    return 0;
}

struct mimi_batch *mimi_cuda_batch_create(const struct mimi_model *m, const struct mimi_batch_params *params,
                                          int *err) {
    (void)m;
    (void)params;
    if (err) *err = MIMI_EUNSUPPORTED;
    return NULL;
}

void mimi_cuda_batch_free(struct mimi_batch *b) { (void)b; }

int mimi_cuda_offline(const struct mimi_model *m, int direction, int n_codebooks, mimi_tap_fn tap, void *tap_user,
                      int want_codes, int n, const struct offline_signal *sig, int (*check)(void *, int),
                      void *check_ctx) {
    (void)m, (void)direction, (void)n_codebooks, (void)tap, (void)tap_user, (void)want_codes, (void)n, (void)sig;
    (void)check, (void)check_ctx;
    return MIMI_EUNSUPPORTED;
}

int mimi_cuda_slot_reset(struct mimi_batch *b, int slot) {
    (void)b;
    (void)slot;
    return MIMI_EUNSUPPORTED;
}

int mimi_cuda_submit(struct mimi_batch *b, int n, const int *slots, const void *input) {
    (void)b, (void)n, (void)slots, (void)input;
    return MIMI_EUNSUPPORTED;
}

int mimi_cuda_submit_device_codes(struct mimi_batch *b, int n, const int *slots, const int32_t *codes,
                                  int64_t offset, int64_t stride, void *wait_stream) {
    (void)b, (void)n, (void)slots, (void)codes, (void)offset, (void)stride, (void)wait_stream;
    return MIMI_EUNSUPPORTED;
}

int mimi_cuda_step(struct mimi_batch *b, int n, const int *slots, const void *input, void *output) {
    (void)b, (void)n, (void)slots, (void)input, (void)output;
    return MIMI_EUNSUPPORTED;
}

int mimi_cuda_collect(struct mimi_batch *b, void *output) {
    (void)b, (void)output;
    return MIMI_EUNSUPPORTED;
}

int mimi_cuda_pending(const struct mimi_batch *b) {
    (void)b;
    return 0;
}

int mimi_cuda_profile(struct mimi_batch *b, int n, const int *slots, const void *input, void *output,
                      mimi_profile_fn fn, void *user) {
    (void)b, (void)n, (void)slots, (void)input, (void)output, (void)fn, (void)user;
    return MIMI_EUNSUPPORTED;
}

void *mimi_cuda_stream(const struct mimi_batch *b) {
    (void)b;
    return NULL;
}

void *mimi_cuda_input_rows(struct mimi_batch *b) {
    (void)b;
    return NULL;
}

const void *mimi_cuda_output_rows(const struct mimi_batch *b) {
    (void)b;
    return NULL;
}
