/*
 * resblock_mma.cu - a SEANet residual block over many columns in one kernel on bfloat16 tensor
 * cores (op_resblock_mma; reference src/nn/seanet.c), for MIMI_PRECISION_FAST_BF16 below the top
 * level: 128 channels over 480 steps a frame and 256 over 96. There im2col, two products and an
 * ELU pass wrote and read again about 4.5 times the block's input per step (at 2048 rows on an
 * H200: 1.23 ms for the 128-channel level, 0.54 for the 256 one, in each direction); this kernel
 * reads x once (with a two-column halo) and writes y once: 0.92 and 0.42 ms, and 0.76 ms for the
 * 128-channel level at four blocks an SM instead of three. Nsight Compute had found it waiting on
 * its global loads with too few warps (no warp eligible in 69% of cycles at three blocks an SM):
 * the window came in 4-byte loads, 32 bytes of a channel row per 8 lanes. Staged from 16-byte
 * pieces (mma.cuh's stage_window) it takes 0.60 and 0.32 ms, still about twice the 128-channel
 * level's memory floor (1 GB at 4.3 TB/s): a block's window loads, products and stores run one
 * after another.
 *
 * A block takes one tile: RM_TILE columns of one row, 8 warps.
 * - window: xs (RM_ROWS, XP) bf16, row u = [history | elu(x)] column t0 + u of every channel
 *   (channels contiguous), staged by mma.cuh's stage_window: a thread loads 16-byte pieces (4
 *   columns) of two channels and stores each column's pair as 4 bytes.
 * - h (hid, RM_TILE) = W1 . window over the reduction kk = k*c + i (tap-major): the B fragment of
 *   rows kk .. kk + 15 (one tap, 16 channels) and columns n .. n + 7 is the 8x8 pair of xs rows
 *   n + k .. (16 contiguous channels each), one ldmatrix.x4 per two column groups. A fragments
 *   come from w1f in fragment order, one 16-byte load per lane (L2-resident: every block reads
 *   the same weights). h = bf16(elu(h + b1)) goes to hs (RM_TILE, HP), hidden contiguous.
 * - y = x + (b2 + W2 . h), the same way over hs, in passes of 128 outputs (a warp 16 of them
 *   over all columns); x read and y written as 8-byte pieces from the accumulators.
 * Shared memory (C = 128 / 256): 26.5 / 51.7 KB, h taking the window's place; four / three blocks
 * an SM (RM_BLOCKS).
 */
#include "cuda/common.cuh"
#include "cuda/mma.cuh"

#define RM_TILE GPU_RESBLOCK_MMA_TILE
#define RM_THREADS 256
#define RM_WARPS (RM_THREADS / 32)
#define RM_NT (RM_TILE / 8)                       // column groups of 8
#define RM_ROWS (RM_TILE + GPU_RESBLOCK_K - 1)    // window rows

// Blocks an SM holds: four at 128 channels (64 registers), three at 256 (80); the y pass takes
// its columns in two halves to fit them. At 256 channels the window and h side by side (77.8 KB)
// had allowed two.
#define RM_BLOCKS(C) ((C) == 128 ? 4 : 3)
#define RM_HALVES 2
#define RM_PAIRS 4  // stage_window's channel pairs a piece group (the window in step order)

template <int C>
struct rm_geom {
    static constexpr int HID = C / 2, KK = GPU_RESBLOCK_K * C;
    // row pitches in bf16 values: 16-byte aligned rows, 8 consecutive ones on distinct banks
    static constexpr int XP = C + 8, HP = HID + 8;
    // h takes the window's place once every warp has read it
    static constexpr size_t SMEM = sizeof(__nv_bfloat16) * ((size_t)RM_ROWS * XP > (size_t)RM_TILE * HP
                                                                ? (size_t)RM_ROWS * XP : (size_t)RM_TILE * HP);
    static_assert((XP / 2) % 32 == 4 && (HP / 2) % 32 == 4, "ldmatrix rows and window stores on distinct banks");
};

template <int C>
static __global__ void __launch_bounds__(RM_THREADS, RM_BLOCKS(C)) resblock_mma_kernel(const struct op_resblock_mma a) {
    typedef rm_geom<C> G;
    constexpr int HID = G::HID, KK = G::KK, XP = G::XP, HP = G::HP;
    extern __shared__ __align__(16) unsigned char rm_smem[];
    __nv_bfloat16 *xs = (__nv_bfloat16 *)rm_smem, *hs = xs;
    pdl_begin();
    const struct op_im2col &in = a.in;
    const int T = in.T, R = in.R, ntiles = T / RM_TILE, r = blockIdx.x / ntiles, t0 = (blockIdx.x % ntiles) * RM_TILE;
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, g = lane >> 2, q = lane & 3;
    {  // the window: [history | elu(x)] in bf16 (the history as stored, zeros on a padding row)
        const int slot = in.row_slot[r];
        stage_window<C, RM_ROWS, XP, RM_PAIRS>(
            xs, in.x + (size_t)r * T, (size_t)R * T, t0 - (GPU_RESBLOCK_K - 1),
            slot >= 0 ? in.hist + (size_t)slot * in.slot_stride : NULL, GPU_RESBLOCK_K - 1,
            [](float v) { return elu_bf16(v); }, [](int u) { return u; });
    }
    __syncthreads();

    // h: warp w takes hidden 16 mt .. + 15 over NT1 column groups from nb
    {
        constexpr int MT1 = HID / 16, WN1 = RM_WARPS / MT1, NT1 = RM_NT / WN1;
        static_assert(RM_WARPS % MT1 == 0 && RM_NT % WN1 == 0 && NT1 % 2 == 0, "the warps tile h");
        const int mt = w % MT1, nb = (w / MT1) * NT1 * 8;
        float acc[NT1][4] = {};
        // B of step kt (tap k, channels i0 ..) for columns n: window rows n + k
        const __nv_bfloat16 *xb = ldmatrix_lane<XP>(xs + nb * XP);
        mma_rows<KK / 16, NT1, XP>(acc, (const uint4 *)a.w1f + mt * 32 + lane, (size_t)MT1 * 32,
                                   [&](int kt) { return xb + (16 * kt / C) * XP + 16 * kt % C; });
        // acc[n][e]: hidden 16 mt + g + 8 (e >> 1), column nb + 8n + 2q + (e & 1)
        const int j = 16 * mt + g;
        const float b_lo = a.w1[(size_t)j * a.ld1 + KK], b_hi = a.w1[(size_t)(j + 8) * a.ld1 + KK];
        __syncthreads();  // every warp is done with the window: h takes its place
#pragma unroll
        for (int n = 0; n < NT1; n++)
#pragma unroll
            for (int e = 0; e < 4; e++)
                hs[(nb + 8 * n + 2 * q + (e & 1)) * HP + j + 8 * (e >> 1)] =
                    __float2bfloat16_rn(elu_bf16(acc[n][e] + (e >> 1 ? b_hi : b_lo)));
    }
    __syncthreads();

    // y: in passes of 128 outputs, warp w takes outputs 16 m .. + 15 over every column (in
    // RM_HALVES parts of NT column groups)
    constexpr int NT = RM_NT / RM_HALVES;
    const size_t cs = (size_t)R * T;
    const __nv_bfloat16 *hb = ldmatrix_lane<HP>(hs);
#pragma unroll 1
    for (int m = w; m < C / 16; m += RM_WARPS) {
        const int o = 16 * m + g;
        const float b_lo = a.w2[(size_t)o * a.ld2 + HID], b_hi = a.w2[(size_t)(o + 8) * a.ld2 + HID];
#pragma unroll 1
        for (int c0 = 0; c0 < RM_TILE; c0 += 8 * NT) {
            float acc[NT][4] = {};
            mma_rows<HID / 16, NT, HP>(acc, (const uint4 *)a.w2f + m * 32 + lane, (size_t)(C / 16) * 32,
                                       [&](int kt) { return hb + c0 * HP + 16 * kt; });
            // acc[n][e]: output 16 m + g + 8 (e >> 1), column c0 + 8n + 2q + (e & 1); x's loads of
            // half the columns in flight together, then the stores
            const size_t at = ((size_t)o * R + r) * T + t0 + c0 + 2 * q;
#pragma unroll
            for (int n0 = 0; n0 < NT; n0 += NT / 2) {
                float2 x[NT / 2][2];
#pragma unroll
                for (int n = 0; n < NT / 2; n++)
#pragma unroll
                    for (int hi = 0; hi < 2; hi++) x[n][hi] = __ldg((const float2 *)(in.x + at + hi * 8 * cs + 8 * (n0 + n)));
#pragma unroll
                for (int n = 0; n < NT / 2; n++)
#pragma unroll
                    for (int hi = 0; hi < 2; hi++) {
                        const float b = hi ? b_hi : b_lo;
                        __stcs((float2 *)(a.y + at + hi * 8 * cs + 8 * (n0 + n)),
                               make_float2(x[n][hi].x + (acc[n0 + n][2 * hi] + b), x[n][hi].y + (acc[n0 + n][2 * hi + 1] + b)));
                    }
            }
        }
    }
}

template <int C>
static int launch(const struct op_resblock_mma *a, struct gpu_exec *ex) {
    return launch_smem("resblock_mma", resblock_mma_kernel<C>, dim3(a->in.R * (a->in.T / RM_TILE)), dim3(RM_THREADS),
                       rm_geom<C>::SMEM, ex, *a);
}

extern "C" int mimi_cuda_resblock_mma(const struct op_resblock_mma *a, struct gpu_exec *ex) {
    const struct op_im2col &in = a->in;
    if (!GPU_RESBLOCK_MMA_FITS(in.c_in, a->hid, in.T) || in.K != GPU_RESBLOCK_K || in.S != 1 ||
        in.H != GPU_RESBLOCK_K - 1 || in.replicate || !in.elu || in.R < 1 || (uintptr_t)in.x % 16 ||
        (uintptr_t)a->y % 8 || (uintptr_t)a->w1f % 16 || (uintptr_t)a->w2f % 16) {
        if (ex->errmsg)
            snprintf(ex->errmsg, ex->errlen, "resblock_mma: %d channels, %d hidden, K %d, stride %d, T %d: no kernel",
                     in.c_in, a->hid, in.K, in.S, in.T);
        return MIMI_EUNSUPPORTED;
    }
    return in.c_in == 128 ? launch<128>(a, ex) : launch<256>(a, ex);
}
