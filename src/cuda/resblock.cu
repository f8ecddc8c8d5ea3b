/*
 * resblock.cu - a SEANet residual block over many columns in one kernel (op_resblock; reference
 * src/nn/seanet.c): the k3 conv's input window is staged once per block with its ELU, the hidden
 * activations stay in shared memory, and the 1x1 conv adds the residual as it stores. It stands
 * in for im2col, two products and an ELU pass on the top SEANet level of large steps (64 channels
 * over 1920 steps per frame): 3.0 ms against 4.4 ms for 2048 rows on an H200. At 128 channels
 * and 480 steps it lost to them (3.0 against 2.5 ms), so it takes 64 channels only.
 *
 * A block takes RB_TILE columns of one row and every channel; warp w computes the hidden outputs
 * w*RB_OUTS .. +RB_OUTS, each lane RB_COLS columns 32 apart (consecutive lanes read consecutive
 * shared words), so a reduction index costs RB_COLS shared loads and two broadcast 16-byte weight
 * loads for RB_OUTS * RB_COLS multiply-adds, in f32.
 */
#include "cuda/common.cuh"

#define RB_OUTS 8    // outputs per warp and pass (a multiple of 4)
#define RB_COLS 4    // columns per lane
#define RB_BATCH 13  // window loads in flight per thread
#define RB_TILE (32 * RB_COLS)
#define RB_WIN (RB_TILE + GPU_RESBLOCK_K - 1)
// Blocks per SM: shared memory holds 6 windows of 130 columns; the bound keeps registers within
// that (80). At 2048 rows: 160-column tiles, 27 loads in flight and 5 blocks took 3.25 ms; 96
// columns and 8 blocks 3.02; this 3.01.
#define RB_MIN_BLOCKS 6

// The RB_OUTS floats at p (16-byte aligned), through the read-only path.
static __device__ __forceinline__ void load_w(const float *p, float w[RB_OUTS]) {
#pragma unroll
    for (int q = 0; q < RB_OUTS / 4; q++) {
        const float4 a = __ldg((const float4 *)p + q);
        w[4 * q] = a.x, w[4 * q + 1] = a.y, w[4 * q + 2] = a.z, w[4 * q + 3] = a.w;
    }
}

// acc[o][c] += w[o] * v[c] over one reduction index.
static __device__ __forceinline__ void outer(float acc[RB_OUTS][RB_COLS], const float w[RB_OUTS],
                                             const float v[RB_COLS]) {
#pragma unroll
    for (int c = 0; c < RB_COLS; c++)
#pragma unroll
        for (int o = 0; o < RB_OUTS; o++) acc[o][c] = fmaf(w[o], v[c], acc[o][c]);
}

template <int C>
static __global__ void __launch_bounds__(32 * (C / 2 / RB_OUTS), RB_MIN_BLOCKS) resblock_kernel(const struct op_resblock a) {
    constexpr int HID = C / 2, THREADS = 32 * (HID / RB_OUTS), K = GPU_RESBLOCK_K;
    pdl_begin();
    extern __shared__ float xs[];  // (C, RB_WIN): xin over the tile's window; then h (HID, RB_TILE)
    const struct op_im2col &in = a.in;
    const int T = in.T, tiles = (T + RB_TILE - 1) / RB_TILE;
    const int r = blockIdx.x / tiles, t0 = (blockIdx.x - r * tiles) * RB_TILE;
    const int lane = threadIdx.x & 31, j0 = (threadIdx.x >> 5) * RB_OUTS;
    // the window: xin(i, r, t0 + u) for u < RB_WIN, zeros past the row's end. Each thread has
    // RB_BATCH loads of x in flight before it applies the ELU (with fewer the kernel waited on
    // them: in 160-column tiles 5.0 ms at 9, 6.0 ms at 1, 3.4 ms at 27 for 2048 rows); the
    // history's H columns (first tile only) are filled apart.
    static_assert(C * RB_WIN % (THREADS * RB_BATCH) == 0, "the window splits evenly");
    const int H = in.H;
#pragma unroll 1
    for (int e0 = threadIdx.x; e0 < C * RB_WIN; e0 += THREADS * RB_BATCH) {
        float v[RB_BATCH];
#pragma unroll
        for (int q = 0; q < RB_BATCH; q++) {
            const int e = e0 + q * THREADS, i = e / RB_WIN, t = t0 + e - i * RB_WIN - H;
            v[q] = t >= 0 && t < T ? in.x[((size_t)i * in.R + r) * T + t] : 0.0f;
        }
#pragma unroll
        for (int q = 0; q < RB_BATCH; q++) {
            const int e = e0 + q * THREADS;
            if (t0 + e % RB_WIN >= H) xs[e] = elu_f(v[q]);
        }
    }
    if (t0 == 0)
        for (int e = threadIdx.x; e < C * H; e += THREADS) xs[(e / H) * RB_WIN + e % H] = xin(in, e / H, r, e % H);
    __syncthreads();

    // h = elu(b1 + W1 . window) for this warp's outputs and this lane's columns
    float acc[RB_OUTS][RB_COLS] = {}, w[RB_OUTS], v[RB_COLS];
#pragma unroll 2  // two channels' loads in flight together: 3.41 -> 3.30 ms at 2048 rows
    for (int i = 0; i < C; i++) {
#pragma unroll
        for (int k = 0; k < K; k++) {
            load_w(a.w1t + (size_t)(i * K + k) * HID + j0, w);
#pragma unroll
            for (int c = 0; c < RB_COLS; c++) v[c] = xs[i * RB_WIN + 32 * c + lane + k];
            outer(acc, w, v);
        }
    }
    load_w(a.w1t + (size_t)C * K * HID + j0, w);
    __syncthreads();  // every warp is done with the window: h takes its place
    float *h = xs;
#pragma unroll
    for (int o = 0; o < RB_OUTS; o++)
#pragma unroll
        for (int c = 0; c < RB_COLS; c++) h[(j0 + o) * RB_TILE + 32 * c + lane] = elu_f(acc[o][c] + w[o]);
    __syncthreads();

    // y = x + (b2 + W2 . h): outputs j0 .. +RB_OUTS, then HID + j0 .. +RB_OUTS
#pragma unroll 1
    for (int o0 = j0; o0 < C; o0 += HID) {
#pragma unroll
        for (int o = 0; o < RB_OUTS; o++)
#pragma unroll
            for (int c = 0; c < RB_COLS; c++) acc[o][c] = 0.0f;
#pragma unroll 2
        for (int j = 0; j < HID; j++) {
            load_w(a.w2t + (size_t)j * C + o0, w);
#pragma unroll
            for (int c = 0; c < RB_COLS; c++) v[c] = h[j * RB_TILE + 32 * c + lane];
            outer(acc, w, v);
        }
        load_w(a.w2t + (size_t)HID * C + o0, w);
#pragma unroll
        for (int c = 0; c < RB_COLS; c++) {
            const int t = t0 + 32 * c + lane;
            if (t >= T) continue;
#pragma unroll
            for (int o = 0; o < RB_OUTS; o++) {
                const size_t at = ((size_t)(o0 + o) * in.R + r) * T + t;
                a.y[at] = in.x[at] + (acc[o][c] + w[o]);
            }
        }
    }
}

// ---- TF32 tensor cores (the fast precisions) ----
//
// The same block in the fast precisions, its two products on mma.sync m16n8k8 (TF32 operands
// rounded to nearest, f32 accumulation) instead of f32 FMAs. Rounded are the ELU'd window, W1,
// W2 and h = elu(b1 + W1 . window); y = x + (b2 + W2 . h) in f32, with x read again as it is.
//
// Persistent blocks of 4 warps (as many as run at once) loop over tiles of TT_TILE columns of one
// row, so that the weights are staged once per block: TF32-rounded, in fragment order (a lane's
// fragment is one 16-byte load). A tile:
// - window: lane l of warp w loads columns t0 + 4l .. +3 of channels w + 4q, 16-byte loads over
//   512 contiguous bytes of a row, then ELUs, rounds and stores them as 16 bytes. Row i of xs
//   holds x columns t0 - 4 + u at u: the tile's at 4 .., the two left of it at 2, 3 ([history |
//   elu(x)] on the first tile). While the products run, the next tile's lines go into L2.
// - h^T = window^T . W1^T: warp w takes columns 32w .. +31 (2 fragments of 16) for all 32 hidden
//   (4 of 8). The reduction index runs tap-major, kk = k*C + i, so that a fragment's 8 indices
//   are 8 channels of one tap: lanes (g, t) read window rows t and t + 4 at pitch TT_XP = 8
//   (mod 32) and columns g, distinct banks.
// - y - x - b2 = W2 . h: h^T's accumulators, ELU'd and rounded in place, are h's B fragments once
//   W2's hidden index is staged in their order (slots t, t + 4 of step p: hidden 8p + 2t, + 1), so
//   h never goes through shared memory.
// - the output tile goes to xs (the window's place) and leaves by rows: 16-byte loads of x and
//   stores of y, 512 contiguous bytes per warp. Where T % 4 leaves rows unaligned (not VEC) the
//   window takes 4-byte loads and the output a column per thread.
// Per warp and tile that is about 4.7k instructions in the SASS against 8.8k executed by a first
// version (the weights staged per tile, a division per window element, scattered epilogue
// stores): most of it the ELU (97 per lane), 0.5k the 256 mma and their fragment loads. Shared
// memory 66.4 KB (W1 24, W2 8, window and output tile 34) for 3 blocks (12 warps) per SM, whose
// bound holds registers to 168. At 2048 rows on an H200: the f32 kernel 3.04 ms, that first
// version 2.91, this one 1.40, and 1.12-1.13 with the ELU computed without its branch (elu_sel).
#define TT_TILE 128
#define TT_THREADS 128
#define TT_XP (TT_TILE + 8)  // window and output tile row pitch (>= TT_TILE + 4)
#define TT_MIN_BLOCKS 3  // what the shared memory allows
#define TT_SMEM_FLOATS(C) ((C) * GPU_RESBLOCK_K * (C) / 2 + (C) / 2 * (C) + (C) / 2 + (C) + (C) * TT_XP)

static __device__ __forceinline__ float tf32_round(float v) {
    uint32_t r;
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(v));
    return __uint_as_float(r);
}

// acc (16 x 8 fragment) += A (16 x 8, a) . B (8 x 8, b)
static __device__ __forceinline__ void mma_tf32(float acc[4], const float a[4], const float b[2]) {
    asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
        : "+f"(acc[0]), "+f"(acc[1]), "+f"(acc[2]), "+f"(acc[3])
        : "r"(__float_as_uint(a[0])), "r"(__float_as_uint(a[1])), "r"(__float_as_uint(a[2])),
          "r"(__float_as_uint(a[3])), "r"(__float_as_uint(b[0])), "r"(__float_as_uint(b[1])));
}

// elu_f's value, bit for bit, without its branch (expm1f computed for every x), so that the ELUs
// of a lane interleave
static __device__ __forceinline__ float elu_sel(float x) {
    const float e = expm1f(x);
    return x > 0.0f ? x : e;
}

// the 128-byte line at p into L2
static __device__ __forceinline__ void prefetch_line(const float *p) {
    asm volatile("prefetch.global.L2 [%0];" ::"l"(p));
}

// p[0 .. 3], the first n of them (zeros after): one 16-byte load when VEC (p aligned, n a
// multiple of 4). That one is a plain load, which the compiler keeps ahead of a barrier after it
// (it may move read-only ones past); the 4-byte ones are read-only, and left free to move so that
// their registers do not spill.
template <bool VEC>
static __device__ __forceinline__ float4 load4(const float *p, int n) {
    if (VEC) return n > 0 ? *(const float4 *)p : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    return make_float4(n > 0 ? __ldg(p) : 0.0f, n > 1 ? __ldg(p + 1) : 0.0f, n > 2 ? __ldg(p + 2) : 0.0f,
                       n > 3 ? __ldg(p + 3) : 0.0f);
}

template <int C, bool VEC>
static __global__ void __launch_bounds__(TT_THREADS, TT_MIN_BLOCKS) resblock_tf32_kernel(const struct op_resblock a) {
    constexpr int HID = C / 2, K = GPU_RESBLOCK_K, KK = C * K;
    static_assert(HID == 32 && C == 64 && TT_TILE == 128 && TT_THREADS == 2 * C,
                  "the tiling assumes 64 channels, 32 hidden, 4 warps");
    extern __shared__ __align__(16) float sm[];
    float *w1f = sm;              // (KK/8, 2, 32, 4): step s's W1^T B fragments, lane l, hidden 16u .. +15
    float *w2f = w1f + KK * HID;  // (HID/8, 4, 32, 4): step p's W2 A fragments, lane l, outputs 16m .. +15
    float *b1s = w2f + HID * C, *b2s = b1s + HID;
    float *xs = b2s + C;          // (C, TT_XP): tf32(xin) of x column t0 - 4 + u at u; then the output tile
    const int tid = threadIdx.x, lane = tid & 31, g = lane >> 2, t = lane & 3, w = tid >> 5;
    // the weights (written by no kernel of the step: staged before the wait). w1f[s, u, l] holds
    // W1^T[kk, j] at kk = 8s + t (b0), + 4 (b1) and j = 16u + g, then j + 8; w2f[p, m, l] holds W2[o, j]
    // at o = 16m + g (a0, a2), + 8 (a1, a3) and j = 8p + 2t (a0, a1), + 1 (a2, a3); (g, t) of lane l
    for (int e = tid; e < KK * HID; e += TT_THREADS) {
        const int f = e & 3, l = (e >> 2) & 31, u = (e >> 7) & 1, s = e >> 8;
        const int kk = 8 * s + (l & 3) + 4 * (f & 1), j = 16 * u + 8 * (f >> 1) + (l >> 2);
        w1f[e] = tf32_round(a.w1t[(size_t)(kk % C * K + kk / C) * HID + j]);
    }
    for (int e = tid; e < HID * C; e += TT_THREADS) {
        const int f = e & 3, l = (e >> 2) & 31, m = (e >> 7) & 3, p = e >> 9;
        const int o = 16 * m + (l >> 2) + 8 * (f & 1), j = 8 * p + 2 * (l & 3) + (f >> 1);
        w2f[e] = tf32_round(a.w2t[(size_t)j * C + o]);
    }
    for (int e = tid; e < HID + C; e += TT_THREADS)  // b1s, then b2s
        b1s[e] = e < HID ? a.w1t[(size_t)KK * HID + e] : a.w2t[(size_t)HID * C + e - HID];
    pdl_begin();

    const struct op_im2col &in = a.in;
    const int T = in.T, R = in.R, ntiles = (T + TT_TILE - 1) / TT_TILE, tiles = R * ntiles, stride = gridDim.x;
    const size_t cs = (size_t)R * T;  // channel stride
#pragma unroll 1
    for (int tile = blockIdx.x; tile < tiles; tile += stride) {
        const int r = tile / ntiles, t0 = (tile - r * ntiles) * TT_TILE, n = T - t0 - 4 * lane;
        // this lane's columns of channels w + 4q, and x[tid/2, r, t0 - 2 + tid%2] left of the tile
        const size_t at = ((size_t)w * R + r) * T + t0 + 4 * lane;
        float4 v[C / 4];
#pragma unroll
        for (int q = 0; q < C / 4; q++) v[q] = load4<VEC>(in.x + at + 4 * q * cs, n);
        const float left = t0 > 0 ? in.x[((size_t)(tid >> 1) * R + r) * T + t0 - 2 + (tid & 1)] : 0.0f;
        __syncthreads();  // the tile before has stored its output from xs
#pragma unroll
        for (int q = 0; q < C / 4; q++)
            *(float4 *)(xs + (w + 4 * q) * TT_XP + 4 + 4 * lane) =
                make_float4(tf32_round(elu_sel(v[q].x)), tf32_round(elu_sel(v[q].y)), tf32_round(elu_sel(v[q].z)),
                            tf32_round(elu_sel(v[q].w)));
        // [history | elu(x)] columns t0, t0 + 1: the history on the first tile
        xs[(tid >> 1) * TT_XP + 2 + (tid & 1)] = tf32_round(t0 > 0 ? elu_sel(left) : xin(in, tid >> 1, r, tid & 1));
        __syncthreads();

        // the next tile's window into L2 ahead of its loads (columns 32j of its rows, and the last)
        if (tile + stride < tiles) {
            const int rn = (tile + stride) / ntiles, tn = (tile + stride - rn * ntiles) * TT_TILE;
            const int c = tn + 32 * (tid & 3), last = min(tn + TT_TILE, T) - 1;
#pragma unroll
            for (int h = 0; h < C / 32; h++) {
                const float *row = in.x + ((size_t)((tid >> 2) + 32 * h) * R + rn) * T;
                if (c < T) prefetch_line(row + c);
                if ((tid & 3) == 3) prefetch_line(row + last);
            }
        }
        // h^T (columns 32w + 16q .. +15, hidden 8p .. +7) = window^T . W1^T over kk = 8s ..: tap
        // k = kk / C, channels i0 = kk % C ..; A = xs rows i0 + t (+ 4), columns 32w + 16q + g (+ 8) + 2 + k
        float acc[2][4][4] = {};
        const float *xa = xs + t * TT_XP + 32 * w + g + 2;
        const float4 *wb = (const float4 *)w1f + lane;
#pragma unroll
        for (int s = 0; s < KK / 8; s++) {
            const int k = 8 * s / C, i0 = 8 * s % C;
            float fa[2][4], fb[4][2];
#pragma unroll
            for (int q = 0; q < 2; q++) {
                const float *x = xa + i0 * TT_XP + 16 * q + k;
                fa[q][0] = x[0], fa[q][1] = x[8], fa[q][2] = x[4 * TT_XP], fa[q][3] = x[4 * TT_XP + 8];
            }
#pragma unroll
            for (int u = 0; u < 2; u++) {
                const float4 b = wb[(2 * s + u) * 32];
                fb[2 * u][0] = b.x, fb[2 * u][1] = b.y, fb[2 * u + 1][0] = b.z, fb[2 * u + 1][1] = b.w;
            }
#pragma unroll
            for (int q = 0; q < 2; q++)
#pragma unroll
                for (int p = 0; p < 4; p++) mma_tf32(acc[q][p], fa[q], fb[p]);
        }
        // h = tf32(elu(h^T + b1)) in place: acc[q][p][e] is hidden 8p + 2t + (e & 1), column
        // 32w + 16q + g + 8 * (e >> 1)
#pragma unroll
        for (int p = 0; p < 4; p++) {
            const float2 b = *(const float2 *)(b1s + 8 * p + 2 * t);
#pragma unroll
            for (int q = 0; q < 2; q++)
#pragma unroll
                for (int e = 0; e < 4; e++) acc[q][p][e] = tf32_round(elu_sel(acc[q][p][e] + (e & 1 ? b.y : b.x)));
        }

        __syncthreads();  // every warp is done with the window: the output tile takes its place

        // y - x - b2 (outputs 16m .. +15, columns 32w + 8n .. +7) = W2 . h over hidden 8p ..: columns
        // 32w + 8n take acc[n / 2][p][2 * (n & 1)], [+ 1] as B fragment (hidden 8p + 2t, + 1: w2f's
        // order). Two halves of the outputs, each added b2 and stored to xs: acc2[m][n][e] is output
        // 16 * (m0 + m) + g + 8 * (e >> 1), column 32w + 8n + 2t + (e & 1).
        const float4 *wa = (const float4 *)w2f + lane;
#pragma unroll
        for (int m0 = 0; m0 < 4; m0 += 2) {
            float acc2[2][4][4] = {};
#pragma unroll
            for (int p = 0; p < 4; p++)
#pragma unroll
                for (int m = 0; m < 2; m++) {
                    const float4 f = wa[(4 * p + m0 + m) * 32];
                    const float fa[4] = {f.x, f.y, f.z, f.w};
#pragma unroll
                    for (int n = 0; n < 4; n++) {
                        const float fb[2] = {acc[n >> 1][p][2 * (n & 1)], acc[n >> 1][p][2 * (n & 1) + 1]};
                        mma_tf32(acc2[m][n], fa, fb);
                    }
                }
#pragma unroll
            for (int m = 0; m < 2; m++)
#pragma unroll
                for (int hi = 0; hi < 2; hi++) {
                    const int o = 16 * (m0 + m) + g + 8 * hi;
                    const float b = b2s[o];
#pragma unroll
                    for (int n = 0; n < 4; n++)
                        *(float2 *)(xs + o * TT_XP + 32 * w + 8 * n + 2 * t) =
                            make_float2(acc2[m][n][2 * hi] + b, acc2[m][n][2 * hi + 1] + b);
                }
        }
        // y = x + (b2 + W2 . h) by rows, x's loads in flight over the barrier: 16 bytes of each of
        // channels 16w .. +15 (VEC), else column t0 + tid of every channel
        if (VEC) {
            const size_t ao = ((size_t)16 * w * R + r) * T + t0 + 4 * lane;
            float4 xr[C / 4];
#pragma unroll
            for (int q = 0; q < C / 4; q++) xr[q] = load4<VEC>(in.x + ao + q * cs, n);
            __syncthreads();
            if (n > 0)
#pragma unroll
                for (int q = 0; q < C / 4; q++) {
                    const float4 br = *(const float4 *)(xs + (16 * w + q) * TT_XP + 4 * lane), x = xr[q];
                    __stcs((float4 *)(a.y + ao + q * cs), make_float4(x.x + br.x, x.y + br.y, x.z + br.z, x.w + br.w));
                }
        } else {
            const bool col = t0 + tid < T;
            const float *xo = in.x + (size_t)r * T + t0 + tid;
            float *yo = a.y + (size_t)r * T + t0 + tid;
            float xr[C];
#pragma unroll
            for (int o = 0; o < C; o++) xr[o] = col ? xo[o * cs] : 0.0f;
            __syncthreads();
            if (col)
#pragma unroll
                for (int o = 0; o < C; o++) __stcs(yo + o * cs, xr[o] + xs[o * TT_XP + tid]);
        }
    }
}

template <int C, bool VEC>
static int launch_tf32(const struct op_resblock *a, struct gpu_exec *ex) {
    const size_t smem = sizeof(float) * TT_SMEM_FLOATS(C);
    const int tiles = a->in.R * ((a->in.T + TT_TILE - 1) / TT_TILE);
    const int sms = device_sms();
    int per_sm = 0;
    if (cudaFuncSetAttribute(resblock_tf32_kernel<C, VEC>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem) !=
            cudaSuccess ||
        !sms ||
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, resblock_tf32_kernel<C, VEC>, TT_THREADS, smem) !=
            cudaSuccess)
        return launch_status(ex, "resblock (occupancy)");
    // as many blocks as run at once (each stages the weights once), at most one per tile
    int blocks = sms * (per_sm > 0 ? per_sm : 1);
    if (blocks > tiles) blocks = tiles > 0 ? tiles : 1;
    pdl_launch(resblock_tf32_kernel<C, VEC>, dim3(blocks), dim3(TT_THREADS), smem, ex, *a);
    return launch_status(ex, "resblock");
}

template <int C>
static int launch(const struct op_resblock *a, struct gpu_exec *ex) {
    const size_t smem = sizeof(float) * C * RB_WIN;
    const unsigned blocks = (unsigned)a->in.R * ((a->in.T + RB_TILE - 1) / RB_TILE);
    if (smem > 48 * 1024 &&
        cudaFuncSetAttribute(resblock_kernel<C>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem) != cudaSuccess)
        return launch_status(ex, "resblock (shared memory)");
    pdl_launch(resblock_kernel<C>, dim3(blocks), dim3(32 * (C / 2 / RB_OUTS)), smem, ex, *a);
    return launch_status(ex, "resblock");
}

extern "C" int mimi_cuda_resblock(const struct op_resblock *a, struct gpu_exec *ex) {
    const int c = a->in.c_in;
    if (!GPU_RESBLOCK_FITS(c, a->hid) || a->in.K != GPU_RESBLOCK_K || a->in.S != 1 || a->in.H != GPU_RESBLOCK_K - 1 ||
        a->in.replicate) {
        if (ex->errmsg)
            snprintf(ex->errmsg, ex->errlen, "resblock: %d channels, %d hidden, K %d, stride %d, history %d: no kernel", c,
                     a->hid, a->in.K, a->in.S, a->in.H);
        return MIMI_EUNSUPPORTED;
    }
    if (ex->precision == MIMI_PRECISION_STRICT) return launch<64>(a, ex);
    // 16-byte loads and stores where every row is 16-byte aligned
    const int vec = a->in.T % 4 == 0 && (uintptr_t)a->in.x % 16 == 0 && (uintptr_t)a->y % 16 == 0;
    return vec ? launch_tf32<64, true>(a, ex) : launch_tf32<64, false>(a, ex);
}
