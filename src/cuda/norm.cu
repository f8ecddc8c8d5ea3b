/*
 * norm.cu - LayerNorm over rows of d values, optionally preceded by the layer-scaled residual
 * add of the previous branch (x += scale * y), as the transformer layer does it (spec 3.3;
 * reference mimi_layer_norm in src/nn/ops_ref.c and src/nn/transformer.c). Mean and biased
 * variance are accumulated in double like the reference; every f32 step is rounded separately.
 */
#include "common.cuh"

#define NORM_THREADS 256

// Sum of v over the block (every thread gets it); `red` holds one double per warp.
static __device__ double block_sum(double v, double *red) {
    for (int off = 16; off; off >>= 1) v += __shfl_down_sync(0xffffffffu, v, off);
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, n_warps = blockDim.x / 32;
    if (lane == 0) red[warp] = v;
    __syncthreads();
    if (warp == 0) {
        v = lane < n_warps ? red[lane] : 0.0;
        for (int off = 16; off; off >>= 1) v += __shfl_down_sync(0xffffffffu, v, off);
        if (lane == 0) red[32] = v;
    }
    __syncthreads();
    double total = red[32];
    __syncthreads();
    return total;
}

// One block per row: residual (modes RESID, RESID_LN), then the norm (modes LN, RESID_LN).
static __global__ void norm_kernel(const struct op_norm a) {
    pdl_begin();
    extern __shared__ float row[];  // (d)
    __shared__ double red[33];
    const int d = a.d;
    float *x = a.x + (size_t)blockIdx.x * d;
    for (int i = threadIdx.x; i < d; i += blockDim.x) {
        float v = x[i];
        if (a.mode != NORM_LN) {
            v = __fadd_rn(v, __fmul_rn(a.scale[i], a.y[(size_t)blockIdx.x * d + i]));
            x[i] = v;
        }
        row[i] = v;
    }
    if (a.mode == NORM_RESID) return;
    __syncthreads();
    double s = 0.0;
    for (int i = threadIdx.x; i < d; i += blockDim.x) s += row[i];
    const double mean = block_sum(s, red) / d;
    double q = 0.0;
    for (int i = threadIdx.x; i < d; i += blockDim.x) q += ((double)row[i] - mean) * ((double)row[i] - mean);
    const double var = block_sum(q, red) / d;
    const float inv = (float)(1.0 / sqrt(var + (double)a.eps)), mf = (float)mean;
    float *out = a.out + (size_t)blockIdx.x * d;
    for (int i = threadIdx.x; i < d; i += blockDim.x)
        out[i] = __fadd_rn(__fmul_rn(__fmul_rn(__fsub_rn(row[i], mf), inv), a.w[i]), a.b[i]);
}

static int launch_norm(const struct op_norm *a, struct gpu_exec *ex) {
    pdl_launch(norm_kernel, a->rows, NORM_THREADS, sizeof(float) * a->d, ex, *a);
    return launch_status(ex, "layernorm");
}

extern "C" int mimi_cuda_norm(const struct op_norm *a, struct gpu_exec *ex) { return launch_norm(a, ex); }
