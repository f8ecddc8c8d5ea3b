/*
 * common.cuh - shared by the CUDA op files: launch checks that return a status (never abort),
 * grid sizing for grid-stride loops, and the scalar functions that must match the CPU reference
 * (src/nn/ops_ref.c) operation for operation.
 */
#ifndef MIMI_CUDA_COMMON_CUH
#define MIMI_CUDA_COMMON_CUH

#include <cuda_runtime.h>
#include <stdio.h>

#include "mimi.h"
#include "ops.h"

#define STREAM(ex) ((cudaStream_t)(ex)->stream)

// Checks the launch just made; on failure records the CUDA error and returns MIMI_EDEVICE.
static inline int launch_status(struct gpu_exec *ex, const char *what) {
    cudaError_t e = cudaGetLastError();
    if (e == cudaSuccess) return MIMI_OK;
    if (ex->errmsg) snprintf(ex->errmsg, ex->errlen, "%s: %s", what, cudaGetErrorString(e));
    return MIMI_EDEVICE;
}

// Blocks of `block` threads for n items, capped (the kernels loop over the rest).
static inline unsigned grid_for(size_t n, int block) {
    size_t g = (n + block - 1) / block;
    if (g > (1u << 24)) g = 1u << 24;
    return g ? (unsigned)g : 1u;
}

// Grid-stride loop over [0, n).
#define FOR_EACH(i, n) \
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += (size_t)gridDim.x * blockDim.x)

// ELU with alpha 1, as mimi_elu.
static __device__ __forceinline__ float elu_f(float x) { return x > 0.0f ? x : expm1f(x); }

// Exact GELU, 0.5 x (1 + erf(x / sqrt 2)), rounded step by step as mimi_gelu.
static __device__ __forceinline__ float gelu_f(float v) {
    return __fmul_rn(__fmul_rn(0.5f, v), __fadd_rn(1.0f, erff(__fmul_rn(v, (float)0.70710678118654752440))));
}

#endif
