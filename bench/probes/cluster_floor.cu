/*
 * cluster_floor.cu - the costs a one-stream transformer held by a few thread-block clusters would
 * be built from, instead of a grid of one block per SM separated by grid barriers
 * (docs/GPU-PERFORMANCE.md): how fast a few SMs stream weights from memory (a layer's 12.6 MB
 * split over 16, 32 or 64 SMs instead of 132), what a cluster barrier costs, and what an
 * all-gather of a 512-wide row over a cluster's distributed shared memory costs.
 * A probe, not part of the library or its tests; the build's `cluster-floor-probe` (with the
 * CUDA backend), or by hand:
 *   nvcc -O3 -arch=sm_90 -Iinclude -Isrc/cuda -Isrc -o cluster_floor bench/probes/cluster_floor.cu
 * Lines: `stream` (blocks of 512 threads, each reading its own 2 MB from a 1 GB buffer that L2
 * does not hold; GB/s per SM and in all; then the cp.async form launched as clusters of 2-16, whose
 * blocks share a GPC), `sync` (a cluster barrier, us each, one cluster and as
 * many as fit), `gather` (each block of a cluster stores its 512 / C values of a row into its
 * shared memory, a cluster barrier, every block reads the whole row from the C blocks: us each).
 */
#include <cooperative_groups.h>
#include <stdio.h>

#include "common.cuh"  // cp_async16
#include "probe_time.cuh"

namespace cg = cooperative_groups;

#define THREADS 512
#define PER_BLOCK (2u << 20)  // bytes a block streams
#define BUFFER (1u << 30)

// Every block reads PER_BLOCK bytes at its own offset (a fresh region each launch: `base`), UNROLL
// 16-byte loads in flight a thread; the sums keep the loads live.
template <int UNROLL>
static __global__ void __launch_bounds__(THREADS, 1) stream_kernel(const float4 *buf, size_t base, float *out) {
    const float4 *p = buf + (base + (size_t)blockIdx.x * PER_BLOCK) / 16;
    const int n = PER_BLOCK / 16;
    float s = 0.0f;
    for (int i = threadIdx.x; i < n; i += THREADS * UNROLL) {
        float4 v[UNROLL];
#pragma unroll
        for (int u = 0; u < UNROLL; u++) v[u] = __ldcs(p + i + u * THREADS);
#pragma unroll
        for (int u = 0; u < UNROLL; u++) s += v[u].x + v[u].y + v[u].z + v[u].w;
    }
    if (s == 12345.0f) out[blockIdx.x] = s;
}

// The same bytes through cp.async (16 bytes a thread and copy, L2 only) into a ring of STAGES
// groups of 32 KB in shared memory, each group waited for and summed a little.
#define STAGES 4
static __global__ void __launch_bounds__(THREADS, 1) stream_async_kernel(const float4 *buf, size_t base, float *out) {
    extern __shared__ float4 ring[];  // STAGES * 4 * THREADS float4 (32 KB a stage)
    const float4 *p = buf + (base + (size_t)blockIdx.x * PER_BLOCK) / 16;
    const int groups = PER_BLOCK / (16 * 4 * THREADS);
    float s = 0.0f;
    auto issue = [&](int g) {
        float4 *dst = ring + (size_t)(g % STAGES) * 4 * THREADS;
        for (int u = 0; u < 4; u++)
            cp_async16(dst + u * THREADS + threadIdx.x, p + (size_t)g * 4 * THREADS + u * THREADS + threadIdx.x);
        asm volatile("cp.async.commit_group;" ::: "memory");
    };
    for (int g = 0; g < STAGES - 1 && g < groups; g++) issue(g);
    for (int g = 0; g < groups; g++) {
        if (g + STAGES - 1 < groups) issue(g + STAGES - 1);
        else asm volatile("cp.async.commit_group;" ::: "memory");
        asm volatile("cp.async.wait_group %0;" ::"n"(STAGES - 1) : "memory");
        const float4 v = ring[(size_t)(g % STAGES) * 4 * THREADS + threadIdx.x];  // its own copy: no barrier
        s += v.x;
    }
    if (s == 12345.0f) out[blockIdx.x] = s;
}

static __global__ void sync_kernel(int iters, float *out) {
    cg::cluster_group cl = cg::this_cluster();
    for (int k = 0; k < iters; k++) cl.sync();
    if (iters < 0) out[0] = 1.0f;
}

// A row of 512 values, 512 / C a block: stored into this block's half of `row` (parity k & 1),
// a cluster barrier, then thread t reads value t from the block that holds it.
static __global__ void gather_kernel(int iters, float *out) {
    __shared__ float row[2][512];
    cg::cluster_group cl = cg::this_cluster();
    const int C = (int)cl.num_blocks(), rank = (int)cl.block_rank(), per = 512 / C, t = threadIdx.x;
    float s = 0.0f;
    for (int k = 0; k < iters; k++) {
        if (t < per) row[k & 1][rank * per + t] = s + (float)t;
        cl.sync();
        const float *src = cl.map_shared_rank(&row[k & 1][0], t / per);
        s += src[t] * 1e-9f;
    }
    cl.sync();  // no block leaves while another reads its shared memory
    if (s == 12345.0f) out[blockIdx.x] = s;
}

static float time_launch(cudaLaunchConfig_t *cfg, void (*k)(int, float *), int iters, float *out) {
    const float ms = probe_best_ms("cluster_floor", 4, [](int) {}, [&] { cudaLaunchKernelEx(cfg, k, iters, out); });
    return ms < 0 ? -1.0f : ms * 1000.0f / iters;
}

int main(void) {
    int sms = 0;
    if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0) != cudaSuccess || sms < 16) {
        fprintf(stderr, "cluster_floor: no CUDA device\n");
        return 1;
    }
    float4 *buf;
    float *out;
    if (cudaMalloc(&buf, BUFFER) != cudaSuccess || cudaMalloc(&out, 4096) != cudaSuccess) return 1;
    cudaMemset(buf, 0, BUFFER);
    cudaFuncSetAttribute(stream_async_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, STAGES * 4 * THREADS * 16);
    const int grids[] = {8, 16, 32, 64, sms};
    size_t base = 0;
    // base past the last launch's g blocks' bytes: a region L2 does not hold
    const auto fresh = [&](int g) {
        base = (base + (size_t)g * PER_BLOCK) % (BUFFER - (size_t)sms * PER_BLOCK);
    };
    for (int form = 0; form < 3; form++)
        for (int g : grids) {
            const float best = probe_best_ms(
                "cluster_floor", 5, [&](int) { fresh(g); },
                [&] {
                    if (form == 0) stream_kernel<8><<<g, THREADS>>>(buf, base, out);
                    else if (form == 1) stream_kernel<16><<<g, THREADS>>>(buf, base, out);
                    else stream_async_kernel<<<g, THREADS, STAGES * 4 * THREADS * 16>>>(buf, base, out);
                });
            if (best < 0) return 1;
            const double gbs = (double)g * PER_BLOCK / (best * 1e-3) / 1e9;
            static const char *name[3] = {"8 x 16 B loads a thread", "16 x 16 B loads a thread", "cp.async, 4 x 32 KB"};
            printf("stream %-26s blocks %3d: %.1f us, %.1f GB/s an SM, %.0f GB/s in all\n", name[form], g, best * 1e3,
                   gbs / g, gbs);
        }
    // The same cp.async stream from blocks launched as clusters: a cluster's blocks share one GPC,
    // where a plain grid's are spread over all of them
    cudaFuncSetAttribute(stream_async_kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
    for (int C : {2, 4, 8, 16})
        for (int g : {16, 8 * 16}) {
            cudaLaunchAttribute attr;
            cudaLaunchConfig_t cfg = probe_cluster_config(&attr, C, g, THREADS, STAGES * 4 * THREADS * 16);
            const float best = probe_best_ms(
                "cluster_floor", 5, [&](int) { fresh(g); },
                [&] { cudaLaunchKernelEx(&cfg, stream_async_kernel, (const float4 *)buf, base, out); });
            if (best < 0) {
                printf("stream cp.async in clusters of %2d, blocks %3d: does not run\n", C, g);
                continue;
            }
            const double gbs = (double)g * PER_BLOCK / (best * 1e-3) / 1e9;
            printf("stream cp.async in clusters of %2d, blocks %3d: %.1f us, %.1f GB/s an SM, %.0f GB/s in all\n", C, g,
                   best * 1e3, gbs / g, gbs);
        }
    cudaFuncSetAttribute(sync_kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
    cudaFuncSetAttribute(gather_kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
    for (int C : {2, 4, 8, 16}) {
        cudaLaunchAttribute attr;
        cudaLaunchConfig_t cfg = probe_cluster_config(&attr, C, C, THREADS, 0);
        int fit = 0;
        if (cudaOccupancyMaxActiveClusters(&fit, (void *)sync_kernel, &cfg) != cudaSuccess) {
            cudaGetLastError();
            printf("sync   clusters of %2d: none fit\n", C);
            continue;
        }
        for (int n : {1, fit}) {
            cfg.gridDim = dim3(C * n);
            const float us = time_launch(&cfg, sync_kernel, 20000, out);
            const float gu = time_launch(&cfg, gather_kernel, 20000, out);
            printf("sync   clusters of %2d (%3d fit), %3d clusters: barrier %.3f us, gather of 512 %.3f us\n", C, fit, n,
                   us, gu);
        }
    }
    return 0;
}
