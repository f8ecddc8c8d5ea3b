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

#define ATT_TQ 64                    // query steps per block
#define ATT_TK 64                    // key positions per tile
#define ATT_HD GPU_ATT_ONEPASS_HD    // head size (64)
#define ATT_LD (ATT_HD + 4)          // shared row length: float4 rows of 8 lanes on distinct banks
#define ATT_THREADS 256              // 16 groups of 16 lanes; group g owns queries 4g .. 4g + 3
#define ATT_QPT 4                    // queries per thread
#define ATT_LOADS (ATT_TK * ATT_HD / 8 / ATT_THREADS)  // 8-value pieces of k (and of v) per thread and tile

// Shared floats: q (TQ, LD), k and v (TK, LD), probabilities (TQ, TK + 4), key positions (TK).
#define ATT_SMEM (sizeof(float) * (ATT_TQ * ATT_LD + 2 * ATT_TK * ATT_LD + ATT_TQ * (ATT_TK + 4)) + sizeof(int32_t) * ATT_TK)

// Eight ring values (f32: two float4; bfloat16: one 16-byte load, widened when stored).
template <typename T> struct ring8;
template <> struct ring8<float> {
    struct unit {
        float4 a, b;
    };
    static __device__ __forceinline__ unit load(const float *p) {
        return unit{((const float4 *)p)[0], ((const float4 *)p)[1]};
    }
    static __device__ __forceinline__ void store(float *dst, const unit &v) {
        *(float4 *)dst = v.a;
        *(float4 *)(dst + 4) = v.b;
    }
};
template <> struct ring8<__nv_bfloat16> {
    typedef uint4 unit;
    static __device__ __forceinline__ unit load(const __nv_bfloat16 *p) { return *(const uint4 *)p; }
    static __device__ __forceinline__ void store(float *dst, const unit &v) {
        *(float4 *)dst = ring4<__nv_bfloat16>::raw(make_uint2(v.x, v.y));
        *(float4 *)(dst + 4) = ring4<__nv_bfloat16>::raw(make_uint2(v.z, v.w));
    }
};

// Grid row_head_grid(R, n_heads, ceil(steps / TQ)). Query step s (absolute position pos0 + s) sees key
// position p when positions[p % ring] == p and 0 <= pos0 + s - p < context, the ring rule of
// attention.cu read by position: with ring >= context + steps - 1 an entry that does not hold p
// holds an older position outside every query's window, or none. The block's queries see
// positions first .. first + span - 1, span = context + nq - 1, walked oldest first; a tile's
// key and value rows are loaded into registers while the tile before it is computed.
template <typename T>
static __global__ void __launch_bounds__(ATT_THREADS) attention_tiled_kernel(const struct op_attention a) {
    typedef typename ring8<T>::unit unit;
    pdl_begin();
    extern __shared__ float4 att_smem4[];
    float *qs = (float *)att_smem4, *ks = qs + ATT_TQ * ATT_LD, *vs = ks + ATT_TK * ATT_LD, *ps = vs + ATT_TK * ATT_LD;
    int32_t *kpos = (int32_t *)(ps + ATT_TQ * (ATT_TK + 4));
    tiled_block<T> b;
    if (!tiled_block_init<T, ATT_TQ, ATT_HD>(a, b)) return;
    const int r = b.r, h = b.h, s0 = b.s0, nq = b.nq, d = a.d, ring = a.ring;
    const int tid = threadIdx.x, g = tid / 16, li = tid % 16;
    const int32_t pos0 = b.pos0, first = b.first, span = b.span, *positions = b.positions;
    const T *keys = b.keys, *values = b.values;
    float *out = b.out;
    // piece e = tid + i * THREADS of a tile: row e / 8, dims 8 (e % 8) ..
    unit kr[ATT_LOADS], vr[ATT_LOADS];
    int32_t pr = -1;
    auto load = [&](int32_t kt) {
#pragma unroll
        for (int i = 0; i < ATT_LOADS; i++) {
            const int e = tid + i * ATT_THREADS, j = e / (ATT_HD / 8);
            const int32_t p = first + kt + j;
            const size_t at = (size_t)(((p % ring) + ring) % ring) * d + 8 * (e % (ATT_HD / 8));
            kr[i] = ring8<T>::load(keys + at);
            vr[i] = ring8<T>::load(values + at);
        }
        if (tid < ATT_TK) {
            const int32_t p = first + kt + tid;
            pr = p >= 0 && kt + tid < span && positions[p % ring] == p ? p : -1;
        }
    };
    load(0);
    // q rows (zeros past nq), a float4 per thread and pass
    for (int i = tid; i < ATT_TQ * (ATT_HD / 4); i += ATT_THREADS) {
        const int s = i / (ATT_HD / 4), c = i % (ATT_HD / 4);
        *(float4 *)(qs + s * ATT_LD + 4 * c) =
            s < nq ? *(const float4 *)(a.qkv + ((size_t)r * a.steps + s0 + s) * 3 * d + (size_t)h * ATT_HD + 4 * c)
                   : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
    const float scale = 1.0f / sqrtf((float)ATT_HD);
    float m[ATT_QPT], l[ATT_QPT];
    float4 acc[ATT_QPT];
#pragma unroll
    for (int i = 0; i < ATT_QPT; i++) m[i] = -INFINITY, l[i] = 0.0f, acc[i] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    for (int32_t kt = 0; kt < span; kt += ATT_TK) {
        __syncthreads();  // the previous tile's k, v and probabilities are consumed
#pragma unroll
        for (int i = 0; i < ATT_LOADS; i++) {
            const int e = tid + i * ATT_THREADS, j = e / (ATT_HD / 8), c = e % (ATT_HD / 8);
            ring8<T>::store(ks + j * ATT_LD + 8 * c, kr[i]);
            ring8<T>::store(vs + j * ATT_LD + 8 * c, vr[i]);
        }
        if (tid < ATT_TK) kpos[tid] = pr;
        __syncthreads();
        if (kt + ATT_TK < span) load(kt + ATT_TK);  // in flight during this tile's arithmetic
        // scores of queries 4g + i and keys li + 16u
        float sc[ATT_QPT][4] = {};
        for (int c = 0; c < ATT_HD; c += 4) {
            float4 q[ATT_QPT];
#pragma unroll
            for (int i = 0; i < ATT_QPT; i++) q[i] = *(const float4 *)(qs + (ATT_QPT * g + i) * ATT_LD + c);
#pragma unroll
            for (int u = 0; u < 4; u++) {
                const float4 k = *(const float4 *)(ks + (li + 16 * u) * ATT_LD + c);
#pragma unroll
                for (int i = 0; i < ATT_QPT; i++) sc[i][u] += q[i].x * k.x + q[i].y * k.y + q[i].z * k.z + q[i].w * k.w;
            }
        }
        // the online softmax: each group of 16 lanes holds its queries' 64 scores
#pragma unroll
        for (int i = 0; i < ATT_QPT; i++) {
            const int32_t qpos = pos0 + ATT_QPT * g + i;
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
                ps[(ATT_QPT * g + i) * (ATT_TK + 4) + li + 16 * u] = p;
                sum += p;
            }
#pragma unroll
            for (int off = 8; off; off >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, off);
            l[i] = l[i] * corr + sum;
            m[i] = mx;
            acc[i] = make_float4(acc[i].x * corr, acc[i].y * corr, acc[i].z * corr, acc[i].w * corr);
        }
        __syncthreads();
        // weighted values: queries 4g + i, dims 4 li .. 4 li + 3
        for (int j = 0; j < ATT_TK; j += 4) {
            float w[ATT_QPT][4];
#pragma unroll
            for (int i = 0; i < ATT_QPT; i++) {
                const float4 p = *(const float4 *)(ps + (ATT_QPT * g + i) * (ATT_TK + 4) + j);
                w[i][0] = p.x, w[i][1] = p.y, w[i][2] = p.z, w[i][3] = p.w;
            }
#pragma unroll
            for (int u = 0; u < 4; u++) {
                const float4 v = *(const float4 *)(vs + (j + u) * ATT_LD + 4 * li);
#pragma unroll
                for (int i = 0; i < ATT_QPT; i++)
                    acc[i].x += w[i][u] * v.x, acc[i].y += w[i][u] * v.y, acc[i].z += w[i][u] * v.z, acc[i].w += w[i][u] * v.w;
            }
        }
    }
#pragma unroll
    for (int i = 0; i < ATT_QPT; i++) {
        const int s = ATT_QPT * g + i;
        if (s >= nq) continue;
        const float inv = l[i] > 0.0f ? 1.0f / l[i] : 0.0f;
        *(float4 *)(out + (size_t)s * d + 4 * li) = make_float4(acc[i].x * inv, acc[i].y * inv, acc[i].z * inv, acc[i].w * inv);
    }
}

int attention_tiled_fits(const struct op_attention *a) {
    return a->head_dim == ATT_HD && a->steps >= ATT_TQ && a->ring >= a->context + a->steps - 1 && a->d % 8 == 0 &&
           (uintptr_t)a->keys % 16 == 0 && (uintptr_t)a->values % 16 == 0 && (uintptr_t)a->qkv % 16 == 0 &&
           (uintptr_t)a->out % 16 == 0 && a->slot_stride % 4 == 0 &&
           (size_t)device_attribute(cudaDevAttrMaxSharedMemoryPerBlockOptin) >= ATT_SMEM;
}

int attention_tiled(const struct op_attention *a, struct gpu_exec *ex) {
    void (*kernel)(const struct op_attention) =
        a->kv_bf16 ? attention_tiled_kernel<__nv_bfloat16> : attention_tiled_kernel<float>;
    return launch_smem("attention", kernel, row_head_grid(a->R, a->n_heads, (a->steps + ATT_TQ - 1) / ATT_TQ),
                       ATT_THREADS, ATT_SMEM, ex, *a);
}
