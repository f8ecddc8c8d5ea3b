/*
 * conv_mma.cu - a strided conv with K = 2S on bfloat16 tensor cores without an im2col matrix
 * (op_conv_mma; reference src/nn/conv.c), for MIMI_PRECISION_FAST_BF16's large steps: the
 * encoder's first two downsampling convs, where im2col wrote its bf16 matrix (twice the input)
 * and the product read it back (at 2048 rows on an H200: 0.97 and 0.55 ms with their products).
 *
 * A block takes one tile: TILE output columns of one row, 8 warps.
 * - window: the S*(TILE + 1) input columns the tile reads, [history | f(x)] in bf16, stored by
 *   phase: column u = m*S + p at row p*(TILE + 1) + m of xs (channels contiguous), so that the
 *   columns one tap reads for 8 consecutive outputs are 8 consecutive rows.
 * - y (c_out, TILE) = W . window over kk = k*c_in + i (tap k = p + S*s): the B fragment of 16
 *   channels of tap k for columns n .. n + 7 is rows p*(TILE + 1) + s + n .., one ldmatrix.x4 per
 *   two column groups; A fragments from wf in fragment order (mma.cuh's mma_rows). Warp w takes
 *   outputs 16(8j + w) .. + 15 in pass j over every column.
 */
#include "cuda/common.cuh"
#include "cuda/mma.cuh"

#define CM_THREADS 256
#define CM_WARPS (CM_THREADS / 32)

template <int CIN, int S, int TILE>
struct cm_geom {
    static constexpr int K = 2 * S, KK = K * CIN, NT = TILE / 8, ROWS = S * (TILE + 1);
    static constexpr int XP = CIN + 8;  // row pitch in bf16 values: 8 consecutive rows on distinct banks
    static constexpr size_t SMEM = sizeof(__nv_bfloat16) * (size_t)ROWS * XP;
    static_assert((XP / 2) % 32 == 4 && NT % 2 == 0 && CIN % 16 == 0, "the tiling");
};

template <int CIN, int S, int TILE>
static __global__ void __launch_bounds__(CM_THREADS, 2) conv_mma_kernel(const struct op_conv_mma a) {
    typedef cm_geom<CIN, S, TILE> G;
    constexpr int KK = G::KK, XP = G::XP, NT = G::NT, KT = KK / 16;
    extern __shared__ __align__(16) unsigned char cm_smem[];
    __nv_bfloat16 *xs = (__nv_bfloat16 *)cm_smem;
    pdl_begin();
    const struct op_im2col &in = a.in;
    const int To = in.T / S, R = in.R, ntiles = To / TILE, r = blockIdx.x / ntiles, t0 = (blockIdx.x % ntiles) * TILE;
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, g = lane >> 2, q = lane & 3;
    {  // the window: [history | f(x)] in bf16 (the history as stored, zeros on a padding row), by phase
        const size_t cs = (size_t)R * in.T;
        const float *xr = in.x + (size_t)r * in.T;
        const int slot = in.row_slot[r];
        const float *hist = slot >= 0 ? in.hist + (size_t)slot * in.slot_stride : NULL;
        stage_window<CIN, G::ROWS, XP>(
            xs,
            [&](int u, int i) {
                const int j = t0 * S + u - S;  // x column
                if (j >= 0) {
                    const float a0 = __ldg(xr + i * cs + j), a1 = __ldg(xr + (i + 1) * cs + j);
                    return in.elu ? make_float2(elu_bf16(a0), elu_bf16(a1)) : make_float2(a0, a1);
                }
                if (!hist) return make_float2(0.0f, 0.0f);  // t0 = 0, u < H = S: the history
                return make_float2(hist[i * S + u], hist[(i + 1) * S + u]);
            },
            [](int u) { return u % S * (TILE + 1) + u / S; });
    }
    __syncthreads();
    // B of step kt (tap k = p + S*s, channels i0 ..) for columns n: rows p*(TILE + 1) + s + n
    const __nv_bfloat16 *xb = ldmatrix_lane<XP>(xs);
    const int MT = a.c_out / 16;
#pragma unroll 1
    for (int m = w; m < MT; m += CM_WARPS) {
        float acc[NT][4] = {};
        mma_rows<KT, NT, XP>(acc, (const uint4 *)a.wf + m * 32 + lane, (size_t)MT * 32, [&](int kt) {
            const int k = 16 * kt / CIN;
            return xb + (k % S * (TILE + 1) + k / S) * XP + 16 * kt % CIN;
        });
        // acc[n][e]: output 16 m + g + 8 (e >> 1), column 8n + 2q + (e & 1)
        const int o = 16 * m + g;
        const float b_lo = a.w[(size_t)o * a.ld + CIN * G::K], b_hi = a.w[(size_t)(o + 8) * a.ld + CIN * G::K];
        const size_t at = ((size_t)o * R + r) * To + t0 + 2 * q;
#pragma unroll
        for (int n = 0; n < NT; n++) {
            __stcs((float2 *)(a.y + at + 8 * n), make_float2(acc[n][0] + b_lo, acc[n][1] + b_lo));
            __stcs((float2 *)(a.y + at + 8 * (size_t)R * To + 8 * n), make_float2(acc[n][2] + b_hi, acc[n][3] + b_hi));
        }
    }
}

template <int CIN, int S, int TILE>
static int launch(const struct op_conv_mma *a, struct gpu_exec *ex) {
    const size_t smem = cm_geom<CIN, S, TILE>::SMEM;
    if (cudaFuncSetAttribute(conv_mma_kernel<CIN, S, TILE>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem) !=
        cudaSuccess)
        return launch_status(ex, "conv_mma (shared memory)");
    pdl_launch(conv_mma_kernel<CIN, S, TILE>, dim3(a->in.R * (a->in.T / S / TILE)), dim3(CM_THREADS), smem, ex, *a);
    return launch_status(ex, "conv_mma");
}

extern "C" int mimi_cuda_conv_mma(const struct op_conv_mma *a, struct gpu_exec *ex) {
    const struct op_im2col &in = a->in;
    if (in.S < 1 || in.T % in.S || !GPU_CONV_MMA_FITS(in.c_in, a->c_out, in.K, in.S, in.T / in.S) ||
        in.H != in.K - in.S || in.replicate || in.R < 1 || (uintptr_t)a->y % 8 || (uintptr_t)a->wf % 16) {
        if (ex->errmsg)
            snprintf(ex->errmsg, ex->errlen, "conv_mma: %d -> %d channels, K %d, stride %d, T %d: no kernel", in.c_in,
                     a->c_out, in.K, in.S, in.T);
        return MIMI_EUNSUPPORTED;
    }
    return in.c_in == 64 ? launch<64, 4, 96>(a, ex) : launch<128, 5, 48>(a, ex);
}
