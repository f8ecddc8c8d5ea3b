/*
 * convtr.cuh - the streaming ConvTranspose1d's overlap-add per output column, shared by its
 * output kernels (convtr1d.cu) and the decoder's projection, whose product stores the depthwise
 * upsampling of each value it computes (matmul.cu, op_gemm.up).
 */
#ifndef MIMI_CUDA_CONVTR_CUH
#define MIMI_CUDA_CONVTR_CUH

#include "common.cuh"

// `v` plus the taps landing on full-output column q of channel o, row r, added in the order the
// reference adds them (input step ascending).
static __device__ __forceinline__ float convtr_col(const struct op_convtr &a, int o, int r, int q, float v) {
    const size_t N = (size_t)a.R * a.T;
    int t_hi = q / a.S, t_lo = q - a.K + 1 > 0 ? (q - a.K + a.S) / a.S : 0;  // q, K, S small: 32-bit
    if (t_hi > a.T - 1) t_hi = a.T - 1;
    for (int t = t_lo; t <= t_hi; t++) {
        int k = q - t * a.S;
        float p = a.taps ? a.taps[((size_t)o * a.K + k) * N + (size_t)r * a.T + t]
                         : __fmul_rn(a.w[(size_t)o * a.K + k], a.x[((size_t)o * a.R + r) * a.T + t]);
        v = __fadd_rn(v, p);
    }
    return v;
}

// The tail that row r's slot carries for channel o (P columns per channel); NULL for a padding
// row, which has no slot.
static __device__ __forceinline__ float *slot_tail(const struct op_convtr &a, int o, unsigned r, int P) {
    const int slot = a.row_slot[r];
    return slot >= 0 ? a.tail + (size_t)slot * a.slot_stride + (size_t)o * P : NULL;
}

// v plus column j of that tail (v alone on a padding row)
static __device__ __forceinline__ float add_tail(const struct op_convtr &a, int o, unsigned r, int j, int P, float v) {
    const float *tail = slot_tail(a, o, r, P);
    return tail ? __fadd_rn(v, tail[j]) : v;
}

// Column j < S*T of row r, channel o: y = (bias + taps) + tail[j], stored; with `carry` (S*T >=
// P: no new tail column takes an old one) the new tail's column j is stored after the old one is
// read.
static __device__ __forceinline__ void convtr_emit(const struct op_convtr &a, int o, unsigned r, unsigned j, float b) {
    const int P = a.K - a.S;
    const unsigned L = a.S * a.T;
    const float v = convtr_col(a, o, r, j, b);
    float *y = a.y + ((size_t)o * a.R + r) * L + j;
    if ((int)j >= P) {
        *y = v;
        return;
    }
    float *tail = slot_tail(a, o, r, P);
    *y = tail ? __fadd_rn(v, tail[j]) : v;
    if (a.carry && tail) tail[j] = __fsub_rn(convtr_col(a, o, r, L + j, b), b);
}

#endif
