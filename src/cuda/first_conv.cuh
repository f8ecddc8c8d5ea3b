/*
 * first_conv.cuh - the encoder's first conv (one input channel, K <= 8 taps) computed inside the
 * resblock after it (op_resblock.first): by the large steps' kernel (resblock.cu) and by the small
 * steps' (resblock_step.cu), which therefore give x the same bits.
 */
#ifndef MIMI_CUDA_FIRST_CONV_CUH
#define MIMI_CUDA_FIRST_CONV_CUH

#include "cuda/common.cuh"

// A tile stages the PCM it needs, samples t0 - RB_PS_OFF up to its last column, in ps, and x is
// computed from ps wherever the block reads it: the window, and the residual as it stores y.
// Each output sums its taps in ascending order from zero, then adds the bias (the direct conv's
// and the emulation's order); the weights are staged with zeros before the K taps, which add
// exact zeros, so that every x takes 8 taps over the same 12 samples.
#define RB_PS_OFF 12                // ps[u] holds sample t0 - RB_PS_OFF + u
#define RB_FW(C) (9 * (C))          // 8 taps per output, then the C biases

// fw = op_resblock.first's weights: output c's K taps at 8c + 8 - K .., zeros before them, its
// bias at 8C + c. With ASYNC the weights are cp.async copies (the caller commits and waits), all
// in flight at once.
template <int C, bool ASYNC = false>
static __device__ __forceinline__ void stage_first_weights(float *fw, const struct gpu_first_conv &f) {
    const int K = f.in.K;
    for (int e = threadIdx.x; e < RB_FW(C); e += blockDim.x) {
        const int c = e < 8 * C ? e >> 3 : e - 8 * C, k = e < 8 * C ? (e & 7) - (8 - K) : K;
        if (k < 0) fw[e] = 0.0f;
        else if (ASYNC) cp_async4(fw + e, f.w + (size_t)c * f.ld + k);
        else fw[e] = f.w[(size_t)c * f.ld + k];
    }
}

// Whether op_resblock.first has the geometry both kernels take: one input channel of the block's
// rows and columns, stride 1, 1 <= K <= GPU_FIRST_MAX_K taps, its history K - 1 samples, no ELU,
// and weight rows holding the K taps and the bias (stage_first_weights reads both).
static inline bool first_conv_fits(const struct op_resblock *a) {
    const struct op_im2col &f = a->first.in;
    return f.c_in == 1 && f.S == 1 && f.K >= 1 && f.K <= GPU_FIRST_MAX_K && f.H == f.K - 1 && !f.elu &&
           f.T == a->in.T && f.R == a->in.R && a->first.ld >= f.K + 1;
}

// Sample t of row r's [history | PCM]: the history (zeros before it, and on padding rows) at t < 0.
static __device__ __forceinline__ float first_sample(const struct gpu_first_conv &f, int r, int t) {
    if (t >= 0) return f.in.x[(size_t)r * f.in.T + t];
    return t >= -f.in.H ? xin(f.in, 0, r, t + f.in.H) : 0.0f;
}

// x of channel c at tile column j (>= -2), as resblock.cu's first_x4 sums it.
template <int C>
static __device__ __forceinline__ float first_x1(const float *ps, const float *fw, int c, int j) {
    float acc = 0.0f;
#pragma unroll
    for (int k = 0; k < 8; k++) acc = fmaf(fw[8 * c + k], ps[RB_PS_OFF + j - 7 + k], acc);
    return acc + fw[8 * C + c];
}

#endif
