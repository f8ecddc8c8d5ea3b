/*
 * attention.cuh - the attention's device pieces shared by attention.cu (one layer per launch)
 * and transformer.cu (every layer of a small step in one persistent launch): the rings' element
 * types, the rotary embedding with the ring store, and one round of the one-pass softmax.
 */
#ifndef MIMI_CUDA_ATTENTION_CUH
#define MIMI_CUDA_ATTENTION_CUH

#include <cuda_bf16.h>

#include "common.cuh"

// Where slot `slot`'s ring of element type T starts (slot_stride counts 4-byte elements).
template <typename T>
static __device__ __forceinline__ T *slot_ring(void *ring, size_t slot_stride, int slot) {
    return (T *)((char *)ring + sizeof(float) * slot_stride * (size_t)slot);
}

// A block's row and head. A row's heads are consecutive blocks (grid x: R * n_heads, from
// row_head_grid), so the blocks resident together read whole ring entries (a row's heads side by
// side) instead of one head's 128 or 256 bytes of each of many rows' entries.
static __device__ __forceinline__ void block_row_head(int n_heads, int &r, int &h) {
    r = blockIdx.x / n_heads;
    h = blockIdx.x - r * n_heads;
}
static inline dim3 row_head_grid(int R, int n_heads, int z) { return dim3((unsigned)R * (unsigned)n_heads, 1, z); }

// Where the per-head scales of slot `slot`'s int8 ring start: after its ring * d values.
static __device__ __forceinline__ float *slot_scales(void *ring, size_t slot_stride, int slot, int entries, int d) {
    return (float *)(slot_ring<int8_t>(ring, slot_stride, slot) + (size_t)entries * d);
}

// Signed byte b (0..3) of v as an f32, exactly: the byte with its sign bit flipped (v ^
// 0x80808080 in `u`) is the low mantissa of 2^23 + b + 128.
static __device__ __forceinline__ float int8_byte(uint32_t u, int b) {
    return __uint_as_float(__byte_perm(u, 0x4B000000u, 0x7440u + (unsigned)b)) - 8388736.0f;
}

// Four consecutive ring values as f32: one 16-byte load (f32), one 8-byte load (bfloat16,
// whose bits are the high half of the f32 they stand for) or one 4-byte load (int8: the codes,
// which the one-pass round multiplies by the entry's scale for the head, which only int8 rings
// have, after its dot products).
template <typename T> struct ring4;
template <> struct ring4<float> {
    typedef float4 unit;
    static const bool scaled = false;
    static __device__ __forceinline__ float4 raw(float4 v) { return v; }
    static __device__ __forceinline__ float4 zero() { return make_float4(0.0f, 0.0f, 0.0f, 0.0f); }
};
template <> struct ring4<__nv_bfloat16> {
    typedef uint2 unit;
    static const bool scaled = false;
    static __device__ __forceinline__ float4 raw(uint2 v) {
        return make_float4(__uint_as_float(v.x << 16), __uint_as_float(v.x & 0xffff0000u), __uint_as_float(v.y << 16),
                           __uint_as_float(v.y & 0xffff0000u));
    }
    static __device__ __forceinline__ uint2 zero() { return make_uint2(0u, 0u); }
};
template <> struct ring4<int8_t> {
    typedef uint32_t unit;
    static const bool scaled = true;
    static __device__ __forceinline__ float4 raw(uint32_t v) {
        const uint32_t u = v ^ 0x80808080u;
        return make_float4(int8_byte(u, 0), int8_byte(u, 1), int8_byte(u, 2), int8_byte(u, 3));
    }
    static __device__ __forceinline__ uint32_t zero() { return 0u; }
};

// ---- long steps (attention_tiled.cu, attention_mma.cu) ----

// A tiled block's share: query steps s0 .. s0 + nq - 1 (TQ a block) of row r and head h (grid
// row_head_grid(R, n_heads, ceil(steps / TQ))), out at the first one's head columns; its slot's position
// ring, first visible position and span of positions (context + nq - 1), and its head's key and
// value rows. A padding row's block writes its zeros and gets false.
template <typename T> struct tiled_block {
    int r, h, s0, nq, slot;
    float *out;
    int32_t pos0, first, span;
    const int32_t *positions;
    const T *keys, *values;
};

template <typename T, int TQ, int HD>
static __device__ __forceinline__ bool tiled_block_init(const struct op_attention &a, tiled_block<T> &b) {
    block_row_head(a.n_heads, b.r, b.h);
    b.s0 = blockIdx.z * TQ, b.nq = min(TQ, a.steps - b.s0);
    b.slot = a.row_slot[b.r];
    b.out = a.out + ((size_t)b.r * a.steps + b.s0) * a.d + (size_t)b.h * HD;
    if (b.slot < 0) {
        for (int i = threadIdx.x; i < b.nq * HD; i += blockDim.x) b.out[(size_t)(i / HD) * a.d + i % HD] = 0.0f;
        return false;
    }
    const size_t base = (size_t)b.slot * a.slot_stride;
    b.pos0 = a.next_pos[base] + b.s0, b.first = b.pos0 - a.context + 1, b.span = a.context + b.nq - 1;
    b.positions = a.positions + base;
    b.keys = slot_ring<T>(a.keys, a.slot_stride, b.slot) + (size_t)b.h * HD;
    b.values = slot_ring<T>(a.values, a.slot_stride, b.slot) + (size_t)b.h * HD;
    return true;
}

// Whether the tiled kernel takes this attention (head size 64, at least 64 query steps, a ring
// that holds every position a step's queries can see, 70 KB of shared memory per block); then
// attention_tiled runs it (rope already done).
int attention_tiled_fits(const struct op_attention *a);
int attention_tiled(const struct op_attention *a, struct gpu_exec *ex);
// The same tiles on bf16 tensor cores (attention_mma.cu) where a->mma_bf16 and the rings are
// bf16; q and the probabilities are rounded to bf16.
int attention_mma_fits(const struct op_attention *a);
int attention_mma(const struct op_attention *a, struct gpu_exec *ex);
// Short steps of many rows (GPU_ATT_MMA_SHORT) on bf16 tensor cores, with the rotation and ring
// store of `rope` inline.
int attention_mma_short_fits(const struct op_attention *a);
int attention_mma_short(const struct op_attention *a, struct gpu_exec *ex);

// ---- rotary embedding and ring store ----

// Pair p of a key (k0, k1) and a value (v0, v1) into ring entry e of `slot` as int8 (kv_int8):
// the warp's 32 lanes hold the 32 pairs of one head (p = 32 h + lane) and together find its
// largest magnitudes; each lane stores its two values, lane 0 the head's scales.
static __device__ __forceinline__ void store_int8_pair(const struct op_attention &a, void *keys, void *values, int slot,
                                                       int e, int p, float k0, float k1, float v0, float v1) {
    float km = fmaxf(fabsf(k0), fabsf(k1)), vm = fmaxf(fabsf(v0), fabsf(v1));
#pragma unroll
    for (int o = 16; o; o >>= 1) {
        km = fmaxf(km, __shfl_xor_sync(0xffffffffu, km, o));
        vm = fmaxf(vm, __shfl_xor_sync(0xffffffffu, vm, o));
    }
    const size_t at = (size_t)e * a.d + 2 * p;
    const auto pair = [](float x0, float x1, float mx) {
        return (uint16_t)((gpu_kv_int8_code(x0, mx) & 0xff) | (gpu_kv_int8_code(x1, mx) & 0xff) << 8);
    };
    *(uint16_t *)(slot_ring<int8_t>(keys, a.slot_stride, slot) + at) = pair(k0, k1, km);
    *(uint16_t *)(slot_ring<int8_t>(values, a.slot_stride, slot) + at) = pair(v0, v1, vm);
    if ((threadIdx.x & 31) == 0) {
        const size_t sc = (size_t)e * a.n_heads + p / (GPU_ATT_ONEPASS_HD / 2);
        slot_scales(keys, a.slot_stride, slot, a.ring, a.d)[sc] = gpu_kv_int8_scale(km);
        slot_scales(values, a.slot_stride, slot, a.ring, a.d)[sc] = gpu_kv_int8_scale(vm);
    }
}

// Pair p of the d-wide q and k of query row r*steps + s is (2p, 2p+1), head p / (hd/2),
// frequency index p % (hd/2); the angle is freq * position in f32 (mimi_rope). Rotates q and k
// in place and stores k and v in the slot's ring (padding rows store nothing). With int8 rings
// the 32 lanes of a warp call it together for the 32 pairs of one head of one row and step
// (p = 32 h + lane; every caller's loop is so), which store_int8_pair needs.
static __device__ __forceinline__ void rope_pair(const struct op_attention &a, int r, int s, int p) {
    const int d = a.d, slot = a.row_slot[r];
    const size_t row = (size_t)r * a.steps + s;
    int32_t pos = (slot < 0 ? 0 : a.next_pos[(size_t)slot * a.slot_stride]) + s;
    float angle = __fmul_rn(a.freq[p % (a.head_dim / 2)], (float)pos), c = cosf(angle), sn = sinf(angle);
    float *q = a.qkv + row * 3 * d, *k = q + d, *v = q + 2 * d;
    float re = q[2 * p], im = q[2 * p + 1];
    q[2 * p] = __fsub_rn(__fmul_rn(re, c), __fmul_rn(im, sn));
    q[2 * p + 1] = __fadd_rn(__fmul_rn(re, sn), __fmul_rn(im, c));
    re = k[2 * p], im = k[2 * p + 1];
    float k0 = __fsub_rn(__fmul_rn(re, c), __fmul_rn(im, sn)), k1 = __fadd_rn(__fmul_rn(re, sn), __fmul_rn(im, c));
    k[2 * p] = k0;
    k[2 * p + 1] = k1;
    if (slot < 0) return;
    if (a.kv_int8) {
        store_int8_pair(a, a.keys, a.values, slot, pos % a.ring, p, k0, k1, v[2 * p], v[2 * p + 1]);
        return;
    }
    const size_t at = (size_t)(pos % a.ring) * d + 2 * p;
    if (a.kv_bf16) {
        slot_ring<__nv_bfloat162>(a.keys, a.slot_stride, slot)[at / 2] = __floats2bfloat162_rn(k0, k1);
        slot_ring<__nv_bfloat162>(a.values, a.slot_stride, slot)[at / 2] = __floats2bfloat162_rn(v[2 * p], v[2 * p + 1]);
        return;
    }
    float *keys = slot_ring<float>(a.keys, a.slot_stride, slot), *values = slot_ring<float>(a.values, a.slot_stride, slot);
    keys[at] = k0;
    keys[at + 1] = k1;
    values[at] = v[2 * p];
    values[at + 1] = v[2 * p + 1];
}

// One round of the one-pass kernel: four keys (kv) and their value rows (vv) folded into each
// step's running maximum m, sum l and weighted sum acc. Step s of the block has position pos + s.
// A half-warp holds a key as 16 float4 (li: this lane's), so a dot product is a sum over the
// half's lanes. The four dots are summed transposed: after the xor-8 exchange a lane keeps two
// keys' sums, after xor-4 one (key onepass_key(lane) = 2*b3 + b2 of li's bits), and xor-2 and
// xor-1 finish it; each pair is added in the same order as four separate butterflies would,
// with 5 shuffles instead of 16. The lane then takes the exponential of its key alone and the
// half shares the four weights; so a lane needs only its own key's position (pkey, -1 for none)
// and, with int8 rings (SC: kv and vv are codes), its key's scales ks and vs: ks multiplies the
// dot product, vs the weight the lane shares for the values (l sums the weights unscaled, the
// four keys' by two exchanges). Against four full butterflies per key the
// results moved by rounding only (the compiler contracts the products differently; golden PCM
// rel. L2 1.848e-6 -> 1.850e-6), and at 2048 streams f32 attention took 4.81 -> 4.64 ms per
// step, bf16 3.52 -> 3.22.
static __device__ __forceinline__ int onepass_key(int lane) { return (lane >> 3 & 1) * 2 + (lane >> 2 & 1); }

template <int MAXS, bool SC>
static __device__ __forceinline__ void onepass_round(const float4 (&q)[MAXS], const float4 (&kv)[4],
                                                     const float4 (&vv)[4], int32_t pkey, float ks, float vs,
                                                     int steps, int32_t pos, int context, float scale, int lane,
                                                     float4 (&acc)[MAXS], float (&m)[MAXS], float (&l)[MAXS]) {
    const bool b3 = lane & 8, b2 = lane & 4;
    const int src = lane & 16;  // key u's lane: src + 4u
    const float kscale = SC ? scale * ks : scale;
#pragma unroll
    for (int s = 0; s < MAXS; s++) {
        if (s >= steps) break;
        float d[4];
#pragma unroll
        for (int u = 0; u < 4; u++) d[u] = q[s].x * kv[u].x + q[s].y * kv[u].y + q[s].z * kv[u].z + q[s].w * kv[u].w;
        const float r0 = __shfl_xor_sync(0xffffffffu, b3 ? d[0] : d[2], 8);
        const float r1 = __shfl_xor_sync(0xffffffffu, b3 ? d[1] : d[3], 8);
        const float e0 = (b3 ? d[2] : d[0]) + r0, e1 = (b3 ? d[3] : d[1]) + r1;
        float dot = (b2 ? e1 : e0) + __shfl_xor_sync(0xffffffffu, b2 ? e0 : e1, 4);
        dot += __shfl_xor_sync(0xffffffffu, dot, 2);
        dot += __shfl_xor_sync(0xffffffffu, dot, 1);
        const int32_t age = pos + s - pkey;
        const float sc = pkey >= 0 && age >= 0 && age < context ? dot * kscale : -INFINITY;
        float mk = fmaxf(sc, __shfl_xor_sync(0xffffffffu, sc, 4));
        mk = fmaxf(mk, __shfl_xor_sync(0xffffffffu, mk, 8));
        const float mx = fmaxf(m[s], mk);
        // nothing visible yet in this half: no change (selects, no branch around the shuffles)
        const bool any = mx != -INFINITY;
        const float c = any ? expf(m[s] - mx) : 1.0f;
        const float pl = any ? expf(sc - mx) : 0.0f;
        float4 ac = make_float4(acc[s].x * c, acc[s].y * c, acc[s].z * c, acc[s].w * c);
        float ls = l[s] * c;
        if (SC) {
            float t = pl + __shfl_xor_sync(0xffffffffu, pl, 4);
            ls += t + __shfl_xor_sync(0xffffffffu, t, 8);
        }
        const float pv = SC ? pl * vs : pl;
#pragma unroll
        for (int u = 0; u < 4; u++) {
            const float p = __shfl_sync(0xffffffffu, pv, src + 4 * u);
            if (!SC) ls += p;
            ac.x += p * vv[u].x, ac.y += p * vv[u].y, ac.z += p * vv[u].z, ac.w += p * vv[u].w;
        }
        acc[s] = ac;
        l[s] = ls;
        m[s] = mx;
    }
}

// One warp's walk of the one-pass softmax over ring entries [j_begin, j_end) of a span that
// starts at entry lo (entry e = lo + j, wrapped at `ring`): a round takes keys j0 + 2u + half
// (u < 4) with their value rows, and the position (-1 past the share) and int8 scales of this
// lane's own key (onepass_key); with PIPE the next round's loads are issued before this round's
// arithmetic. keys and values point at this lane's four values of the head in slot's entry 0;
// entries are d4 units apart. With int8 rings ks and vs point at the head's scale of entry 0,
// entries n_heads floats apart (else unused).
struct ring_scales {
    const float *ks, *vs;
    int n_heads;
};
template <typename T>
static __device__ __forceinline__ ring_scales head_scales(const struct op_attention &a, void *keys, void *values,
                                                          int slot, int h) {
    if (!ring4<T>::scaled) return ring_scales{nullptr, nullptr, 0};
    return ring_scales{slot_scales(keys, a.slot_stride, slot, a.ring, a.d) + h,
                       slot_scales(values, a.slot_stride, slot, a.ring, a.d) + h, a.n_heads};
}

// Entries at positions `newest` or later are left out (the persistent transformer's int8 rings,
// whose step's new entries it folds in from q k v itself).
template <int MAXS, typename T, bool PIPE>
static __device__ __forceinline__ void onepass_span(const typename ring4<T>::unit *keys,
                                                    const typename ring4<T>::unit *values, ring_scales sc,
                                                    const int32_t *positions, int lo, int ring, int j_begin,
                                                    int j_end, int d4, const float4 (&q)[MAXS], int steps, int32_t pos,
                                                    int context, float scale, float4 (&acc)[MAXS], float (&m)[MAXS],
                                                    float (&l)[MAXS], int32_t newest = INT32_MAX) {
    typedef typename ring4<T>::unit unit;
    const int lane = threadIdx.x % 32, half = lane >> 4, own = 2 * onepass_key(lane) + half;
    unit kr[4], vr[4];
    float ks = 0.0f, vs = 0.0f;
    int32_t pr;
    auto load = [&](int j0) {
#pragma unroll
        for (int u = 0; u < 4; u++) {
            const int j = j0 + 2 * u + half, e = lo + j < ring ? lo + j : lo + j - ring;
            const bool in = j < j_end;
            kr[u] = in ? keys[(size_t)e * d4] : ring4<T>::zero();
            vr[u] = in ? values[(size_t)e * d4] : ring4<T>::zero();
        }
        const int j = j0 + own, e = lo + j < ring ? lo + j : lo + j - ring;
        const bool in = j < j_end;
        pr = in ? positions[e] : -1;
        if (pr >= newest) pr = -1;
        if (ring4<T>::scaled) {
            ks = in ? sc.ks[(size_t)e * sc.n_heads] : 0.0f;
            vs = in ? sc.vs[(size_t)e * sc.n_heads] : 0.0f;
        }
    };
    if (PIPE) load(j_begin);
    for (int j0 = j_begin; j0 < j_end; j0 += 8) {
        if (!PIPE) load(j0);
        float4 kv[4], vv[4];
#pragma unroll
        for (int u = 0; u < 4; u++) kv[u] = ring4<T>::raw(kr[u]), vv[u] = ring4<T>::raw(vr[u]);
        const int32_t pk = pr;
        const float kso = ks, vso = vs;
        if (PIPE && j0 + 8 < j_end) load(j0 + 8);  // in flight during this round's arithmetic
        onepass_round<MAXS, ring4<T>::scaled>(q, kv, vv, pk, kso, vso, steps, pos, context, scale, lane, acc, m, l);
    }
}

// The two halves of a warp merged (half 0 takes its own terms first, so both halves hold the
// same sums); half 0 stores step s's max, sum and weighted values at sm_m[s], sm_l[s] and
// sm_acc[s * 16 + its lane]: this warp's row of the block's partials.
template <int MAXS>
static __device__ __forceinline__ void onepass_store_warp(int steps, const float (&m)[MAXS], const float (&l)[MAXS],
                                                          const float4 (&acc)[MAXS], float *sm_m, float *sm_l,
                                                          float4 *sm_acc) {
    const int lane = threadIdx.x % 32, half = lane >> 4, li = lane & 15;
#pragma unroll
    for (int s = 0; s < MAXS; s++) {
        if (s >= steps) break;
        const float mo = __shfl_xor_sync(0xffffffffu, m[s], 16), lo = __shfl_xor_sync(0xffffffffu, l[s], 16);
        float4 ao;
        ao.x = __shfl_xor_sync(0xffffffffu, acc[s].x, 16);
        ao.y = __shfl_xor_sync(0xffffffffu, acc[s].y, 16);
        ao.z = __shfl_xor_sync(0xffffffffu, acc[s].z, 16);
        ao.w = __shfl_xor_sync(0xffffffffu, acc[s].w, 16);
        const float mm = fmaxf(m[s], mo);
        const float c0 = mm == -INFINITY ? 0.0f : expf((half ? mo : m[s]) - mm);
        const float c1 = mm == -INFINITY ? 0.0f : expf((half ? m[s] : mo) - mm);
        const float l0 = half ? lo : l[s], l1 = half ? l[s] : lo;
        const float4 a0 = half ? ao : acc[s], a1 = half ? acc[s] : ao;
        if (half == 0) {
            if (li == 0) {
                sm_m[s] = mm;
                sm_l[s] = l0 * c0 + l1 * c1;
            }
            sm_acc[s * (GPU_ATT_ONEPASS_HD / 4) + li] = make_float4(a0.x * c0 + a1.x * c1, a0.y * c0 + a1.y * c1,
                                                                    a0.z * c0 + a1.z * c1, a0.w * c0 + a1.w * c1);
        }
    }
}

// Step s's output, dims 4 i4 .. 4 i4 + 3, from n_warps warps' partials (onepass_store_warp's
// rows, `maxs` steps each) merged in warp order; zeros when no key was visible.
static __device__ __forceinline__ float4 onepass_merge_warps(int n_warps, int maxs, const float *sm_m, const float *sm_l,
                                                             const float4 *sm_acc, int s, int i4) {
    float mm = -INFINITY;
    for (int w = 0; w < n_warps; w++) mm = fmaxf(mm, sm_m[w * maxs + s]);
    float sum = 0.0f;
    float4 o = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (mm != -INFINITY)
        for (int w = 0; w < n_warps; w++) {
            const float c = expf(sm_m[w * maxs + s] - mm);
            const float4 v = sm_acc[(w * maxs + s) * (GPU_ATT_ONEPASS_HD / 4) + i4];
            sum += sm_l[w * maxs + s] * c;
            o.x += v.x * c, o.y += v.y * c, o.z += v.z * c, o.w += v.w * c;
        }
    const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
    return make_float4(o.x * inv, o.y * inv, o.z * inv, o.w * inv);
}

#endif
