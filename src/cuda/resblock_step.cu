/*
 * resblock_step.cu - a SEANet residual block of a small step in one kernel (op_resblock with
 * step.on; reference src/nn/seanet.c): one stream's top two levels, 64 channels over 1920 steps
 * and 128 over 480 per frame.
 *
 * There each block used to be two direct conv kernels (conv1d.cu): the k3 conv's reduction split
 * over blocks whose parts a last block summed, then the 1x1 conv staging the hidden activations
 * again; each kernel a chain of round trips (input staging, parts, counter, epilogue) of 5-8 us
 * for a few MFLOP. Here a block takes a tile of TC columns of one row and all of its channels:
 *   1. the weights (W1^T, W2^T with their bias rows, 32 KB at 64 channels and 129 KB at 128)
 *      requested into shared memory before the predecessor is waited for; then the window,
 *      elu(x) of the tile's columns and the two before them (the history where the row starts),
 *      with x of the thread's own outputs kept in registers for the residual;
 *   2. h = elu(b1 + W1 . window), thread (g, c) hidden 4g .. 4g + 3 at column c;
 *   3. y = x + (b2 + W2 . h), thread (g, c) outputs 8g .. 8g + 7 at column c, ELU'd where the
 *      next layer is an ELU (elu_out).
 * Every sum runs in resblock.cu's f32 order (channel, then tap, in FMAs from zero, then the
 * bias), so the two kernels give the same bits. The tile that holds a row's last column stages
 * the new history (the window's last two columns) for the step's GOP_TAILS.
 * At 64 channels the encoder's first conv rides in the kernel (op_resblock.first, FIRST): a tile
 * stages its PCM, from 12 samples before its first column (first_conv.cuh), and computes x of
 * the window and of its own outputs there instead of loading it; x is never stored. The first
 * conv's weights come with the others, in a cp.async group of their own that is waited for
 * first. The row's last tile also stages the PCM's new history. One launch fewer in one stream's
 * encode: 3.2 us a step faster on average over nine rounds on an H200 (2026-12-06).
 *
 * On an H100 (2026-12-06, bench/results/gpu-h100-2026-12-06.md) one stream's step took 5-10 us
 * less in encode and 9-14 us less in decode than with the direct kernels, four rounds each; the
 * blocks are 9.5 and 12.7 us of eager ops in encode (its direct pairs 20.5 and 22 us). Staging
 * the weights by a loop of loads and stores instead of cp.async made them 11 and 24 us.
 */
#include "cuda/first_conv.cuh"

#define STEP_K GPU_RESBLOCK_K
#define STEP_OH 4  // hidden outputs of a thread (one column)

// Shared memory (floats): W1^T (C*K + 1, HID), W2^T (HID + 1, C), window (C, TC + 2), h (HID, TC);
// with the first conv, its weights (RB_FW(C)) and the tile's PCM (RB_PS_OFF + TC).
template <int C, int TC>
struct step_shape {
    static constexpr int HID = C / 2, KK = C * STEP_K, W = TC + STEP_K - 1, THREADS = HID / STEP_OH * TC;
    static constexpr int OUTS = C * TC / THREADS;  // outputs of a thread in the 1x1 conv (8)
    static constexpr int FLOATS = (KK + 1) * HID + (HID + 1) * C + C * W + HID * TC;
    static constexpr int FIRST_FLOATS = RB_FW(C) + RB_PS_OFF + TC;
};

// n float4 from src to dst (shared memory), thread tid of `threads`, as cp.async copies.
static __device__ __forceinline__ void stage_async(float *dst, const float *src, int n, int tid, int threads) {
    for (int e = tid; e < n; e += threads) cp_async16((float4 *)dst + e, (const float4 *)src + e);
}

template <int C, int TC, bool FIRST>
static __global__ void __launch_bounds__(step_shape<C, TC>::THREADS) resblock_step_kernel(const struct op_resblock a) {
    typedef step_shape<C, TC> S;
    constexpr int HID = S::HID, KK = S::KK, W = S::W, OUTS = S::OUTS, H = STEP_K - 1;
    static_assert(OUTS == 8 && (KK + 1) * HID % 4 == 0 && (HID + 1) * C % 4 == 0, "the tiling");
    static_assert(!FIRST || RB_PS_OFF + TC <= S::THREADS, "a PCM sample a thread");
    extern __shared__ float4 step_smem[];
    float *w1s = (float *)step_smem;   // (KK + 1, HID)
    float *w2s = w1s + (KK + 1) * HID;  // (HID + 1, C)
    float *xs = w2s + (HID + 1) * C;    // (C, W): column u is [hist | elu(x)] at t0 - H + u
    float *hs = xs + C * W;             // (HID, TC)
    float *fw = hs + HID * TC;          // (first) RB_FW(C), then the PCM: ps[u] = sample t0 - RB_PS_OFF + u
    float *ps = fw + RB_FW(C);
    const int tid = threadIdx.x;
    // the weights (written by no kernel of the step): asynchronous copies issued before the wait,
    // all in flight at once (a loop of loads and stores took a round trip per iteration); the
    // first conv's in a group of their own, the first waited for
    if (FIRST) {
        stage_first_weights<C, true>(fw, a.first);
        asm volatile("cp.async.commit_group;" ::: "memory");
    }
    stage_async(w1s, a.w1t, (KK + 1) * HID / 4, tid, S::THREADS);
    stage_async(w2s, a.w2t, (HID + 1) * C / 4, tid, S::THREADS);
    asm volatile("cp.async.commit_group;" ::: "memory");
    pdl_begin();

    const struct op_im2col &in = a.in;
    const int T = in.T, R = in.R, ntiles = (T + TC - 1) / TC, r = blockIdx.x / ntiles;
    const int t0 = (blockIdx.x - r * ntiles) * TC, c = tid % TC, g = tid / TC, t = t0 + c;
    if (FIRST) {  // the tile's PCM (zeros past the row), then the first conv's weights
        const int u = t0 - RB_PS_OFF + tid;
        if (tid < RB_PS_OFF + TC) ps[tid] = u < T ? first_sample(a.first, r, u) : 0.0f;
        asm volatile("cp.async.wait_group 1;" ::: "memory");
        __syncthreads();
    }
    // 1. x of this thread's outputs (channels OUTS g ..) and the window, every load before a store
    float xr[OUTS];
#pragma unroll
    for (int u = 0; u < OUTS; u++)
        xr[u] = t >= T ? 0.0f : FIRST ? first_x1<C>(ps, fw, OUTS * g + u, c) : in.x[((size_t)(OUTS * g + u) * R + r) * T + t];
    constexpr int LEFT = (C * H + S::THREADS - 1) / S::THREADS;  // the columns before the tile
    float left[LEFT];
#pragma unroll
    for (int q = 0; q < LEFT; q++) {
        const int e = tid + q * S::THREADS, i = e / H, j = t0 - H + e % H;
        const bool xj = e < C * H && j >= 0;  // x of the tile before, else the history (or nothing)
        const float x = !xj ? 0.0f : FIRST ? first_x1<C>(ps, fw, i, e % H - H) : in.x[((size_t)i * R + r) * T + j];
        left[q] = e < C * H ? (j >= 0 ? elu_f(x) : xin(in, i, r, j + H)) : 0.0f;
    }
#pragma unroll
    for (int u = 0; u < OUTS; u++) xs[(OUTS * g + u) * W + H + c] = t < T ? elu_f(xr[u]) : 0.0f;
#pragma unroll
    for (int q = 0; q < LEFT; q++) {
        const int e = tid + q * S::THREADS;
        if (e < C * H) xs[e / H * W + e % H] = left[q];
    }
    asm volatile("cp.async.wait_all;" ::: "memory");
    __syncthreads();
    // the new history: [hist | elu(x)] at T - H .. T - 1, window columns T - t0 ..; with the
    // first conv, the PCM's newest samples too
    if (a.step.tail && t0 + TC >= T)
        for (int e = tid; e < C * H; e += S::THREADS)
            a.step.tail[((size_t)(e / H) * R + r) * H + e % H] = xs[e / H * W + T - t0 + e % H];
    if (FIRST && t0 + TC >= T && tid < a.first.in.H)
        a.step.first_tail[(size_t)r * a.first.in.H + tid] = xin(a.first.in, 0, r, T + tid);
    // 2. h = elu(b1 + W1 . window): hidden STEP_OH g .. at column c
    {
        float acc[STEP_OH] = {};
#pragma unroll 4
        for (int i = 0; i < C; i++) {
            const float v[STEP_K] = {xs[i * W + c], xs[i * W + c + 1], xs[i * W + c + 2]};
#pragma unroll
            for (int k = 0; k < STEP_K; k++) {
                const float4 w = *(const float4 *)(w1s + (i * STEP_K + k) * HID + STEP_OH * g);
                acc[0] = fmaf(w.x, v[k], acc[0]), acc[1] = fmaf(w.y, v[k], acc[1]);
                acc[2] = fmaf(w.z, v[k], acc[2]), acc[3] = fmaf(w.w, v[k], acc[3]);
            }
        }
#pragma unroll
        for (int u = 0; u < STEP_OH; u++) hs[(STEP_OH * g + u) * TC + c] = elu_f(acc[u] + w1s[KK * HID + STEP_OH * g + u]);
    }
    __syncthreads();
    // 3. y = x + (b2 + W2 . h): outputs OUTS g .. at column c
    float acc[OUTS] = {};
#pragma unroll 4
    for (int j = 0; j < HID; j++) {
        const float hv = hs[j * TC + c];
        const float4 wa = *(const float4 *)(w2s + j * C + OUTS * g), wb = *(const float4 *)(w2s + j * C + OUTS * g + 4);
        const float w[OUTS] = {wa.x, wa.y, wa.z, wa.w, wb.x, wb.y, wb.z, wb.w};
#pragma unroll
        for (int u = 0; u < OUTS; u++) acc[u] = fmaf(w[u], hv, acc[u]);
    }
    if (t >= T) return;
#pragma unroll
    for (int u = 0; u < OUTS; u++) {
        const float y = xr[u] + (acc[u] + w2s[HID * C + OUTS * g + u]);
        a.y[((size_t)(OUTS * g + u) * R + r) * T + t] = a.step.elu_out ? elu_f(y) : y;
    }
}

template <int C, int TC, bool FIRST>
static int launch_step(const struct op_resblock *a, struct gpu_exec *ex) {
    typedef step_shape<C, TC> S;
    static_assert(TC != GPU_RESBLOCK_STEP_TC || sizeof(float) * S::FLOATS == GPU_RESBLOCK_STEP_SMEM(C), "ops.h's size");
    const size_t smem = sizeof(float) * (S::FLOATS + (FIRST ? S::FIRST_FLOATS : 0));
    void (*kernel)(const struct op_resblock) = resblock_step_kernel<C, TC, FIRST>;
    if (cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem) != cudaSuccess)
        return launch_status(ex, "resblock step (shared memory)");
    const int tiles = a->in.R * ((a->in.T + TC - 1) / TC);
    pdl_launch(kernel, dim3(tiles), dim3(S::THREADS), smem, ex, *a);
    return launch_status(ex, "resblock step");
}

// Tiles of 8 columns: 240 blocks of 128 threads at the top level, 60 below it. Against 16 and 8
// columns, or 8 and 4, one stream's step was 4-9 us faster a direction (H100, 2026-12-06).
extern "C" int mimi_cuda_resblock_step(const struct op_resblock *a, struct gpu_exec *ex) {
    const int c = a->in.c_in;
    // with the first conv: its geometry, a history, and both staged histories
    const bool first_ok = !a->has_first || (GPU_RESBLOCK_STEP_FIRST(c) && first_conv_fits(a) && a->first.in.H > 0 &&
                                             a->step.tail && a->step.first_tail);
    if (!GPU_RESBLOCK_STEP_FITS(c, a->hid) || !first_ok || a->has_last || a->in.K != GPU_RESBLOCK_K ||
        a->in.S != 1 || a->in.H != GPU_RESBLOCK_K - 1 || !a->in.elu || a->in.replicate ||
        (!a->has_first && a->y == a->in.x) || a->in.T < 1 || a->in.R < 1) {
        if (ex->errmsg)
            snprintf(ex->errmsg, ex->errlen,
                     "resblock step: %d channels, %d hidden, K %d, stride %d, history %d, %d x %d columns%s: no kernel",
                     c, a->hid, a->in.K, a->in.S, a->in.H, a->in.R, a->in.T, a->has_first ? ", with the first conv" : "");
        return MIMI_EUNSUPPORTED;
    }
    if (a->has_first) return launch_step<64, GPU_RESBLOCK_STEP_TC, true>(a, ex);
    return c == 64 ? launch_step<64, GPU_RESBLOCK_STEP_TC, false>(a, ex)
                   : launch_step<128, GPU_RESBLOCK_STEP_TC, false>(a, ex);
}
