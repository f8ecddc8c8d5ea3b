/*
 * conv_mma.cu - a strided conv with K = 2S on bfloat16 tensor cores that reads its input in
 * place (op_conv_mma; reference src/nn/conv.c), for MIMI_PRECISION_FAST_BF16's large steps: the
 * encoder's first two downsamplings (64 -> 128 channels, S 4, 1920 input steps a frame; 128 ->
 * 256, S 5, 480 steps). There im2col wrote K/S = 2 bf16 copies of elu(x) for a cuBLAS product to
 * read again: at 2048 rows on an H200, 564 + 411 us and 330 + 221 us (with the carries 12 and 18).
 * This kernel takes 651 and 562 us (its window staged from 16-byte pieces; from 4-byte loads of
 * two channels it had taken 1181 and 741, slower than im2col and the product).
 *
 * As a product: output t of a row is W (c_out, K*c_in, tap-major) times the window rows S t + k,
 * k < K, of [history | v], v = bf16(elu_bf16(x)). A block takes TILE outputs of one row, 8
 * warps:
 * - window: the S (TILE + 1) input steps the tile reads (mma.cuh's stage_window), phase-major:
 *   step S m + p (from the tile's first, the history first) at row p * PP + m of xs (channels
 *   contiguous), so that tap k = S a + p of outputs n .. n + 7 is the 8 consecutive rows
 *   p * PP + a + n .. (an ldmatrix row each; with the steps in order they were S rows apart, on
 *   the same banks).
 * - warp w takes outputs 16 m .. + 15 (m = w, w + 8, ..) over every column: A fragments from wf
 *   (fragment order: mma.cuh's mma_rows), B fragments by ldmatrix.x4 over two column groups.
 *   The bias (f32) is added and y stored as 8-byte pieces from the accumulators.
 * The history is not carried here (a GOP_CARRY follows: it reads the old one).
 */
#include "cuda/common.cuh"
#include "cuda/mma.cuh"

#define CM_THREADS 256
#define CM_WARPS (CM_THREADS / 32)

template <int CIN, int COUT, int S, int TILE>
struct cm_geom {
    static constexpr int K = 2 * S, KK = K * CIN, NT = TILE / 8;
    // phase pitch (rows): the tile's TILE + 1 steps of a phase, = 2 (mod 8) so that the window's
    // stores of 8 consecutive steps (S phases) fall on distinct banks for S = 4
    static constexpr int PP = (TILE + 1 + 5) / 8 * 8 + 2;
    static constexpr int ROWS = S * (TILE + 1);  // the window's steps
    static constexpr int XP = CIN + 8;           // row pitch (bf16): 8 consecutive rows on distinct banks
    static constexpr size_t SMEM = sizeof(__nv_bfloat16) * (size_t)S * PP * XP;
    static_assert((XP / 2) % 32 == 4 && NT % 2 == 0 && CIN % 16 == 0 && COUT % 16 == 0 && PP >= TILE + 1,
                  "the tiling");
};

// Blocks an SM holds: three at 64 input channels (55 KB of shared memory each, 80 registers),
// three at 128 (68 KB).
#define CM_BLOCKS 3
#define CM_PAIRS 1  // stage_window's channel pairs a piece group: 512-byte rows for the phase split

template <int CIN, int COUT, int S, int TILE>
static __global__ void __launch_bounds__(CM_THREADS, CM_BLOCKS) conv_mma_kernel(const struct op_conv_mma a) {
    typedef cm_geom<CIN, COUT, S, TILE> G;
    constexpr int XP = G::XP, PP = G::PP, NT = G::NT;
    extern __shared__ __align__(16) unsigned char cm_smem[];
    __nv_bfloat16 *xs = (__nv_bfloat16 *)cm_smem;
    pdl_begin();
    const struct op_im2col &in = a.in;
    const int T = in.T, R = in.R, ntiles = T / S / TILE, r = blockIdx.x / ntiles, t0 = (blockIdx.x % ntiles) * TILE;
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, g = lane >> 2, q = lane & 3;
    {  // the window: [history | elu(x)] in bf16 (the history as stored, zeros on a padding row)
        const int slot = in.row_slot[r];
        stage_window<CIN, G::ROWS, XP, CM_PAIRS>(
            xs, in.x + (size_t)r * T, (size_t)R * T, S * t0 - S, slot >= 0 ? in.hist + (size_t)slot * in.slot_stride : NULL,
            S, [](float v) { return elu_bf16(v); }, [](int u) { return u % S * PP + u / S; });
    }
    __syncthreads();

    const size_t cs = (size_t)R * (T / S);
    const __nv_bfloat16 *xb = ldmatrix_lane<XP>(xs);
#pragma unroll 1
    for (int m = w; m < COUT / 16; m += CM_WARPS) {
        float acc[NT][4] = {};
        // step kt: tap k = 16 kt / CIN (phase k % S, offset k / S), channels 16 kt % CIN ..
        mma_rows<G::KK / 16, NT, XP>(acc, (const uint4 *)a.wf + m * 32 + lane, (size_t)(COUT / 16) * 32, [&](int kt) {
            const int k = 16 * kt / CIN;
            return xb + (k % S * PP + k / S) * XP + 16 * kt % CIN;
        });
        // acc[n][e]: output 16 m + g + 8 (e >> 1), column t0 + 8n + 2q + (e & 1)
        const int o = 16 * m + g;
        const float b_lo = a.w[(size_t)o * a.ld + G::KK], b_hi = a.w[(size_t)(o + 8) * a.ld + G::KK];
        float *yr = a.y + ((size_t)o * R + r) * (T / S) + t0 + 2 * q;
#pragma unroll
        for (int n = 0; n < NT; n++) {
            __stcs((float2 *)(yr + 8 * n), make_float2(acc[n][0] + b_lo, acc[n][1] + b_lo));
            __stcs((float2 *)(yr + 8 * cs + 8 * n), make_float2(acc[n][2] + b_hi, acc[n][3] + b_hi));
        }
    }
}

template <int CIN, int COUT, int S, int TILE>
static int launch(const struct op_conv_mma *a, struct gpu_exec *ex) {
    return launch_smem("conv_mma", conv_mma_kernel<CIN, COUT, S, TILE>, dim3(a->in.R * (a->in.T / S / TILE)),
                       dim3(CM_THREADS), cm_geom<CIN, COUT, S, TILE>::SMEM, ex, *a);
}

extern "C" int mimi_cuda_conv_mma(const struct op_conv_mma *a, struct gpu_exec *ex) {
    const struct op_im2col &in = a->in;
    if (!GPU_CONV_MMA_FITS(in.c_in, a->c_out, in.K, in.S, in.T) || in.H != in.K - in.S || in.replicate || !in.elu ||
        in.R < 1 || (uintptr_t)in.x % 16 || (uintptr_t)a->y % 8 || (uintptr_t)a->wf % 16) {
        if (ex->errmsg)
            snprintf(ex->errmsg, ex->errlen, "conv_mma: %d -> %d channels, K %d, stride %d, T %d: no kernel", in.c_in,
                     a->c_out, in.K, in.S, in.T);
        return MIMI_EUNSUPPORTED;
    }
    if (in.c_in == 64) return launch<64, 128, 4, GPU_CONV_MMA_TILE_S4>(a, ex);
    return launch<128, 256, 5, GPU_CONV_MMA_TILE_S5>(a, ex);
}
