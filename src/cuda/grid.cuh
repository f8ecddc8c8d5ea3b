/*
 * grid.cuh - a grid-wide barrier for persistent cooperative kernels (transformer.cu, rvq.cu):
 * every block resident at once (cudaLaunchAttributeCooperative), stages separated by barriers
 * on two counters in device memory that are zero before and after each launch, and a third
 * word that counts the launches (the version a launch's blocks give what they leave for each
 * other as versioned words; common.cuh's st_relaxed_u64). All three are zero when the batch is
 * created, and again every GPU_VERSION_PERIOD launches with the words (gpu.h), so a
 * version, the count times the stages a launch versions plus the stage, never wraps around.
 */
#ifndef MIMI_CUDA_GRID_CUH
#define MIMI_CUDA_GRID_CUH

#include "common.cuh"

// A grid-wide barrier in two halves, so that a block's loads for the next stage are issued
// between them and stream while it waits: arrive after the stage's writes (the release makes
// them, ordered before it by the block barrier, visible to every block that acquires), then
// wait until the n-th barrier of the launch has n * gridDim.x arrivals on barrier[0]. A release
// waits for the arriving thread's outstanding memory operations, so no load the stage does not
// need is issued before it. (One flag per block instead of the shared counter, each waiter
// acquiring every flag, measured 1.6-2.1 us per barrier against 1.0-1.3; on an H100 with 132
// blocks, bench/probes/stage_floor.cu: acquiring polls 1.18 us, relaxed polls with one acquiring
// load after them (this form) 1.12, relaxed polls with one acquire-release fence after them 1.48,
// the last arriver releasing a flag 1.63, arrivals over 8 counters 1.53.)
static __device__ __forceinline__ void grid_arrive(uint32_t *barrier) {
    __syncthreads();
    if (threadIdx.x == 0) asm volatile("red.release.gpu.global.add.u32 [%0], 1;" ::"l"(barrier) : "memory");
}

static __device__ __forceinline__ void grid_wait(const uint32_t *barrier, unsigned n) {
    if (threadIdx.x == 0) {
        const unsigned target = n * gridDim.x;
        unsigned v;
        do {
            asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(barrier) : "memory");
        } while (v < target);
        // one acquiring load once the count is there: it reads a value at least the polled one
        // (coherence), so it synchronises with every arrival's release as an acquiring poll did
        asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(barrier) : "memory");
    }
    __syncthreads();
}

// The launches before this one (read by every block at its start; grid_exit advances it).
static __device__ __forceinline__ uint32_t grid_launches(const uint32_t *barrier) { return __ldcg(barrier + 2); }

// The version of stage `stage` < `stages` <= GRID_MAX_VERSIONS of the launch that found `launch`
// launches before it: at least 1 (a zeroed word carries none), and below 2^26 while the count is
// zeroed every GPU_VERSION_PERIOD (2^20) launches, so it never wraps.
#define GRID_MAX_VERSIONS 64u
static __device__ __forceinline__ uint32_t grid_version(uint32_t launch, uint32_t stages, uint32_t stage) {
    return launch * stages + stage + 1;
}

// The end of a launch: the last block out zeroes the counters for the next launch and counts
// the launch (barrier[1] counts the blocks out, after their last barrier, so every block has
// read the count by then; last_block's one add a block, no fences: the launch's end publishes
// the zeroes, the count and its outputs).
static __device__ __forceinline__ void grid_exit(uint32_t *barrier) {
    if (last_block(barrier + 1, gridDim.x) && threadIdx.x == 0) {
        barrier[0] = 0;
        barrier[1] = 0;
        barrier[2] += 1;
    }
}

// kernel<<<blocks, threads, smem>>>(args) as a cooperative launch on ex's stream, after checking
// that a block fits an SM; a launch error is left for launch_status().
template <typename Args>
static inline int grid_launch(void (*kernel)(Args), int blocks, int threads, size_t smem, const Args &args,
                              struct gpu_exec *ex, const char *what) {
    if (smem > 48 * 1024 &&
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem) != cudaSuccess)
        return launch_status(ex, what);
    int per_sm = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, smem) != cudaSuccess || per_sm < 1) {
        cudaGetLastError();
        if (ex->errmsg) snprintf(ex->errmsg, ex->errlen, "%s: a block of %zu bytes does not fit an SM", what, smem);
        return MIMI_EDEVICE;
    }
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeCooperative;
    attr[0].val.cooperative = 1;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(blocks);
    cfg.blockDim = dim3(threads);
    cfg.dynamicSmemBytes = smem;
    cfg.stream = STREAM(ex);
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    (void)cudaLaunchKernelEx(&cfg, kernel, args);
    return launch_status(ex, what);
}

#endif
