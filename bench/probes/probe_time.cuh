/*
 * probe_time.cuh - the probes' timer (the best of `reps` timed launches, the first a warm-up) and
 * their launch configuration for thread-block clusters.
 */
#ifndef MIMI_PROBE_TIME_CUH
#define MIMI_PROBE_TIME_CUH

#include <cuda_runtime.h>
#include <stdio.h>

// prepare() (untimed), then launch() between two events, reps times; the best time in ms of all
// but the first, or a negative value after a CUDA error (printed, after `who`).
template <typename Prepare, typename Launch>
static float probe_best_ms(const char *who, int reps, Prepare prepare, Launch launch) {
    cudaEvent_t a, b;
    cudaEventCreate(&a);
    cudaEventCreate(&b);
    float best = 1e30f;
    for (int rep = 0; rep < reps; rep++) {
        prepare(rep);
        cudaEventRecord(a);
        launch();
        cudaEventRecord(b);
        cudaEventSynchronize(b);
        float ms = 0.0f;
        cudaEventElapsedTime(&ms, a, b);
        if (rep > 0 && ms < best) best = ms;
    }
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    const cudaError_t e = cudaGetLastError();
    if (e == cudaSuccess) return best;
    fprintf(stderr, "%s: %s\n", who, cudaGetErrorString(e));
    return -1.0f;
}

// A launch of `blocks` blocks of `threads` in clusters of C (x only), `smem` bytes of dynamic
// shared memory; attr is the configuration's one attribute, kept by the caller.
static inline cudaLaunchConfig_t probe_cluster_config(cudaLaunchAttribute *attr, int C, int blocks, int threads,
                                                       size_t smem) {
    attr->id = cudaLaunchAttributeClusterDimension;
    attr->val.clusterDim.x = C, attr->val.clusterDim.y = 1, attr->val.clusterDim.z = 1;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(blocks);
    cfg.blockDim = dim3(threads);
    cfg.dynamicSmemBytes = smem;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    return cfg;
}

#endif
