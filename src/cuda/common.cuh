/*
 * common.cuh - shared by the CUDA op files: launch checks that return a status (never abort),
 * grid sizing for grid-stride loops, and the scalar functions that must match the CPU reference
 * (src/nn/ops_ref.c) operation for operation.
 */
#ifndef MIMI_CUDA_COMMON_CUH
#define MIMI_CUDA_COMMON_CUH

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>

#include "mimi.h"
#include "ops.h"

#define STREAM(ex) ((cudaStream_t)(ex)->stream)

// ---- asynchronous copies into shared memory (cp.async; the caller commits and waits) ----
static __device__ __forceinline__ unsigned smem_addr(const void *p) { return (unsigned)__cvta_generic_to_shared(p); }

static __device__ __forceinline__ void cp_async16(void *dst, const void *src) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(smem_addr(dst)), "l"(src));
}

static __device__ __forceinline__ void cp_async4(void *dst, const void *src) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(smem_addr(dst)), "l"(src) : "memory");
}

// ---- programmatic dependent launch ----
// With ex->pdl every kernel is launched as a programmatic dependent of the kernel before it on
// the stream (and captured so into the graphs): the GPU may schedule it while its predecessor
// runs, which removes most of the gap between two dependent kernels of a small step. Every
// kernel begins with pdl_begin(): it waits until the predecessor has completed and its memory
// is visible (griddepcontrol.wait, a no-op without a programmatic predecessor), and only then
// lets its own successor be scheduled, so at most two grids overlap and the order of the plan's
// ops is kept transitively.
static __device__ __forceinline__ void pdl_begin() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// A kernel of a small step asks for what it will read before pdl_begin(): its weights (and the
// attention its rings, written by earlier steps) then come into L2 while the predecessor still
// runs, instead of one memory round trip after it. Thread i of n requests every n-th 128-byte
// line of [p, p + bytes). Only a hint: L2 is where every write of the chip lands, so a line
// fetched early is never stale.
static __device__ __forceinline__ void prefetch_l2(const void *p, size_t bytes, int i, int n) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    const uintptr_t end = (uintptr_t)p + bytes;
    for (uintptr_t a = ((uintptr_t)p & ~(uintptr_t)127) + (uintptr_t)i * 128; a < end; a += (uintptr_t)n * 128)
        asm volatile("prefetch.global.L2 [%0];" ::"l"(a));
#endif
}

// kernel<<<grid, block, smem, ex's stream>>>(args...), programmatic when ex->pdl; a launch
// error is left for launch_status().
template <typename... Params, typename... Args>
static inline void pdl_launch(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, struct gpu_exec *ex,
                              Args... args) {
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = STREAM(ex);
    cfg.attrs = attr;
    cfg.numAttrs = ex->pdl ? 1 : 0;
    (void)cudaLaunchKernelEx(&cfg, kernel, args...);
}

// Checks the launch just made; on failure records the CUDA error and returns MIMI_EDEVICE.
static inline int launch_status(struct gpu_exec *ex, const char *what) {
    cudaError_t e = cudaGetLastError();
    if (e == cudaSuccess) return MIMI_OK;
    if (ex->errmsg) snprintf(ex->errmsg, ex->errlen, "%s: %s", what, cudaGetErrorString(e));
    return MIMI_EDEVICE;
}

// pdl_launch of a kernel with `smem` bytes of dynamic shared memory, opted in past the 48 KB a
// block gets by default; returns launch_status(ex, what), or MIMI_EDEVICE ("what (shared
// memory)") when the opt-in fails.
template <typename... Params, typename... Args>
static inline int launch_smem(const char *what, void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem,
                              struct gpu_exec *ex, Args... args) {
    if (smem > 48 * 1024 &&
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem) != cudaSuccess) {
        char msg[96];
        snprintf(msg, sizeof msg, "%s (shared memory)", what);
        return launch_status(ex, msg);
    }
    pdl_launch(kernel, grid, block, smem, ex, args...);
    return launch_status(ex, what);
}

// Blocks of `block` threads for n items, capped (the kernels loop over the rest).
static inline unsigned grid_for(size_t n, int block) {
    size_t g = (n + block - 1) / block;
    if (g > (1u << 24)) g = 1u << 24;
    return g ? (unsigned)g : 1u;
}

// The grid of the kernels that walk `rows` with blockIdx.y and n items of a row with a
// grid-stride loop over blockIdx.x (blocks of `block` threads), both capped at 65535.
static inline dim3 grid_rows(size_t n, int block, int rows) {
    dim3 grid(grid_for(n, block), rows < 65535 ? rows : 65535);
    if (grid.x > 65535) grid.x = 65535;
    return grid;
}

// Grid-stride loop over [0, n).
#define FOR_EACH(i, n) \
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += (size_t)gridDim.x * blockDim.x)

// op_finish's work for rows first, first + step, ... (finish_kernel, tails_kernel).
static __device__ __forceinline__ void finish_rows(const struct op_finish &a, int first, int step) {
    for (int r = first; r < a.R; r += step) {
        const int slot = a.row_slot[r];
        if (slot < 0) continue;
        a.next_pos[(size_t)slot * a.slot_stride] += a.steps;
        a.started[(size_t)slot * a.slot_stride] = 1;
    }
}

// Whether this block is the last of `n` blocks to arrive at *counter, each after its writes:
// the last one then sees every block's writes (it resets the counter when done). Every thread
// of the block must call it. One thread arrives for the block, after the block barrier that
// orders its threads' writes before it, with an acquire-release add (grid_arrive's pattern), so
// that one thread waits for the writes to be visible instead of each waiting at a fence; the
// last block's other threads read after the barrier that follows the add.
static __device__ __forceinline__ bool last_block(uint32_t *counter, unsigned n) {
    __shared__ bool last;
    __syncthreads();
    if (threadIdx.x == 0) {
        unsigned before;
        asm volatile("atom.acq_rel.gpu.global.add.u32 %0, [%1], 1;" : "=r"(before) : "l"(counter) : "memory");
        last = before == n - 1;
    }
    __syncthreads();
    return last;
}

// A 64-bit word stored and loaded whole at the GPU's scope, with no ordering beyond it: a value
// that carries its own version (the float's or int's bits below, the version above) can pass
// from block to block with no fence and no barrier, its reader loading it until the version is
// the one it waits for (transformer.cu, rvq.cu).
static __device__ __forceinline__ void st_relaxed_u64(uint64_t *p, uint64_t v) {
    asm volatile("st.relaxed.gpu.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}
static __device__ __forceinline__ uint64_t ld_relaxed_u64(const uint64_t *p) {
    uint64_t v;
    asm volatile("ld.relaxed.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
    return v;
}

// The dot product of two float4 (products summed left to right).
static __device__ __forceinline__ float dot4(float4 a, float4 b) { return a.x * b.x + a.y * b.y + a.z * b.z + a.w * b.w; }

// v summed over the warp (xor butterfly: every lane gets the same sum).
static __device__ __forceinline__ double warp_sum_d(double v) {
    for (int off = 16; off; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
    return v;
}

// The same in float (the same butterfly, so the same sum on every lane).
static __device__ __forceinline__ float warp_sum_f(float v) {
    for (int off = 16; off; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
    return v;
}

// An attribute of the current device (0 on failure, the error cleared).
static inline int device_attribute(enum cudaDeviceAttr attr) {
    int device = 0, v = 0;
    if (cudaGetDevice(&device) != cudaSuccess || cudaDeviceGetAttribute(&v, attr, device) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return v;
}

// The number of SMs of the current device (0 on failure).
static inline int device_sms(void) { return device_attribute(cudaDevAttrMultiProcessorCount); }

// ELU with alpha 1, as mimi_elu.
static __device__ __forceinline__ float elu_f(float x) { return x > 0.0f ? x : expm1f(x); }

// Four values in bfloat16 (rounded to nearest even), in memory order: one 8-byte store.
static __device__ __forceinline__ uint2 bf16x4(float v0, float v1, float v2, float v3) {
    const __nv_bfloat162 lo = __floats2bfloat162_rn(v0, v1), hi = __floats2bfloat162_rn(v2, v3);
    return make_uint2(*(const unsigned *)&lo, *(const unsigned *)&hi);
}

// ELU for operands rounded to bfloat16 next (MIMI_PRECISION_FAST_BF16): expm1 from the fast
// exponential, and near 0 (where exp(x) - 1 cancels) from its Taylor polynomial to x^4. Within
// about 1e-7 of elu_f, far below the rounding's 2^-9 relative; a third of expm1f's instructions,
// which bound the bf16 im2col.
static __device__ __forceinline__ float elu_bf16(float x) {
    const float p = x * fmaf(x, fmaf(x, fmaf(x, 1.0f / 24.0f, 1.0f / 6.0f), 0.5f), 1.0f);
    const float e = __expf(x) - 1.0f;
    return x > 0.0f ? x : x > -0.03125f ? p : e;
}

// Exact GELU, 0.5 x (1 + erf(x / sqrt 2)), rounded step by step as mimi_gelu.
static __device__ __forceinline__ float gelu_f(float v) {
    return __fmul_rn(__fmul_rn(0.5f, v), __fadd_rn(1.0f, erff(__fmul_rn(v, (float)0.70710678118654752440))));
}

// Column j of [hist (H) | f(x) (T)] for channel i of row r of a conv's input side (f = ELU when
// a.elu). A padding row has a zero history; a replicate-padded slot that has not started repeats
// f(x[i, r, 0]).
static __device__ __forceinline__ float xin(const struct op_im2col &a, int i, int r, int j) {
    const float *xr = a.x + ((size_t)i * a.R + r) * a.T;
    if (j >= a.H) return a.elu ? elu_f(xr[j - a.H]) : xr[j - a.H];
    int slot = a.row_slot[r];
    if (slot < 0) return 0.0f;
    if (a.replicate && !a.started[(size_t)slot * a.slot_stride]) return a.elu ? elu_f(xr[0]) : xr[0];
    return a.hist[(size_t)slot * a.slot_stride + (size_t)i * a.H + j];
}

#endif
