/*
 * conv1d.cu - the streaming Conv1d (spec 5.1; reference src/nn/conv.c): im2col over
 * [history | f(x)] for the large products, which then are one cuBLAS call (matmul.cu); the whole
 * conv in one kernel for the small ones (one stream's SEANet); and the carry of the newest
 * history columns.
 */
#include <stdint.h>

#include "common.cuh"

// ---- im2col ----

// Column j of [hist (H) | f(x) (T)] for channel i of row r (f = ELU when a.elu). A padding row
// has a zero history; a replicate-padded slot that has not started repeats f(x[i, r, 0]).
static __device__ __forceinline__ float xin(const struct op_im2col &a, int i, int r, int j) {
    const float *xr = a.x + ((size_t)i * a.R + r) * a.T;
    if (j >= a.H) return a.elu ? elu_f(xr[j - a.H]) : xr[j - a.H];
    int slot = a.row_slot[r];
    if (slot < 0) return 0.0f;
    if (a.replicate && !a.started[(size_t)slot * a.slot_stride]) return a.elu ? elu_f(xr[0]) : xr[0];
    return a.hist[(size_t)slot * a.slot_stride + (size_t)i * a.H + j];
}

// col[(i*K + k), r*T_out + t] = xin(i, r, t*S + k): blockIdx.y walks the input channels i (one
// more for the row of ones), x the output columns; each thread writes its column's K taps, so the
// index arithmetic is done once per K values and consecutive threads write consecutive columns.
static __global__ void im2col_kernel(const struct op_im2col a) {
    const unsigned To = a.T / a.S, N = (unsigned)a.R * To;
    for (int i = blockIdx.y; i < a.c_in + a.ones; i += gridDim.y) {
        float *col = a.col + (size_t)i * a.K * N;
        for (unsigned n = blockIdx.x * blockDim.x + threadIdx.x; n < N; n += gridDim.x * blockDim.x) {
            if (i == a.c_in) {
                col[n] = 1.0f;
                continue;
            }
            const unsigned r = n / To, t = n - r * To;
            for (int k = 0; k < a.K; k++) col[(size_t)k * N + n] = xin(a, i, r, t * a.S + k);
        }
    }
}

// The same with four consecutive columns per thread (one row r: T_out is a multiple of 4), each
// tap written as one 16-byte store: a quarter of the store instructions of the kernel above.
static __global__ void im2col4_kernel(const struct op_im2col a) {
    const unsigned To = a.T / a.S, N4 = (unsigned)a.R * To / 4, N = 4 * N4;
    for (int i = blockIdx.y; i < a.c_in + a.ones; i += gridDim.y) {
        float4 *col = (float4 *)(a.col + (size_t)i * a.K * N);
        for (unsigned n4 = blockIdx.x * blockDim.x + threadIdx.x; n4 < N4; n4 += gridDim.x * blockDim.x) {
            if (i == a.c_in) {
                col[n4] = make_float4(1.0f, 1.0f, 1.0f, 1.0f);
                continue;
            }
            const unsigned n = 4 * n4, r = n / To, t = n - r * To;
            for (int k = 0; k < a.K; k++) {
                const int j = (int)t * a.S + k;
                col[(size_t)k * N4 + n4] = make_float4(xin(a, i, r, j), xin(a, i, r, j + a.S), xin(a, i, r, j + 2 * a.S),
                                                       xin(a, i, r, j + 3 * a.S));
            }
        }
    }
}

static int launch_im2col(const struct op_im2col *a, struct gpu_exec *ex) {
    const size_t N = (size_t)a->R * (a->T / a->S);
    const int rows = a->c_in + a->ones;
    // four columns per thread only where there are many columns: at one stream (N <= 1920) it
    // leaves too few threads to hide the loads (measured slower)
    if (N >= 32768 && (a->T / a->S) % 4 == 0 && (uintptr_t)a->col % 16 == 0) {
        dim3 grid(grid_for(N / 4, 256), rows < 65535 ? rows : 65535);
        if (grid.x > 65535) grid.x = 65535;
        im2col4_kernel<<<grid, 256, 0, STREAM(ex)>>>(*a);
        return launch_status(ex, "im2col");
    }
    dim3 grid(grid_for(N, 256), rows < 65535 ? rows : 65535);
    if (grid.x > 65535) grid.x = 65535;
    im2col_kernel<<<grid, 256, 0, STREAM(ex)>>>(*a);
    return launch_status(ex, "im2col");
}

extern "C" int mimi_cuda_im2col(const struct op_im2col *a, struct gpu_exec *ex) {
    return launch_im2col(a, ex);
}

// ---- direct conv ----

#define CONV_WARPS 8
#define CONV_TO 8      // output channels per block (two float4s of weights per reduction index)
#define CONV_KC 2048   // reduction indices staged at a time: a (CONV_KC, CONV_TO) slice, 64 KB

// Block (x, y, z) computes CONV_TO output channels for 32 columns, a lane per column, over the
// z-th part of the reduction. Its weight rows are staged in shared memory with coalesced loads,
// stored (index, channel) so that a lane reads its CONV_TO weights as two float4s broadcast to
// the whole warp; the warps split the part into contiguous shares and their sums are added in
// warp order, then (splits > 1) the parts' sums in part order by the tile's last block.
static __global__ void __launch_bounds__(32 * CONV_WARPS) conv_kernel(const struct op_conv a) {
    extern __shared__ float4 conv_smem[];
    __shared__ float part[CONV_WARPS][CONV_TO][32];
    __shared__ bool last;
    float *ws = (float *)conv_smem;  // (kc, CONV_TO)
    const struct op_im2col &in = a.in;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int To = in.T / in.S, N = in.R * To, KK = in.c_in * in.K;
    const int n = blockIdx.x * 32 + lane, o0 = blockIdx.y * CONV_TO;
    const int r = n < N ? n / To : 0, j0 = (n < N ? n - r * To : 0) * in.S;
    const int p_begin = blockIdx.z * a.chunk, p_end = min(KK, p_begin + a.chunk);
    float acc[CONV_TO];
#pragma unroll
    for (int o = 0; o < CONV_TO; o++) acc[o] = 0.0f;
    for (int p0 = p_begin; p0 < p_end; p0 += CONV_KC) {
        const int kc = min(CONV_KC, p_end - p0);
        __syncthreads();  // the previous slice is consumed
        for (int e = threadIdx.x; e < CONV_TO * kc; e += blockDim.x) {
            const int o = e / kc, q = e - o * kc;
            ws[q * CONV_TO + o] = o0 + o < a.c_out ? a.w[(size_t)(o0 + o) * a.ld + p0 + q] : 0.0f;
        }
        __syncthreads();
        const int share = (kc + CONV_WARPS - 1) / CONV_WARPS, q0 = warp * share, q1 = min(kc, q0 + share);
        if (n < N && q0 < q1) {
            int i = (p0 + q0) / in.K, k = p0 + q0 - i * in.K;
#pragma unroll 4
            for (int q = q0; q < q1; q++) {
                const float xv = xin(in, i, r, j0 + k);
                const float4 w0 = *(const float4 *)(ws + q * CONV_TO), w1 = *(const float4 *)(ws + q * CONV_TO + 4);
                acc[0] += w0.x * xv, acc[1] += w0.y * xv, acc[2] += w0.z * xv, acc[3] += w0.w * xv;
                acc[4] += w1.x * xv, acc[5] += w1.y * xv, acc[6] += w1.z * xv, acc[7] += w1.w * xv;
                if (++k == in.K) k = 0, i++;
            }
        }
    }
#pragma unroll
    for (int o = 0; o < CONV_TO; o++) part[warp][o][lane] = acc[o];
    __syncthreads();
    // warp w finishes output channel o0 + w (CONV_TO == CONV_WARPS)
    const int o = o0 + warp;
    float v = 0.0f;
    for (int w = 0; w < CONV_WARPS; w++) v += part[w][warp][lane];
    const size_t at = (size_t)o * N + n;
    const bool mine = n < N && o < a.c_out;
    if (a.splits > 1) {
        const size_t plane = (size_t)a.c_out * N;
        if (mine) a.part[(size_t)blockIdx.z * plane + at] = v;
        __threadfence();
        __syncthreads();
        uint32_t *counter = a.counters + blockIdx.y * gridDim.x + blockIdx.x;
        if (threadIdx.x == 0) last = atomicAdd(counter, 1u) == (unsigned)a.splits - 1;
        __syncthreads();
        if (!last) return;
        __threadfence();
        if (threadIdx.x == 0) *counter = 0;
        if (!mine) return;
        v = __ldcg(a.part + at);
        for (int z = 1; z < a.splits; z++) v += __ldcg(a.part + (size_t)z * plane + at);
    }
    if (!mine) return;
    if (a.bias) v += a.w[(size_t)o * a.ld + KK];
    if (a.post_elu) v = elu_f(v);
    float *y = a.y + at;
    *y = a.accumulate ? *y + v : v;
}

static int launch_conv(const struct op_conv *a, struct gpu_exec *ex) {
    static_assert(CONV_TO == CONV_WARPS, "one warp per output channel in the epilogue");
    const int N = a->in.R * (a->in.T / a->in.S);
    const size_t smem = sizeof(float) * CONV_TO * (size_t)(a->chunk < CONV_KC ? a->chunk : CONV_KC);
    if (smem > 48 * 1024) {
        cudaError_t e = cudaFuncSetAttribute(conv_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
        if (e != cudaSuccess) return launch_status(ex, "conv (shared memory)");
    }
    dim3 grid((N + 31) / 32, (a->c_out + CONV_TO - 1) / CONV_TO, a->splits);
    conv_kernel<<<grid, 32 * CONV_WARPS, smem, STREAM(ex)>>>(*a);
    return launch_status(ex, "conv");
}

extern "C" int mimi_cuda_conv(const struct op_conv *a, struct gpu_exec *ex) { return launch_conv(a, ex); }

// ---- carry ----

// One thread per (channel, row) walks the history in ascending order: column j reads column
// T + j of [hist | f(x)], which is never one it already overwrote (the overlap lesson of the
// design notes: one thread per element would race when H > T).
static __global__ void carry_kernel(const struct op_im2col a) {
    FOR_EACH(idx, (size_t)a.c_in * a.R) {
        int i = (int)(idx / a.R), r = (int)(idx - (size_t)i * a.R);
        int slot = a.row_slot[r];
        if (slot < 0) continue;
        float *h = (float *)a.hist + (size_t)slot * a.slot_stride + (size_t)i * a.H;
        for (int j = 0; j < a.H; j++) h[j] = xin(a, i, r, a.T + j);
    }
}

static int launch_carry(const struct op_im2col *a, struct gpu_exec *ex) {
    carry_kernel<<<grid_for((size_t)a->c_in * a->R, 128), 128, 0, STREAM(ex)>>>(*a);
    return launch_status(ex, "carry");
}

extern "C" int mimi_cuda_carry(const struct op_im2col *a, struct gpu_exec *ex) {
    return launch_carry(a, ex);
}
