/*
 * stage_floor.cu - what a stage of a persistent one-stream kernel costs before any work: the
 * grid barrier of grid.cuh alone, then with the residual-stream read every stage of the
 * transformer begins with, a LayerNorm-shaped statistics section, and stage 2's counter.
 * A probe for the design of the next transformer kernel (docs/GPU-PERFORMANCE.md), not part of
 * the library or its tests. Build and run on a device:
 *   nvcc -O3 -arch=sm_90 -Iinclude -Isrc/cuda -Isrc -o stage_floor bench/probes/stage_floor.cu
 *   ./stage_floor
 * Each line: the case, the grid, and the mean time of one stage over `iters` stages of one
 * cooperative launch (CUDA events around the launch; the launch itself is amortised).
 */
#include <stdio.h>

#include "grid.cuh"

enum { BARRIER, READ, READ_LN, READ_COUNT, CASES };
static const char *case_name[CASES] = {"barrier", "barrier + read x (8 KB)", "... + LN statistics",
                                       "... + counter, last block sums"};

#define D 512
#define S 2

// Stage k: every block reads x[k & 1] (S, D) whole, then stores its slice of x[~k & 1].
template <int C>
static __global__ void stage_kernel(uint32_t *barrier, float *x, float *part, uint32_t *counter, int iters) {
    __shared__ float hs[S * D];
    __shared__ double stat[S];
    const int t = threadIdx.x, per = (D + gridDim.x - 1) / gridDim.x;
    float keep = 0.0f;
    for (int k = 0; k < iters; k++) {
        const float *in = x + (k & 1) * S * D;
        float *out = x + (~k & 1) * S * D;
        if (C >= READ) {
            for (int e = t; e < S * D; e += blockDim.x) hs[e] = __ldcg(in + e);
            __syncthreads();
        }
        if (C >= READ_LN) {  // a warp a row: two passes in double, as the transformer's LayerNorm
            const int warp = t / 32, lane = t % 32;
            if (warp < S) {
                double sum = 0.0;
                for (int i = lane; i < D; i += 32) sum += hs[warp * D + i];
                for (int o = 16; o; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
                const double m = sum / D;
                double q = 0.0;
                for (int i = lane; i < D; i += 32) q += ((double)hs[warp * D + i] - m) * ((double)hs[warp * D + i] - m);
                for (int o = 16; o; o >>= 1) q += __shfl_xor_sync(0xffffffffu, q, o);
                if (lane == 0) stat[warp] = 1.0 / sqrt(q / D + 1e-5);
            }
            __syncthreads();
            keep += (float)stat[0];
        }
        if (C >= READ) keep += hs[(t * 7) % (S * D)];
        if (C == READ_COUNT) {  // every block stores a part; the last to count sums them
            if (t < per) part[blockIdx.x * per + t] = keep;
            if (last_block(counter, gridDim.x)) {
                if (t == 0) *counter = 0;
                float a = 0.0f;
                for (int b = 0; b < (int)gridDim.x && t < per; b++) a += __ldcg(part + b * per + t);
                keep += a;
            }
        }
        for (int e = t; e < per * S; e += blockDim.x) {
            const int c = blockIdx.x * per + e % per;
            if (c < D) out[(e / per) * D + c] = keep;
        }
        grid_arrive(barrier);
        grid_wait(barrier, k + 1);
    }
    if (t == 0 && keep == 12345.0f) x[0] = keep;  // keeps the stages' reads live
    grid_exit(barrier);
}

template <int C>
static float run(int blocks, int threads, int iters, uint32_t *barrier, float *x, float *part, uint32_t *counter) {
    void *args[] = {&barrier, &x, &part, &counter, &iters};
    cudaEvent_t a, b;
    cudaEventCreate(&a);
    cudaEventCreate(&b);
    float best = 1e30f;
    for (int rep = 0; rep < 5; rep++) {
        cudaEventRecord(a);
        cudaLaunchCooperativeKernel((void *)stage_kernel<C>, blocks, threads, args, 0, 0);
        cudaEventRecord(b);
        cudaEventSynchronize(b);
        float ms = 0.0f;
        cudaEventElapsedTime(&ms, a, b);
        if (rep > 0 && ms < best) best = ms;  // the first launch warms up
    }
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    const cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) {
        fprintf(stderr, "stage_floor: %s\n", cudaGetErrorString(e));
        return -1.0f;
    }
    return best * 1000.0f / iters;
}

int main(void) {
    int sms = 0;
    if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0) != cudaSuccess || sms < 1) {
        fprintf(stderr, "stage_floor: no CUDA device\n");
        return 1;
    }
    uint32_t *barrier, *counter;
    float *x, *part;
    cudaMalloc(&barrier, 2 * sizeof(uint32_t));
    cudaMalloc(&counter, sizeof(uint32_t));
    cudaMalloc(&x, 2 * S * D * sizeof(float));
    cudaMalloc(&part, (size_t)sms * D * sizeof(float));
    cudaMemset(barrier, 0, 2 * sizeof(uint32_t));
    cudaMemset(counter, 0, sizeof(uint32_t));
    cudaMemset(x, 0, 2 * S * D * sizeof(float));
    const int iters = 2000;
    const int grids[][2] = {{sms, 512}, {sms, 256}, {sms, 128}, {sms / 2, 512}, {sms / 4, 512}};
    for (int c = 0; c < CASES; c++)
        for (const auto &g : grids) {
            float us = -1.0f;
            switch (c) {
            case BARRIER: us = run<BARRIER>(g[0], g[1], iters, barrier, x, part, counter); break;
            case READ: us = run<READ>(g[0], g[1], iters, barrier, x, part, counter); break;
            case READ_LN: us = run<READ_LN>(g[0], g[1], iters, barrier, x, part, counter); break;
            default: us = run<READ_COUNT>(g[0], g[1], iters, barrier, x, part, counter); break;
            }
            if (us < 0) return 1;
            printf("stage_floor %-32s blocks %3d threads %3d: %.3f us a stage\n", case_name[c], g[0], g[1], us);
        }
    return 0;
}
