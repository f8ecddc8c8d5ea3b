/*
 * attention.cu - the transformer's streaming attention over per-slot KV rings (spec 2, 5.4;
 * reference src/nn/transformer.c): marking the step's positions, rotary embedding of q and k
 * with the store of k and v into the ring, and softmax(q k^T / sqrt(hd)) v over the window.
 *
 * Ring rule: query position p sees entry j when 0 <= p - positions[j] < context; positions[j]
 * is -1 (0xFFFFFFFF) until written, so a fresh ring never aliases position 0. All keys of a step
 * are stored before any query runs, like the reference.
 *
 * Ring storage: f32, or bfloat16 with kv_bf16 (MIMI_PRECISION_FAST_BF16_KV), read by the one-pass
 * and tiled (attention_tiled.cu) kernels only, or int8 with per-head scales with kv_int8 (ops.h),
 * read by the one-pass and short mma kernels only; arithmetic is f32 in the one-pass kernel.
 */
#include <stdint.h>

#include "attention.cuh"

#define ATT_THREADS 512

// ---- positions ----

static __global__ void positions_kernel(const struct op_attention a) {
    pdl_begin();
    FOR_EACH(idx, (size_t)a.R * a.steps) {
        int r = (int)(idx / a.steps), s = (int)(idx - (size_t)r * a.steps);
        int slot = a.row_slot[r];
        if (slot < 0) continue;
        int32_t pos = a.next_pos[(size_t)slot * a.slot_stride] + s;
        a.positions[(size_t)slot * a.slot_stride + pos % a.ring] = pos;
    }
}

extern "C" int mimi_cuda_positions(const struct op_attention *a, struct gpu_exec *ex) {
    pdl_launch(positions_kernel, grid_for((size_t)a->R * a->steps, 128), 128, 0, ex, *a);
    return launch_status(ex, "positions");
}

// ---- rotary embedding and ring store ----

// One thread per (query row, pair).
static __global__ void rope_kv_kernel(const struct op_attention a) {
    pdl_begin();
    const int half = a.d / 2;
    FOR_EACH(idx, (size_t)a.R * a.steps * half) {
        size_t row = idx / half;
        int p = (int)(idx - row * half), r = (int)(row / a.steps), s = (int)(row - (size_t)r * a.steps);
        rope_pair(a, r, s, p);
    }
}

static int launch_rope_kv(const struct op_attention *a, struct gpu_exec *ex) {
    pdl_launch(rope_kv_kernel, grid_for((size_t)a->R * a->steps * (a->d / 2), 256), 256, 0, ex, *a);
    return launch_status(ex, "rope_kv");
}

// ---- attention ----

static __host__ __device__ size_t align4(size_t n) { return (n + 3) & ~(size_t)3; }

// Shared floats of one block: q (steps, hd), probabilities (steps, ring), partial outputs
// (parts, steps, hd), sums (steps).
static size_t att_parts(const struct op_attention *a) {
    int per = a->steps * a->head_dim / 4;
    return per >= ATT_THREADS ? 1 : ATT_THREADS / per;
}

static size_t att_smem(const struct op_attention *a) {
    size_t sh = (size_t)a->steps * a->head_dim;
    return sizeof(float) * (align4(sh) + align4((size_t)a->steps * a->ring) + att_parts(a) * sh + align4(a->steps));
}

// One block per (row, head), all steps of the row together (they share the slot's keys):
// a thread per key for the scores, a warp per step for the softmax, then (step, 4 dims, part)
// threads for the weighted sum of values, reduced over parts in a fixed order.
static __global__ void __launch_bounds__(ATT_THREADS) attention_kernel(const struct op_attention a, int parts) {
    pdl_begin();
    extern __shared__ float4 smem4[];
    int r, h;
    block_row_head(a.n_heads, r, h);
    const int steps = a.steps, hd = a.head_dim, d = a.d, ring = a.ring;
    const int hd4 = hd / 4, per = steps * hd4;
    float *q = (float *)smem4, *prob = q + align4((size_t)steps * hd);
    float4 *part = (float4 *)(prob + align4((size_t)steps * ring));
    float *sums = (float *)(part + (size_t)parts * per);
    const int slot = a.row_slot[r];
    float *out = a.out + (size_t)r * steps * d + (size_t)h * hd;
    if (slot < 0) {
        for (int i = threadIdx.x; i < steps * hd; i += blockDim.x) out[(size_t)(i / hd) * d + i % hd] = 0.0f;
        return;
    }
    const size_t base = (size_t)slot * a.slot_stride;
    const int32_t pos0 = a.next_pos[base];
    const int32_t *positions = a.positions + base;
    const float *keys = slot_ring<float>(a.keys, a.slot_stride, slot) + (size_t)h * hd;
    const float4 *values = (const float4 *)(slot_ring<float>(a.values, a.slot_stride, slot) + (size_t)h * hd);
    for (int i = threadIdx.x; i < steps * hd; i += blockDim.x)
        q[i] = a.qkv[((size_t)r * steps + i / hd) * 3 * d + (size_t)h * hd + i % hd];
    __syncthreads();
    // scores, -inf outside the window: a group of hd/4 lanes per key, one float4 each, so a
    // key's row is read in one coalesced access; groups walk the ring four keys at a time
    const float scale = 1.0f / sqrtf((float)hd);
    const int group = hd4 <= 32 ? hd4 : 32, n_groups = blockDim.x / group;
    const int g = threadIdx.x / group, gl = threadIdx.x % group;
    const unsigned mask = group == 32 ? 0xffffffffu : ((1u << group) - 1) << (threadIdx.x % 32 / group * group);
    for (int j0 = g; j0 < ring; j0 += 4 * n_groups) {
        float4 kv[4][2];
#pragma unroll
        for (int u = 0; u < 4; u++) {
            int j = j0 + u * n_groups;
#pragma unroll
            for (int c = 0; c < 2; c++) {
                int i4 = gl + c * group;
                kv[u][c] = j < ring && i4 < hd4 ? ((const float4 *)(keys + (size_t)j * d))[i4] : make_float4(0, 0, 0, 0);
            }
        }
#pragma unroll
        for (int u = 0; u < 4; u++) {
            int j = j0 + u * n_groups;
            for (int s = 0; s < steps; s++) {
                const float4 *q4 = (const float4 *)(q + (size_t)s * hd);
                float dot = 0.0f;
#pragma unroll
                for (int c = 0; c < 2; c++) {
                    int i4 = gl + c * group;
                    if (i4 < hd4) {
                        float4 qv = q4[i4];
                        dot += qv.x * kv[u][c].x + qv.y * kv[u][c].y + qv.z * kv[u][c].z + qv.w * kv[u][c].w;
                    }
                }
                for (int off = group / 2; off; off >>= 1) dot += __shfl_xor_sync(mask, dot, off);
                if (gl == 0 && j < ring) {
                    const int32_t pk = positions[j], age = pos0 + s - pk;
                    prob[(size_t)s * ring + j] = pk >= 0 && age >= 0 && age < a.context ? dot * scale : -INFINITY;
                }
            }
        }
    }
    __syncthreads();
    // softmax numerators and sums, one warp per step
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, n_warps = blockDim.x / 32;
    for (int s = warp; s < steps; s += n_warps) {
        float *ps = prob + (size_t)s * ring, mx = -INFINITY, sum = 0.0f;
        for (int j = lane; j < ring; j += 32) mx = fmaxf(mx, ps[j]);
        for (int off = 16; off; off >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
        for (int j = lane; j < ring; j += 32) {
            float e = ps[j] == -INFINITY ? 0.0f : expf(ps[j] - mx);
            ps[j] = e;
            sum += e;
        }
        sum = warp_sum_f(sum);
        if (lane == 0) sums[s] = sum;
    }
    __syncthreads();
    // weighted values: item (part, step, 4 dims) over keys part, part + parts, ...; four keys per
    // round so that four loads are in flight. A zero probability (outside the window) adds
    // 0 * v, and v is finite: every ring entry is zeroed at reset and only finite values are
    // stored (the reference skips those keys; the sum is the same).
    for (int it = threadIdx.x; it < parts * per; it += blockDim.x) {
        int pt = it / per, rem = it - pt * per, s = rem / hd4, i4 = rem - s * hd4;
        const float *ps = prob + (size_t)s * ring;
        const float inv = 1.0f / sums[s];
        float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        int j = pt;
        for (; j + 3 * parts < ring; j += 4 * parts) {
            float4 v[4];
            float w[4];
#pragma unroll
            for (int u = 0; u < 4; u++) {
                v[u] = values[(size_t)(j + u * parts) * (d / 4) + i4];
                w[u] = ps[j + u * parts] * inv;
            }
#pragma unroll
            for (int u = 0; u < 4; u++)
                acc.x += w[u] * v[u].x, acc.y += w[u] * v[u].y, acc.z += w[u] * v[u].z, acc.w += w[u] * v[u].w;
        }
        for (; j < ring; j += parts) {
            float w = ps[j] * inv;
            float4 v = values[(size_t)j * (d / 4) + i4];
            acc.x += w * v.x, acc.y += w * v.y, acc.z += w * v.z, acc.w += w * v.w;
        }
        part[it] = acc;
    }
    __syncthreads();
    for (int it = threadIdx.x; it < per; it += blockDim.x) {
        float4 acc = part[it];
        for (int pt = 1; pt < parts; pt++) {
            float4 v = part[(size_t)pt * per + it];
            acc.x += v.x, acc.y += v.y, acc.z += v.z, acc.w += v.w;
        }
        int s = it / hd4, i4 = it - s * hd4;
        *(float4 *)(out + (size_t)s * d + 4 * i4) = acc;
    }
}

// ---- attention, one pass (head_dim 64: every Mimi and Pocket transformer) ----

// Warps per block: the pipelined variant (PIPE, small steps) 8, the others ATTF_WARPS_WIDE. At
// 2048 streams (eager, encode + decode) 8 warps took 64.2 ms per strict step and 2 took 62.2
// (bf16 rings: 27.3 and 26.5): smaller blocks, more of them resident on each SM.
#define ATTF_WARPS 8
#ifndef ATTF_WARPS_WIDE
#define ATTF_WARPS_WIDE 2
#endif
#define ATTF_BLOCK_WARPS(PIPE) ((PIPE) ? ATTF_WARPS : ATTF_WARPS_WIDE)
// Blocks each SM must hold (0: no bound): with bfloat16 rings and two query steps per block,
// 1024 threads (64 registers) instead of the 768 that 80 registers allow; at 2048 streams this
// took that attention from 3.76 to 3.44 ms per step. int8 rings: 768 threads (80 registers, as
// the compiler chose before a lane loaded only its own key's position and scales; 96 without
// the bound; 64 spill). f32 rings, bound by bandwidth, lost 2-4% with a bound and keep the
// compiler's choice. The pipelined variant is unbounded.
#define ATTF_MIN_BLOCKS(MAXS, T, PIPE)                                                                   \
    ((MAXS) == 2 && !(PIPE) && sizeof(T) == 2   ? 32 / ATTF_BLOCK_WARPS(PIPE)                            \
     : (MAXS) == 2 && !(PIPE) && sizeof(T) == 1 ? 24 / ATTF_BLOCK_WARPS(PIPE)                            \
                                                : 0)
#define ATTF_HD GPU_ATT_ONEPASS_HD

// One block per (row, head), W warps each owning a contiguous share of the ring. A warp
// reads two keys at a time (a half-warp per key, a float4 of its row per lane) together with the
// same two value rows, four pairs per round so that 8 loads per lane are in flight, and keeps a
// running maximum, sum and weighted value sum per step (the online softmax). Halves and warps are
// then merged in a fixed order. Keys and values are read once, in one pass; the result differs
// from the two-pass kernel above only in rounding. T: the rings' element type. With PIPE a warp
// issues the next round's loads before this round's arithmetic (more registers, fewer blocks
// per SM): same results, for steps whose few blocks wait on memory latency.
template <int MAXS, typename T, bool PIPE>
static __global__ void __launch_bounds__(32 * ATTF_BLOCK_WARPS(PIPE), ATTF_MIN_BLOCKS(MAXS, T, PIPE)) attention_onepass_kernel(const struct op_attention a) {
    typedef typename ring4<T>::unit unit;
    constexpr int W = ATTF_BLOCK_WARPS(PIPE);
    __shared__ float sm_m[W][MAXS], sm_l[W][MAXS];
    __shared__ float4 sm_acc[W][MAXS][ATTF_HD / 4];
    // this block's queries: steps s0 .. s0 + steps - 1 of the row
    int r, h;
    block_row_head(a.n_heads, r, h);
    const int s0 = blockIdx.z * MAXS, steps = min(MAXS, a.steps - s0);
    const int d = a.d, ring = a.ring;
    const int warp = threadIdx.x / 32, li = threadIdx.x % 16;
    const int slot = a.row_slot[r];  // (set by the step's input copy, before any kernel)
    if (a.R <= GPU_SKINNY_MAX && slot >= 0)  // small steps: this head's share of the rings
        for (int j = threadIdx.x; j < ring; j += blockDim.x) {
            const size_t at = (size_t)j * d + (size_t)h * ATTF_HD;
            prefetch_l2(slot_ring<T>(a.keys, a.slot_stride, slot) + at, sizeof(T) * ATTF_HD, 0, 1);
            prefetch_l2(slot_ring<T>(a.values, a.slot_stride, slot) + at, sizeof(T) * ATTF_HD, 0, 1);
        }
    pdl_begin();
    float *out = a.out + ((size_t)r * a.steps + s0) * d + (size_t)h * ATTF_HD;
    if (slot < 0) {
        for (int i = threadIdx.x; i < steps * ATTF_HD; i += blockDim.x) out[(size_t)(i / ATTF_HD) * d + i % ATTF_HD] = 0.0f;
        return;
    }
    if (a.rope) {
        // rope_kv for this (row, head): every key of the step is in the ring before any query
        // reads it, and the only queries that read this head's new keys are this block's (the
        // launch passes `rope` only when one block takes all the row's steps)
        for (int e = threadIdx.x; e < a.steps * (ATTF_HD / 2); e += blockDim.x)
            rope_pair(a, r, e / (ATTF_HD / 2), h * (ATTF_HD / 2) + e % (ATTF_HD / 2));
        __syncthreads();
    }
    const size_t base = (size_t)slot * a.slot_stride;
    const int32_t pos0 = a.next_pos[base];
    const int32_t *positions = a.positions + base;
    const unit *keys = (const unit *)(slot_ring<T>(a.keys, a.slot_stride, slot) + (size_t)h * ATTF_HD) + li;
    const unit *values = (const unit *)(slot_ring<T>(a.values, a.slot_stride, slot) + (size_t)h * ATTF_HD) + li;
    const float scale = 1.0f / sqrtf((float)ATTF_HD);
    float4 q[MAXS], acc[MAXS];
    float m[MAXS], l[MAXS];
#pragma unroll
    for (int s = 0; s < MAXS; s++) {
        q[s] = s < steps ? *((const float4 *)(a.qkv + ((size_t)r * a.steps + s0 + s) * 3 * d + (size_t)h * ATTF_HD) + li)
                         : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        acc[s] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        m[s] = -INFINITY;
        l[s] = 0.0f;
    }
    // The ring entries this block reads: entries lo, lo + 1, ... (mod ring), span of them. With
    // one block per row, the whole ring; with several (long steps: whole-signal passes), only the
    // context + steps - 1 positions its queries can see, oldest first (each such position's
    // entry holds it or an older, invisible one; at 64 frames a step that is 253 of 378).
    int lo = 0, span = ring;
    if (gridDim.z > 1) {
        const int32_t oldest = pos0 + s0 - a.context + 1;
        span = min(ring, a.context + steps - 1);
        lo = ((oldest % ring) + ring) % ring;
    }
    const int share = (span + W - 1) / W;
    const int j_begin = warp * share, j_end = min(span, j_begin + share);
    onepass_span<MAXS, T, PIPE>(keys, values, head_scales<T>(a, a.keys, a.values, slot, h), positions, lo, ring, j_begin,
                                j_end, d / 4, q, steps, pos0 + s0, a.context, scale, acc, m, l);
    // merge the two halves of the warp, then the warps through shared memory
    onepass_store_warp<MAXS>(steps, m, l, acc, sm_m[warp], sm_l[warp], sm_acc[warp][0]);
    __syncthreads();
    for (int t = threadIdx.x; t < steps * (ATTF_HD / 4); t += blockDim.x) {
        const int s = t / (ATTF_HD / 4), i4 = t % (ATTF_HD / 4);
        *(float4 *)(out + (size_t)s * d + 4 * i4) = onepass_merge_warps(W, MAXS, sm_m[0], sm_l[0], sm_acc[0][0], s, i4);
    }
}

extern "C" size_t mimi_cuda_attention_smem(int steps, int head_dim, int ring) {
    struct op_attention a = {};
    a.steps = steps, a.head_dim = head_dim, a.ring = ring;
    return head_dim == ATTF_HD ? 0 : att_smem(&a);
}

static int onepass_fits(const struct op_attention *a) {
    return a->head_dim == ATTF_HD && a->steps >= 1 && a->d % 4 == 0 &&
           (uintptr_t)a->keys % 16 == 0 && (uintptr_t)a->values % 16 == 0 && (uintptr_t)a->qkv % 16 == 0 &&
           (uintptr_t)a->out % 16 == 0 && a->slot_stride % 4 == 0;
}

// The rotation and the KV store of `a` (when it has them) as a launch of their own; *b is `a`
// without them, for the attention launch that follows.
static int rope_apart(const struct op_attention *a, struct op_attention *b, struct gpu_exec *ex) {
    *b = *a;
    if (!a->rope) return MIMI_OK;
    b->rope = 0;
    return launch_rope_kv(a, ex);
}

// The one-pass kernel over rings of element type T, `per` queries a block (2 or 4), pipelined
// (`pipe`) for two.
template <typename T>
static void launch_onepass(const struct op_attention &b, dim3 grid, int threads, int per, bool pipe,
                           struct gpu_exec *ex) {
    if (per == 2 && pipe) pdl_launch(attention_onepass_kernel<2, T, true>, grid, threads, 0, ex, b);
    else if (per == 2) pdl_launch(attention_onepass_kernel<2, T, false>, grid, threads, 0, ex, b);
    else pdl_launch(attention_onepass_kernel<4, T, false>, grid, threads, 0, ex, b);
}

static int launch_attention(const struct op_attention *a, struct gpu_exec *ex) {
    dim3 grid = row_head_grid(a->R, a->n_heads, 1);
    struct op_attention b = *a;
    if (!a->kv_int8 && attention_tiled_fits(a)) {
        // long steps (whole-signal passes): tiles of queries, after the rotation and KV store;
        // on bf16 tensor cores in MIMI_PRECISION_FAST_BF16
        const int rc = rope_apart(a, &b, ex);
        return rc ? rc : attention_mma_fits(&b) ? attention_mma(&b, ex) : attention_tiled(&b, ex);
    }
    if (attention_mma_short_fits(a)) return attention_mma_short(a, ex);
    if (onepass_fits(a)) {
        // up to 4 queries per block; with more blocks per row than one, the rotation and the
        // KV store run first as their own launch (every block reads all the row's new keys)
        const int per = a->steps <= 2 ? 2 : 4;
        grid.z = (a->steps + per - 1) / per;
        if (grid.z > 1) {
            const int rc = rope_apart(a, &b, ex);
            if (rc) return rc;
        }
        // small steps wait on memory latency: pipelined (one stream 0.550 -> 0.543 ms encode);
        // at 2048 streams the pipelined f32 kernel (116 registers, 2 blocks per SM) lost 9%
        const bool pipe = a->R <= GPU_SKINNY_MAX;
        const int threads = 32 * ATTF_BLOCK_WARPS(pipe && per == 2);  // the launched kernel's PIPE
        if (a->kv_int8) launch_onepass<int8_t>(b, grid, threads, per, pipe, ex);
        else if (a->kv_bf16) launch_onepass<__nv_bfloat16>(b, grid, threads, per, pipe, ex);
        else launch_onepass<float>(b, grid, threads, per, pipe, ex);
        return launch_status(ex, "attention");
    }
    if (a->kv_bf16 || a->kv_int8) {
        if (ex->errmsg)
            snprintf(ex->errmsg, ex->errlen, "attention: %s rings need the one-pass kernel", a->kv_int8 ? "int8" : "bfloat16");
        return MIMI_EINVAL;
    }
    const int rc = rope_apart(a, &b, ex);
    if (rc) return rc;
    return launch_smem("attention", attention_kernel, grid, ATT_THREADS, att_smem(a), ex, b, (int)att_parts(a));
}

extern "C" int mimi_cuda_attention(const struct op_attention *a, struct gpu_exec *ex) {
    return launch_attention(a, ex);
}
