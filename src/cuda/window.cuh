/*
 * window.cuh - the conv of the fast precisions for large products (many streams, whole
 * signals): an implicit GEMM on the tensor cores (TF32 mma.sync, f32 accumulation) that reads
 * each input once per tile, with no im2col matrix.
 *
 * A block computes 16*TM output channels x WIN_BN consecutive output steps t0 .. t0 + 127 of one
 * row r. The reduction runs over slices of CH whole input channels (CH*K <= WIN_BK indices,
 * padded with zero weights to WIN_BK). For a slice the block stages in shared memory
 *   - the window of each of its channels: xin(i, r, t0*S + j), j < W = 127*S + K, with
 *     xin = [history | f(x)] as im2col forms it (f = ELU when in.elu, zeros past the input), so
 *     that reduction index (c, k) of output step t0 + n is window[c][n*S + k];
 *   - the weights (index, channel), TF32-rounded.
 * Slices are double-buffered: the next slice is fetched before the current one is multiplied.
 * The 8 warps tile the block as in tiled_mma below; the epilogue (bias, ELU, residual add) is
 * op_conv's, as in the direct kernel.
 */
#ifndef MIMI_CUDA_WINDOW_CUH
#define MIMI_CUDA_WINDOW_CUH

#include <stdint.h>

#include "common.cuh"

#define WIN_BN 128
#define WIN_BK 32
#define WIN_THREADS 256
#define WIN_PAD 8  // weight rows padded so that the fragment loads of a warp hit distinct banks

// Rounds v to TF32 (nearest, ties away), as the tensor cores take it.
static __device__ __forceinline__ float tf32_round(float v) {
    uint32_t r;
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(v));
    return __uint_as_float(r);
}

// The slicing of one conv: CH channels per slice, windows of W floats at a pitch of P.
struct win_shape {
    int CH, W, P, tiles;  // tiles: blocks per row along the output steps
};

static inline struct win_shape win_shape_of(const struct op_conv *a) {
    struct win_shape s;
    s.CH = WIN_BK / a->in.K;
    if (s.CH > a->in.c_in) s.CH = a->in.c_in;
    s.W = (WIN_BN - 1) * a->in.S + a->in.K;
    s.P = (s.W + 3) / 4 * 4 + 4;  // channels a few banks apart
    s.tiles = (a->in.T / a->in.S + WIN_BN - 1) / WIN_BN;
    return s;
}

static inline size_t win_smem(const struct win_shape &s, int TM) {
    return sizeof(float) * 2 * ((size_t)s.CH * s.P + (size_t)WIN_BK * (16 * TM + WIN_PAD));
}

// Stages slice `slice` of the windows (CH, P) and the weights (WIN_BK, BM + WIN_PAD).
template <int TM>
static __device__ __forceinline__ void win_fill(const struct op_conv &a, const win_shape &s, int slice, int r,
                                                int t0, int o0, float *win, float (*ws)[16 * TM + WIN_PAD]) {
    constexpr int BM = 16 * TM;
    const struct op_im2col &in = a.in;
    const int i0 = slice * s.CH, base = t0 * in.S - in.H;
    const int slot = in.row_slot[r];
    const bool replicate = slot >= 0 && in.replicate && !in.started[(size_t)slot * in.slot_stride];
    for (int c = 0; c < s.CH; c++) {
        const int i = i0 + c;
        const float *xr = in.x + ((size_t)i * in.R + r) * in.T;
        for (int j = threadIdx.x; j < s.W; j += WIN_THREADS) {
            const int q = base + j;
            float v = 0.0f;
            if (i < in.c_in) {
                if (q >= 0) {
                    if (q < in.T) v = in.elu ? elu_f(xr[q]) : xr[q];
                } else if (replicate) {
                    v = in.elu ? elu_f(xr[0]) : xr[0];
                } else if (slot >= 0) {
                    v = in.hist[(size_t)slot * in.slot_stride + (size_t)i * in.H + q + in.H];
                }
            }
            win[c * s.P + j] = tf32_round(v);
        }
    }
    // weights: consecutive threads take consecutive channels of one index (conflict-free stores)
    const int kk = in.c_in * in.K, p0 = i0 * in.K, np = min(s.CH * in.K, kk - p0);
    for (int e = threadIdx.x; e < BM * WIN_BK; e += WIN_THREADS) {
        const int o = e % BM, q = e / BM;
        float v = 0.0f;
        if (q < np && o0 + o < a.c_out) v = a.w[(size_t)(o0 + o) * a.ld + p0 + q];
        ws[q][o] = tf32_round(v);
    }
}

template <int TM>
static __global__ void __launch_bounds__(WIN_THREADS, 2) window_kernel(const struct op_conv a, const win_shape s) {
    pdl_begin();
    constexpr int BM = 16 * TM, WARPS_M = BM >= 32 ? BM / 32 : 1, WARPS_N = 8 / WARPS_M;
    constexpr int WM = BM / WARPS_M, WN = WIN_BN / WARPS_N, MT = WM / 16, NT = WN / 8;
    extern __shared__ float4 win_smem_raw[];
    float *smem = (float *)win_smem_raw;  // windows [2][CH][P], then weights [2][WIN_BK][BM + WIN_PAD]
    const int win_floats = s.CH * s.P;
    auto ws = (float(*)[WIN_BK][BM + WIN_PAD])(smem + 2 * s.CH * s.P);  // [2]

    const struct op_im2col &in = a.in;
    const int To = in.T / in.S, r = blockIdx.x / s.tiles, t0 = blockIdx.x % s.tiles * WIN_BN;
    const int o0 = blockIdx.y * BM, slices = (in.c_in + s.CH - 1) / s.CH;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    const int m0 = warp / WARPS_N * WM + g, n0 = warp % WARPS_N * WN + g;

    // where this lane's reduction indices k0 + t and k0 + t + 4 sit in the windows (the padding
    // indices, whose weights are zero, read element 0)
    int off[WIN_BK / 8][2];
#pragma unroll
    for (int ks = 0; ks < WIN_BK / 8; ks++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int p = ks * 8 + t + 4 * h, c = p / in.K;
            off[ks][h] = c < s.CH ? c * s.P + (p - c * in.K) : 0;
        }

    float acc[MT][NT][4];
#pragma unroll
    for (int i = 0; i < MT; i++)
#pragma unroll
        for (int j = 0; j < NT; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) acc[i][j][e] = 0.0f;

    win_fill<TM>(a, s, 0, r, t0, o0, smem, ws[0]);
    __syncthreads();
    for (int sl = 0; sl < slices; sl++) {
        const int buf = sl & 1;
        if (sl + 1 < slices) win_fill<TM>(a, s, sl + 1, r, t0, o0, smem + (buf ^ 1) * win_floats, ws[buf ^ 1]);
        const float *wb = smem + buf * win_floats;
#pragma unroll
        for (int ks = 0; ks < WIN_BK / 8; ks++) {
            const int k0 = ks * 8;
            uint32_t af[MT][4], bf[NT][2];
#pragma unroll
            for (int i = 0; i < MT; i++) {
                const int m = m0 + 16 * i;
                af[i][0] = __float_as_uint(ws[buf][k0 + t][m]), af[i][1] = __float_as_uint(ws[buf][k0 + t][m + 8]);
                af[i][2] = __float_as_uint(ws[buf][k0 + t + 4][m]);
                af[i][3] = __float_as_uint(ws[buf][k0 + t + 4][m + 8]);
            }
#pragma unroll
            for (int j = 0; j < NT; j++) {
                const int col = (n0 + 8 * j) * in.S;
                bf[j][0] = __float_as_uint(wb[off[ks][0] + col]), bf[j][1] = __float_as_uint(wb[off[ks][1] + col]);
            }
#pragma unroll
            for (int i = 0; i < MT; i++)
#pragma unroll
                for (int j = 0; j < NT; j++)
                    asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
                        "{%8,%9}, {%0,%1,%2,%3};"
                        : "+f"(acc[i][j][0]), "+f"(acc[i][j][1]), "+f"(acc[i][j][2]), "+f"(acc[i][j][3])
                        : "r"(af[i][0]), "r"(af[i][1]), "r"(af[i][2]), "r"(af[i][3]), "r"(bf[j][0]), "r"(bf[j][1]));
        }
        __syncthreads();
    }

    // epilogue: lane (g, t) of fragment (i, j) holds channels g, g + 8 at steps 2t, 2t + 1
    const int kk = in.c_in * in.K;
#pragma unroll
    for (int i = 0; i < MT; i++)
#pragma unroll
        for (int e2 = 0; e2 < 2; e2++) {
            const int o = o0 + m0 + 16 * i + 8 * e2;
            if (o >= a.c_out) continue;
            const float b = a.bias ? a.w[(size_t)o * a.ld + kk] : 0.0f;
            float *y = a.y + ((size_t)o * in.R + r) * To;
#pragma unroll
            for (int j = 0; j < NT; j++)
#pragma unroll
                for (int e1 = 0; e1 < 2; e1++) {
                    const int tt = t0 + warp % WARPS_N * WN + 8 * j + 2 * t + e1;
                    if (tt >= To) continue;
                    float v = acc[i][j][2 * e2 + e1] + b;
                    if (a.post_elu) v = elu_f(v);
                    y[tt] = a.accumulate ? y[tt] + v : v;
                }
        }
}

static int window_launch(const struct op_conv *a, struct gpu_exec *ex) {
    const win_shape s = win_shape_of(a);
    const int rows = a->c_out <= 16 ? 16 : a->c_out <= 32 ? 32 : 64, TM = rows / 16;
    const dim3 grid(a->in.R * s.tiles, (a->c_out + rows - 1) / rows);
    const size_t smem = win_smem(s, TM);
    void (*kernel)(const struct op_conv, const win_shape) =
        TM == 1 ? window_kernel<1> : TM == 2 ? window_kernel<2> : window_kernel<4>;
    if (smem > 48 * 1024) cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    pdl_launch(kernel, grid, WIN_THREADS, smem, ex, *a, s);
    return launch_status(ex, "conv");
}

#endif
