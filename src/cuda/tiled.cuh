/*
 * tiled.cuh - the direct conv and transposed conv for large products (many streams, whole
 * signals): an implicit-GEMM kernel over a direct-kernel geometry G (direct.cuh lists what G
 * provides), with no im2col matrix. The inputs are gathered (with the history, padding rows and
 * the input ELU) straight from the activations into shared memory, a slice of the reduction at a
 * time, and every output is finished (bias, ELU, residual, tails) in the kernel's epilogue.
 *
 * Block: 16*TM output channels x TILED_BN columns of one phase, 256 threads. Slices of TILED_BK
 * reduction indices are staged in shared memory as (index, channel) and (index, column) and
 * double-buffered: the next slice's loads are in flight while the current one is multiplied.
 *
 * Products: strict f32 FMAs, or with `tf32` (the fast precisions) tensor-core mma.sync over
 * TF32-rounded operands with f32 accumulation. Each output is one accumulator added in
 * reduction order, so a result does not depend on timing or on the grid.
 */
#ifndef MIMI_CUDA_TILED_CUH
#define MIMI_CUDA_TILED_CUH

#include <stdint.h>

#include <type_traits>

#include "common.cuh"

#define TILED_BN GPU_TILED_COLS
#ifndef TILED_BK
#define TILED_BK 32
#endif
#define TILED_THREADS 256

// Shared-memory rows are padded by 8 floats, so that the tensor-core fragment loads (lanes 4
// rows apart) hit distinct banks; rows stay 16-byte aligned for the f32 path's float4 loads.
#define TILED_PAD 8

// Rounds v to TF32 (nearest, ties away), as the tensor cores take it; returns its bits.
static __device__ __forceinline__ uint32_t tf32_bits(float v) {
    uint32_t r;
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(v));
    return r;
}

// ws (TILED_BK, 16*TM): the weights of the block's channels at the slice's indices (zeros
// outside). Thread t loads E consecutive indices of one channel.
template <class G, int TM>
struct tiled_weights {
    static constexpr int E = TM * TILED_BK / 16, PER_ROW = TILED_BK / E;
    float v[E];
    __device__ __forceinline__ void load(const G &g, bool vec, int o0, int phase, int p0) {
        const int o = o0 + (int)threadIdx.x / PER_ROW, p = p0 + (int)threadIdx.x % PER_ROW * E;
        const int KK = g.reduction();
#pragma unroll
        for (int e = 0; e < E; e++) v[e] = 0.0f;
        if (o >= g.c_out() || p >= KK) return;
        const float *src = g.weight(o, phase, p);
        if constexpr (E % 4 == 0) {
            if (vec && p + E <= KK) {
#pragma unroll
                for (int e = 0; e < E; e += 4) {
                    const float4 w = *(const float4 *)(src + e);
                    v[e] = w.x, v[e + 1] = w.y, v[e + 2] = w.z, v[e + 3] = w.w;
                }
                return;
            }
        }
#pragma unroll
        for (int e = 0; e < E; e++)
            if (p + e < KK) v[e] = *g.weight(o, phase, p + e);
    }
    template <bool TF32>
    __device__ __forceinline__ void store(float (*ws)[16 * TM + TILED_PAD]) const {
        const int o = (int)threadIdx.x / PER_ROW, q = (int)threadIdx.x % PER_ROW * E;
#pragma unroll
        for (int e = 0; e < E; e++) ws[q + e][o] = TF32 ? __uint_as_float(tf32_bits(v[e])) : v[e];
    }
};

// xs (TILED_BK, TILED_BN): the inputs of the block's columns. Thread t keeps column t % 128 and
// takes the consecutive indices (t / 128) * PER .. + PER - 1 of the slice, walking them with the
// geometry's cursor (one start per slice: a few divisions, then one step per index).
template <class G>
struct tiled_inputs {
    static constexpr int PER = TILED_BK / 2;
    float v[PER];
    __device__ __forceinline__ void load(const G &g, int n, bool column, int phase, int p0) {
        const int KK = g.reduction(), p = p0 + (int)threadIdx.x / TILED_BN * PER;
#pragma unroll
        for (int j = 0; j < PER; j++) v[j] = 0.0f;
        if (!column || p >= KK) return;
        typename G::cursor c = g.start(n, phase, p, 1);
#pragma unroll
        for (int j = 0; j < PER; j++) {
            if (p + j < KK) v[j] = g.take(c);
            g.advance(c);
        }
    }
    template <bool TF32>
    __device__ __forceinline__ void store(float (*xs)[TILED_BN + TILED_PAD]) const {
        const int n = (int)threadIdx.x % TILED_BN, h = (int)threadIdx.x / TILED_BN * PER;
#pragma unroll
        for (int j = 0; j < PER; j++) xs[h + j][n] = TF32 ? __uint_as_float(tf32_bits(v[j])) : v[j];
    }
};

// f32 products: thread (ty, tx) = (tid / 16, tid % 16) owns channels ty*TM .. ty*TM + TM-1 and
// columns 4tx .. 4tx+3, 64 + 4tx .. 64 + 4tx+3; every product is one FMA.
template <int TM>
struct tiled_fma {
    float acc[TM][8];
    __device__ __forceinline__ void zero() {
#pragma unroll
        for (int m = 0; m < TM; m++)
#pragma unroll
            for (int j = 0; j < 8; j++) acc[m][j] = 0.0f;
    }
    __device__ __forceinline__ void slice(const float (*ws)[16 * TM + TILED_PAD], const float (*xs)[TILED_BN + TILED_PAD]) {
        const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
#pragma unroll
        for (int q = 0; q < TILED_BK; q++) {
            float a[TM];
#pragma unroll
            for (int m = 0; m < TM; m++) a[m] = ws[q][ty * TM + m];
            const float4 b0 = *(const float4 *)&xs[q][4 * tx], b1 = *(const float4 *)&xs[q][64 + 4 * tx];
            const float b[8] = {b0.x, b0.y, b0.z, b0.w, b1.x, b1.y, b1.z, b1.w};
#pragma unroll
            for (int m = 0; m < TM; m++)
#pragma unroll
                for (int j = 0; j < 8; j++) acc[m][j] = fmaf(a[m], b[j], acc[m][j]);
        }
    }
    template <class G>
    __device__ __forceinline__ void finish(const G &g, int o0, int n0, int phase) const {
        const int tx = threadIdx.x % 16, ty = threadIdx.x / 16, N = g.cols();
#pragma unroll
        for (int m = 0; m < TM; m++) {
            const int o = o0 + ty * TM + m;
            if (o >= g.c_out()) continue;
#pragma unroll
            for (int j = 0; j < 8; j++) {
                const int n = n0 + (j < 4 ? 4 * tx + j : 64 + 4 * tx + j - 4);
                if (n < N) g.finish(o, phase, n, acc[m][j]);
            }
        }
    }
};

// TF32 tensor-core products (mma.sync m16n8k8, f32 accumulation): the 8 warps tile the block as
// WARPS_M x WARPS_N, each warp MT x NT fragments of 16 channels x 8 columns. In a fragment, lane
// (g, t) = (lane / 4, lane % 4) holds channels g and g + 8 at columns 2t and 2t + 1.
template <int TM>
struct tiled_mma {
    static constexpr int BM = 16 * TM, WARPS_M = BM >= 32 ? BM / 32 : 1, WARPS_N = 8 / WARPS_M;
    static constexpr int WM = BM / WARPS_M, WN = TILED_BN / WARPS_N, MT = WM / 16, NT = WN / 8;
    float acc[MT][NT][4];
    __device__ __forceinline__ void zero() {
#pragma unroll
        for (int i = 0; i < MT; i++)
#pragma unroll
            for (int j = 0; j < NT; j++)
#pragma unroll
                for (int e = 0; e < 4; e++) acc[i][j][e] = 0.0f;
    }
    __device__ __forceinline__ void slice(const float (*ws)[16 * TM + TILED_PAD], const float (*xs)[TILED_BN + TILED_PAD]) {
        const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
        const int m0 = warp / WARPS_N * WM + g, n0 = warp % WARPS_N * WN + g;
#pragma unroll
        for (int k0 = 0; k0 < TILED_BK; k0 += 8) {
            uint32_t a[MT][4], b[NT][2];
#pragma unroll
            for (int i = 0; i < MT; i++) {
                const int m = m0 + 16 * i;
                a[i][0] = __float_as_uint(ws[k0 + t][m]), a[i][1] = __float_as_uint(ws[k0 + t][m + 8]);
                a[i][2] = __float_as_uint(ws[k0 + t + 4][m]), a[i][3] = __float_as_uint(ws[k0 + t + 4][m + 8]);
            }
#pragma unroll
            for (int j = 0; j < NT; j++) {
                const int n = n0 + 8 * j;
                b[j][0] = __float_as_uint(xs[k0 + t][n]), b[j][1] = __float_as_uint(xs[k0 + t + 4][n]);
            }
#pragma unroll
            for (int i = 0; i < MT; i++)
#pragma unroll
                for (int j = 0; j < NT; j++)
                    asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
                        "{%8,%9}, {%0,%1,%2,%3};"
                        : "+f"(acc[i][j][0]), "+f"(acc[i][j][1]), "+f"(acc[i][j][2]), "+f"(acc[i][j][3])
                        : "r"(a[i][0]), "r"(a[i][1]), "r"(a[i][2]), "r"(a[i][3]), "r"(b[j][0]), "r"(b[j][1]));
        }
    }
    template <class G>
    __device__ __forceinline__ void finish(const G &g, int o0, int n0, int phase) const {
        const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, N = g.cols();
        const int m0 = o0 + warp / WARPS_N * WM + lane / 4, c0 = n0 + warp % WARPS_N * WN + 2 * (lane % 4);
#pragma unroll
        for (int i = 0; i < MT; i++)
#pragma unroll
            for (int j = 0; j < NT; j++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int o = m0 + 16 * i + (e >= 2 ? 8 : 0), n = c0 + 8 * j + (e & 1);
                    if (o < g.c_out() && n < N) g.finish(o, phase, n, acc[i][j][e]);
                }
    }
};

template <class G, int TM, bool TF32>
static __global__ void __launch_bounds__(TILED_THREADS, 2) tiled_kernel(const G g) {
    pdl_begin();
    constexpr int BM = 16 * TM;
    extern __shared__ float4 tiled_smem[];
    float *smem = (float *)tiled_smem;
    auto ws = (float(*)[TILED_BK][BM + TILED_PAD])smem;  // [2]
    auto xs = (float(*)[TILED_BK][TILED_BN + TILED_PAD])(smem + 2 * TILED_BK * (BM + TILED_PAD));  // [2]
    const int N = g.cols(), KK = g.reduction(), phases = g.phases();
    const int phase = blockIdx.y % phases, o0 = blockIdx.y / phases * BM, n0 = blockIdx.x * TILED_BN;
    const int nb = n0 + (int)threadIdx.x % TILED_BN;
    const bool column = nb < N, vec = g.weights_vec(0, 4);

    tiled_weights<G, TM> wl;
    tiled_inputs<G> xl;
    wl.load(g, vec, o0, phase, 0);
    xl.load(g, nb, column, phase, 0);
    wl.template store<TF32>(ws[0]);
    xl.template store<TF32>(xs[0]);
    __syncthreads();

    typename std::conditional<TF32, tiled_mma<TM>, tiled_fma<TM>>::type core;
    core.zero();
    int buf = 0;
    for (int p0 = 0; p0 < KK; p0 += TILED_BK) {
        const bool more = p0 + TILED_BK < KK;
        if (more) {
            wl.load(g, vec, o0, phase, p0 + TILED_BK);
            xl.load(g, nb, column, phase, p0 + TILED_BK);
        }
        core.slice(ws[buf], xs[buf]);
        if (more) {
            wl.template store<TF32>(ws[buf ^ 1]);
            xl.template store<TF32>(xs[buf ^ 1]);
        }
        __syncthreads();
        buf ^= 1;
    }
    core.finish(g, o0, n0, phase);
}

// The kernel for 16*TM channels, with the shared memory it needs (two slices of weights and
// inputs; above 48 KB the kernel must opt in).
template <class G, int TM>
static void tiled_start(bool tf32, dim3 grid, struct gpu_exec *ex, const G &g) {
    const size_t smem = sizeof(float) * 2 * TILED_BK * (16 * TM + TILED_BN + 2 * TILED_PAD);
    void (*kernel)(const G) = tf32 ? tiled_kernel<G, TM, true> : tiled_kernel<G, TM, false>;
    if (smem > 48 * 1024) cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    pdl_launch(kernel, grid, TILED_THREADS, smem, ex, g);
}

// Launches g's tiled kernel over `cols` columns, c_out channels and `phases` phases, with the
// channel tile that wastes the fewest rows (gpu_tiled_channels).
template <class G>
static int tiled_launch(const G &g, int cols, int c_out, int phases, struct gpu_exec *ex, const char *what) {
    const int rows = gpu_tiled_channels(c_out);
    const dim3 grid((cols + TILED_BN - 1) / TILED_BN, (c_out + rows - 1) / rows * phases);
    const bool tf32 = ex->precision != MIMI_PRECISION_STRICT;
    if (rows == 16) tiled_start<G, 1>(tf32, grid, ex, g);
    else if (rows == 32) tiled_start<G, 2>(tf32, grid, ex, g);
    else tiled_start<G, 4>(tf32, grid, ex, g);
    return launch_status(ex, what);
}

#endif
