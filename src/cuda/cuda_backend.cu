/*
 * cuda_backend.cu - the CUDA backend's device handling: device discovery, the mapping of CUDA
 * failures to MIMI_EDEVICE (never an abort), and the one upload of a model's weights to the
 * device, shared by all its batches. The model keeps its host copy (src/model.c).
 * Batches are in cuda_batch.cu, the ops in the other .cu files, the plans in plan.c and the
 * weights' forms they read in weights.c.
 */
#include <cuda_runtime.h>
#include <stdlib.h>
#include <string.h>

extern "C" {
#include "internal.h"
#include "gpu.h"
#include "cuda/runtime.h"
}

// ---- devices ----

extern "C" int mimi_cuda_device_count(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError();  // no driver or no device: clear the error, report none
        return 0;
    }
    return n;
}

// ---- weights ----

// The mapping callback of gpu_weights_bind: first a measuring pass (addresses unused), then the
// upload pass into one allocation, each tensor 256-byte aligned.
struct upload {
    struct mimi_cuda_model *cm;
    size_t used;
    int measure;
    cudaError_t err;
};

static const float *map_upload(void *ctx, const float *host, size_t n) {
    struct upload *u = (struct upload *)ctx;
    size_t off = (u->used + 63) / 64 * 64;
    u->used = off + n;
    if (u->measure) return host;
    float *dst = u->cm->weights + off;
    u->err = cudaMemcpy(dst, host, n * sizeof(float), cudaMemcpyHostToDevice);
    return u->err == cudaSuccess ? dst : NULL;
}

static int upload_weights(struct mimi_model *m, struct mimi_cuda_model *cm) {
    struct upload u = {cm, 0, 1, cudaSuccess};
    int rc = gpu_weights_bind(&cm->w, m, map_upload, &u);
    if (rc) {
        gpu_weights_release(&cm->w);
        return rc;
    }
    cm->n_floats = u.used;
    cudaError_t e = cudaMalloc((void **)&cm->weights, cm->n_floats * sizeof(float));
    if (e == cudaSuccess) {
        u = (struct upload){cm, 0, 0, cudaSuccess};
        rc = gpu_weights_bind(&cm->w, m, map_upload, &u);
        e = u.err;
    }
    gpu_weights_release(&cm->w);  // the packed host copies are on the device now
    if (e != cudaSuccess) {
        mimi_log(m, MIMI_LOG_ERROR, "cuda: uploading %.1f MB of weights to device %d: %s",
                 cm->n_floats * 4e-6, cm->device, cudaGetErrorString(e));
        return MIMI_EDEVICE;
    }
    return rc;
}

// ---- model ----

extern "C" int mimi_cuda_model_init(struct mimi_model *m) {
    int count = mimi_cuda_device_count();
    if (m->device < 0 || m->device >= count) {
        mimi_log(m, MIMI_LOG_ERROR, "cuda: device %d requested, %d present", m->device, count);
        return MIMI_EUNSUPPORTED;
    }
    cudaError_t e = cudaSetDevice(m->device);
    if (e != cudaSuccess) {
        mimi_log(m, MIMI_LOG_ERROR, "cuda: device %d: %s", m->device, cudaGetErrorString(e));
        return MIMI_EDEVICE;
    }
    struct mimi_cuda_model *cm = (struct mimi_cuda_model *)calloc(1, sizeof *cm);
    if (!cm) return MIMI_ENOMEM;
    cm->device = m->device;
    cm->tuning = mimi_cuda_tuning_new();
    cm->kept = mimi_cuda_kept_new(cm->device);
    int rc = cm->tuning && cm->kept ? upload_weights(m, cm) : MIMI_ENOMEM;
    if (rc) {
        if (cm->weights) cudaFree(cm->weights);
        mimi_cuda_kept_free(cm->kept);
        mimi_cuda_tuning_free(cm->tuning);
        free(cm);
        return rc;
    }
    cudaDeviceProp prop;
    if (cudaGetDeviceProperties(&prop, m->device) == cudaSuccess)
        mimi_log(m, MIMI_LOG_INFO, "cuda: %s (device %d), %.1f MB of weights uploaded", prop.name, m->device,
                 cm->n_floats * 4e-6);
    m->cuda = cm;
    return MIMI_OK;
}

extern "C" void mimi_cuda_model_free(struct mimi_model *m) {
    if (!m || !m->cuda) return;
    cudaSetDevice(m->cuda->device);
    mimi_cuda_kept_free(m->cuda->kept);  // before the tuning their plans point into
    cudaFree(m->cuda->weights);
    mimi_cuda_tuning_free(m->cuda->tuning);
    free(m->cuda);
    m->cuda = NULL;
}
