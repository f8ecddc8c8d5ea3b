/*
 * resblock.cu - a SEANet residual block over many columns in one kernel (op_resblock; reference
 * src/nn/seanet.c): the k3 conv's input window is staged once per tile with its ELU, the hidden
 * activations stay on chip, and the 1x1 conv adds the residual as it stores. It stands in for
 * im2col, two products and an ELU pass on the top SEANet level of large steps (64 channels over
 * 1920 steps per frame). At 128 channels and 480 steps the first (f32) form lost to them (3.0
 * against 2.5 ms for 2048 rows on an H200), so it takes 64 channels only.
 *
 * Both precisions run persistent blocks of 4 warps (as many as run at once) that loop over tiles
 * of RB_TILE columns of one row, so that the weights are staged in shared memory once per block.
 * A tile:
 * - window: lane l of warp w loads columns t0 + 4l .. +3 of channels w + 4q, 16-byte loads over
 *   512 contiguous bytes of a row, then ELUs them and stores them as 16 bytes. Row i of xs holds
 *   x column t0 - 4 + u at u: the tile's at 4 .., the two left of it at 2, 3 ([history | elu(x)]
 *   on the first tile). While the products run, the next tile's lines go into L2. Where T % 4
 *   leaves rows unaligned (not VEC) the window takes 4-byte loads.
 * - the two products, f32 FMAs (strict) or TF32 mma (fast), then y = x + (b2 + W2 . h).
 * In the fast precisions the decoder's last conv (one output channel) can ride on the TF32 form
 * (op_resblock.last): y is ELU'd in shared memory and convolved there instead of being stored.
 * At 2048 bf16 streams that took decode from 11.1 to 10.5 ms in eager ops (the resblock 0.84 ->
 * 1.08 ms, the separate conv's 0.83 ms gone). In every precision the encoder's first conv can
 * ride on either form (op_resblock.first): x is computed from the tile's PCM instead of loaded,
 * and x is never stored (encode 8.78 -> 8.34 ms at 2048 bf16 streams, the resblock 0.84 -> 0.82
 * ms, the first conv's 0.41 ms gone).
 */
#include "cuda/first_conv.cuh"

#define RB_TILE GPU_RESBLOCK_TILE
#define RB_THREADS 128
#define RB_XP (RB_TILE + 8)  // window row pitch (>= RB_TILE + 4)
#define RB_MIN_BLOCKS 3      // what the shared memory allows
// W1, W2 (each without its bias row), b1, b2, the window
#define RB_SMEM_FLOATS(C) ((C) * GPU_RESBLOCK_K * (C) / 2 + (C) / 2 * (C) + (C) / 2 + (C) + (C) * RB_XP)

static __device__ __forceinline__ float tf32_round(float v) {
    uint32_t r;
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(v));
    return __uint_as_float(r);
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

// The resblock's ELU: elu_sel, or with FAST (MIMI_PRECISION_FAST_BF16, TF32 operands next)
// elu_bf16, a third of its instructions.
template <bool FAST>
static __device__ __forceinline__ float elu_rb(float x) { return FAST ? elu_bf16(x) : elu_sel(x); }

// ---- the encoder's first conv inside the block (op_resblock.first; first_conv.cuh) ----

#define RB_PS (RB_TILE + RB_PS_OFF)

// x of channel c at tile columns j .. j + 3 (j a multiple of 4): samples j - 7 + k + u, the 12
// at ps[j + 4] ..
template <int C>
static __device__ __forceinline__ float4 first_x4(const float *ps, const float *fw, int c, int j) {
    static_assert(RB_PS_OFF == 12, "the window of four columns' taps");
    const float4 p0 = *(const float4 *)(ps + j + 4), p1 = *(const float4 *)(ps + j + 8),
                 p2 = *(const float4 *)(ps + j + 12);
    const float p[12] = {p0.x, p0.y, p0.z, p0.w, p1.x, p1.y, p1.z, p1.w, p2.x, p2.y, p2.z, p2.w};
    const float4 wa = *(const float4 *)(fw + 8 * c), wb = *(const float4 *)(fw + 8 * c + 4);
    const float w[8] = {wa.x, wa.y, wa.z, wa.w, wb.x, wb.y, wb.z, wb.w};
    float acc[4] = {};
#pragma unroll
    for (int k = 0; k < 8; k++)
#pragma unroll
        for (int u = 0; u < 4; u++) acc[u] = fmaf(w[k], p[k + u + 1], acc[u]);
    const float b = fw[8 * C + c];
    return make_float4(acc[0] + b, acc[1] + b, acc[2] + b, acc[3] + b);
}

// stage_window with x computed from the PCM: ps takes the tile's samples, then xs x's window as
// stage_window leaves it. Loads are issued before the barrier.
template <int C, bool TF32, bool FAST>
static __device__ __forceinline__ void stage_window_first(float *xs, float *ps, const float *fw,
                                                          const struct op_resblock &a, int r, int t0) {
    static_assert(RB_THREADS == RB_TILE && RB_THREADS == 2 * C && RB_PS_OFF <= RB_THREADS, "a sample a thread");
    const int tid = threadIdx.x, lane = tid & 31, w = tid >> 5, T = a.in.T;
    const float v = t0 + tid < T ? a.first.in.x[(size_t)r * T + t0 + tid] : 0.0f;
    const float left = tid < RB_PS_OFF ? first_sample(a.first, r, t0 - RB_PS_OFF + tid) : 0.0f;
    const float hist = t0 > 0 ? 0.0f : xin(a.in, tid >> 1, r, tid & 1);  // elu(x) before the step
    __syncthreads();  // the tile before is done with xs and ps
    ps[RB_PS_OFF + tid] = v;
    if (tid < RB_PS_OFF) ps[tid] = left;
    __syncthreads();
    auto f = [](float x) { return TF32 ? tf32_round(elu_rb<FAST>(x)) : elu_rb<FAST>(x); };
#pragma unroll 4
    for (int q = 0; q < C / 4; q++) {
        const float4 x = first_x4<C>(ps, fw, w + 4 * q, 4 * lane);
        *(float4 *)(xs + (w + 4 * q) * RB_XP + 4 + 4 * lane) = make_float4(f(x.x), f(x.y), f(x.z), f(x.w));
    }
    const float h = t0 > 0 ? elu_rb<FAST>(first_x1<C>(ps, fw, tid >> 1, -2 + (tid & 1))) : hist;
    xs[(tid >> 1) * RB_XP + 2 + (tid & 1)] = TF32 ? tf32_round(h) : h;
    __syncthreads();
}

// in.hist = elu(x) of each row's last two columns, x computed as the block computed it (block r:
// a thread per channel and column). After the block, which reads the old history.
template <int C>
static __global__ void __launch_bounds__(RB_THREADS) first_carry_kernel(const struct op_resblock a) {
    static_assert(RB_THREADS == 2 * C && GPU_RESBLOCK_K - 1 == 2, "a thread per channel and column");
    __shared__ __align__(16) float fw[RB_FW(C)];
    __shared__ float ps[RB_PS_OFF];  // samples T - RB_PS_OFF .. T - 1
    stage_first_weights<C>(fw, a.first);
    pdl_begin();
    const int r = blockIdx.x, tid = threadIdx.x, T = a.in.T, slot = a.in.row_slot[r];
    if (slot < 0) return;
    if (tid < RB_PS_OFF) ps[tid] = first_sample(a.first, r, T - RB_PS_OFF + tid);
    __syncthreads();
    float *hist = (float *)a.in.hist + (size_t)slot * a.in.slot_stride;
    hist[tid] = elu_f(first_x1<C>(ps, fw, tid >> 1, -2 + (tid & 1)));  // (c, 2): c = tid / 2
}

// xs (C, RB_XP) = the window of tile (r, t0): xin columns t0 .. t0 + RB_TILE + 1 at u = 2 .., ELU'd
// (and TF32-rounded when TF32). The loads are issued before the barrier that waits for the tile
// before to be done with xs.
template <int C, bool VEC, bool TF32, bool FAST = false>
static __device__ __forceinline__ void stage_window(float *xs, const struct op_im2col &in, int r, int t0) {
    static_assert(RB_THREADS == 2 * C, "a thread per left column of each channel");
    const int tid = threadIdx.x, lane = tid & 31, w = tid >> 5, T = in.T, R = in.R;
    const size_t cs = (size_t)R * T, at = ((size_t)w * R + r) * T + t0 + 4 * lane;
    float4 v[C / 4];
#pragma unroll
    for (int q = 0; q < C / 4; q++) v[q] = load4<VEC>(in.x + at + 4 * q * cs, T - t0 - 4 * lane);
    const float left = t0 > 0 ? in.x[((size_t)(tid >> 1) * R + r) * T + t0 - 2 + (tid & 1)] : 0.0f;
    __syncthreads();  // the tile before is done with xs
    auto f = [](float x) { return TF32 ? tf32_round(elu_rb<FAST>(x)) : elu_rb<FAST>(x); };
#pragma unroll
    for (int q = 0; q < C / 4; q++)
        *(float4 *)(xs + (w + 4 * q) * RB_XP + 4 + 4 * lane) = make_float4(f(v[q].x), f(v[q].y), f(v[q].z), f(v[q].w));
    // [history | elu(x)] columns t0, t0 + 1: the history on the first tile
    const float h = t0 > 0 ? elu_rb<FAST>(left) : xin(in, tid >> 1, r, tid & 1);
    xs[(tid >> 1) * RB_XP + 2 + (tid & 1)] = TF32 ? tf32_round(h) : h;
    __syncthreads();
}

// Tile `tile`'s window lines into L2 (columns 32j of its rows, and the last).
template <int C>
static __device__ __forceinline__ void prefetch_tile(const struct op_im2col &in, int tile, int ntiles) {
    const int tid = threadIdx.x, T = in.T;
    const int r = tile / ntiles, t0 = (tile - r * ntiles) * RB_TILE;
    const int c = t0 + 32 * (tid & 3), last = min(t0 + RB_TILE, T) - 1;
#pragma unroll
    for (int h = 0; h < C / 32; h++) {
        const float *row = in.x + ((size_t)((tid >> 2) + 32 * h) * in.R + r) * T;
        if (c < T) prefetch_line(row + c);
        if ((tid & 3) == 3) prefetch_line(row + last);
    }
}

// ---- f32 (strict) ----
//
// Warp w computes hidden outputs 8w .. +7 and lane l the tile's columns 4l .. +3: per input
// channel two 16-byte window loads give the six columns its three taps read, and each tap's 8
// weights are two broadcast 16-byte loads, for 96 multiply-adds. h = elu(b1 + W1 . window) goes to
// xs (the window's place) as rows; the 1x1 conv then takes outputs 8w .. +7 and 32 + 8w .. +7 over
// h, 16-byte loads of h and of x and stores of y. Each output sums its reduction in the order of
// the im2col form (channel, then tap, then the bias), in f32 FMAs.
template <int C, bool VEC, bool FIRST = false>
static __global__ void __launch_bounds__(RB_THREADS, RB_MIN_BLOCKS) resblock_f32_kernel(const struct op_resblock a) {
    constexpr int HID = C / 2, K = GPU_RESBLOCK_K, KK = C * K, OUTS = HID / (RB_THREADS / 32);
    static_assert(HID == 32 && C == 64 && OUTS == 8, "the tiling assumes 64 channels, 32 hidden, 4 warps");
    static_assert(!FIRST || VEC, "the first conv takes rows of whole 16-byte groups");
    extern __shared__ __align__(16) float sm[];
    __shared__ __align__(16) float fw[FIRST ? RB_FW(C) : 4], ps[FIRST ? RB_PS : 4];  // (op_resblock.first)
    float *w1s = sm;              // (KK + 1, HID): W1^T, its last row b1
    float *w2s = w1s + (KK + 1) * HID;  // (HID + 1, C): W2^T, its last row b2
    float *xs = w2s + (HID + 1) * C;    // (C, RB_XP): the window; then h (HID, RB_XP)
    static_assert(RB_SMEM_FLOATS(C) == (KK + 1) * HID + (HID + 1) * C + C * RB_XP, "the layout");
    const int tid = threadIdx.x, lane = tid & 31, j0 = (tid >> 5) * OUTS;
    // the weights (written by no kernel of the step: staged before the wait)
    for (int e = tid; e < (KK + 1) * HID / 4; e += RB_THREADS) ((float4 *)w1s)[e] = ((const float4 *)a.w1t)[e];
    for (int e = tid; e < (HID + 1) * C / 4; e += RB_THREADS) ((float4 *)w2s)[e] = ((const float4 *)a.w2t)[e];
    if (FIRST) stage_first_weights<C>(fw, a.first);
    pdl_begin();

    const struct op_im2col &in = a.in;
    const int T = in.T, R = in.R, ntiles = (T + RB_TILE - 1) / RB_TILE, tiles = R * ntiles, stride = gridDim.x;
#pragma unroll 1
    for (int tile = blockIdx.x; tile < tiles; tile += stride) {
        const int r = tile / ntiles, t0 = (tile - r * ntiles) * RB_TILE, n = T - t0 - 4 * lane;
        if (FIRST) stage_window_first<C, false, false>(xs, ps, fw, a, r, t0);
        else stage_window<C, VEC, false>(xs, in, r, t0);
        if (!FIRST && tile + stride < tiles) prefetch_tile<C>(in, tile + stride, ntiles);
        // acc[o][c]: hidden j0 + o at column 4l + c, over xin columns 4l + c + k (window u + 2)
        float acc[OUTS][4] = {};
#pragma unroll 2
        for (int i = 0; i < C; i++) {
            const float4 lo = *(const float4 *)(xs + i * RB_XP + 4 * lane), hi = *(const float4 *)(xs + i * RB_XP + 4 * lane + 4);
            const float v[6] = {lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
#pragma unroll
            for (int k = 0; k < K; k++) {
                const float4 wa = *(const float4 *)(w1s + (i * K + k) * HID + j0), wb = *(const float4 *)(w1s + (i * K + k) * HID + j0 + 4);
                const float w[OUTS] = {wa.x, wa.y, wa.z, wa.w, wb.x, wb.y, wb.z, wb.w};
#pragma unroll
                for (int c = 0; c < 4; c++)
#pragma unroll
                    for (int o = 0; o < OUTS; o++) acc[o][c] = fmaf(w[o], v[k + c], acc[o][c]);
            }
        }
        __syncthreads();  // every warp is done with the window: h takes its place
#pragma unroll
        for (int o = 0; o < OUTS; o++) {
            const float b = w1s[KK * HID + j0 + o];
            *(float4 *)(xs + (j0 + o) * RB_XP + 4 * lane) = make_float4(
                elu_sel(acc[o][0] + b), elu_sel(acc[o][1] + b), elu_sel(acc[o][2] + b), elu_sel(acc[o][3] + b));
        }
        __syncthreads();
        // y = x + (b2 + W2 . h): outputs o0 = j0, then HID + j0
#pragma unroll 1
        for (int o0 = j0; o0 < C; o0 += HID) {
#pragma unroll
            for (int o = 0; o < OUTS; o++)
#pragma unroll
                for (int c = 0; c < 4; c++) acc[o][c] = 0.0f;
#pragma unroll 4
            for (int j = 0; j < HID; j++) {
                const float4 h4 = *(const float4 *)(xs + j * RB_XP + 4 * lane);
                const float hv[4] = {h4.x, h4.y, h4.z, h4.w};
                const float4 wa = *(const float4 *)(w2s + j * C + o0), wb = *(const float4 *)(w2s + j * C + o0 + 4);
                const float w[OUTS] = {wa.x, wa.y, wa.z, wa.w, wb.x, wb.y, wb.z, wb.w};
#pragma unroll
                for (int c = 0; c < 4; c++)
#pragma unroll
                    for (int o = 0; o < OUTS; o++) acc[o][c] = fmaf(w[o], hv[c], acc[o][c]);
            }
            const size_t at = ((size_t)o0 * R + r) * T + t0 + 4 * lane;
#pragma unroll
            for (int o = 0; o < OUTS; o++) {
                const float b = w2s[HID * C + o0 + o];
                const size_t ao = at + (size_t)o * R * T;
                if (VEC) {
                    if (n <= 0) continue;
                    const float4 x = FIRST ? first_x4<C>(ps, fw, o0 + o, 4 * lane) : *(const float4 *)(in.x + ao);
                    __stcs((float4 *)(a.y + ao), make_float4(x.x + (acc[o][0] + b), x.y + (acc[o][1] + b),
                                                             x.z + (acc[o][2] + b), x.w + (acc[o][3] + b)));
                } else {
#pragma unroll
                    for (int c = 0; c < 4; c++)
                        if (c < n) a.y[ao + c] = in.x[ao + c] + (acc[o][c] + b);
                }
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
// The weights are staged TF32-rounded, in fragment order (a lane's fragment is one 16-byte load).
// After the window (rounded too):
// - h^T = window^T . W1^T: warp w takes columns 32w .. +31 (2 fragments of 16) for all 32 hidden
//   (4 of 8). The reduction index runs tap-major, kk = k*C + i, so that a fragment's 8 indices
//   are 8 channels of one tap: lanes (g, t) read window rows t and t + 4 at pitch RB_XP = 8
//   (mod 32) and columns g, distinct banks.
// - y - x - b2 = W2 . h: h^T's accumulators, ELU'd and rounded in place, are h's B fragments once
//   W2's hidden index is staged in their order (slots t, t + 4 of step p: hidden 8p + 2t, + 1), so
//   h never goes through shared memory.
// - the output tile goes to xs (the window's place) and leaves by rows: 16-byte loads of x and
//   stores of y, 512 contiguous bytes per warp (a column per thread where not VEC).
// Per warp and tile that is about 4.7k instructions in the SASS against 8.8k executed by a first
// version (the weights staged per tile, a division per window element, scattered epilogue
// stores): most of it the ELU (97 per lane), 0.5k the 256 mma and their fragment loads. Shared
// memory 66.4 KB (W1 24, W2 8, window and output tile 34) for 3 blocks (12 warps) per SM, whose
// bound holds registers to 168. At 2048 rows on an H200: the first f32 kernel 3.04 ms, the first TF32
// version 2.91, this one 1.40, and 1.12-1.13 with the ELU computed without its branch (elu_sel);
// 0.84 with FAST_BF16's elu_bf16 (FAST).

// ---- the decoder's last conv (op_resblock.last) ----
//
// The tile's outputs from its third column on, a thread per column over e(y) in xs (channels,
// then taps, in ascending order, then the bias: the narrow conv's order), and e(y) of its first
// and last two columns into the edges. The next tile's window waits for every warp at its first
// barrier before it writes xs.
template <int C>
static __device__ __forceinline__ void last_conv_tile(const struct gpu_last_conv &L, const float *xs, const float *lw,
                                                      int r, int t0, int T, int tile) {
    static_assert(RB_THREADS == RB_TILE, "a thread per column");
    constexpr int K = GPU_RESBLOCK_K;
    const int u = threadIdx.x, cols = min(RB_TILE, T - t0);
    if (u >= K - 1 && u < cols) {
        float acc = 0.0f;
        for (int i = 0; i < C; i++) {
            const float *x = xs + i * RB_XP + u - (K - 1);
#pragma unroll
            for (int k = 0; k < K; k++) acc += lw[i * K + k] * x[k];
        }
        L.out[(size_t)r * T + t0 + u] = acc + lw[C * K];
    }
    float *E = L.edges + (size_t)tile * 4 * C;
    for (int e = u; e < 4 * C; e += RB_THREADS) {
        const int j = e / C, i = e % C;
        E[e] = xs[i * RB_XP + (j < 2 ? j : cols - 4 + j)];
    }
}

// Block (r, part): outputs t0 and t0 + 1 of the part's tiles of row r, from their edges and the
// tile before (the slot's history before the first); the first part then carries the row's last
// two columns of e(y) into the history, once its threads have read the old one.
template <int C>
static __global__ void last_edges_kernel(const struct op_resblock a) {
    constexpr int K = GPU_RESBLOCK_K, H = K - 1;
    static_assert(H == 2, "two edge columns a side");
    pdl_begin();
    const struct op_im2col &in = a.in;
    const struct gpu_last_conv &L = a.last;
    const int r = blockIdx.x, T = in.T, ntiles = (T + RB_TILE - 1) / RB_TILE, slot = in.row_slot[r];
    const float *E = L.edges + (size_t)r * ntiles * 4 * C;
    float *hist = slot >= 0 ? L.hist + (size_t)slot * in.slot_stride : NULL;
    const int e = blockIdx.y * blockDim.x + threadIdx.x, tile = e / H, j = e % H, t = tile * RB_TILE + j;
    if (tile < ntiles && t < T) {
        float acc = 0.0f;
        for (int i = 0; i < C; i++)
#pragma unroll
            for (int k = 0; k < K; k++) {
                const int c = j - H + k;  // column t0 + c
                const float v = c >= 0 ? E[(size_t)tile * 4 * C + c * C + i]
                                : tile > 0 ? E[(size_t)(tile - 1) * 4 * C + (4 + c) * C + i]
                                : hist ? hist[i * H + H + c] : 0.0f;
                acc += L.w[i * K + k] * v;
            }
        L.out[(size_t)r * T + t] = acc + L.w[C * K];
    }
    if (blockIdx.y != 0 || !hist) return;
    __syncthreads();  // the old history is read
    for (int q = threadIdx.x; q < C * H; q += blockDim.x)
        hist[q] = E[(size_t)(ntiles - 1) * 4 * C + (2 + q % H) * C + q / H];
}

// acc (16 x 8 fragment) += A (16 x 8, a) . B (8 x 8, b)
static __device__ __forceinline__ void mma_tf32(float acc[4], const float a[4], const float b[2]) {
    asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
        : "+f"(acc[0]), "+f"(acc[1]), "+f"(acc[2]), "+f"(acc[3])
        : "r"(__float_as_uint(a[0])), "r"(__float_as_uint(a[1])), "r"(__float_as_uint(a[2])),
          "r"(__float_as_uint(a[3])), "r"(__float_as_uint(b[0])), "r"(__float_as_uint(b[1])));
}


template <int C, bool VEC, bool FAST, bool LAST = false, bool FIRST = false>
static __global__ void __launch_bounds__(RB_THREADS, RB_MIN_BLOCKS) resblock_tf32_kernel(const struct op_resblock a) {
    constexpr int HID = C / 2, K = GPU_RESBLOCK_K, KK = C * K;
    static_assert(HID == 32 && C == 64 && RB_TILE == 128 && RB_THREADS == 2 * C,
                  "the tiling assumes 64 channels, 32 hidden, 4 warps");
    static_assert((!LAST && !FIRST) || VEC, "the first and last convs take rows of whole 16-byte groups");
    static_assert(!(LAST && FIRST), "one of them");
    extern __shared__ __align__(16) float sm[];
    __shared__ float lw[LAST ? C * K + 1 : 1];  // the last conv's weights and bias
    __shared__ __align__(16) float fw[FIRST ? RB_FW(C) : 4], ps[FIRST ? RB_PS : 4];  // (op_resblock.first)
    float *w1f = sm;              // (KK/8, 2, 32, 4): step s's W1^T B fragments, lane l, hidden 16u .. +15
    float *w2f = w1f + KK * HID;  // (HID/8, 4, 32, 4): step p's W2 A fragments, lane l, outputs 16m .. +15
    float *b1s = w2f + HID * C, *b2s = b1s + HID;
    float *xs = b2s + C;          // (C, RB_XP): the window (tf32(xin)); then the output tile
    const int tid = threadIdx.x, lane = tid & 31, g = lane >> 2, t = lane & 3, w = tid >> 5;
    // the weights (written by no kernel of the step: staged before the wait). w1f[s, u, l] holds
    // W1^T[kk, j] at kk = 8s + t (b0), + 4 (b1) and j = 16u + g, then j + 8; w2f[p, m, l] holds W2[o, j]
    // at o = 16m + g (a0, a2), + 8 (a1, a3) and j = 8p + 2t (a0, a1), + 1 (a2, a3); (g, t) of lane l
    for (int e = tid; e < KK * HID; e += RB_THREADS) {
        const int f = e & 3, l = (e >> 2) & 31, u = (e >> 7) & 1, s = e >> 8;
        const int kk = 8 * s + (l & 3) + 4 * (f & 1), j = 16 * u + 8 * (f >> 1) + (l >> 2);
        w1f[e] = tf32_round(a.w1t[(size_t)(kk % C * K + kk / C) * HID + j]);
    }
    for (int e = tid; e < HID * C; e += RB_THREADS) {
        const int f = e & 3, l = (e >> 2) & 31, m = (e >> 7) & 3, p = e >> 9;
        const int o = 16 * m + (l >> 2) + 8 * (f & 1), j = 8 * p + 2 * (l & 3) + (f >> 1);
        w2f[e] = tf32_round(a.w2t[(size_t)j * C + o]);
    }
    for (int e = tid; e < HID + C; e += RB_THREADS)  // b1s, then b2s
        b1s[e] = e < HID ? a.w1t[(size_t)KK * HID + e] : a.w2t[(size_t)HID * C + e - HID];
    if (LAST)
        for (int e = tid; e < C * K + 1; e += RB_THREADS) lw[e] = a.last.w[e];
    if (FIRST) stage_first_weights<C>(fw, a.first);
    pdl_begin();

    const struct op_im2col &in = a.in;
    const int T = in.T, R = in.R, ntiles = (T + RB_TILE - 1) / RB_TILE, tiles = R * ntiles, stride = gridDim.x;
    const size_t cs = (size_t)R * T;  // channel stride
#pragma unroll 1
    for (int tile = blockIdx.x; tile < tiles; tile += stride) {
        const int r = tile / ntiles, t0 = (tile - r * ntiles) * RB_TILE, n = T - t0 - 4 * lane;
        if (FIRST) stage_window_first<C, true, FAST>(xs, ps, fw, a, r, t0);
        else stage_window<C, VEC, true, FAST>(xs, in, r, t0);
        if (!FIRST && tile + stride < tiles) prefetch_tile<C>(in, tile + stride, ntiles);
        // h^T (columns 32w + 16q .. +15, hidden 8p .. +7) = window^T . W1^T over kk = 8s ..: tap
        // k = kk / C, channels i0 = kk % C ..; A = xs rows i0 + t (+ 4), columns 32w + 16q + g (+ 8) + 2 + k
        float acc[2][4][4] = {};
        const float *xa = xs + t * RB_XP + 32 * w + g + 2;
        const float4 *wb = (const float4 *)w1f + lane;
#pragma unroll
        for (int s = 0; s < KK / 8; s++) {
            const int k = 8 * s / C, i0 = 8 * s % C;
            float fa[2][4], fb[4][2];
#pragma unroll
            for (int q = 0; q < 2; q++) {
                const float *x = xa + i0 * RB_XP + 16 * q + k;
                fa[q][0] = x[0], fa[q][1] = x[8], fa[q][2] = x[4 * RB_XP], fa[q][3] = x[4 * RB_XP + 8];
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
                for (int e = 0; e < 4; e++) acc[q][p][e] = tf32_round(elu_rb<FAST>(acc[q][p][e] + (e & 1 ? b.y : b.x)));
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
                        *(float2 *)(xs + o * RB_XP + 32 * w + 8 * n + 2 * t) =
                            make_float2(acc2[m][n][2 * hi] + b, acc2[m][n][2 * hi + 1] + b);
                }
        }
        // y = x + (b2 + W2 . h) by rows, x's loads in flight over the barrier: 16 bytes of each of
        // channels 16w .. +15 (VEC), else column t0 + tid of every channel
        if (VEC) {
            const size_t ao = ((size_t)16 * w * R + r) * T + t0 + 4 * lane;
            float4 xr[C / 4];
            if (!FIRST)
#pragma unroll
                for (int q = 0; q < C / 4; q++) xr[q] = load4<VEC>(in.x + ao + q * cs, n);
            __syncthreads();
            if (n > 0)
#pragma unroll
                for (int q = 0; q < C / 4; q++) {
                    float4 *o = (float4 *)(xs + (16 * w + q) * RB_XP + 4 * lane);
                    const float4 br = *o, x = FIRST ? first_x4<C>(ps, fw, 16 * w + q, 4 * lane) : xr[q];
                    const float4 y = make_float4(x.x + br.x, x.y + br.y, x.z + br.z, x.w + br.w);
                    if (LAST) *o = make_float4(elu_rb<FAST>(y.x), elu_rb<FAST>(y.y), elu_rb<FAST>(y.z), elu_rb<FAST>(y.w));
                    else __stcs((float4 *)(a.y + ao + q * cs), y);
                }
            if (LAST) {
                __syncthreads();  // e(y) of the tile is in xs
                last_conv_tile<C>(a.last, xs, lw, r, t0, T, tile);
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
                for (int o = 0; o < C; o++) __stcs(yo + o * cs, xr[o] + xs[o * RB_XP + tid]);
        }
    }
}

// As many blocks as run at once (each stages the weights once), at most one per tile.
template <typename Kernel>
static int launch_persistent(Kernel kernel, const struct op_resblock *a, struct gpu_exec *ex) {
    const size_t smem = sizeof(float) * RB_SMEM_FLOATS(64);
    const int tiles = a->in.R * ((a->in.T + RB_TILE - 1) / RB_TILE);
    if (cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem) != cudaSuccess)
        return launch_status(ex, "resblock (shared memory)");
    const int sms = device_sms();
    int per_sm = 0;
    const cudaError_t e = sms ? cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, RB_THREADS, smem)
                              : cudaErrorInvalidDevice;
    if (e != cudaSuccess) {  // (device_sms clears its error: launch_status would find none)
        cudaGetLastError();
        if (ex->errmsg) snprintf(ex->errmsg, ex->errlen, "resblock (occupancy): %s", cudaGetErrorString(e));
        return MIMI_EDEVICE;
    }
    int blocks = sms * (per_sm > 0 ? per_sm : 1);
    if (blocks > tiles) blocks = tiles > 0 ? tiles : 1;
    pdl_launch(kernel, dim3(blocks), dim3(RB_THREADS), smem, ex, *a);
    return launch_status(ex, "resblock");
}

// The block with the decoder's last conv: the fast precisions' kernel, then the edges.
static int launch_last(const struct op_resblock *a, struct gpu_exec *ex) {
    const int T = a->in.T, ntiles = (T + RB_TILE - 1) / RB_TILE;
    if (ex->precision == MIMI_PRECISION_STRICT || !GPU_RESBLOCK_LAST_FITS(T) || (uintptr_t)a->in.x % 16) {
        if (ex->errmsg)
            snprintf(ex->errmsg, ex->errlen, "resblock: the last conv takes a fast precision and 16-byte rows (T %d)", T);
        return MIMI_EUNSUPPORTED;
    }
    const int rc = a->in.fast_elu ? launch_persistent(resblock_tf32_kernel<64, true, true, true>, a, ex)
                                  : launch_persistent(resblock_tf32_kernel<64, true, false, true>, a, ex);
    if (rc) return rc;
    pdl_launch(last_edges_kernel<64>, dim3(a->in.R, (2 * ntiles + 127) / 128), 128, 0, ex, *a);
    return launch_status(ex, "resblock edges");
}

// The block with the encoder's first conv: the kernel of the precision, then the history's carry.
static int launch_first(const struct op_resblock *a, struct gpu_exec *ex) {
    const struct op_im2col *f = &a->first.in;
    if (a->has_last || a->in.T % 4 || !first_conv_fits(a) || (uintptr_t)f->x % 16 || (uintptr_t)a->y % 16) {
        if (ex->errmsg)
            snprintf(ex->errmsg, ex->errlen,
                     "resblock: the first conv takes one channel, K %d at most, stride 1, T %% 4 == 0 and 16-byte "
                     "rows (%d channels, K %d, stride %d, T %d)", GPU_FIRST_MAX_K, f->c_in, f->K, f->S, a->in.T);
        return MIMI_EUNSUPPORTED;
    }
    const int rc = ex->precision == MIMI_PRECISION_STRICT ? launch_persistent(resblock_f32_kernel<64, true, true>, a, ex)
                   : a->in.fast_elu ? launch_persistent(resblock_tf32_kernel<64, true, true, false, true>, a, ex)
                                    : launch_persistent(resblock_tf32_kernel<64, true, false, false, true>, a, ex);
    if (rc) return rc;
    pdl_launch(first_carry_kernel<64>, dim3(a->in.R), RB_THREADS, 0, ex, *a);
    return launch_status(ex, "resblock history");
}

extern "C" int mimi_cuda_resblock(const struct op_resblock *a, struct gpu_exec *ex) {
    if (a->step.on) return mimi_cuda_resblock_step(a, ex);
    const int c = a->in.c_in;
    if (!GPU_RESBLOCK_FITS(c, a->hid) || a->in.K != GPU_RESBLOCK_K || a->in.S != 1 || a->in.H != GPU_RESBLOCK_K - 1 ||
        a->in.replicate) {
        if (ex->errmsg)
            snprintf(ex->errmsg, ex->errlen, "resblock: %d channels, %d hidden, K %d, stride %d, history %d: no kernel", c,
                     a->hid, a->in.K, a->in.S, a->in.H);
        return MIMI_EUNSUPPORTED;
    }
    if (a->has_first) return launch_first(a, ex);
    if (a->has_last) return launch_last(a, ex);
    // 16-byte loads and stores where every row is 16-byte aligned
    const bool vec = a->in.T % 4 == 0 && (uintptr_t)a->in.x % 16 == 0 && (uintptr_t)a->y % 16 == 0;
    if (ex->precision == MIMI_PRECISION_STRICT)
        return vec ? launch_persistent(resblock_f32_kernel<64, true>, a, ex)
                   : launch_persistent(resblock_f32_kernel<64, false>, a, ex);
    if (a->in.fast_elu)
        return vec ? launch_persistent(resblock_tf32_kernel<64, true, true>, a, ex)
                   : launch_persistent(resblock_tf32_kernel<64, false, true>, a, ex);
    return vec ? launch_persistent(resblock_tf32_kernel<64, true, false>, a, ex)
               : launch_persistent(resblock_tf32_kernel<64, false, false>, a, ex);
}
