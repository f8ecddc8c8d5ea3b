/*
 * direct.cuh - the kernel shared by the direct (im2col-free) conv and transposed conv: the whole
 * layer in one launch for products too small to fill the chip through cuBLAS.
 *
 * A geometry G (conv1d.cu, convtr1d.cu) says what the kernel reduces:
 *   cols(), reduction(), phases(), c_out(), split()   the sizes and the struct gpu_split; split()
 *                                                     is __host__ __device__ (direct_launch reads
 *                                                     it: a device-only function called from host
 *                                                     code compiles to a body that exits)
 *   weight(o, phase, p), weights_vec(p0, n)           output o's weight at reduction index p;
 *                                                     whether 4 consecutive ones are one float4
 *   start(n, phase, p) -> cursor                      column n's input at reduction index p:
 *   take(cursor, act), advance(cursor)                its value as stored and whether activate()
 *   activate(v)                                       applies to it, then the index DIRECT_WARPS
 *                                                     on (take only loads, so that a lane's loads
 *                                                     are all in flight before any value is used)
 *   load(o, phase, n) -> epi, store(o, phase, n, v, e)  the epilogue: what it reads (bias,
 *                                                     residual, tail), then the bias, activation
 *                                                     and stores; a warp's loads for all of its
 *                                                     channels are issued before its first store
 *   staged(xs, n0, phase, p0, kc)                     sees each staged input slice (xs below)
 * Block (x, y, z): columns 32x .. 32x + 31 (a lane each), output channels
 * DIRECT_TO * (y / phases) + 0 .. DIRECT_TO - 1 of phase y % phases, reduction part z. The part
 * is walked DIRECT_KC indices at a time: the weight slice is staged in shared memory as
 * (index, channel), so that a lane reads its DIRECT_TO weights as float4s broadcast to the
 * whole warp, and the inputs as (index, column); both with batched loads, so that a slice costs
 * a few memory round trips and the products then read shared memory only. The warps split the
 * slice into contiguous shares and their sums are added in warp order, then (splits > 1) the
 * parts' sums in part order by the tile's last block (struct gpu_split).
 */
#ifndef MIMI_CUDA_DIRECT_CUH
#define MIMI_CUDA_DIRECT_CUH

#include <stdint.h>

#include "common.cuh"

#define DIRECT_WARPS 8
#define DIRECT_TO GPU_DIRECT_CHANNELS  // output channels per block
#define DIRECT_KC 128       // reduction indices staged at a time: 16 KB of weights, 16 KB of inputs
#define DIRECT_STAGE_LOADS 8
#define DIRECT_PART_LOADS 4  // of each of a warp's DIRECT_PER channels at a time

// ws (kc, DIRECT_TO) = the weights of channels o0 .. o0 + DIRECT_TO - 1 at reduction indices
// p0 .. p0 + kc - 1 (zeros past c_out). Every thread issues up to DIRECT_STAGE_LOADS loads
// before it stores any, so the slice arrives in about one memory round trip. With float4
// weights, thread t takes channel t / 8 and every 8th float4 of its run from t % 8 on: 8 threads
// read a channel's 128 contiguous bytes, and no index is divided per load.
template <class G>
static __device__ __forceinline__ void direct_stage(const G &g, float *ws, int o0, int phase, int p0, int kc) {
    if (g.weights_vec(p0, kc)) {
        static_assert(32 * DIRECT_WARPS == 8 * DIRECT_TO, "8 threads per channel");
        const int o = threadIdx.x / 8, per_row = kc / 4;
        const bool live = o0 + o < g.c_out();
        for (int r0 = threadIdx.x % 8; r0 < per_row; r0 += 8 * DIRECT_STAGE_LOADS) {
            float4 v[DIRECT_STAGE_LOADS];
#pragma unroll
            for (int u = 0; u < DIRECT_STAGE_LOADS; u++) {
                const int r = r0 + 8 * u;
                v[u] = live && r < per_row ? *(const float4 *)g.weight(o0 + o, phase, p0 + 4 * r)
                                           : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            }
#pragma unroll
            for (int u = 0; u < DIRECT_STAGE_LOADS; u++) {
                const int q = 4 * (r0 + 8 * u);
                if (q >= kc) break;
                ws[q * DIRECT_TO + o] = v[u].x, ws[(q + 1) * DIRECT_TO + o] = v[u].y;
                ws[(q + 2) * DIRECT_TO + o] = v[u].z, ws[(q + 3) * DIRECT_TO + o] = v[u].w;
            }
        }
        return;
    }
    const int total = DIRECT_TO * kc;
    for (int base = threadIdx.x; base < total; base += DIRECT_STAGE_LOADS * blockDim.x) {
        float v[DIRECT_STAGE_LOADS];
#pragma unroll
        for (int u = 0; u < DIRECT_STAGE_LOADS; u++) {
            const int e = base + u * blockDim.x, o = e / kc, q = e - o * kc;
            v[u] = e < total && o0 + o < g.c_out() ? *g.weight(o0 + o, phase, p0 + q) : 0.0f;
        }
#pragma unroll
        for (int u = 0; u < DIRECT_STAGE_LOADS; u++) {
            const int e = base + u * blockDim.x, o = e / kc, q = e - o * kc;
            if (e >= total) break;
            ws[q * DIRECT_TO + o] = v[u];
        }
    }
}

// xs (kc, 32) = the inputs of columns n0 .. n0 + 31 at reduction indices p0 .. p0 + kc - 1
// (zeros past the last column). A thread keeps one column (its lane) and walks the indices
// DIRECT_WARPS apart with the geometry's cursor, DIRECT_STAGE_LOADS loads in flight: the
// activation is applied once all of them are issued (applied inside each take, the loads of one
// stream's slice went out one round trip after another).
// With `made`, `first` is the lane's cursor at p0 + warp, made by the caller.
template <class G>
static __device__ __forceinline__ void direct_stage_inputs(const G &g, float *xs, int n0, int phase, int p0, int kc,
                                                           bool made, typename G::cursor first) {
    const int lane = threadIdx.x % 32, n = n0 + lane;
    int q = threadIdx.x / 32;
    if (n >= g.cols()) {
        for (; q < kc; q += DIRECT_WARPS) xs[q * 32 + lane] = 0.0f;
        return;
    }
    typename G::cursor c = made ? first : g.start(n, phase, p0 + q);
    for (; q < kc; q += DIRECT_WARPS * DIRECT_STAGE_LOADS) {
        float v[DIRECT_STAGE_LOADS];
        bool act[DIRECT_STAGE_LOADS];
#pragma unroll
        for (int u = 0; u < DIRECT_STAGE_LOADS; u++) {
            act[u] = false;
            v[u] = q + u * DIRECT_WARPS < kc ? g.take(c, act[u]) : 0.0f;
            g.advance(c);
        }
#pragma unroll
        for (int u = 0; u < DIRECT_STAGE_LOADS; u++)
            if (q + u * DIRECT_WARPS < kc) xs[(q + u * DIRECT_WARPS) * 32 + lane] = act[u] ? g.activate(v[u]) : v[u];
    }
}

// The epilogue of column n's channels o + DIRECT_WARPS i, i < DIRECT_PER, whose sums are v (where
// mine): every load first, then the stores.
#define DIRECT_PER (DIRECT_TO / DIRECT_WARPS)
template <class G>
static __device__ __forceinline__ void direct_epilogue(const G &g, int o, int phase, int n, const float (&v)[DIRECT_PER],
                                                       const bool (&mine)[DIRECT_PER]) {
    typename G::epi e[DIRECT_PER];
#pragma unroll
    for (int i = 0; i < DIRECT_PER; i++)
        if (mine[i]) e[i] = g.load(o + i * DIRECT_WARPS, phase, n);
#pragma unroll
    for (int i = 0; i < DIRECT_PER; i++)
        if (mine[i]) g.store(o + i * DIRECT_WARPS, phase, n, v[i], e[i]);
}

template <class G>
static __global__ void __launch_bounds__(32 * DIRECT_WARPS, GPU_DIRECT_PER_SM) direct_kernel(const G g) {
    static_assert(DIRECT_TO % DIRECT_WARPS == 0 && DIRECT_TO % 4 == 0, "channels split evenly over the warps");
    extern __shared__ float4 direct_smem[];
    float *ws = (float *)direct_smem, *xs = ws + DIRECT_KC * DIRECT_TO;  // (kc, DIRECT_TO), (kc, 32)
    const struct gpu_split &sp = g.split();
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int N = g.cols(), KK = g.reduction(), phases = g.phases();
    const int phase = blockIdx.y % phases, o0 = blockIdx.y / phases * DIRECT_TO;
    const int n = blockIdx.x * 32 + lane;
    const int p_begin = blockIdx.z * sp.chunk, p_end = min(KK, p_begin + sp.chunk);
    // Before the predecessor is waited for, what does not depend on it: the first slice's
    // weights into shared memory, the first column tile's request of the later slices' weights
    // into L2 (their span, for each channel), and the lane's first input cursor (a row's slot
    // and its flags are set before the step's first kernel).
    const int p_second = min(p_end, p_begin + DIRECT_KC);
    if (p_begin < p_end) direct_stage(g, ws, o0, phase, p_begin, p_second - p_begin);
    if (blockIdx.x == 0 && p_second < p_end)
        for (int o = o0 + warp; o < min(o0 + DIRECT_TO, g.c_out()); o += DIRECT_WARPS) {
            const float *first = g.weight(o, phase, p_second), *last = g.weight(o, phase, p_end - 1);
            prefetch_l2(first, sizeof(float) * (size_t)(last - first + 1), lane, 32);
        }
    typename G::cursor c0{};
    if (n < N && p_begin < p_end) c0 = g.start(n, phase, p_begin + warp);
    pdl_begin();
    float acc[DIRECT_TO];
#pragma unroll
    for (int o = 0; o < DIRECT_TO; o++) acc[o] = 0.0f;
    for (int p0 = p_begin; p0 < p_end; p0 += DIRECT_KC) {
        const int kc = min(DIRECT_KC, p_end - p0);
        if (p0 != p_begin) {
            __syncthreads();  // the previous slice is consumed
            direct_stage(g, ws, o0, phase, p0, kc);
        }
        direct_stage_inputs(g, xs, blockIdx.x * 32, phase, p0, kc, p0 == p_begin, c0);
        __syncthreads();
        g.staged(xs, blockIdx.x * 32, phase, p0, kc);
        const int share = (kc + DIRECT_WARPS - 1) / DIRECT_WARPS, q0 = warp * share, q1 = min(kc, q0 + share);
        if (n < N) {
#pragma unroll 4
            for (int q = q0; q < q1; q++) {
                const float xv = xs[q * 32 + lane];
                const float4 *w4 = (const float4 *)(ws + q * DIRECT_TO);
#pragma unroll
                for (int o4 = 0; o4 < DIRECT_TO / 4; o4++) {
                    const float4 w = w4[o4];
                    acc[4 * o4] += w.x * xv, acc[4 * o4 + 1] += w.y * xv;
                    acc[4 * o4 + 2] += w.z * xv, acc[4 * o4 + 3] += w.w * xv;
                }
            }
        }
    }
    // the warps' sums, through the staging area once every warp is done with it
    float(*part)[DIRECT_TO][32] = (float(*)[DIRECT_TO][32])direct_smem;
    const size_t plane = (size_t)g.c_out() * phases * N;
    __syncthreads();
#pragma unroll
    for (int o = 0; o < DIRECT_TO; o++) part[warp][o][lane] = acc[o];
    __syncthreads();
    // warp w finishes channels o0 + w + DIRECT_WARPS i, i < DIRECT_PER: their sums first
    float v[DIRECT_PER];
    bool mine[DIRECT_PER];
#pragma unroll
    for (int i = 0; i < DIRECT_PER; i++) {
        const int oi = warp + i * DIRECT_WARPS;
        v[i] = 0.0f;
#pragma unroll
        for (int w = 0; w < DIRECT_WARPS; w++) v[i] += part[w][oi][lane];
        mine[i] = n < N && o0 + oi < g.c_out();
    }
    if (sp.splits == 1) {
        direct_epilogue(g, o0 + warp, phase, n, v, mine);
        return;
    }
    size_t at[DIRECT_PER];  // the channels' place in a part's plane
#pragma unroll
    for (int i = 0; i < DIRECT_PER; i++) {
        at[i] = ((size_t)(o0 + warp + i * DIRECT_WARPS) * phases + phase) * N + n;
        if (mine[i]) sp.part[(size_t)blockIdx.z * plane + at[i]] = v[i];
    }
    // the tile's last part to finish adds the parts in order
    uint32_t *counter = sp.counters + blockIdx.y * gridDim.x + blockIdx.x;
    if (!last_block(counter, sp.splits)) return;
    if (threadIdx.x == 0) *counter = 0;
    // the parts' sums of the warp's channels, DIRECT_PART_LOADS parts a channel loaded at a
    // time, then added in part order
#pragma unroll
    for (int i = 0; i < DIRECT_PER; i++) v[i] = mine[i] ? __ldcg(sp.part + at[i]) : 0.0f;
    for (int z0 = 1; z0 < sp.splits; z0 += DIRECT_PART_LOADS) {
        float pz[DIRECT_PER][DIRECT_PART_LOADS];
#pragma unroll
        for (int i = 0; i < DIRECT_PER; i++)
#pragma unroll
            for (int u = 0; u < DIRECT_PART_LOADS; u++)
                pz[i][u] = mine[i] && z0 + u < sp.splits ? __ldcg(sp.part + (size_t)(z0 + u) * plane + at[i]) : 0.0f;
#pragma unroll
        for (int i = 0; i < DIRECT_PER; i++)
#pragma unroll
            for (int u = 0; u < DIRECT_PART_LOADS; u++)
                if (z0 + u < sp.splits) v[i] += pz[i][u];
    }
    direct_epilogue(g, o0 + warp, phase, n, v, mine);
}

// Launches g's kernel over `cols` columns, c_out channels and `phases` phases.
template <class G>
static int direct_launch(const G &g, int cols, int c_out, int phases, struct gpu_exec *ex, const char *what) {
    const struct gpu_split &sp = g.split();
    // (with last_block's flag, within the 48 KB a block gets without opting in)
    const size_t smem = sizeof(float) * (DIRECT_TO + 32) * DIRECT_KC;
    static_assert(sizeof(float) * (DIRECT_TO + 32) * DIRECT_KC + 16 <= 48 * 1024, "direct kernel shared memory");
    static_assert(DIRECT_WARPS * DIRECT_TO * 32 <= (DIRECT_TO + 32) * DIRECT_KC, "warp sums fit the staging area");
    dim3 grid((cols + 31) / 32, (c_out + DIRECT_TO - 1) / DIRECT_TO * phases, sp.splits);
    pdl_launch(direct_kernel<G>, grid, 32 * DIRECT_WARPS, smem, ex, g);
    return launch_status(ex, what);
}

#endif
