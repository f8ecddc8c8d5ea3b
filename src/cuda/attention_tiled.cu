/*
 * attention_tiled.cu - the attention of long steps (whole-signal passes: up to 128 query steps
 * per row), as tiles: a block takes ATT_TQ consecutive query steps of one (row, head) and walks
 * the key positions they can see ATT_TK at a time through shared memory, so that every key and
 * value row read from the ring serves ATT_TQ queries instead of the one-pass kernel's four.
 * softmax(q k^T / sqrt(hd)) v with the online softmax (running maximum and sum per query), f32
 * arithmetic; rings in f32 or bfloat16 (attention.cu's ring rule and storage).
 */
#include <stdint.h>

#include "attention.cuh"

#define ATT_TQ 32                    // query steps per block
#define ATT_TK 64                    // key positions per tile
#define ATT_HD GPU_ATT_ONEPASS_HD    // head size (64)
#define ATT_LD (ATT_HD + 4)          // shared row length: float4 rows of 8 lanes on distinct banks
#define ATT_THREADS 256              // 16 groups of 16 lanes; group g owns queries 2g and 2g+1

// Shared floats: q (TQ, LD), k and v (TK, LD), probabilities (TQ, TK + 4), key positions (TK).
#define ATT_SMEM (sizeof(float) * (ATT_TQ * ATT_LD + 2 * ATT_TK * ATT_LD + ATT_TQ * (ATT_TK + 4)) + sizeof(int32_t) * ATT_TK)

// Eight ring values of row `e` (dims 8c .. 8c + 7) as f32 into dst.
static __device__ __forceinline__ void ring8(const float *ring, size_t at, float *dst) {
    const float4 *p = (const float4 *)(ring + at);
    *(float4 *)dst = p[0];
    *(float4 *)(dst + 4) = p[1];
}
static __device__ __forceinline__ void ring8(const __nv_bfloat16 *ring, size_t at, float *dst) {
    const uint4 v = *(const uint4 *)(ring + at);
    *(float4 *)dst = ring4<__nv_bfloat16>::get(make_uint2(v.x, v.y));
    *(float4 *)(dst + 4) = ring4<__nv_bfloat16>::get(make_uint2(v.z, v.w));
}

// Grid (R, n_heads, ceil(steps / TQ)). Query step s (absolute position pos0 + s) sees key
// position p when positions[p % ring] == p and 0 <= pos0 + s - p < context, the ring rule of
// attention.cu read by position: with ring >= context + steps - 1 an entry that does not hold p
// holds an older position outside every query's window, or none. The block's queries see
// positions first .. first + span - 1, span = context + nq - 1, walked oldest first.
template <typename T>
static __global__ void __launch_bounds__(ATT_THREADS) attention_tiled_kernel(const struct op_attention a) {
    pdl_begin();
    extern __shared__ float4 att_smem4[];
    float *qs = (float *)att_smem4, *ks = qs + ATT_TQ * ATT_LD, *vs = ks + ATT_TK * ATT_LD, *ps = vs + ATT_TK * ATT_LD;
    int32_t *kpos = (int32_t *)(ps + ATT_TQ * (ATT_TK + 4));
    const int r = blockIdx.x, h = blockIdx.y, s0 = blockIdx.z * ATT_TQ, nq = min(ATT_TQ, a.steps - s0);
    const int d = a.d, ring = a.ring, tid = threadIdx.x, g = tid / 16, li = tid % 16;
    const int slot = a.row_slot[r];
    float *out = a.out + ((size_t)r * a.steps + s0) * d + (size_t)h * ATT_HD;
    if (slot < 0) {
        for (int i = tid; i < nq * ATT_HD; i += ATT_THREADS) out[(size_t)(i / ATT_HD) * d + i % ATT_HD] = 0.0f;
        return;
    }
    const size_t base = (size_t)slot * a.slot_stride;
    const int32_t pos0 = a.next_pos[base] + s0, first = pos0 - a.context + 1, span = a.context + nq - 1;
    const int32_t *positions = a.positions + base;
    const T *keys = slot_ring<T>(a.keys, a.slot_stride, slot) + (size_t)h * ATT_HD;
    const T *values = slot_ring<T>(a.values, a.slot_stride, slot) + (size_t)h * ATT_HD;
    // q rows (zeros past nq), a float4 per thread and pass
    for (int i = tid; i < ATT_TQ * (ATT_HD / 4); i += ATT_THREADS) {
        const int s = i / (ATT_HD / 4), c = i % (ATT_HD / 4);
        *(float4 *)(qs + s * ATT_LD + 4 * c) =
            s < nq ? *(const float4 *)(a.qkv + ((size_t)r * a.steps + s0 + s) * 3 * d + (size_t)h * ATT_HD + 4 * c)
                   : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
    const float scale = 1.0f / sqrtf((float)ATT_HD);
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
    float4 acc[2] = {make_float4(0.0f, 0.0f, 0.0f, 0.0f), make_float4(0.0f, 0.0f, 0.0f, 0.0f)};
    for (int32_t kt = 0; kt < span; kt += ATT_TK) {
        __syncthreads();  // the previous tile's k, v and probabilities are consumed
        // the tile's key and value rows (8 dims per thread and pass) and positions
        for (int i = tid; i < ATT_TK * (ATT_HD / 8); i += ATT_THREADS) {
            const int j = i / (ATT_HD / 8), c = i % (ATT_HD / 8);
            const int32_t p = first + kt + j;
            const size_t at = (size_t)(((p % ring) + ring) % ring) * d + 8 * c;
            ring8(keys, at, ks + j * ATT_LD + 8 * c);
            ring8(values, at, vs + j * ATT_LD + 8 * c);
        }
        if (tid < ATT_TK) {
            const int32_t p = first + kt + tid;
            kpos[tid] = p >= 0 && kt + tid < span && positions[p % ring] == p ? p : -1;
        }
        __syncthreads();
        // scores of queries 2g + i and keys li + 16u
        float sc[2][4] = {};
        for (int c = 0; c < ATT_HD; c += 4) {
            const float4 q0 = *(const float4 *)(qs + (2 * g) * ATT_LD + c), q1 = *(const float4 *)(qs + (2 * g + 1) * ATT_LD + c);
#pragma unroll
            for (int u = 0; u < 4; u++) {
                const float4 k = *(const float4 *)(ks + (li + 16 * u) * ATT_LD + c);
                sc[0][u] += q0.x * k.x + q0.y * k.y + q0.z * k.z + q0.w * k.w;
                sc[1][u] += q1.x * k.x + q1.y * k.y + q1.z * k.z + q1.w * k.w;
            }
        }
        // the online softmax: each group of 16 lanes holds its two queries' 64 scores
#pragma unroll
        for (int i = 0; i < 2; i++) {
            const int32_t qpos = pos0 + 2 * g + i;
            float mx = m[i];
#pragma unroll
            for (int u = 0; u < 4; u++) {
                const int32_t pk = kpos[li + 16 * u], age = qpos - pk;
                sc[i][u] = pk >= 0 && age >= 0 && age < a.context ? sc[i][u] * scale : -INFINITY;
                mx = fmaxf(mx, sc[i][u]);
            }
#pragma unroll
            for (int off = 8; off; off >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
            const bool any = mx != -INFINITY;
            const float corr = any ? expf(m[i] - mx) : 1.0f;
            float sum = 0.0f;
#pragma unroll
            for (int u = 0; u < 4; u++) {
                const float p = any ? expf(sc[i][u] - mx) : 0.0f;
                ps[(2 * g + i) * (ATT_TK + 4) + li + 16 * u] = p;
                sum += p;
            }
#pragma unroll
            for (int off = 8; off; off >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, off);
            l[i] = l[i] * corr + sum;
            m[i] = mx;
            acc[i] = make_float4(acc[i].x * corr, acc[i].y * corr, acc[i].z * corr, acc[i].w * corr);
        }
        __syncthreads();
        // weighted values: queries 2g + i, dims 4 li .. 4 li + 3
        for (int j = 0; j < ATT_TK; j += 4) {
            const float4 p0 = *(const float4 *)(ps + (2 * g) * (ATT_TK + 4) + j);
            const float4 p1 = *(const float4 *)(ps + (2 * g + 1) * (ATT_TK + 4) + j);
            const float w0[4] = {p0.x, p0.y, p0.z, p0.w}, w1[4] = {p1.x, p1.y, p1.z, p1.w};
#pragma unroll
            for (int u = 0; u < 4; u++) {
                const float4 v = *(const float4 *)(vs + (j + u) * ATT_LD + 4 * li);
                acc[0].x += w0[u] * v.x, acc[0].y += w0[u] * v.y, acc[0].z += w0[u] * v.z, acc[0].w += w0[u] * v.w;
                acc[1].x += w1[u] * v.x, acc[1].y += w1[u] * v.y, acc[1].z += w1[u] * v.z, acc[1].w += w1[u] * v.w;
            }
        }
    }
#pragma unroll
    for (int i = 0; i < 2; i++) {
        const int s = 2 * g + i;
        if (s >= nq) continue;
        const float inv = l[i] > 0.0f ? 1.0f / l[i] : 0.0f;
        *(float4 *)(out + (size_t)s * d + 4 * li) = make_float4(acc[i].x * inv, acc[i].y * inv, acc[i].z * inv, acc[i].w * inv);
    }
}

int attention_tiled_fits(const struct op_attention *a) {
    return a->head_dim == ATT_HD && a->steps >= ATT_TQ && a->ring >= a->context + a->steps - 1 && a->d % 8 == 0 &&
           (uintptr_t)a->keys % 16 == 0 && (uintptr_t)a->values % 16 == 0 && (uintptr_t)a->qkv % 16 == 0 &&
           (uintptr_t)a->out % 16 == 0 && a->slot_stride % 4 == 0;
}

int attention_tiled(const struct op_attention *a, struct gpu_exec *ex) {
    void (*kernel)(const struct op_attention) =
        a->kv_bf16 ? attention_tiled_kernel<__nv_bfloat16> : attention_tiled_kernel<float>;
    if (cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)ATT_SMEM) != cudaSuccess)
        return launch_status(ex, "attention (shared memory)");
    pdl_launch(kernel, dim3(a->R, a->n_heads, (a->steps + ATT_TQ - 1) / ATT_TQ), ATT_THREADS, ATT_SMEM, ex, *a);
    return launch_status(ex, "attention");
}
