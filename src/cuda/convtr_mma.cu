/*
 * convtr_mma.cu - a dense ConvTranspose1d with K = 2S on bfloat16 tensor cores (op_convtr_mma;
 * reference src/nn/conv.c), for MIMI_PRECISION_FAST_BF16's large steps: the decoder's last two
 * upsamplings (128 -> 64 channels, S 4; 256 -> 128, S 5), where an ELU pass into bf16, the
 * per-tap product (2S times the output channels over every input step, in f32) and the
 * overlap-add wrote and read again about 3.5 times the output. At 2048 rows on an H200 they took
 * 1.67 and 0.86 ms; this kernel 1.08 and 0.71 (0.97 for S 4 at three blocks an SM instead of
 * two), and 0.71 and 0.68 with its window staged from 16-byte pieces (mma.cuh's stage_window); its
 * tail launch 0.02 and 0.03.
 *
 * As a product: output phase f of input step t is row o*S + f of W' (c_out*S, 2*c_in) times
 * [v(t); v(t - 1)], W'[o*S + f] = [W[o, f] | W[o, f + S]]. A block takes TILE input steps of one
 * row, 8 warps:
 * - window: xs (TILE + 1, XP) bf16, row u = v(t0 - 1 + u) over the channels (zeros before the
 *   row's first step, whose place the slot's tail takes).
 * - warp w takes rows 16(w + 8j) .. + 15 of W' over every column: B fragments of 16 channels of
 *   v(t - s) for 8 steps are 8 consecutive rows of xs (ldmatrix.x4 per two groups), A fragments
 *   from wf (fragment order: mma.cuh's mma_rows). Bias and tail are added and the outputs go
 *   to `outs` (c_out, TILE*S) in output order, which the block then stores as 16-byte rows.
 * The tail launch computes the rows' next tails from their last input steps, 16 rows a block.
 */
#include "cuda/common.cuh"
#include "cuda/mma.cuh"

#define CT_THREADS 256
#define CT_WARPS (CT_THREADS / 32)
#define CT_PAIRS 4  // stage_window's channel pairs a piece group (the window in step order)

template <int CIN, int COUT, int S, int TILE>
struct ct_geom {
    static constexpr int KK = 2 * CIN, M = COUT * S, NT = TILE / 8, ROWS = TILE + 1;
    static constexpr int XP = CIN + 8;        // window row pitch (bf16): 8 consecutive rows on distinct banks
    static constexpr int OP = TILE * S + 4;   // output row pitch (floats), 16-byte aligned
    static constexpr size_t XS_BYTES = sizeof(__nv_bfloat16) * (size_t)ROWS * XP;
    static constexpr size_t SMEM = XS_BYTES + sizeof(float) * (size_t)COUT * OP;
    static_assert((XP / 2) % 32 == 4 && NT % 2 == 0 && CIN % 16 == 0 && M % 16 == 0 && XS_BYTES % 16 == 0 &&
                      (TILE * S) % 4 == 0, "the tiling");
};

// v(i, r, t) and v(i + 1, r, t): f(x) of two channels at step t of row r (f = elu_bf16 when `elu`)
static __device__ __forceinline__ float2 input_pair(const struct op_convtr_mma &a, int i, int r, int t) {
    const struct op_convtr &tr = a.tr;
    const float *p = tr.x + ((size_t)i * tr.R + r) * tr.T + t;
    const float x0 = __ldg(p), x1 = __ldg(p + (size_t)tr.R * tr.T);
    return a.elu ? make_float2(elu_bf16(x0), elu_bf16(x1)) : make_float2(x0, x1);
}

// Blocks an SM holds: three for the S 4 upsampling (64 KB of shared memory each), two for S 5.
#define CT_BLOCKS(CIN) ((CIN) == 128 ? 3 : 2)

template <int CIN, int COUT, int S, int TILE>
static __global__ void __launch_bounds__(CT_THREADS, CT_BLOCKS(CIN)) convtr_mma_kernel(const struct op_convtr_mma a) {
    typedef ct_geom<CIN, COUT, S, TILE> G;
    constexpr int XP = G::XP, OP = G::OP, NT = G::NT, KT = G::KK / 16, MT = G::M / 16;
    extern __shared__ __align__(16) unsigned char ct_smem[];
    __nv_bfloat16 *xs = (__nv_bfloat16 *)ct_smem;
    float *outs = (float *)(ct_smem + G::XS_BYTES);
    pdl_begin();
    const struct op_convtr &tr = a.tr;
    const int T = tr.T, R = tr.R, ntiles = T / TILE, r = blockIdx.x / ntiles, t0 = (blockIdx.x % ntiles) * TILE;
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, g = lane >> 2, q = lane & 3;
    const int slot = tr.row_slot[r];
    const float *tail = t0 == 0 && slot >= 0 ? tr.tail + (size_t)slot * tr.slot_stride : NULL;
    // the window: v(t0 - 1 + u) in bf16, zeros before step 0
    stage_window<CIN, G::ROWS, XP, CT_PAIRS>(
        xs, tr.x + (size_t)r * T, (size_t)R * T, t0 - 1, NULL, 1, [&](float v) { return a.elu ? elu_bf16(v) : v; },
        [](int u) { return u; });
    __syncthreads();
    // B of step kt (v(t - s), channels i0 ..) for steps n: window rows n + 1 - s
    const __nv_bfloat16 *xb = ldmatrix_lane<XP>(xs);
#pragma unroll 1
    for (int m = w; m < MT; m += CT_WARPS) {
        float acc[NT][4] = {};
        mma_rows<KT, NT, XP>(acc, (const uint4 *)a.wf + m * 32 + lane, (size_t)MT * 32,
                             [&](int kt) { return xb + (1 - 16 * kt / CIN) * XP + 16 * kt % CIN; });
        // acc[n][e]: row 16 m + g + 8 (e >> 1) = o*S + f, step 8n + 2q + (e & 1)
#pragma unroll
        for (int hi = 0; hi < 2; hi++) {
            const int row = 16 * m + g + 8 * hi, o = row / S, f = row - o * S;
            const float b = tr.bias ? tr.bias[o] : 0.0f;
#pragma unroll
            for (int n = 0; n < NT; n++)
#pragma unroll
                for (int c = 0; c < 2; c++) {
                    const int t = 8 * n + 2 * q + c;
                    float v = acc[n][2 * hi + c] + b;
                    if (tail && t == 0) v += tail[o * S + f];
                    outs[o * OP + t * S + f] = v;
                }
        }
    }
    __syncthreads();
    // the tile's outputs as 16-byte rows: channel o's TILE*S values from output step t0*S
    constexpr int ROW4 = TILE * S / 4;
    const size_t L = (size_t)T * S;
    for (int e = threadIdx.x; e < COUT * ROW4; e += CT_THREADS) {
        const int o = e / ROW4, j = e - o * ROW4;
        __stcs((float4 *)(tr.y + ((size_t)o * R + r) * L + (size_t)t0 * S) + j, *(const float4 *)(outs + o * OP + 4 * j));
    }
}

// The next tails as one product on tensor cores: tail[o*S + f] of row r = the s = 1 half of W'
// (columns c_in ..) times v(T - 1) of row r. Block b takes rows CT_TAIL_ROWS b .. + CT_TAIL_ROWS - 1,
// their v(T - 1) staged as vs (CT_TAIL_ROWS, XP) bf16 (a row's channels contiguous: the B
// operand's columns); warp w takes the tail rows 16(w + 8j) .. + 15.
#define CT_TAIL_ROWS 16
template <int CIN, int COUT, int S>
static __global__ void __launch_bounds__(CT_THREADS) convtr_mma_tail_kernel(const struct op_convtr_mma a) {
    constexpr int XP = CIN + 8, KT = 2 * CIN / 16, MT = COUT * S / 16, NT = CT_TAIL_ROWS / 8;
    __shared__ __align__(16) __nv_bfloat16 vs[CT_TAIL_ROWS * XP];
    pdl_begin();
    const struct op_convtr &tr = a.tr;
    const int T = tr.T, R = tr.R, r0 = blockIdx.x * CT_TAIL_ROWS, lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    const int g = lane >> 2, q = lane & 3;
    stage_rows<CIN, CT_TAIL_ROWS, XP>(
        vs, [&](int u, int i) { return r0 + u < R ? input_pair(a, i, r0 + u, T - 1) : make_float2(0.0f, 0.0f); },
        [](int u) { return u; });
    __syncthreads();
    const __nv_bfloat16 *vb = ldmatrix_lane<XP>(vs);
#pragma unroll 1
    for (int m = w; m < MT; m += CT_WARPS) {
        float acc[NT][4] = {};
        mma_rows<KT / 2, NT, XP>(acc, (const uint4 *)a.wf + (size_t)(KT / 2) * MT * 32 + m * 32 + lane,
                                 (size_t)MT * 32, [&](int kt) { return vb + 16 * kt; });
        // acc[n][e]: tail row 16 m + g + 8 (e >> 1), stream row r0 + 8n + 2q + (e & 1)
#pragma unroll
        for (int n = 0; n < NT; n++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int r = r0 + 8 * n + 2 * q + (e & 1), slot = r < R ? tr.row_slot[r] : -1;
                if (slot >= 0) tr.tail[(size_t)slot * tr.slot_stride + 16 * m + g + 8 * (e >> 1)] = acc[n][e];
            }
    }
}

static bool fits(const struct op_convtr_mma *a, struct gpu_exec *ex) {
    const struct op_convtr &tr = a->tr;
    if (GPU_CONVTR_MMA_FITS(a->c_in, tr.c_out, tr.K, tr.S, tr.T) && tr.R >= 1 && (uintptr_t)tr.x % 16 == 0 &&
        (uintptr_t)tr.y % 16 == 0 && (uintptr_t)a->wf % 16 == 0)
        return true;
    if (ex->errmsg)
        snprintf(ex->errmsg, ex->errlen, "convtr_mma: %d -> %d channels, K %d, stride %d, T %d: no kernel", a->c_in,
                 tr.c_out, tr.K, tr.S, tr.T);
    return false;
}

template <int CIN, int COUT, int S, int TILE>
static int launch(const struct op_convtr_mma *a, struct gpu_exec *ex) {
    return launch_smem("convtr_mma", convtr_mma_kernel<CIN, COUT, S, TILE>, dim3(a->tr.R * (a->tr.T / TILE)),
                       dim3(CT_THREADS), ct_geom<CIN, COUT, S, TILE>::SMEM, ex, *a);
}

extern "C" int mimi_cuda_convtr_mma(const struct op_convtr_mma *a, struct gpu_exec *ex) {
    if (!fits(a, ex)) return MIMI_EUNSUPPORTED;
    return a->c_in == 128 ? launch<128, 64, 4, 48>(a, ex) : launch<256, 128, 5, 32>(a, ex);
}

extern "C" int mimi_cuda_convtr_mma_tail(const struct op_convtr_mma *a, struct gpu_exec *ex) {
    if (!fits(a, ex)) return MIMI_EUNSUPPORTED;
    const dim3 grid((a->tr.R + CT_TAIL_ROWS - 1) / CT_TAIL_ROWS);
    if (a->c_in == 128) pdl_launch(convtr_mma_tail_kernel<128, 64, 4>, grid, dim3(256), 0, ex, *a);
    else pdl_launch(convtr_mma_tail_kernel<256, 128, 5>, grid, dim3(256), 0, ex, *a);
    return launch_status(ex, "convtr_mma tail");
}
