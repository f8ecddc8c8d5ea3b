/*
 * resblock_mma.cu - a SEANet residual block over many columns in one kernel on bfloat16 tensor
 * cores (op_resblock_mma; reference src/nn/seanet.c), for MIMI_PRECISION_FAST_BF16 below the top
 * level: 128 channels over 480 steps a frame and 256 over 96. There im2col, two products and an
 * ELU pass wrote and read again about 4.5 times the block's input per step (at 2048 rows on an
 * H200: 1.23 ms for the 128-channel level, 0.54 for the 256 one, in each direction); this kernel
 * reads x once (with a two-column halo) and writes y once.
 *
 * A block takes one tile: RM_TILE columns of one row, 8 warps.
 * - window: xs (RM_ROWS, XP) bf16, row u = [history | elu(x)] column t0 + u of every channel
 *   (channels contiguous). Lane l of a warp takes row 8b + (l & 7) and channels 2(l >> 3), + 1 of
 *   an octet: 32-byte pieces of 8 rows per load, conflict-free 4-byte stores.
 * - h (hid, RM_TILE) = W1 . window over the reduction kk = k*c + i (tap-major): the B fragment of
 *   rows kk .. kk + 15 (one tap, 16 channels) and columns n .. n + 7 is the 8x8 pair of xs rows
 *   n + k .. (16 contiguous channels each), one ldmatrix.x4 per two column groups. A fragments
 *   come from w1f in fragment order, one 16-byte load per lane (L2-resident: every block reads
 *   the same weights). h = bf16(elu(h + b1)) goes to hs (RM_TILE, HP), hidden contiguous.
 * - y = x + (b2 + W2 . h), the same way over hs, in passes of 128 outputs (a warp 16 of them
 *   over all columns); x read and y written as 8-byte pieces from the accumulators.
 * Shared memory (C = 128 / 256): 40.5 / 77.8 KB, two blocks an SM.
 */
#include "cuda/common.cuh"
#include "cuda/mma.cuh"

#define RM_TILE GPU_RESBLOCK_MMA_TILE
#define RM_THREADS 256
#define RM_WARPS (RM_THREADS / 32)
#define RM_NT (RM_TILE / 8)                       // column groups of 8
#define RM_ROWS (RM_TILE + GPU_RESBLOCK_K - 1)    // window rows
#define RM_ROW_BLOCKS ((RM_ROWS + 7) / 8)
#define RM_AHEAD 6                                // W1 fragments in flight

template <int C>
struct rm_geom {
    static constexpr int HID = C / 2, KK = GPU_RESBLOCK_K * C;
    // row pitches in bf16 values: 16-byte aligned rows, 8 consecutive ones on distinct banks
    static constexpr int XP = C + 8, HP = HID + 8;
    static constexpr size_t SMEM = sizeof(__nv_bfloat16) * ((size_t)RM_ROWS * XP + (size_t)RM_TILE * HP);
    static_assert((XP / 2) % 32 == 4 && (HP / 2) % 32 == 4, "ldmatrix rows and window stores on distinct banks");
};

// xs = the tile's window: [history | elu(x)] columns t0 .. t0 + RM_ROWS - 1 of row r in bf16
// (elu_bf16; the history as stored, zeros on a padding row). The loads of a chunk are issued
// before its stores.
template <int C>
static __device__ __forceinline__ void stage_window(__nv_bfloat16 *xs, const struct op_im2col &in, int r, int t0) {
    constexpr int XP = rm_geom<C>::XP, OCT = C / 8, ITEMS = RM_ROW_BLOCKS * OCT, CHUNK = 13;
    static_assert(ITEMS % (RM_WARPS * CHUNK) == 0, "whole chunks");
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    const size_t cs = (size_t)in.R * in.T;
    const float *xr = in.x + (size_t)r * in.T;
    const int slot = in.row_slot[r];
    const float *hist = slot >= 0 ? in.hist + (size_t)slot * in.slot_stride : NULL;
#pragma unroll 1
    for (int c0 = w; c0 < ITEMS; c0 += RM_WARPS * CHUNK) {
        float v[CHUNK][2];
#pragma unroll
        for (int q = 0; q < CHUNK; q++) {
            const int it = c0 + q * RM_WARPS, b = it / OCT, i = 8 * (it - b * OCT) + 2 * (lane >> 3);
            const int u = 8 * b + (lane & 7), j = t0 + u - (GPU_RESBLOCK_K - 1);  // x column
            if (u >= RM_ROWS) {
                v[q][0] = v[q][1] = 0.0f;
            } else if (j >= 0) {
                v[q][0] = elu_bf16(__ldg(xr + i * cs + j));
                v[q][1] = elu_bf16(__ldg(xr + (i + 1) * cs + j));
            } else {  // t0 = 0, u < H: the history (H = K - 1 columns a channel)
                v[q][0] = hist ? hist[i * (GPU_RESBLOCK_K - 1) + u] : 0.0f;
                v[q][1] = hist ? hist[(i + 1) * (GPU_RESBLOCK_K - 1) + u] : 0.0f;
            }
        }
#pragma unroll
        for (int q = 0; q < CHUNK; q++) {
            const int it = c0 + q * RM_WARPS, b = it / OCT, i = 8 * (it - b * OCT) + 2 * (lane >> 3);
            const int u = 8 * b + (lane & 7);
            if (u < RM_ROWS) *(unsigned *)(xs + u * XP + i) = pack_bf16(v[q][0], v[q][1]);
        }
    }
}

template <int C>
static __global__ void __launch_bounds__(RM_THREADS, C == 128 ? 3 : 2) resblock_mma_kernel(const struct op_resblock_mma a) {
    typedef rm_geom<C> G;
    constexpr int HID = G::HID, KK = G::KK, XP = G::XP, HP = G::HP;
    extern __shared__ __align__(16) unsigned char rm_smem[];
    __nv_bfloat16 *xs = (__nv_bfloat16 *)rm_smem, *hs = xs + RM_ROWS * XP;
    pdl_begin();
    const struct op_im2col &in = a.in;
    const int T = in.T, R = in.R, ntiles = T / RM_TILE, r = blockIdx.x / ntiles, t0 = (blockIdx.x % ntiles) * RM_TILE;
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, g = lane >> 2, q = lane & 3;
    stage_window<C>(xs, in, r, t0);
    __syncthreads();

    // h: warp w takes hidden 16 mt .. + 15 over NT1 column groups from nb
    {
        constexpr int MT1 = HID / 16, WN1 = RM_WARPS / MT1, NT1 = RM_NT / WN1;
        static_assert(RM_WARPS % MT1 == 0 && RM_NT % WN1 == 0 && NT1 % 2 == 0, "the warps tile h");
        const int mt = w % MT1, nb = (w / MT1) * NT1 * 8;
        float acc[NT1][4] = {};
        const uint4 *af = (const uint4 *)a.w1f + mt * 32 + lane;
        // this lane's ldmatrix row: column nb + (l & 7) (+ 8 for lanes 16 ..), channels + 8 for lanes 8 .. 15, 24 ..
        const __nv_bfloat16 *xb = xs + (nb + (lane & 7) + 8 * (lane >> 4)) * XP + 8 * ((lane >> 3) & 1);
        // the A fragments RM_AHEAD steps ahead: each is an L2 round trip
        uint4 ring[RM_AHEAD];
#pragma unroll
        for (int d = 0; d < RM_AHEAD; d++) ring[d] = __ldg(af + (size_t)d * MT1 * 32);
#pragma unroll
        for (int kt = 0; kt < KK / 16; kt++) {
            const int k = 16 * kt / C, i0 = 16 * kt % C;
            const uint4 f = ring[kt % RM_AHEAD];
            if (kt + RM_AHEAD < KK / 16) ring[kt % RM_AHEAD] = __ldg(af + (size_t)(kt + RM_AHEAD) * MT1 * 32);
            const unsigned fa[4] = {f.x, f.y, f.z, f.w};
#pragma unroll
            for (int p = 0; p < NT1 / 2; p++) {
                unsigned b[4];
                ldmatrix_x4(b, xb + (16 * p + k) * XP + i0);
                mma_bf16(acc[2 * p], fa, b[0], b[1]);
                mma_bf16(acc[2 * p + 1], fa, b[2], b[3]);
            }
        }
        // acc[n][e]: hidden 16 mt + g + 8 (e >> 1), column nb + 8n + 2q + (e & 1)
        const int j = 16 * mt + g;
        const float b_lo = a.w1[(size_t)j * a.ld1 + KK], b_hi = a.w1[(size_t)(j + 8) * a.ld1 + KK];
#pragma unroll
        for (int n = 0; n < NT1; n++)
#pragma unroll
            for (int e = 0; e < 4; e++)
                hs[(nb + 8 * n + 2 * q + (e & 1)) * HP + j + 8 * (e >> 1)] =
                    __float2bfloat16_rn(elu_bf16(acc[n][e] + (e >> 1 ? b_hi : b_lo)));
    }
    __syncthreads();

    // y: in passes of 128 outputs, warp w takes outputs 16 m .. + 15 over every column
    const size_t cs = (size_t)R * T;
    const __nv_bfloat16 *hb = hs + ((lane & 7) + 8 * (lane >> 4)) * HP + 8 * ((lane >> 3) & 1);
#pragma unroll 1
    for (int m = w; m < C / 16; m += RM_WARPS) {
        float acc[RM_NT][4] = {};
        const uint4 *af = (const uint4 *)a.w2f + m * 32 + lane;
        uint4 fr[HID / 16];
#pragma unroll
        for (int kt = 0; kt < HID / 16; kt++) fr[kt] = __ldg(af + (size_t)kt * (C / 16) * 32);
#pragma unroll
        for (int kt = 0; kt < HID / 16; kt++) {
            const unsigned fa[4] = {fr[kt].x, fr[kt].y, fr[kt].z, fr[kt].w};
#pragma unroll
            for (int p = 0; p < RM_NT / 2; p++) {
                unsigned b[4];
                ldmatrix_x4(b, hb + 16 * p * HP + 16 * kt);
                mma_bf16(acc[2 * p], fa, b[0], b[1]);
                mma_bf16(acc[2 * p + 1], fa, b[2], b[3]);
            }
        }
        // acc[n][e]: output 16 m + g + 8 (e >> 1), column 8n + 2q + (e & 1); x's loads of half the
        // columns in flight together, then the stores
        const int o = 16 * m + g;
        const float b_lo = a.w2[(size_t)o * a.ld2 + HID], b_hi = a.w2[(size_t)(o + 8) * a.ld2 + HID];
        const size_t at = ((size_t)o * R + r) * T + t0 + 2 * q;
#pragma unroll
        for (int n0 = 0; n0 < RM_NT; n0 += RM_NT / 2) {
            float2 x[RM_NT / 2][2];
#pragma unroll
            for (int n = 0; n < RM_NT / 2; n++)
#pragma unroll
                for (int hi = 0; hi < 2; hi++) x[n][hi] = __ldg((const float2 *)(in.x + at + hi * 8 * cs + 8 * (n0 + n)));
#pragma unroll
            for (int n = 0; n < RM_NT / 2; n++)
#pragma unroll
                for (int hi = 0; hi < 2; hi++) {
                    const float b = hi ? b_hi : b_lo;
                    __stcs((float2 *)(a.y + at + hi * 8 * cs + 8 * (n0 + n)),
                           make_float2(x[n][hi].x + (acc[n0 + n][2 * hi] + b), x[n][hi].y + (acc[n0 + n][2 * hi + 1] + b)));
                }
        }
    }
}

template <int C>
static int launch(const struct op_resblock_mma *a, struct gpu_exec *ex) {
    const size_t smem = rm_geom<C>::SMEM;
    if (cudaFuncSetAttribute(resblock_mma_kernel<C>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem) !=
        cudaSuccess)
        return launch_status(ex, "resblock_mma (shared memory)");
    pdl_launch(resblock_mma_kernel<C>, dim3(a->in.R * (a->in.T / RM_TILE)), dim3(RM_THREADS), smem, ex, *a);
    return launch_status(ex, "resblock_mma");
}

extern "C" int mimi_cuda_resblock_mma(const struct op_resblock_mma *a, struct gpu_exec *ex) {
    const struct op_im2col &in = a->in;
    if (!GPU_RESBLOCK_MMA_FITS(in.c_in, a->hid, in.T) || in.K != GPU_RESBLOCK_K || in.S != 1 ||
        in.H != GPU_RESBLOCK_K - 1 || in.replicate || !in.elu || in.R < 1 || (uintptr_t)in.x % 8 ||
        (uintptr_t)a->y % 8 || (uintptr_t)a->w1f % 16 || (uintptr_t)a->w2f % 16) {
        if (ex->errmsg)
            snprintf(ex->errmsg, ex->errlen, "resblock_mma: %d channels, %d hidden, K %d, stride %d, T %d: no kernel",
                     in.c_in, a->hid, in.K, in.S, in.T);
        return MIMI_EUNSUPPORTED;
    }
    return in.c_in == 128 ? launch<128>(a, ex) : launch<256>(a, ex);
}
