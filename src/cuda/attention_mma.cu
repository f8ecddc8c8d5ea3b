/*
 * attention_mma.cu - the tiled attention of long steps (attention_tiled.cu's tiling and ring
 * rule) on bfloat16 tensor cores, for MIMI_PRECISION_FAST_BF16 (op_attention.mma_bf16): the
 * rings already hold bfloat16; q (scaled by 1/sqrt(hd), a power of two) and the softmax's
 * probabilities are rounded to bfloat16 for the two products, which accumulate in f32 on
 * mma.sync m16n8k16. The running maximum, the sums and the output stay f32.
 *
 * A block takes TQ = 64 query steps of one (row, head), a warp 16 of them; every warp walks the
 * key positions the block's queries can see 64 at a time. A tile's keys and values are copied
 * from the ring to shared memory with cp.async, the next tile's while this one is computed.
 * Per warp and tile: S (16 x 64) = Q K^T in 32 mma with q held in registers as A fragments and
 * K's fragments read as 32-bit words; the online softmax on S's accumulators (a row's 64 scores
 * over the 4 lanes of a quad); O (16 x 64) += P V in 32 mma, P's A fragments made from S's
 * accumulators in place and V's B fragments by ldmatrix.trans.
 *
 * Short steps (streaming: one or two query steps a row) of many rows take the same arithmetic
 * with a block per row and a warp per head: a warp's queries are one 16-row tile (rows past the
 * step's zero), and it copies and walks its head's columns of every ring entry AS_TK at a time,
 * checking each entry's position as the one-pass kernel does. The one-pass kernel spent about 30
 * instructions per key there (at 2048 streams on an H200: issue slots 71% busy, memory at 57% of
 * its rate).
 */
#include <stdint.h>

#include "attention.cuh"
#include "mma.cuh"

#define AM_TQ 64                         // query steps per block
#define AM_TK 64                         // key positions per tile
#define AM_HD GPU_ATT_ONEPASS_HD         // head size (64)
#define AM_THREADS 128                   // 4 warps of 16 query steps
#define AM_LD (AM_HD + 8)                // shared row of a key or value: 144 bytes, 16-byte aligned, rows on distinct banks
#define AM_TILE (AM_TK * AM_LD)          // bf16 values of one tile's keys (or values)
#define AM_CHUNKS (AM_TK * AM_HD / 8)    // 16-byte pieces of a tile's keys (or values)
#define AM_SMEM (sizeof(__nv_bfloat16) * 4 * AM_TILE + sizeof(int32_t) * 2 * AM_TK)  // two buffers of k and v, positions

// O (16 x 64) += P V over keys 16 kk .. 16 kk + 15 of a tile: pa, P's A fragments; V's B
// fragments by ldmatrix.trans from the values at vs (rows ld 2-byte values apart); bf16 or (F16)
// f16 operands. W 4: o holds this lane's rows g and g + 8; W 2: row g only (row g + 8 is
// padding: its sums are dropped, and o takes 16 registers instead of 32).
template <bool F16, int W>
static __device__ __forceinline__ void pv_product(const unsigned (&pa)[4], const void *vs, int ld, int kk,
                                                  float (&o)[8][W]) {
    const int lane = threadIdx.x & 31;
    const int row = 16 * kk + (lane & 7) + 8 * ((lane >> 3) & 1), col = 8 * (lane >> 4);
    unsigned v[4];  // V's fragments of dims 8n .. 8n + 15, for n even and the odd n after it
#pragma unroll
    for (int n = 0; n < 8; n++) {
        if (n % 2 == 0)
            asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
                         : "=r"(v[0]), "=r"(v[1]), "=r"(v[2]), "=r"(v[3])
                         : "r"(smem_addr((const uint16_t *)vs + row * ld + 8 * n + col)));
        float c[4] = {o[n][0], o[n][1], W == 4 ? o[n][W / 2] : 0.0f, W == 4 ? o[n][W - 1] : 0.0f};
        if (F16) mma_f16(c, pa, v[2 * (n % 2)], v[2 * (n % 2) + 1]);
        else mma_bf16(c, pa, v[2 * (n % 2)], v[2 * (n % 2) + 1]);
#pragma unroll
        for (int i = 0; i < W; i++) o[n][i] = c[i];
    }
}

// S (16 x n) = Q K^T over a tile of keys, masked by the ring rule, folded into the running
// maximum m, sums l and output o (rows g and g + 8 of this lane) of the online softmax: the tile
// loop of attention_mma_kernel for NJ key groups of 8. A key's (and a value's) row starts ld
// values after the one before; 16 bytes more than a multiple of 128, so that 8 rows fall on
// distinct banks.
template <int NJ>
static __device__ __forceinline__ void mma_tile(const unsigned (&qf)[4][4], const __nv_bfloat16 *ks, const __nv_bfloat16 *vs, int ld,
                                                const int32_t *kp, const int32_t (&qpos)[2], int context, float (&m)[2],
                                                float (&l)[2], float (&o)[8][4]) {
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    float sc[NJ][4] = {};
#pragma unroll
    for (int j = 0; j < NJ; j++) {
        const unsigned *krow = (const unsigned *)(ks + (8 * j + g) * ld) + t;
#pragma unroll
        for (int kk = 0; kk < 4; kk++) mma_bf16(sc[j], qf[kk], krow[8 * kk], krow[8 * kk + 4]);
    }
    float mx[2] = {m[0], m[1]};
#pragma unroll
    for (int j = 0; j < NJ; j++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            const int32_t pk = kp[8 * j + 2 * t + (e & 1)], age = qpos[e >> 1] - pk;
            sc[j][e] = pk >= 0 && age >= 0 && age < context ? sc[j][e] : -INFINITY;
            mx[e >> 1] = fmaxf(mx[e >> 1], sc[j][e]);
        }
    float corr[2];
#pragma unroll
    for (int u = 0; u < 2; u++) {
        mx[u] = fmaxf(mx[u], __shfl_xor_sync(0xffffffffu, mx[u], 1));
        mx[u] = fmaxf(mx[u], __shfl_xor_sync(0xffffffffu, mx[u], 2));
        corr[u] = mx[u] == -INFINITY ? 1.0f : __expf(m[u] - mx[u]);
        m[u] = mx[u];
        l[u] *= corr[u];
    }
#pragma unroll
    for (int j = 0; j < NJ; j++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            const float p = m[e >> 1] == -INFINITY ? 0.0f : __expf(sc[j][e] - m[e >> 1]);
            sc[j][e] = p;
            l[e >> 1] += p;
        }
#pragma unroll
    for (int n = 0; n < 8; n++) o[n][0] *= corr[0], o[n][1] *= corr[0], o[n][2] *= corr[1], o[n][3] *= corr[1];
#pragma unroll
    for (int kk = 0; kk < NJ / 2; kk++) {
        const unsigned pa[4] = {pack_bf16(sc[2 * kk][0], sc[2 * kk][1]), pack_bf16(sc[2 * kk][2], sc[2 * kk][3]),
                                pack_bf16(sc[2 * kk + 1][0], sc[2 * kk + 1][1]),
                                pack_bf16(sc[2 * kk + 1][2], sc[2 * kk + 1][3])};
        pv_product<false>(pa, vs, ld, kk, o);
    }
}

// The A fragments of q for this lane's rows g (at qa) and g + 8 (8 rows of 3d further), zeros for
// a row not `valid`, scaled by 1/sqrt(hd) = 1/8 (exact) and rounded to bf16: 4 k-steps of 16 dims.
static __device__ __forceinline__ void q_fragments(const float *qa, int d, bool valid_a, bool valid_b,
                                                   unsigned (&qf)[4][4]) {
    const int t = threadIdx.x & 3;
    const float scale = 1.0f / sqrtf((float)AM_HD);
    const float *qb = qa + (size_t)8 * 3 * d;
#pragma unroll
    for (int kk = 0; kk < 4; kk++)
#pragma unroll
        for (int half = 0; half < 2; half++) {
            const int c = 16 * kk + 8 * half + 2 * t;
            const float2 x = valid_a ? *(const float2 *)(qa + c) : make_float2(0.0f, 0.0f);
            const float2 y = valid_b ? *(const float2 *)(qb + c) : make_float2(0.0f, 0.0f);
            qf[kk][2 * half] = pack_bf16(x.x * scale, x.y * scale);
            qf[kk][2 * half + 1] = pack_bf16(y.x * scale, y.y * scale);
        }
}

// The online softmax's end for this lane's query rows s_a and s_a + 8 of the block's (out: its
// first row): the sums over the quad, then o / l stored for the rows below nq (zeros where no key
// was visible). W 2: o holds row s_a only.
template <int W>
static __device__ __forceinline__ void store_rows(float (&l)[2], const float (&o)[8][W], float *out, int d, int s_a,
                                                  int nq) {
    const int t = threadIdx.x & 3;
#pragma unroll
    for (int u = 0; u < W / 2; u++) {
        l[u] += __shfl_xor_sync(0xffffffffu, l[u], 1);
        l[u] += __shfl_xor_sync(0xffffffffu, l[u], 2);
        const int s = s_a + 8 * u;
        if (s >= nq) continue;
        const float inv = l[u] > 0.0f ? 1.0f / l[u] : 0.0f;
#pragma unroll
        for (int n = 0; n < 8; n++)
            *(float2 *)(out + (size_t)s * d + 8 * n + 2 * t) = make_float2(o[n][2 * u] * inv, o[n][2 * u + 1] * inv);
    }
}

// Grid row_head_grid(R, n_heads, ceil(steps / TQ)); attention_tiled_kernel's positions and visibility.
static __global__ void __launch_bounds__(AM_THREADS) attention_mma_kernel(const struct op_attention a) {
    pdl_begin();
    extern __shared__ uint4 am_smem16[];
    __nv_bfloat16 *kv = (__nv_bfloat16 *)am_smem16;  // buffer b: keys at 2b, values at 2b + 1 (AM_TILE each)
    int32_t *kpos = (int32_t *)(kv + 4 * AM_TILE);     // buffer b: AM_TK positions at b * AM_TK (-1: none)
    tiled_block<__nv_bfloat16> blk;
    if (!tiled_block_init<__nv_bfloat16, AM_TQ, AM_HD>(a, blk)) return;
    const int r = blk.r, h = blk.h, s0 = blk.s0, nq = blk.nq, d = a.d, ring = a.ring;
    const int tid = threadIdx.x, lane = tid & 31, w = tid >> 5, g = lane >> 2;
    const int32_t pos0 = blk.pos0, first = blk.first, span = blk.span, *positions = blk.positions;
    const __nv_bfloat16 *keys = blk.keys, *values = blk.values;
    float *out = blk.out;
    // tile kt into buffer b: chunk e = tid + i * THREADS is row e / 8, values 8 (e % 8) ..
    auto load = [&](int32_t kt, int b) {
        __nv_bfloat16 *ks = kv + 2 * b * AM_TILE, *vs = ks + AM_TILE;
#pragma unroll
        for (int i = 0; i < AM_CHUNKS / AM_THREADS; i++) {
            const int e = tid + i * AM_THREADS, j = e / (AM_HD / 8), c = 8 * (e % (AM_HD / 8));
            const int32_t p = first + kt + j;
            const size_t at = (size_t)(((p % ring) + ring) % ring) * d + c;
            cp_async16(ks + j * AM_LD + c, keys + at);
            cp_async16(vs + j * AM_LD + c, values + at);
        }
        asm volatile("cp.async.commit_group;");
        if (tid < AM_TK) {
            const int32_t p = first + kt + tid;
            kpos[b * AM_TK + tid] = p >= 0 && kt + tid < span && positions[p % ring] == p ? p : -1;
        }
    };
    load(0, 0);
    unsigned qf[4][4];  // q of this warp's rows sa and sa + 8
    const int sa = 16 * w + g;
    q_fragments(a.qkv + ((size_t)r * a.steps + s0 + sa) * 3 * d + (size_t)h * AM_HD, d, sa < nq, sa + 8 < nq, qf);
    const int32_t qpos[2] = {pos0 + 16 * w + g, pos0 + 16 * w + g + 8};
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
    float o[8][4] = {};  // O's dims 8n + 2t, + 1 of rows g (0, 1) and g + 8 (2, 3)
    for (int32_t kt = 0, b = 0; kt < span; kt += AM_TK, b ^= 1) {
        __syncthreads();  // every warp is done with buffer b ^ 1 (the tile before the last)
        if (kt + AM_TK < span) {
            load(kt + AM_TK, b ^ 1);
            asm volatile("cp.async.wait_group 1;");
        } else {
            asm volatile("cp.async.wait_group 0;");
        }
        __syncthreads();  // tile kt is in buffer b
        const __nv_bfloat16 *ks = kv + 2 * b * AM_TILE;
        mma_tile<AM_TK / 8>(qf, ks, ks + AM_TILE, AM_LD, kpos + b * AM_TK, qpos, a.context, m, l, o);
    }
    store_rows(l, o, out, d, sa, nq);
}

// ---- short steps ----

// A block per row, a warp per head. Each warp copies its head's columns of the ring entries
// AS_TK at a time into its own shared buffers and walks them, so that the warps never wait for
// each other, while the block's warps together read whole entries at about the same time. At
// 2048 bf16 streams on an H200, a direction's eight attention launches took 2,520 us with a
// one-warp block per (row, head) and 32 entries a tile (the chip's resident blocks then read
// 128-byte pieces of 1 KB entries), 2,461-2,467 us with the block copying whole entries for
// all its warps (a barrier per tile, 35% of the stalls), and 2,381-2,390 us so (2,437-2,451 on
// another machine start).
#define AS_TK 16          // ring entries per tile
#define AS_MAX_HEADS 8    // warps a block at most
#define AS_WARP_TILE (AS_TK * AM_LD)
#define AS_WARP_BYTES (sizeof(__nv_bfloat16) * 4 * AS_WARP_TILE + sizeof(int32_t) * 2 * AS_TK)
static size_t as_smem(int n_heads) { return AS_WARP_BYTES * (size_t)n_heads; }

// What a short step's warp for row r and head h walks its ring with.
struct short_head {
    int slot;
    float *out;                // its rows of the output: steps of d floats, head h's columns
    int32_t pos0;              // the step's first position
    const int32_t *positions;  // the slot's position ring
    // the slot's ring of keys or values, head h's columns
    template <typename T>
    __device__ const T *ring(void *base, const struct op_attention &a, int h) const {
        return slot_ring<T>(base, a.slot_stride, slot) + (size_t)h * AM_HD;
    }
};

// The warp's start, once the predecessor is done (pdl_begin): a padding row's zeros (false),
// else the head's new keys rotated and stored (only this warp reads them) and s filled.
static __device__ __forceinline__ bool short_head_begin(const struct op_attention &a, int r, int h, struct short_head &s) {
    const int lane = threadIdx.x & 31;
    pdl_begin();
    s.slot = a.row_slot[r];
    s.out = a.out + (size_t)r * a.steps * a.d + (size_t)h * AM_HD;
    if (s.slot < 0) {
        for (int i = lane; i < a.steps * AM_HD; i += 32) s.out[(size_t)(i / AM_HD) * a.d + i % AM_HD] = 0.0f;
        return false;
    }
    if (a.rope) {
        for (int e = lane; e < a.steps * (AM_HD / 2); e += 32)
            rope_pair(a, r, e / (AM_HD / 2), h * (AM_HD / 2) + e % (AM_HD / 2));
        __threadfence_block();
        __syncwarp();
    }
    const size_t base = (size_t)s.slot * a.slot_stride;
    s.pos0 = a.next_pos[base];
    s.positions = a.positions + base;
    return true;
}

// Grid R, a warp per head: this row's queries against every entry of its ring.
static __global__ void __launch_bounds__(32 * AS_MAX_HEADS, 3) attention_mma_short_kernel(const struct op_attention a) {
    extern __shared__ uint4 as_smem16[];
    const int d = a.d, steps = a.steps, ring = a.ring;
    const int r = blockIdx.x, tid = threadIdx.x, h = tid >> 5, lane = tid & 31, g = lane >> 2;
    __nv_bfloat16 *kv = (__nv_bfloat16 *)((unsigned char *)as_smem16 + AS_WARP_BYTES * h);  // buffer b: keys at 2b, values at 2b + 1
    int32_t *kpos = (int32_t *)(kv + 4 * AS_WARP_TILE);  // buffer b: AS_TK positions at b * AS_TK (-1: none)
    struct short_head sh;
    if (!short_head_begin(a, r, h, sh)) return;
    const __nv_bfloat16 *keys = sh.ring<__nv_bfloat16>(a.keys, a, h), *values = sh.ring<__nv_bfloat16>(a.values, a, h);
    // entries e0 .. e0 + AS_TK - 1 into buffer b (past the ring: the last entry again, masked)
    auto load = [&](int e0, int b) {
        __nv_bfloat16 *ks = kv + 2 * b * AS_WARP_TILE, *vs = ks + AS_WARP_TILE;
#pragma unroll
        for (int i = 0; i < AS_TK * AM_HD / 8 / 32; i++) {
            const int c16 = lane + 32 * i, j = c16 / (AM_HD / 8), c = 8 * (c16 % (AM_HD / 8));
            const size_t at = (size_t)min(e0 + j, ring - 1) * d + c;
            cp_async16(ks + j * AM_LD + c, keys + at);
            cp_async16(vs + j * AM_LD + c, values + at);
        }
        asm volatile("cp.async.commit_group;");
        if (lane < AS_TK) kpos[b * AS_TK + lane] = e0 + lane < ring ? sh.positions[e0 + lane] : -1;
    };
    load(0, 0);
    unsigned qf[4][4];
    q_fragments(a.qkv + ((size_t)r * steps + g) * 3 * d + (size_t)h * AM_HD, d, g < steps, g + 8 < steps, qf);
    const int32_t qpos[2] = {sh.pos0 + g, sh.pos0 + g + 8};
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
    float o[8][4] = {};
    for (int e0 = 0, b = 0; e0 < ring; e0 += AS_TK, b ^= 1) {
        __syncwarp();  // every lane is done with buffer b ^ 1
        if (e0 + AS_TK < ring) {
            load(e0 + AS_TK, b ^ 1);
            asm volatile("cp.async.wait_group 1;");
        } else {
            asm volatile("cp.async.wait_group 0;");
        }
        __syncwarp();  // tile e0 is in buffer b
        const __nv_bfloat16 *ks = kv + 2 * b * AS_WARP_TILE;
        mma_tile<AS_TK / 8>(qf, ks, ks + AS_WARP_TILE, AM_LD, kpos + b * AS_TK, qpos, a.context, m, l, o);
    }
    store_rows(l, o, sh.out, d, g, steps);
}

// ---- short steps over int8 rings ----

// As attention_mma_short_kernel, over int8 rings (op_attention.kv_int8). A warp copies its
// head's int8 columns of AS_TK entries and their scales (cp.async, the next tile's while this one
// is computed). Q K^T runs on int8 tensor cores: each query row's q / sqrt(hd) is quantized as a
// key is (gpu_kv_int8_*), its fragments read the staged keys as they are, and a score is the
// exact integer dot product times the query's and the key's scales. P V runs on f16 tensor cores:
// each lane widens the values it copied to f16 (exactly: integers of at most 127 in magnitude),
// and a probability is multiplied by its value's scale (at most 65504) before its rounding to
// f16; the sums take it unscaled. Against bf16 rings' kernel a tile is half the bytes and needs
// no widening of its keys.
#define AS8_TILE (AS_TK * AM_HD)  // bytes of a tile's staged keys, or values
// Where 16-byte piece c of staged key row j lies in the row: swapped within the row's four by
// (j / 2) % 4, so that the 8 rows a fragment load reads fall on distinct banks.
#define AS8_PIECE(j, c) (16 * ((c) ^ (((j) >> 1) & 3)))
#define AS8_WARP_BYTES \
    (sizeof(__half) * AS_WARP_TILE + 2 * 2 * AS8_TILE + sizeof(float) * 2 * 2 * AS_TK + sizeof(int32_t) * 2 * AS_TK)
static size_t as8_smem(int n_heads) { return AS8_WARP_BYTES * (size_t)n_heads; }

// The 16 int8 values of `in` as f16 at out (two 16-byte words): a byte with its sign bit flipped
// is the low mantissa of the f16 1024 + b + 128.
static __device__ __forceinline__ void widen16_f16(uint4 in, uint4 *out) {
    const uint32_t w[4] = {in.x, in.y, in.z, in.w};
    uint32_t h[8];
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const uint32_t u = w[i] ^ 0x80808080u;
        const uint32_t lo = __byte_perm(u, 0x64646464u, 0x4140), hi = __byte_perm(u, 0x64646464u, 0x4342);
        asm("sub.f16x2 %0, %1, %2;" : "=r"(h[2 * i]) : "r"(lo), "r"(0x64806480u));
        asm("sub.f16x2 %0, %1, %2;" : "=r"(h[2 * i + 1]) : "r"(hi), "r"(0x64806480u));
    }
    out[0] = make_uint4(h[0], h[1], h[2], h[3]);
    out[1] = make_uint4(h[4], h[5], h[6], h[7]);
}

// The int8 A fragments of this lane's query rows g (at qa, when valid_a) and g + 8 (zeros: a
// short step has at most 2 rows) for two k-steps of 32 dims, and row g's scale: q / sqrt(hd)
// quantized over the head's 64 values (the quad's four lanes hold them all).
static __device__ __forceinline__ void q_fragments_int8(const float *qa, bool valid_a, unsigned (&qi)[2][4],
                                                         float &qs) {
    const int t = threadIdx.x & 3;
    const float scale = 1.0f / sqrtf((float)AM_HD);
    float x[2][2][4];  // [k-step][half of 16 dims][4 dims]
    float mx = 0.0f;
#pragma unroll
    for (int kk = 0; kk < 2; kk++)
#pragma unroll
        for (int hf = 0; hf < 2; hf++) {
            const float *p = qa + 32 * kk + 16 * hf + 4 * t;
            const float2 a = valid_a ? *(const float2 *)p : make_float2(0.0f, 0.0f);
            const float2 b = valid_a ? *(const float2 *)(p + 2) : make_float2(0.0f, 0.0f);
            x[kk][hf][0] = a.x * scale, x[kk][hf][1] = a.y * scale, x[kk][hf][2] = b.x * scale, x[kk][hf][3] = b.y * scale;
#pragma unroll
            for (int i = 0; i < 4; i++) mx = fmaxf(mx, fabsf(x[kk][hf][i]));
        }
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
    qs = gpu_kv_int8_scale(mx);
#pragma unroll
    for (int kk = 0; kk < 2; kk++) {
#pragma unroll
        for (int hf = 0; hf < 2; hf++) {
            unsigned w = 0;
#pragma unroll
            for (int i = 0; i < 4; i++) w |= (unsigned)(gpu_kv_int8_code(x[kk][hf][i], mx) & 0xff) << (8 * i);
            qi[kk][2 * hf] = w;      // row g
            qi[kk][2 * hf + 1] = 0;  // row g + 8
        }
    }
}

// mma_tile over a staged int8 tile for short steps (rows g + 8 of the 16 are padding: their
// scores, sums and outputs are left out, o holding row g only): keys ks (AS8_PIECE rows of 64
// bytes), values widened to f16 at vs (rows ld halves apart), the tile's key and value scales
// ksc and vsc. A lane's scores are sc[j][0..1]: keys 8j + 2t and 8j + 2t + 1 of its row g.
template <int NJ>
static __device__ __forceinline__ void mma_tile_int8(const unsigned (&qi)[2][4], float qs, const int8_t *ks,
                                                     const __half *vs, int ld, const float *ksc, const float *vsc,
                                                     const int32_t *kp, int32_t qpos, int context, float &m, float &l,
                                                     float (&o)[8][2]) {
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    float sc[NJ][2], mx = m;
#pragma unroll
    for (int j = 0; j < NJ; j++) {
        int acc[4] = {0, 0, 0, 0};
        const int8_t *krow = ks + (8 * j + g) * AM_HD + 4 * t;
#pragma unroll
        for (int kk = 0; kk < 2; kk++)
            mma_s8(acc, qi[kk], *(const unsigned *)(krow + AS8_PIECE(g, 2 * kk)),
                   *(const unsigned *)(krow + AS8_PIECE(g, 2 * kk + 1)));
        const float2 kscale = *(const float2 *)(ksc + 8 * j + 2 * t);
        const int2 pk = *(const int2 *)(kp + 8 * j + 2 * t);
#pragma unroll
        for (int e = 0; e < 2; e++) {
            const int32_t p = e ? pk.y : pk.x, age = qpos - p;
            sc[j][e] = p >= 0 && age >= 0 && age < context ? (float)acc[e] * (qs * (e ? kscale.y : kscale.x)) : -INFINITY;
            mx = fmaxf(mx, sc[j][e]);
        }
    }
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
    const float corr = mx == -INFINITY ? 1.0f : __expf(m - mx);
    m = mx;
    l *= corr;
#pragma unroll
    for (int j = 0; j < NJ; j++) {
        const float2 vscale = *(const float2 *)(vsc + 8 * j + 2 * t);
#pragma unroll
        for (int e = 0; e < 2; e++) {
            const float p = m == -INFINITY ? 0.0f : __expf(sc[j][e] - m);
            l += p;
            sc[j][e] = fminf(p * (e ? vscale.y : vscale.x), 65504.0f);
        }
    }
#pragma unroll
    for (int n = 0; n < 8; n++) o[n][0] *= corr, o[n][1] *= corr;
#pragma unroll
    for (int kk = 0; kk < NJ / 2; kk++) {
        const unsigned pa[4] = {pack_f16(sc[2 * kk][0], sc[2 * kk][1]), 0u, pack_f16(sc[2 * kk + 1][0], sc[2 * kk + 1][1]), 0u};
        pv_product<true>(pa, vs, ld, kk, o);
    }
}

// Grid R, a warp per head.
static __global__ void __launch_bounds__(32 * AS_MAX_HEADS, 3) attention_mma_short_int8_kernel(const struct op_attention a) {
    extern __shared__ uint4 as_smem16[];
    const int d = a.d, steps = a.steps, ring = a.ring;
    const int r = blockIdx.x, tid = threadIdx.x, h = tid >> 5, lane = tid & 31, g = lane >> 2;
    unsigned char *mine = (unsigned char *)as_smem16 + AS8_WARP_BYTES * h;
    __half *vt = (__half *)mine;                                     // the widened values
    int8_t *staged = (int8_t *)(vt + AS_WARP_TILE);                   // buffer b: keys, then values
    float *scales = (float *)(staged + 2 * 2 * AS8_TILE);  // buffer b: keys' at 2b, values' at 2b + 1
    int32_t *kpos = (int32_t *)(scales + 4 * AS_TK);                  // buffer b: positions at b * AS_TK
    struct short_head sh;
    if (!short_head_begin(a, r, h, sh)) return;
    const int8_t *keys = sh.ring<int8_t>(a.keys, a, h), *values = sh.ring<int8_t>(a.values, a, h);
    const ring_scales rs = head_scales<int8_t>(a, a.keys, a.values, sh.slot, h);
    // entries e0 .. e0 + AS_TK - 1 into buffer b (past the ring: the last entry again, masked):
    // lane copies 16-byte pieces lane and lane + 32 of the keys and of the values
    auto load = [&](int e0, int b) {
        int8_t *kb = staged + b * 2 * AS8_TILE, *vb = kb + AS8_TILE;
#pragma unroll
        for (int i = 0; i < AS8_TILE / 16 / 32; i++) {
            const int c16 = lane + 32 * i, j = c16 / (AM_HD / 16), c = 16 * (c16 % (AM_HD / 16));
            const size_t at = (size_t)min(e0 + j, ring - 1) * d + c;
            cp_async16(kb + j * AM_HD + AS8_PIECE(j, c / 16), keys + at);
            cp_async16(vb + j * AM_HD + c, values + at);
        }
        const int j = lane & (AS_TK - 1), e = min(e0 + j, ring - 1);
        cp_async4(scales + (2 * b + (lane >> 4)) * AS_TK + j, (lane >> 4 ? rs.vs : rs.ks) + (size_t)e * rs.n_heads);
        asm volatile("cp.async.commit_group;");
        if (lane < AS_TK) kpos[b * AS_TK + lane] = e0 + lane < ring ? sh.positions[e0 + lane] : -1;
    };
    load(0, 0);
    unsigned qi[2][4];
    float qs;
    q_fragments_int8(a.qkv + ((size_t)r * steps + g) * 3 * d + (size_t)h * AM_HD, g < steps, qi, qs);
    float m = -INFINITY, l = 0.0f;
    float o[8][2] = {};  // row g's outputs (dims 8n + 2t, + 1)
    for (int e0 = 0, b = 0; e0 < ring; e0 += AS_TK, b ^= 1) {
        __syncwarp();  // every lane is done with buffer b ^ 1 and with the widened values
        if (e0 + AS_TK < ring) {
            load(e0 + AS_TK, b ^ 1);
            asm volatile("cp.async.wait_group 1;");
        } else {
            asm volatile("cp.async.wait_group 0;");
        }
        // the values this lane copied, widened (its own copies: no exchange needed before)
        const int8_t *kb = staged + b * 2 * AS8_TILE, *vb = kb + AS8_TILE;
#pragma unroll
        for (int i = 0; i < AS8_TILE / 16 / 32; i++) {
            const int c16 = lane + 32 * i, j = c16 / (AM_HD / 16), c = 16 * (c16 % (AM_HD / 16));
            widen16_f16(*(const uint4 *)(vb + j * AM_HD + c), (uint4 *)(vt + j * AM_LD + c));
        }
        __syncwarp();  // tile e0 is staged and widened
        mma_tile_int8<AS_TK / 8>(qi, qs, kb, vt, AM_LD, scales + 2 * b * AS_TK, scales + (2 * b + 1) * AS_TK,
                                 kpos + b * AS_TK, sh.pos0 + g, a.context, m, l, o);
    }
    float ls[2] = {l, 0.0f};
    store_rows(ls, o, sh.out, d, g, steps);
}

int attention_mma_short_fits(const struct op_attention *a) {
    return a->mma_bf16 && (a->kv_bf16 || a->kv_int8) && a->head_dim == AM_HD && a->n_heads * AM_HD == a->d &&
           a->n_heads <= AS_MAX_HEADS && a->steps >= 1 && GPU_ATT_MMA_SHORT(a->R, a->steps) &&
           (uintptr_t)a->keys % 16 == 0 && (uintptr_t)a->values % 16 == 0 && (uintptr_t)a->qkv % 8 == 0 &&
           (uintptr_t)a->out % 8 == 0 && a->slot_stride % 4 == 0;
}

int attention_mma_short(const struct op_attention *a, struct gpu_exec *ex) {
    if (a->kv_int8)
        return launch_smem("attention", attention_mma_short_int8_kernel, dim3((unsigned)a->R), 32 * a->n_heads,
                           as8_smem(a->n_heads), ex, *a);
    return launch_smem("attention", attention_mma_short_kernel, dim3((unsigned)a->R), 32 * a->n_heads,
                       as_smem(a->n_heads), ex, *a);
}

int attention_mma_fits(const struct op_attention *a) {
    return a->mma_bf16 && a->kv_bf16 && a->head_dim == AM_HD && a->steps >= AM_TQ &&
           a->ring >= a->context + a->steps - 1 && a->d % 8 == 0 && (uintptr_t)a->keys % 16 == 0 &&
           (uintptr_t)a->values % 16 == 0 && (uintptr_t)a->qkv % 8 == 0 && (uintptr_t)a->out % 8 == 0 &&
           a->slot_stride % 4 == 0;
}

int attention_mma(const struct op_attention *a, struct gpu_exec *ex) {
    pdl_launch(attention_mma_kernel, row_head_grid(a->R, a->n_heads, (a->steps + AM_TQ - 1) / AM_TQ), AM_THREADS,
               AM_SMEM, ex, *a);
    return launch_status(ex, "attention");
}
