/*
 * mma.cuh - bfloat16 tensor-core pieces shared by the kernels on mma.sync m16n8k16
 * (attention_mma.cu and the SEANet's *_mma.cu): shared-memory addresses, 16-byte asynchronous
 * copies, bf16 packing, the product and ldmatrix; and for the SEANet kernels, the staging of an
 * input window in shared memory (from 16-byte pieces of x: at 2048 bf16 streams on an H200 the
 * 4-byte form had left the 128-channel resblock and the S 4 transposed conv at 0.75 and 0.97 ms,
 * this one takes them to 0.60 and 0.71) and a warp's product of weight fragments with it.
 */
#ifndef MIMI_CUDA_MMA_CUH
#define MIMI_CUDA_MMA_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>

// two f32 as one register of bf16 (rounded to nearest even), the first in the low half
static __device__ __forceinline__ unsigned pack_bf16(float lo, float hi) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *(const unsigned *)&v;
}

// the same in f16
static __device__ __forceinline__ unsigned pack_f16(float lo, float hi) {
    const __half2 v = __floats2half2_rn(lo, hi);
    return *(const unsigned *)&v;
}

// acc (16 x 8) += A (16 x 16) B (16 x 8), f16 operands, f32 accumulation (mma_bf16's fragments)
static __device__ __forceinline__ void mma_f16(float acc[4], const unsigned a[4], unsigned b0, unsigned b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};"
                 : "+f"(acc[0]), "+f"(acc[1]), "+f"(acc[2]), "+f"(acc[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// acc (16 x 8) += A (16 x 32) B (32 x 8), int8 operands, exact int32 accumulation. Lane 4g + t
// holds A's rows g (a[0], a[2]) and g + 8 (a[1], a[3]), columns 4t .. 4t + 3 (a[0], a[1]) and
// 16 + 4t .. (a[2], a[3]), four to a register; B's column g, rows 4t .. (b0) and 16 + 4t .. (b1);
// acc as mma_bf16's.
static __device__ __forceinline__ void mma_s8(int acc[4], const unsigned a[4], unsigned b0, unsigned b1) {
    asm volatile("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};"
                 : "+r"(acc[0]), "+r"(acc[1]), "+r"(acc[2]), "+r"(acc[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// acc (16 x 8) += A (16 x 16) B (16 x 8), bf16 operands, f32 accumulation
static __device__ __forceinline__ void mma_bf16(float acc[4], const unsigned a[4], unsigned b0, unsigned b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};"
                 : "+f"(acc[0]), "+f"(acc[1]), "+f"(acc[2]), "+f"(acc[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Four 8x8 bf16 matrices from shared memory: lanes 8m .. 8m + 7 give matrix m's row addresses
// (16 bytes each); lane 4g + q receives row g, values 2q and 2q + 1 of each.
static __device__ __forceinline__ void ldmatrix_x4(unsigned (&v)[4], const void *row) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(v[0]), "=r"(v[1]), "=r"(v[2]), "=r"(v[3])
                 : "r"(smem_addr(row)));
}

// ---- the SEANet kernels (8 warps a block) ----

// Rows that are not one channel row's consecutive columns (the transposed conv's tail launch
// stages one column of each of 16 streams): xs row dst(u) (pitch XP bf16 values), channels i,
// i + 1 = load(u, i) (a float2) for rows u < ROWS and channels i < C: lane l of warp w takes row
// 8b + (l & 7) and the channel pair 2(l >> 3) of an octet, so that a load instruction reads 32
// contiguous bytes of 8 rows of each of 8 channels and the stores of 8 consecutive rows fall on
// distinct banks when XP / 2 = 4 (mod 32); CHUNK items' loads are issued before their stores.
template <int C, int ROWS, int XP, typename Load, typename Dst>
static __device__ __forceinline__ void stage_rows(__nv_bfloat16 *xs, Load load, Dst dst) {
    constexpr int WARPS = 8, CHUNK = 8, OCT = C / 8, ITEMS = (ROWS + 7) / 8 * OCT;
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
#pragma unroll 1
    for (int c0 = w; c0 < ITEMS; c0 += WARPS * CHUNK) {
        float2 v[CHUNK];
#pragma unroll
        for (int q = 0; q < CHUNK; q++) {
            const int it = c0 + q * WARPS, b = it / OCT, i = 8 * (it - b * OCT) + 2 * (lane >> 3), u = 8 * b + (lane & 7);
            v[q] = it < ITEMS && u < ROWS ? load(u, i) : make_float2(0.0f, 0.0f);
        }
#pragma unroll
        for (int q = 0; q < CHUNK; q++) {
            const int it = c0 + q * WARPS, b = it / OCT, i = 8 * (it - b * OCT) + 2 * (lane >> 3), u = 8 * b + (lane & 7);
            if (it < ITEMS && u < ROWS) *(unsigned *)(xs + dst(u) * XP + i) = pack_bf16(v[q].x, v[q].y);
        }
    }
}

// The window of a tile staged from x in 16-byte pieces: xs row dst(u) (pitch XP bf16 values),
// channels i, i + 1 = bf16 of f(x) at column j0 + u of channels i, i + 1 (xr: the row's channel
// 0, channel i at xr + i * cs, 16-byte aligned with cs a multiple of 4) for u < ROWS and i < C;
// columns j0 + u < 0 come from the history hist (C, H) at column j0 + u + H as stored (zeros
// without one). Pieces start at the aligned column a0 <= j0 (j0 >= -H). Item it takes channel
// pair PC (it / PC / NF) + it % PC and piece it / PC % NF: a warp reads 512 / PC contiguous bytes
// of 2 PC channel rows. Its 4-byte stores of one piece value fall PC to a bank group of 4 rows:
// PC = 8 keeps them at most two to a bank when dst is the identity and XP / 2 = 4 (mod 32);
// PC = 1 (whole 512-byte rows) suits a phase split of stride 4, which puts consecutive pieces on
// consecutive rows. CHUNK items' loads are issued before their stores. Reads stay within the
// row when T % 4 == 0 and j0 + ROWS <= T.
template <int C, int ROWS, int XP, int PC, typename F, typename Dst>
static __device__ __forceinline__ void stage_window(__nv_bfloat16 *xs, const float *xr, size_t cs, int j0,
                                                    const float *hist, int H, F f, Dst dst) {
    constexpr int THREADS = 256, NF = (ROWS + 6) / 4, ITEMS = C / 2 * NF, CHUNK = 4;
    static_assert(C / 2 % PC == 0, "channel pairs in groups of PC");
    const int a0 = j0 >= 0 ? j0 & ~3 : -((-j0 + 3) & ~3);
#pragma unroll 1
    for (int it0 = threadIdx.x; it0 < ITEMS; it0 += THREADS * CHUNK) {
        float4 v[CHUNK][2];
#pragma unroll
        for (int c = 0; c < CHUNK; c++) {
            const int it = it0 + c * THREADS, o = it / PC / NF, p = PC * o + it % PC, j = a0 + 4 * (it / PC - o * NF);
            if (it < ITEMS && j >= 0 && j < j0 + ROWS) {
                v[c][0] = __ldg((const float4 *)(xr + 2 * p * cs + j));
                v[c][1] = __ldg((const float4 *)(xr + (2 * p + 1) * cs + j));
            } else {
                v[c][0] = v[c][1] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            }
        }
#pragma unroll
        for (int c = 0; c < CHUNK; c++) {
            const int it = it0 + c * THREADS, o = it / PC / NF, p = PC * o + it % PC, j = a0 + 4 * (it / PC - o * NF);
            if (it >= ITEMS) break;
            const float lo[4] = {v[c][0].x, v[c][0].y, v[c][0].z, v[c][0].w};
            const float hi[4] = {v[c][1].x, v[c][1].y, v[c][1].z, v[c][1].w};
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int u = j + e - j0;
                if (u < 0 || u >= ROWS) continue;
                unsigned pair = 0u;
                if (j >= 0) pair = pack_bf16(f(lo[e]), f(hi[e]));
                else if (hist) pair = pack_bf16(hist[2 * p * H + j + e + H], hist[(2 * p + 1) * H + j + e + H]);
                *(unsigned *)(xs + dst(u) * XP + 2 * p) = pair;
            }
        }
    }
}

// This lane's ldmatrix row in a block of bf16 rows (pitch P) whose row n is column n of a B
// operand: row (l & 7) (+ 8 for lanes 16 ..), values + 8 for lanes 8 .. 15 and 24 ..; so that
// ldmatrix_x4 at it + row0 * P + k0 gives the B fragments (k0 .. k0 + 15) of columns row0 .. + 7
// and row0 + 8 .. + 15.
template <int P>
static __device__ __forceinline__ const __nv_bfloat16 *ldmatrix_lane(const __nv_bfloat16 *rows) {
    const int lane = threadIdx.x & 31;
    return rows + ((lane & 7) + 8 * (lane >> 4)) * P + 8 * ((lane >> 3) & 1);
}

// acc[n] (16 x 8 tile of columns 8n ..) += A (16 rows, KT*16) . B over KT steps: step kt's A
// fragment is af[kt * astep] (fragment order: one 16-byte load per lane, AHEAD steps in flight),
// its B fragments ldmatrix_x4 at b(kt) + 16 j * P for column groups 2j, 2j + 1. A step's B loads
// are all issued before its products (ldmatrix and mma are volatile: interleaved, each product
// would wait out one shared-memory round trip).
template <int KT, int NT, int P, typename BRow>
static __device__ __forceinline__ void mma_rows(float (&acc)[NT][4], const uint4 *af, size_t astep, BRow b) {
    constexpr int AHEAD = KT < 4 ? KT : 4;
    uint4 ring[AHEAD];
#pragma unroll
    for (int d = 0; d < AHEAD; d++) ring[d] = __ldg(af + d * astep);
#pragma unroll
    for (int kt = 0; kt < KT; kt++) {
        const uint4 f = ring[kt % AHEAD];
        if (kt + AHEAD < KT) ring[kt % AHEAD] = __ldg(af + (kt + AHEAD) * astep);
        const unsigned fa[4] = {f.x, f.y, f.z, f.w};
        const __nv_bfloat16 *bk = b(kt);
        unsigned v[NT / 2][4];
#pragma unroll
        for (int j = 0; j < NT / 2; j++) ldmatrix_x4(v[j], bk + 16 * j * P);
#pragma unroll
        for (int j = 0; j < NT / 2; j++) {
            mma_bf16(acc[2 * j], fa, v[j][0], v[j][1]);
            mma_bf16(acc[2 * j + 1], fa, v[j][2], v[j][3]);
        }
    }
}

#endif
