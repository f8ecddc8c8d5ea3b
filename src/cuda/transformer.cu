/*
 * transformer.cu - a whole transformer (every layer, spec 3.3 and 5.4) for a small step in one
 * persistent launch (ops.h, struct op_transformer).
 *
 * One stream's step is a chain of about 40 dependent products and attentions, each a few
 * microseconds of weights; launched one by one, each pays its launch, its first memory round
 * trip and its drain. Here one block per SM walks the chain: the stages of a layer are
 * separated by grid-wide barriers, and each block requests its slice of the next stage's
 * weights into registers between arriving and waiting, so they stream while the chip
 * synchronises.
 *
 * Stages of layer l (S = R * steps rows, d model width, f feed-forward width):
 *   1. h = LN1(x); qkv rows of this block = h . in_proj^T;
 *      q and k rotated, q stored, k and v stored into the slots' rings;
 *   2. a block per (row, head, slice of d: up to GPU_TR_MAX_SPLIT_WO as the SMs allow): softmax
 *      attention over the ring (the one-pass arithmetic of attention.cu), then the slice's rows
 *      of out_proj's head columns applied to the head's output -> that head's part of y; the
 *      (row, slice)'s last-head item waits for the other heads' parts (each stored with the
 *      layer's version beside it) and adds them, in head order, to the slice's x:
 *      x += scale1 * y;
 *   3. h = LN2(x); this block's rows of gelu(h . linear1^T) -> ff;
 *   4. its rows of y = ff . linear2^T, and x += scale2 * y for those rows.
 * Then out = x (transposed to (d, S)). Every block computes the LayerNorms itself (a few KB from
 * L2) instead of waiting for one more barrier. The residual stream is stored by the blocks that
 * update it (stages 2 and 4) and alternates between two buffers, so that no stage reads what
 * another block of it writes; the LayerNorms read it alone (when they read x and y, or x and the
 * eight heads' parts, in every block, one stream's transformer took 188 us of eager ops instead
 * of 182-183; bench/results/gpu-h200-2026-12-05.md). The numerics are those of the unfused ops
 * (f32 products, LayerNorm statistics in double, every f32 step of the residual and the norm
 * rounded separately), except that the out-projection is summed by heads and the statistics are
 * taken in one pass (tr_layernorm).
 *
 * On an H200 (132 blocks) a stage takes 2-6 us and a barrier 1-2 us: one stream's transformer
 * went from 388 us of separately launched ops (eager) to about 200 us, 2 and 4 streams' from
 * 472 and 622 us to 332 and 427 us. Timestamps per stage (bench/results/gpu-h200-2026-12-01.md)
 * put a layer at about 25 us, 7 of them in its two LayerNorms, whose statistics were block-wide
 * reductions (four block barriers, each thread summing the 16 warps' partials); a warp per row
 * took the transformer to about 190 us. Tried and dropped, each slower: the next layer's weights
 * or the rings requested into L2 ahead (the requests delay the waits), the attention blocks'
 * rings copied into shared memory (cp.async) while the stages before stage 2 run (190 -> 214 us
 * strict, 179 -> 198 us with bf16 rings), a flag per block instead of one counter, and items of
 * 16 ring entries merged by every block. Thread-block clusters (stage 2's ring in 2-8 shares
 * merged through distributed shared memory; stages 3 and 4 one stage, linear2 summed in a part
 * per cluster) were correct and not faster: at 512 threads the kernel has 128 registers a
 * thread, and what they kept live spilled (bench/results/gpu-h200-2026-12-04-clusters.md); so
 * did the linears' first weights staged through cp.async instead of registers (10 us slower).
 */
#include <stdint.h>

#include "attention.cuh"
#include "grid.cuh"

#define TR_THREADS 512
#define TR_WARPS (TR_THREADS / 32)
// Stage 2's items per (row, head) at most, each d / split (a multiple of 32) out-projection rows.
// Every item walks the head's whole ring, so more items cost L2 reads and save out-projection
// rows: one stream's step (8 heads on 132 SMs, 128 items) took a few us less with 16 than with 4
// (H200, two rounds each: strict 0.430-0.434 / 0.382-0.385 ms against 0.437-0.445 /
// 0.390-0.394, the eager transformer 192 -> 187 us in encode and unchanged in decode).
static_assert(GPU_TR_MAX_ROWS <= TR_WARPS, "tr_layernorm: a warp per row");
static_assert(GPU_TR_MAX_D <= TR_THREADS, "tr_layernorm, tr_chan_load: a thread per channel");
static_assert(GPU_TR_MAX_LAYERS <= GRID_MAX_VERSIONS, "the heads' parts: a version a layer");

// How a linear (J outputs, K inputs, weights (J, K) row-major) is spread: each block takes
// `rows` consecutive outputs (even, so that a rotated pair stays in one block), `split` warps
// per output, each a contiguous `per` = K / split inputs (a multiple of 128: a float4 per lane).
struct tr_lin {
    int J, K, rows, split, per;
};

struct tr_args {
    struct op_transformer t;
    struct op_tr_layer layers[GPU_TR_MAX_LAYERS];
    struct tr_lin qkv, ff1, ff2;
    int split_wo;  // stage 2's items per (row, head), each d / split_wo out-projection rows
    int units;     // the most (output, warp) units of one block in any linear
};

// ---- linears ----

// This warp's unit in block blockIdx.x (its first, when a block has more units than warps):
// output row and input part; false when the warp has none.
static __device__ __forceinline__ bool tr_unit(const struct tr_lin &L, int u, int *row, int *part) {
    const int row0 = blockIdx.x * L.rows, n = min(L.rows, L.J - row0);
    if (n <= 0 || u >= n * L.split) return false;
    *row = row0 + u / L.split;
    *part = u % L.split;
    return true;
}

// The first 4 float4 per lane of this warp's first unit of W, into registers (zeros past it:
// every element is written, so the registers' earlier values are dead across the stage before).
static __device__ __forceinline__ void tr_load(const struct tr_lin &L, const float *W, float4 (&v)[4]) {
    int row = 0, part = 0;
    const bool mine = tr_unit(L, threadIdx.x / 32, &row, &part);
    const float4 *w = (const float4 *)(W + (size_t)row * L.K + (size_t)part * L.per) + threadIdx.x % 32;
#pragma unroll
    for (int u = 0; u < 4; u++) v[u] = mine && 128 * u < L.per ? w[32 * u] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
}

// outv[i * S + s] = sum_k W[row0 + i, k] hs[s, k] for the block's rows i; v holds the first
// unit's first weights (tr_load). Parts of one output are summed in part order; a one-part
// linear's warps store their sums straight into outv (0 + a, the bits of the parts' sum).
template <int MAXS>
static __device__ void tr_linear(const struct tr_lin &L, const float *W, const float *hs, int S,
                                 const float4 (&v)[4], float *red, float *outv) {
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, K4 = L.K / 4;
    const int row0 = blockIdx.x * L.rows, n = max(0, min(L.rows, L.J - row0));
    for (int u = warp; u < n * L.split; u += TR_WARPS) {
        int row, part;
        tr_unit(L, u, &row, &part);
        const float4 *w = (const float4 *)(W + (size_t)row * L.K + (size_t)part * L.per) + lane;
        const float4 *x = (const float4 *)hs + part * (L.per / 4) + lane;
        float acc[MAXS];
#pragma unroll
        for (int s = 0; s < MAXS; s++) acc[s] = 0.0f;
        for (int c = 0; c < L.per / 4; c += 128) {  // 4 float4 per lane and round
            float4 wv[4];
#pragma unroll
            for (int k = 0; k < 4; k++)
                wv[k] = c == 0 && u == warp ? v[k] : c + 32 * k < L.per / 4 ? w[c + 32 * k] : make_float4(0, 0, 0, 0);
#pragma unroll
            for (int s = 0; s < MAXS; s++) {
                if (s >= S) break;
#pragma unroll
                for (int k = 0; k < 4; k++)
                    if (c + 32 * k < L.per / 4) acc[s] += dot4(wv[k], x[(size_t)s * K4 + c + 32 * k]);
            }
        }
#pragma unroll
        for (int s = 0; s < MAXS; s++) {
            if (s >= S) break;
            const float a = warp_sum_f(acc[s]);
            if (lane == 0) {
                if (L.split == 1)
                    outv[u * S + s] = 0.0f + a;
                else
                    red[u * S + s] = a;
            }
        }
    }
    __syncthreads();
    if (L.split == 1) return;
    for (int e = threadIdx.x; e < n * S; e += blockDim.x) {
        const int i = e / S, s = e - i * S;
        float a = 0.0f;
        for (int k = 0; k < L.split; k++) a += red[(i * L.split + k) * S + s];
        outv[e] = a;
    }
    __syncthreads();
}

// ---- LayerNorm ----

// A LayerNorm's vectors at this thread's channel (threadIdx.x; d <= TR_THREADS, so a thread has
// at most one): weight and bias, loaded with the stage's weights between a barrier's arrival and
// its wait instead of after the statistics.
struct tr_chan {
    float w, b;
};

static __device__ __forceinline__ struct tr_chan tr_chan_load(const float *w, const float *b, int d) {
    struct tr_chan c = {0.0f, 0.0f};
    const int i = threadIdx.x;
    if (i < d) {
        c.w = w[i];
        c.b = b[i];
    }
    return c;
}

// hs (S, d) = LayerNorm(x) * ch.w + ch.b, x[s, i] at x[s * xs + i * xi]; block 0 stores x to
// x_out (S, d) when it is set. Thread i < d loads channel i of every row and keeps it; warp s loads
// row s whole at the same time and takes its statistics in double in one pass (lane l sums values
// l, l + 32, ... and their squares in four interleaved chains, then the warp's butterfly;
// norm.cu's kernel takes two passes, so the two agree within double's rounding, not bit for bit).
// One block barrier after the statistics and one after the normalised rows are stored.
template <int MAXS>
static __device__ void tr_layernorm(const float *x, int xs, int xi, const struct tr_chan &ch, float eps, int S, int d,
                                    float *hs, float *x_out) {
    __shared__ float mean[MAXS], inv[MAXS];
    const int t = threadIdx.x, warp = t / 32, lane = t % 32;
    float v[MAXS];  // channel t of every row, loaded before the statistics' loads are used
#pragma unroll
    for (int s = 0; s < MAXS; s++) v[s] = t < d && s < S ? x[(size_t)s * xs + (size_t)t * xi] : 0.0f;
    if (warp < S) {  // S <= GPU_TR_MAX_ROWS <= TR_WARPS
        constexpr int PER = GPU_TR_MAX_D / 32;  // a lane's values of the row at most
        float r[PER];
#pragma unroll
        for (int k = 0; k < PER; k++) {
            const int i = lane + 32 * k;
            r[k] = i < d ? x[(size_t)warp * xs + (size_t)i * xi] : 0.0f;
        }
        // one pass: the sum and the sum of squares together (a float's square is exact in double,
        // and var = E[x^2] - m^2 loses about 1e-16 * m^2 / var of var, far below f32's rounding
        // unless |m| is 1e4 standard deviations); zeros past d add nothing
        double sum[4] = {0.0, 0.0, 0.0, 0.0}, sq[4] = {0.0, 0.0, 0.0, 0.0};
#pragma unroll
        for (int k = 0; k < PER; k++) {
            const double e = r[k];
            sum[k % 4] += e;
            sq[k % 4] = fma(e, e, sq[k % 4]);
        }
        double su = (sum[0] + sum[1]) + (sum[2] + sum[3]), sqs = (sq[0] + sq[1]) + (sq[2] + sq[3]);
        for (int off = 16; off; off >>= 1) {
            su += __shfl_xor_sync(0xffffffffu, su, off);
            sqs += __shfl_xor_sync(0xffffffffu, sqs, off);
        }
        // v / d, as v * (1 / d) where d is a power of two: the same bits without a division
        const bool pow2 = (d & (d - 1)) == 0;
        const double rd = 1.0 / d;
        const auto per_channel = [&](double a) { return pow2 ? a * rd : a / d; };
        const double m = per_channel(su), var = fmax(per_channel(sqs) - m * m, 0.0);
        if (lane == 0) {
            mean[warp] = (float)m;
            inv[warp] = (float)rsqrt(var + (double)eps);  // within an ulp of double: 1 / sqrt's float
        }
    }
    __syncthreads();
    if (t < d)
#pragma unroll
        for (int s = 0; s < MAXS; s++) {
            if (s >= S) break;
            hs[(size_t)s * d + t] = __fadd_rn(__fmul_rn(__fmul_rn(__fsub_rn(v[s], mean[s]), inv[s]), ch.w), ch.b);
            if (blockIdx.x == 0 && x_out) x_out[(size_t)s * d + t] = v[s];
        }
    __syncthreads();
}

// ---- attention ----

// What the step's rows need of the batch's state, read once per launch into shared memory
// (they do not change during it): each row's slot (-1: padding) and first position, and the
// rotation of every (row, step) at every rotary frequency (rope_pair's cosines and sines, the
// same at every layer: computed once instead of at every layer's ring store).
struct tr_rows {
    int slot[GPU_TR_MAX_ROWS];
    int32_t pos0[GPU_TR_MAX_ROWS];
    float cs[GPU_TR_MAX_ROWS][GPU_ATT_ONEPASS_HD / 2], sn[GPU_TR_MAX_ROWS][GPU_ATT_ONEPASS_HD / 2];
};

// Stage 1's end: the block's qkv outputs (pairs of rows), q and k rotated (rope_pair's
// arithmetic), q into a.qkv, k and v into the rings of non-padding rows (int8 rings: into a.qkv
// as well, since a head's scale needs all its values; tr_attend stores them).
template <typename T>
static __device__ void tr_store_qkv(const struct op_attention &a, const struct op_tr_layer &w,
                                    const struct tr_lin &L, const struct tr_rows &rw, const float *outv) {
    const int d = a.d, S = a.R * a.steps, row0 = blockIdx.x * L.rows, n = max(0, min(L.rows, L.J - row0));
    for (int e = threadIdx.x; e < n / 2 * S; e += blockDim.x) {
        const int i = e / S * 2, sr = e % S, j = row0 + i, seg = j / d, c = j % d;
        const int r = sr / a.steps, st = sr % a.steps, slot = rw.slot[r];
        const int32_t pos = rw.pos0[r] + st;
        float v0 = outv[i * S + sr], v1 = outv[(i + 1) * S + sr];
        if (seg < 2) {
            const int f = (c / 2) % (a.head_dim / 2);  // the pair's rotary frequency
            const float cs = rw.cs[sr][f], sn = rw.sn[sr][f], re = v0, im = v1;
            v0 = __fsub_rn(__fmul_rn(re, cs), __fmul_rn(im, sn));
            v1 = __fadd_rn(__fmul_rn(re, sn), __fmul_rn(im, cs));
        }
        if (seg == 0 || sizeof(T) == 1) {  // q, and with int8 rings k and v (tr_attend stores them)
            float *q = a.qkv + (size_t)sr * 3 * d + (size_t)seg * d + c;
            q[0] = v0;
            q[1] = v1;
        } else if (slot >= 0) {
            void *ring = seg == 1 ? w.keys : w.values;
            const size_t at = (size_t)(pos % a.ring) * d + c;
            if (sizeof(T) == 2) {
                slot_ring<__nv_bfloat162>(ring, a.slot_stride, slot)[at / 2] = __floats2bfloat162_rn(v0, v1);
            } else {
                float *f = slot_ring<float>(ring, a.slot_stride, slot) + at;
                f[0] = v0;
                f[1] = v1;
            }
        }
    }
}

// Rows j0 .. j0 + rows - 1 (at most TR_WO_ROWS) of out_proj's columns of head h, each padded to
// TR_WO floats, toward shared memory (cp.async; stage 2 waits for them). A block issues its first
// item's first rows before it waits at the barrier that starts stage 2.
#define TR_WO (GPU_ATT_ONEPASS_HD + 4)
#define TR_WO_ROWS 128  // rows of wo staged at a time (34 KB)
#define TR_WO_LANES 4   // threads per out-projection row
#define TR_WO_PER (GPU_ATT_ONEPASS_HD / 4 / TR_WO_LANES)  // float4 of the row per thread
static __device__ void tr_stage_wo(const float *out_proj, int d, int h, int j0, int rows, float *wo) {
    const int per_row = GPU_ATT_ONEPASS_HD / 4;
    for (int e = threadIdx.x; e < rows * per_row; e += blockDim.x) {
        const int j = j0 + e / per_row, k = e % per_row;
        cp_async16(wo + (size_t)(j - j0) * TR_WO + 4 * k, out_proj + (size_t)j * d + (size_t)h * GPU_ATT_ONEPASS_HD + 4 * k);
    }
    asm volatile("cp.async.commit_group;" ::: "memory");
}

// With int8 rings: the step's new keys and values of row r and head h (in a.qkv, stage 1's)
// quantized as the ring holds them; warp 0 folds them into its softmax (the ring walk left their
// entries out: other items of this row and head read the ring while this one stores them), and
// the item that stores them (`store`: one per row and head) writes them into the ring, warp s
// step s, for the launches after this one.
template <int MAXS>
static __device__ void tr_new_int8(const struct op_attention &a, const struct op_tr_layer &w, int r, int h, int slot,
                                   int32_t pos0, bool store, const float4 (&q)[MAXS], float scale, float4 (&acc)[MAXS],
                                   float (&m)[MAXS], float (&l)[MAXS]) {
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, half = lane >> 4, li = lane & 15;
    const int d = a.d, steps = a.steps;
    if (warp == 0) {
        // round u = 0: half-warp `half` holds step half's key (when there is one), as onepass_span
        // (codes, the scales folded in by onepass_round as for ring entries)
        float4 kv[4], vv[4];
        for (int u = 0; u < 4; u++) kv[u] = vv[u] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        const int s = min(half, steps - 1);
        const float *row = a.qkv + ((size_t)r * steps + s) * 3 * d + (size_t)h * GPU_ATT_ONEPASS_HD + 4 * li;
        const float4 k = *(const float4 *)(row + d), v = *(const float4 *)(row + 2 * d);
        float km = fmaxf(fmaxf(fabsf(k.x), fabsf(k.y)), fmaxf(fabsf(k.z), fabsf(k.w)));
        float vm = fmaxf(fmaxf(fabsf(v.x), fabsf(v.y)), fmaxf(fabsf(v.z), fabsf(v.w)));
#pragma unroll
        for (int o = 8; o; o >>= 1) {
            km = fmaxf(km, __shfl_xor_sync(0xffffffffu, km, o));
            vm = fmaxf(vm, __shfl_xor_sync(0xffffffffu, vm, o));
        }
        const auto code = [](float x, float mx) { return (float)gpu_kv_int8_code(x, mx); };
        kv[0] = make_float4(code(k.x, km), code(k.y, km), code(k.z, km), code(k.w, km));
        vv[0] = make_float4(code(v.x, vm), code(v.y, vm), code(v.z, vm), code(v.w, vm));
        const int32_t pkey = onepass_key(lane) == 0 && half < steps ? pos0 + half : -1;
        onepass_round<MAXS, true>(q, kv, vv, pkey, gpu_kv_int8_scale(km), gpu_kv_int8_scale(vm), steps, pos0,
                                  a.context, scale, lane, acc, m, l);
    }
    if (store && warp < steps) {
        const float *row = a.qkv + ((size_t)r * steps + warp) * 3 * d;
        const int p = h * (GPU_ATT_ONEPASS_HD / 2) + lane;
        store_int8_pair(a, w.keys, w.values, slot, (pos0 + warp) % a.ring, p, row[d + 2 * p], row[d + 2 * p + 1],
                        row[2 * d + 2 * p], row[2 * d + 2 * p + 1]);
    }
}

// Stage 2, item b < R * n_heads * split: `split` items for each row r and head h attend
// (b = (r * n_heads + h) * split + k; the warps take consecutive shares of the ring, a half-warp
// per key as the one-pass kernel, the halves and warps merged in a fixed order), and item k
// projects the head's output through out_proj rows [k d / split, (k + 1) d / split) of the
// head's columns (wo, staged by tr_stage_wo): ypart[h] rows r * steps + s, (d) each, a 64-bit
// word a value: the float's bits, and `version` (the launch's and layer's) above them. The
// out-projection is the sum of the heads' parts, added in head order to the slice's rows of x:
// x_out = x + scale1 * y, the unfused residual add's arithmetic. The (r, k) item of the last
// head loads the heads' words until each carries this version (a 64-bit store is seen whole or
// not at all, and the word is all it needs of the other block, so relaxed loads and stores do;
// an earlier layer's or launch's word has another version). It waits only on items of lower
// index, so where a block takes several items (in index order: a chip with fewer SMs than
// items) the lowest unfinished item is always one its block has reached and none waits forever.
template <typename T>
static __device__ void tr_attend(const struct op_attention &a, const struct op_tr_layer &w, int split, int item,
                                 const struct tr_rows &rw, float *wo, uint64_t *ypart, uint32_t version,
                                 const float *x, float *x_out) {
    typedef typename ring4<T>::unit unit;
    __shared__ float sm_m[TR_WARPS][GPU_TR_MAX_STEPS], sm_l[TR_WARPS][GPU_TR_MAX_STEPS];
    __shared__ float4 sm_acc[TR_WARPS][GPU_TR_MAX_STEPS][GPU_ATT_ONEPASS_HD / 4];
    __shared__ float4 att[GPU_TR_MAX_STEPS][GPU_ATT_ONEPASS_HD / 4];
    const int warp = threadIdx.x / 32, li = threadIdx.x % 16;
    const int rh = item / split, r = rh / a.n_heads, h = rh % a.n_heads, d = a.d, d4 = d / 4, steps = a.steps;
    const int rows = d / split, j0 = item % split * rows;
    const int slot = rw.slot[r];
    float4 q[GPU_TR_MAX_STEPS], acc[GPU_TR_MAX_STEPS];
    float m[GPU_TR_MAX_STEPS], l[GPU_TR_MAX_STEPS];
#pragma unroll
    for (int s = 0; s < GPU_TR_MAX_STEPS; s++) {
        q[s] = s < steps ? *((const float4 *)(a.qkv + ((size_t)r * steps + s) * 3 * d + (size_t)h * GPU_ATT_ONEPASS_HD) + li)
                         : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        acc[s] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        m[s] = -INFINITY;
        l[s] = 0.0f;
    }
    if (slot >= 0) {
        const size_t base = (size_t)slot * a.slot_stride;
        const int32_t pos0 = rw.pos0[r], *positions = a.positions + base;
        const unit *keys = (const unit *)(slot_ring<T>(w.keys, a.slot_stride, slot) + (size_t)h * GPU_ATT_ONEPASS_HD) + li;
        const unit *values = (const unit *)(slot_ring<T>(w.values, a.slot_stride, slot) + (size_t)h * GPU_ATT_ONEPASS_HD) + li;
        const int share = (a.ring + TR_WARPS - 1) / TR_WARPS;
        const int j_begin = warp * share, j_end = min(a.ring, j_begin + share);
        const float scale = 1.0f / sqrtf((float)GPU_ATT_ONEPASS_HD);
        const int32_t newest = ring4<T>::scaled ? pos0 : INT32_MAX;
        onepass_span<GPU_TR_MAX_STEPS, T, true>(keys, values, head_scales<T>(a, w.keys, w.values, slot, h), positions, 0,
                                                a.ring, j_begin, j_end, d4, q, steps, pos0, a.context, scale, acc, m,
                                                l, newest);
        if (ring4<T>::scaled) tr_new_int8(a, w, r, h, slot, pos0, item % split == 0, q, scale, acc, m, l);
    }
    // the halves, then the warps in order (as the one-pass kernel); a padding row gives zeros
    onepass_store_warp<GPU_TR_MAX_STEPS>(steps, m, l, acc, sm_m[warp], sm_l[warp], sm_acc[warp][0]);
    __syncthreads();
    for (int e = threadIdx.x; e < steps * (GPU_ATT_ONEPASS_HD / 4); e += blockDim.x) {
        const int s = e / (GPU_ATT_ONEPASS_HD / 4), i4 = e % (GPU_ATT_ONEPASS_HD / 4);
        att[s][i4] = onepass_merge_warps(TR_WARPS, GPU_TR_MAX_STEPS, sm_m[0], sm_l[0], sm_acc[0][0], s, i4);
    }
    // ypart[h][r * steps + s][j] = wo[j] . att[s], TR_WO_ROWS rows of wo staged at a time (the
    // first chunk before the stage's barrier)
    const size_t S = (size_t)a.R * steps;
    for (int c0 = 0; c0 < rows; c0 += TR_WO_ROWS) {
        const int n = min(TR_WO_ROWS, rows - c0);
        if (c0 > 0) {
            __syncthreads();
            tr_stage_wo(w.out_proj, d, h, j0 + c0, n, wo);
        }
        asm volatile("cp.async.wait_all;" ::: "memory");
        __syncthreads();
        // TR_WO_LANES consecutive threads per row, each a contiguous quarter of the head's
        // dimensions, their sums added by a butterfly (the same sum in every lane of the group;
        // n is a multiple of 32, so every warp takes whole rows)
        for (int e = threadIdx.x; e < n * TR_WO_LANES; e += blockDim.x) {
            const int j = j0 + c0 + e / TR_WO_LANES, q4 = e % TR_WO_LANES * TR_WO_PER;
            const float4 *wr = (const float4 *)(wo + (size_t)(j - j0 - c0) * TR_WO) + q4;
            float y[GPU_TR_MAX_STEPS] = {};
#pragma unroll
            for (int k = 0; k < TR_WO_PER; k++) {
                const float4 wk = wr[k];
#pragma unroll
                for (int s = 0; s < GPU_TR_MAX_STEPS; s++)
                    if (s < steps) y[s] += dot4(wk, att[s][q4 + k]);
            }
#pragma unroll
            for (int s = 0; s < GPU_TR_MAX_STEPS; s++)
#pragma unroll
                for (int o = TR_WO_LANES / 2; o > 0; o /= 2) y[s] += __shfl_xor_sync(0xffffffffu, y[s], o);
            // (s bounded by the constant, so that y stays in registers instead of local memory)
            if (e % TR_WO_LANES == 0)
#pragma unroll
                for (int s = 0; s < GPU_TR_MAX_STEPS; s++)
                    if (s < steps)
                        st_relaxed_u64(ypart + ((size_t)h * S + (size_t)r * steps + s) * d + j,
                                       (uint64_t)version << 32 | __float_as_uint(y[s]));
        }
    }
    if (h != a.n_heads - 1) return;
    for (int e = threadIdx.x; e < steps * rows; e += blockDim.x) {
        const int j = j0 + e % rows;
        const size_t at = ((size_t)r * steps + e / rows) * d + j;
        uint64_t yp[GPU_TR_MAX_HEADS];  // every part's load issued before the first is looked at
#pragma unroll
        for (int p = 0; p < GPU_TR_MAX_HEADS; p++)
            yp[p] = p < a.n_heads ? ld_relaxed_u64(ypart + p * S * d + at) : (uint64_t)version << 32;
        const float xv = __ldcg(x + at), sc = w.scale1[j];
        for (bool all = false; !all;) {
            all = true;
#pragma unroll
            for (int p = 0; p < GPU_TR_MAX_HEADS; p++)
                if (yp[p] >> 32 != version) {
                    all = false;
                    yp[p] = ld_relaxed_u64(ypart + p * S * d + at);
                }
        }
        float ys = __uint_as_float((uint32_t)yp[0]);
#pragma unroll
        for (int p = 1; p < GPU_TR_MAX_HEADS; p++)
            if (p < a.n_heads) ys = __fadd_rn(ys, __uint_as_float((uint32_t)yp[p]));
        x_out[at] = __fadd_rn(xv, __fmul_rn(sc, ys));
    }
}

// ---- the kernel ----

// Stage 3's end: dst[s, row0 + i] (row stride ld) = gelu(outv[i * S + s]).
static __device__ void tr_store_gelu(const struct tr_lin &L, const float *outv, int S, float *dst, int ld) {
    const int row0 = blockIdx.x * L.rows, n = max(0, min(L.rows, L.J - row0));
    for (int e = threadIdx.x; e < n * S; e += blockDim.x) {
        const int i = e / S, s = e - i * S;
        dst[(size_t)s * ld + row0 + i] = gelu_f(outv[e]);
    }
}

// Stage 4's residual add for the block's rows of linear2: x_out[s, row0 + i] = x[s, row0 + i] +
// scale[row0 + i] * outv[i * S + s] (the unfused residual add's arithmetic). A thread's first
// element's x and scale are requested before the linear (tr_resid_load), the rest, if any, where
// they are used.
struct tr_resid {
    float x, scale;
};

static __device__ __forceinline__ struct tr_resid tr_resid_load(const struct tr_lin &L, int S, int d, const float *x,
                                                                const float *scale) {
    const int row0 = blockIdx.x * L.rows, n = max(0, min(L.rows, L.J - row0)), e = threadIdx.x;
    struct tr_resid r = {0.0f, 0.0f};
    if (e < n * S) {
        const int i = e / S, s = e - i * S;
        r.x = __ldcg(x + (size_t)s * d + row0 + i);
        r.scale = scale[row0 + i];
    }
    return r;
}

static __device__ void tr_store_resid(const struct tr_lin &L, const float *outv, int S, int d, const float *x,
                                      const float *scale, const struct tr_resid &first, float *x_out) {
    const int row0 = blockIdx.x * L.rows, n = max(0, min(L.rows, L.J - row0));
    for (int e = threadIdx.x; e < n * S; e += blockDim.x) {
        const int i = e / S, s = e - i * S;
        const size_t at = (size_t)s * d + row0 + i;
        const bool mine = e == (int)threadIdx.x;
        x_out[at] = __fadd_rn(mine ? first.x : __ldcg(x + at), __fmul_rn(mine ? first.scale : scale[row0 + i], outv[e]));
    }
}

// MAXS: the most rows (2: one stream's step, whose registers it sizes; or GPU_TR_MAX_ROWS).
template <typename T, int MAXS>
static __global__ void __launch_bounds__(TR_THREADS, 1) transformer_kernel(const struct tr_args A) {
    extern __shared__ float4 tr_smem[];
    const struct op_transformer &t = A.t;
    const struct op_attention &a = t.att;
    const int d = a.d, f = t.d_ff, S = a.R * a.steps, n_layers = t.n_layers;
    float *hs = (float *)tr_smem;                          // (S, max(d, f))
    const size_t us = ((size_t)A.units * S + 3) & ~(size_t)3;
    float *outv = hs + (size_t)S * (d > f ? d : f);        // (units, S)
    float *red = outv + us;                                // (units, S)
    float *wo = red + us;                                  // (TR_WO_ROWS, TR_WO): stage 2's out_proj columns
    __shared__ struct tr_rows rw;
    unsigned stage = 0;  // barriers passed
    float4 wv[4] = {};
    tr_load(A.qkv, A.layers[0].in_proj, wv);
    struct tr_chan ch = tr_chan_load(A.layers[0].norm1_w, A.layers[0].norm1_b, d);
    for (int r = threadIdx.x; r < a.R; r += blockDim.x) {
        const int slot = a.row_slot[r];
        rw.slot[r] = slot;
        rw.pos0[r] = slot < 0 ? 0 : a.next_pos[(size_t)slot * a.slot_stride];
    }
    __syncthreads();
    for (int e = threadIdx.x; e < S * (a.head_dim / 2); e += blockDim.x) {
        const int sr = e / (a.head_dim / 2), i = e % (a.head_dim / 2);
        const float angle = __fmul_rn(a.freq[i], (float)(rw.pos0[sr / a.steps] + sr % a.steps));
        rw.cs[sr][i] = cosf(angle);
        rw.sn[sr][i] = sinf(angle);
    }
    __syncthreads();
    // the step's positions (positions_kernel's work; first read after a barrier)
    if (blockIdx.x == 0)
        for (int e = threadIdx.x; e < S; e += blockDim.x) {
            const int r = e / a.steps, s = e % a.steps, slot = rw.slot[r];
            if (slot < 0) continue;
            const int32_t pos = rw.pos0[r] + s;
            a.positions[(size_t)slot * a.slot_stride + pos % a.ring] = pos;
        }
    const uint32_t launch = grid_launches(t.barrier);  // (the parts' versions)
    int cur = 0;  // t.x[cur]: the residual stream
    const int items = a.R * a.n_heads * A.split_wo, wo_rows = d / A.split_wo;
    for (int l = 0; l < n_layers; l++) {
        const struct op_tr_layer &w = A.layers[l];
        // 1. LN1, qkv, rotation and ring store
        if (l == 0) {
            tr_layernorm<MAXS>(t.in, 1, S, ch, t.eps, S, d, hs, t.x[0]);
        } else {
            tr_layernorm<MAXS>(t.x[cur], d, 1, ch, t.eps, S, d, hs, NULL);
        }
        tr_linear<MAXS>(A.qkv, w.in_proj, hs, S, wv, red, outv);
        tr_store_qkv<T>(a, w, A.qkv, rw, outv);
        grid_arrive(t.barrier);
        if (blockIdx.x < items)  // the first item's columns
            tr_stage_wo(w.out_proj, d, blockIdx.x / A.split_wo % a.n_heads, blockIdx.x % A.split_wo * wo_rows,
                        min(wo_rows, TR_WO_ROWS), wo);
        grid_wait(t.barrier, ++stage);
        // 2. attention and out_proj, a block per (row, head, slice) -> the heads' parts of y;
        // x += scale1 * y
        for (int item = blockIdx.x; item < items; item += gridDim.x) {
            if (item != blockIdx.x) {  // more items than blocks (a chip of few SMs)
                __syncthreads();
                tr_stage_wo(w.out_proj, d, item / A.split_wo % a.n_heads, item % A.split_wo * wo_rows,
                            min(wo_rows, TR_WO_ROWS), wo);
            }
            tr_attend<T>(a, w, A.split_wo, item, rw, wo, t.part, grid_version(launch, n_layers, l),
                         t.x[cur], t.x[cur ^ 1]);
        }
        grid_arrive(t.barrier);
        tr_load(A.ff1, w.linear1, wv);
        ch = tr_chan_load(w.norm2_w, w.norm2_b, d);
        grid_wait(t.barrier, ++stage);
        // 3. LN2, gelu(linear1) -> ff
        cur ^= 1;
        tr_layernorm<MAXS>(t.x[cur], d, 1, ch, t.eps, S, d, hs, NULL);
        tr_linear<MAXS>(A.ff1, w.linear1, hs, S, wv, red, outv);
        tr_store_gelu(A.ff1, outv, S, t.ff, f);
        grid_arrive(t.barrier);
        tr_load(A.ff2, w.linear2, wv);
        grid_wait(t.barrier, ++stage);
        // 4. linear2 -> y (its input read where stage 3 stored it); x += scale2 * y for the
        // block's rows (their x and scale2 requested first, used after the linear)
        const struct tr_resid rs = tr_resid_load(A.ff2, S, d, t.x[cur], w.scale2);
        tr_linear<MAXS>(A.ff2, w.linear2, t.ff, S, wv, red, outv);
        tr_store_resid(A.ff2, outv, S, d, t.x[cur], w.scale2, rs, t.x[cur ^ 1]);
        cur ^= 1;
        grid_arrive(t.barrier);
        if (l + 1 < n_layers) {
            tr_load(A.qkv, A.layers[l + 1].in_proj, wv);
            ch = tr_chan_load(A.layers[l + 1].norm1_w, A.layers[l + 1].norm1_b, d);
        }
        grid_wait(t.barrier, ++stage);
    }
    // out (d, S): the last layer's x transposed
    const float *x = t.x[cur];
    for (int e = blockIdx.x * blockDim.x + threadIdx.x; e < S * d; e += gridDim.x * blockDim.x) {
        const int s = e / d, c = e - s * d;
        t.out[(size_t)c * S + s] = x[e];
    }
    grid_exit(t.barrier);
}

// ---- launch ----

static struct tr_lin lin_for(int J, int K, int blocks) {
    struct tr_lin L = {J, K, (J + blocks - 1) / blocks, 1, K};
    L.rows += L.rows & 1;
    while (L.rows * L.split * 2 <= TR_WARPS && (K / (L.split * 2)) % 128 == 0) L.split *= 2;
    L.per = K / L.split;
    return L;
}

static int lin_units(const struct tr_lin &L) { return L.rows * L.split; }

extern "C" int mimi_cuda_transformer(const struct op_transformer *t, struct gpu_exec *ex) {
    const struct op_attention *a = &t->att;
    const int S = a->R * a->steps, d = a->d, f = t->d_ff;
    if (!gpu_transformer_fits(S, a->steps, d, f, a->head_dim, t->n_layers) || t->n_layers < 1 ||
        a->n_heads * a->head_dim != d) {
        if (ex->errmsg) snprintf(ex->errmsg, ex->errlen, "transformer: %d rows of width %d / %d do not fit", S, d, f);
        return MIMI_EINVAL;
    }
    const int blocks = device_sms();
    if (!blocks) return launch_status(ex, "transformer (device)");
    struct tr_args A = {};
    A.t = *t;
    for (int l = 0; l < t->n_layers; l++) A.layers[l] = t->layers[l];
    A.split_wo = 1;
    while (A.split_wo < GPU_TR_MAX_SPLIT_WO && a->R * a->n_heads * A.split_wo * 2 <= blocks &&
           d % (A.split_wo * 2 * 32) == 0)
        A.split_wo *= 2;
    A.qkv = lin_for(3 * d, d, blocks);
    A.ff1 = lin_for(f, d, blocks);
    A.ff2 = lin_for(d, f, blocks);
    A.units = max(lin_units(A.qkv), max(lin_units(A.ff1), lin_units(A.ff2)));
    const size_t us = ((size_t)A.units * S + 3) & ~(size_t)3;
    const size_t smem = sizeof(float) * ((size_t)S * (d > f ? d : f) + 2 * us + (size_t)min(d / A.split_wo, TR_WO_ROWS) * TR_WO);
    void (*kernel)(const struct tr_args) =
        S <= 2 ? (a->kv_int8   ? transformer_kernel<int8_t, 2>
                  : a->kv_bf16 ? transformer_kernel<__nv_bfloat16, 2>
                               : transformer_kernel<float, 2>)
               : (a->kv_int8   ? transformer_kernel<int8_t, GPU_TR_MAX_ROWS>
                  : a->kv_bf16 ? transformer_kernel<__nv_bfloat16, GPU_TR_MAX_ROWS>
                               : transformer_kernel<float, GPU_TR_MAX_ROWS>);
    return grid_launch(kernel, blocks, TR_THREADS, smem, A, ex, "transformer");
}
