/*
 * mma.cuh - bfloat16 tensor-core pieces shared by the kernels on mma.sync m16n8k16
 * (attention_mma.cu, resblock_mma.cu): shared-memory addresses, 16-byte asynchronous copies,
 * bf16 packing, the product and ldmatrix.
 */
#ifndef MIMI_CUDA_MMA_CUH
#define MIMI_CUDA_MMA_CUH

#include <cuda_bf16.h>

static __device__ __forceinline__ unsigned smem_addr(const void *p) { return (unsigned)__cvta_generic_to_shared(p); }

static __device__ __forceinline__ void cp_async16(void *dst, const void *src) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(smem_addr(dst)), "l"(src));
}

// two f32 as one register of bf16 (rounded to nearest even), the first in the low half
static __device__ __forceinline__ unsigned pack_bf16(float lo, float hi) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *(const unsigned *)&v;
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

#endif
