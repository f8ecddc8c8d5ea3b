/*
 * convtr1d.cu - the streaming ConvTranspose1d's overlap-add (spec 5.2; reference
 * src/nn/conv.c): the emitted columns with bias and the previous call's tail, then the new tail
 * without bias. A dense layer's per-tap products come from one cuBLAS call (matmul.cu); a
 * depthwise layer (the upsample) multiplies its input here.
 */
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

// ---- emitted columns ----

// y[o, r, j] = ((bias + taps) + tail[j]) for j < S*T; blockIdx.y walks the channels o, x the
// (row, column) pairs with 32-bit index arithmetic.
static __global__ void convtr_out_kernel(const struct op_convtr a) {
    const int P = a.K - a.S;
    const unsigned L = a.S * a.T, N = (unsigned)a.R * L;
    for (int o = blockIdx.y; o < a.c_out; o += gridDim.y) {
        const float b = a.bias ? a.bias[o] : 0.0f;
        float *y = a.y + (size_t)o * N;
        for (unsigned n = blockIdx.x * blockDim.x + threadIdx.x; n < N; n += gridDim.x * blockDim.x) {
            const unsigned r = n / L, j = n - r * L;
            float v = convtr_col(a, o, r, j, b);
            int slot = a.row_slot[r];
            if ((int)j < P && slot >= 0) v = __fadd_rn(v, a.tail[(size_t)slot * a.slot_stride + (size_t)o * P + j]);
            y[n] = v;
        }
    }
}

static int launch_out(const struct op_convtr *a, struct gpu_exec *ex) {
    const size_t N = (size_t)a->R * a->S * a->T;
    dim3 grid(grid_for(N, 256), a->c_out < 65535 ? a->c_out : 65535);
    if (grid.x > 65535) grid.x = 65535;
    convtr_out_kernel<<<grid, 256, 0, STREAM(ex)>>>(*a);
    return launch_status(ex, "convtr_out");
}

extern "C" int mimi_cuda_convtr_out(const struct op_convtr *a, struct gpu_exec *ex) { return launch_out(a, ex); }

// ---- carried tail ----

// tail[j] = full[S*T + j] - bias, with full as the reference forms it (bias + taps + old tail).
// One thread per (channel, row), ascending: column j reads old column S*T + j > j.
static __global__ void convtr_tail_kernel(const struct op_convtr a) {
    const int P = a.K - a.S, L = a.S * a.T;
    FOR_EACH(idx, (size_t)a.c_out * a.R) {
        int o = (int)(idx / a.R), r = (int)(idx - (size_t)o * a.R);
        int slot = a.row_slot[r];
        if (slot < 0) continue;
        float *tail = a.tail + (size_t)slot * a.slot_stride + (size_t)o * P;
        float b = a.bias ? a.bias[o] : 0.0f;
        for (int j = 0; j < P; j++) {
            float v = convtr_col(a, o, r, L + j, b);
            if (L + j < P) v = __fadd_rn(v, tail[L + j]);
            tail[j] = __fsub_rn(v, b);
        }
    }
}

static int launch_tail(const struct op_convtr *a, struct gpu_exec *ex) {
    convtr_tail_kernel<<<grid_for((size_t)a->c_out * a->R, 128), 128, 0, STREAM(ex)>>>(*a);
    return launch_status(ex, "convtr_tail");
}

extern "C" int mimi_cuda_convtr_tail(const struct op_convtr *a, struct gpu_exec *ex) { return launch_tail(a, ex); }
