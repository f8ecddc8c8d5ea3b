/*
 * backend.c - public entry points about compute backends: availability, the backend of a
 * model, asynchronous steps (submit now, collect later) and the per-op profile.
 *
 * CUDA batches (b->gpu set) go to src/cuda through gpu.h. A CPU batch runs its whole step at
 * submit, through the ordinary batch functions, and keeps the result until collect, so callers
 * write one code path for both backends. The synchronous steps themselves are in batch.c.
 */
#include <stdlib.h>
#include <string.h>

#include "batch.h"
#include "cpu/cpu.h"
#include "gpu.h"

// ---- backends ----

int mimi_backend_available(int backend) {
    switch (backend) {
    case MIMI_BACKEND_AUTO:
    case MIMI_BACKEND_CPU: return 1;
    case MIMI_BACKEND_CUDA: return mimi_cuda_device_count() > 0;
    default: return 0;
    }
}

const char *mimi_model_backend_name(const struct mimi_model *m) {
    if (!m) return "";
    return m->cuda ? "cuda" : "cpu";
}

void mimi_batch_backend_free(struct mimi_batch *b) {
    if (!b) return;
    mimi_cuda_batch_free(b);
    free(b->async);
    free(b->input_rows);
    b->async = NULL;
    b->input_rows = NULL;
}

// ---- CPU submit / collect ----

// The step a CPU batch ran at submit, waiting for collect.
struct mimi_batch_async {
    int pending;
    size_t bytes;
    unsigned char data[];
};

// Bytes of one slot's step output.
static size_t out_row_bytes(const struct mimi_batch *b) {
    const struct mimi_model *m = b->model;
    if (b->direction == MIMI_DIRECTION_DECODE) return sizeof(float) * m->frame_size;
    return m->quantizer.n_q ? sizeof(int32_t) * b->n_codebooks : sizeof(float) * m->frame_dim;
}

// Bytes of one slot's step input.
static size_t in_row_bytes(const struct mimi_batch *b) {
    const struct mimi_model *m = b->model;
    if (b->direction == MIMI_DIRECTION_ENCODE) return sizeof(float) * m->frame_size;
    return m->quantizer.n_q ? sizeof(int32_t) * b->n_codebooks : sizeof(float) * m->frame_dim;
}

// The result buffer of a CPU batch (made on demand), or NULL.
static struct mimi_batch_async *cpu_async(struct mimi_batch *b) {
    if (!b->async) b->async = calloc(1, sizeof *b->async + out_row_bytes(b) * (size_t)b->capacity);
    return b->async;
}

// The result buffer of a CPU batch for a new step, or NULL with *rc set.
static void *cpu_result(struct mimi_batch *b, int *rc) {
    if (!cpu_async(b)) {
        *rc = MIMI_ENOMEM;
        return NULL;
    }
    if (b->async->pending) {
        mimi_batch_error(b, "a submitted step was not collected");
        *rc = MIMI_ESTATE;
        return NULL;
    }
    return b->async->data;
}

static int cpu_done(struct mimi_batch *b, int n, int rc) {
    if (rc == MIMI_OK) {
        b->async->pending = 1;
        b->async->bytes = out_row_bytes(b) * (size_t)n;
    }
    return rc;
}

// ---- submit ----

// A device batch checks PCM and latents as it stages them, except those the caller wrote in
// place (mimi_batch_input_rows), which are checked here.
static int check_in_place(struct mimi_batch *b, const void *input, int n) {
    const int encode = b->direction == MIMI_DIRECTION_ENCODE;
    if (input != mimi_cuda_input_rows(b) || (!encode && b->model->quantizer.n_q)) return MIMI_OK;
    return mimi_batch_check_finite(b, input, (size_t)n * (encode ? b->model->frame_size : b->model->frame_dim),
                                   encode ? "sample" : "latent");
}

int mimi_batch_submit_encode(struct mimi_batch *b, int n, const int *slots, const float *pcm) {
    if (!b) return MIMI_EINVAL;
    int rc = MIMI_OK;
    if (!b->gpu) {
        void *out = cpu_result(b, &rc);
        if (!out) return rc;
        rc = b->model->quantizer.n_q ? mimi_batch_encode(b, n, slots, pcm, out)
                                     : mimi_batch_encode_latent(b, n, slots, pcm, out);
        return cpu_done(b, n, rc);
    }
    // the device path checks the samples as it stages them (mimi_cuda_submit), or here when the
    // caller wrote them in place
    rc = mimi_batch_check_step(b, MIMI_DIRECTION_ENCODE, b->model->quantizer.n_q > 0, n, slots, pcm);
    if (rc == MIMI_OK) rc = check_in_place(b, pcm, n);
    return rc ? rc : mimi_cuda_submit(b, n, slots, pcm);
}

int mimi_batch_submit_decode(struct mimi_batch *b, int n, const int *slots, const int32_t *codes) {
    if (!b) return MIMI_EINVAL;
    int rc = MIMI_OK;
    if (!b->gpu) {
        void *out = cpu_result(b, &rc);
        return out ? cpu_done(b, n, mimi_batch_decode(b, n, slots, codes, out)) : rc;
    }
    rc = mimi_batch_check_step(b, MIMI_DIRECTION_DECODE, 1, n, slots, codes);
    if (rc == MIMI_OK) rc = mimi_batch_check_codes(b, codes, n);
    return rc ? rc : mimi_cuda_submit(b, n, slots, codes);
}

int mimi_batch_submit_decode_latent(struct mimi_batch *b, int n, const int *slots, const float *latents) {
    if (!b) return MIMI_EINVAL;
    int rc = MIMI_OK;
    if (!b->gpu) {
        void *out = cpu_result(b, &rc);
        return out ? cpu_done(b, n, mimi_batch_decode_latent(b, n, slots, latents, out)) : rc;
    }
    rc = mimi_batch_check_step(b, MIMI_DIRECTION_DECODE, 0, n, slots, latents);
    if (rc == MIMI_OK) rc = check_in_place(b, latents, n);
    return rc ? rc : mimi_cuda_submit(b, n, slots, latents);
}

int mimi_batch_submit_decode_device(struct mimi_batch *b, int n, const int *slots, const int32_t *device_codes,
                                    int64_t offset, int64_t stride, void *wait_stream) {
    if (!b) return MIMI_EINVAL;
    if (!b->gpu) {
        mimi_batch_error(b, "codes in device memory need a CUDA batch");
        return MIMI_EUNSUPPORTED;
    }
    int rc = mimi_batch_check_step(b, MIMI_DIRECTION_DECODE, 1, n, slots, device_codes);
    if (rc == MIMI_OK && (offset < 0 || stride < b->n_codebooks)) {
        mimi_batch_error(b, "device codes: offset %lld, stride %lld for %d codebooks", (long long)offset,
                         (long long)stride, b->n_codebooks);
        rc = MIMI_EINVAL;
    }
    return rc ? rc : mimi_cuda_submit_device_codes(b, n, slots, device_codes, offset, stride, wait_stream);
}

// ---- collect ----

int mimi_batch_collect(struct mimi_batch *b, void *output) {
    if (!b) return MIMI_EINVAL;
    if (b->gpu) return mimi_cuda_collect(b, output);
    if (!b->async || !b->async->pending) {
        mimi_batch_error(b, "nothing was submitted");
        return MIMI_ESTATE;
    }
    if (output && output != b->async->data) memcpy(output, b->async->data, b->async->bytes);
    b->async->pending = 0;
    return MIMI_OK;
}

// ---- the batch's own step rows ----

void *mimi_batch_input_rows(struct mimi_batch *b) {
    if (!b) return NULL;
    if (b->gpu) return mimi_cuda_input_rows(b);
    if (!b->input_rows) b->input_rows = calloc((size_t)b->capacity, in_row_bytes(b));
    return b->input_rows;
}

const void *mimi_batch_output_rows(struct mimi_batch *b) {
    if (!b) return NULL;
    if (b->gpu) return mimi_cuda_output_rows(b);
    return cpu_async(b) ? b->async->data : NULL;
}

void *mimi_batch_cuda_stream(const struct mimi_batch *b) { return b ? mimi_cuda_stream(b) : NULL; }

// ---- profile ----

int mimi_batch_profile(struct mimi_batch *b, int n, const int *slots, const void *input, void *output,
                       mimi_profile_fn fn, void *user) {
    if (!b || !fn || !output) return MIMI_EINVAL;
    if (!b->gpu) {
        // an ordinary step with this thread's kernel calls and stages reported (src/cpu/cpu.h)
        const int encode = b->direction == MIMI_DIRECTION_ENCODE, codes = b->model->quantizer.n_q > 0;
        struct mimi_cpu_profile p = {.fn = fn, .user = user};
        mimi_cpu_profiling = &p;
        int rc = encode && codes ? mimi_batch_encode(b, n, slots, input, output)
                 : encode        ? mimi_batch_encode_latent(b, n, slots, input, output)
                 : codes         ? mimi_batch_decode(b, n, slots, input, output)
                                 : mimi_batch_decode_latent(b, n, slots, input, output);
        mimi_cpu_profiling = NULL;
        return rc;
    }
    const struct mimi_model *m = b->model;
    const int encode = b->direction == MIMI_DIRECTION_ENCODE, codes = m->quantizer.n_q > 0;
    int rc = mimi_batch_check_step(b, b->direction, codes, n, slots, input);
    if (rc == MIMI_OK && !encode && codes) rc = mimi_batch_check_codes(b, input, n);
    if (rc == MIMI_OK) rc = check_in_place(b, input, n);
    return rc ? rc : mimi_cuda_profile(b, n, slots, input, output, fn, user);  // stages check PCM, latents
}
