/*
 * cuda_batch.cuh - the device side of a batch, shared by cuda_batch.cu (lifetime, plans and
 * graphs) and cuda_step.cu (steps, submit/collect, taps, profile), with their error helpers.
 */
#ifndef MIMI_CUDA_BATCH_CUH
#define MIMI_CUDA_BATCH_CUH

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>

extern "C" {
#include "batch.h"
#include "gpu.h"
#include "cuda/runtime.h"
}

#define MAX_BUCKETS 20
#define WORKSPACE_BYTES ((size_t)32 << 20)

#define GPU_COPY_PIECES 8
#define GPU_COPY_PIECE_MIN ((size_t)4 << 20)

struct mimi_cuda_batch {
    int device, n_buckets;
    struct gpu_layout L;
    struct gpu_plan plans[MAX_BUCKETS];  // by bucket, R = 1, 2, 4, ..., capacity (offline: capacity)
    cudaGraphExec_t graphs[MAX_BUCKETS];
    float *state, *scratch;   // device: (capacity, slot_elems) and the scratch
    void *workspace;          // cuBLAS workspace (graph capture needs a fixed one)
    unsigned char *host;      // pinned: stage (capacity rows), output (capacity rows), error flag
    size_t host_stage_bytes, host_out_bytes;
    float *tap_buf;           // host copy of one tap, when the batch has a tap
    cudaStream_t stream;
    cublasHandle_t cublas;
    cublasLtHandle_t cublaslt;
    cudaEvent_t done, ready, staged;  // staged: the submitted step's inputs left the pinned stage
    cudaEvent_t piece[GPU_COPY_PIECES];  // the pieces of the output copy (cuda_step.cu)
    struct gpu_exec ex;
    int poisoned, pending, pending_n, pending_bucket, pending_pieces;
    int tap_frames;  // the taps hand over the first tap_frames of the L.frames frames of a row
    uint32_t launches;  // launches since the versioned words were zeroed (cuda_step.cu; the period: gpu.h)
};

// ---- errors ----

// Records a CUDA failure on the batch and poisons it.
static inline int fail(struct mimi_batch *b, cudaError_t e, const char *what) {
    mimi_batch_error(b, "cuda: %s: %s", what, cudaGetErrorString(e));
    if (b->gpu) b->gpu->poisoned = 1;
    return MIMI_EDEVICE;
}

#define CK(call, what)                                   \
    do {                                                 \
        cudaError_t e_ = (call);                         \
        if (e_ != cudaSuccess) return fail(b, e_, what); \
    } while (0)

static inline int op_failed(struct mimi_batch *b, int rc) {
    if (rc == MIMI_EDEVICE) b->gpu->poisoned = 1;
    return rc;
}

// Launches one op of a plan on ex's stream (cuda_batch.cu).
int mimi_cuda_run_op(const struct gpu_op *op, struct gpu_exec *ex);

#endif
