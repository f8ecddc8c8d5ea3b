/*
 * ring_walk.cu - what the persistent transformer's attention stage (stage 2, transformer.cu)
 * costs in its ring walk alone, and whether that cost is the walk's redundancy: one stream's
 * stage 2 has 16 blocks per head, every one walking the head's whole ring (252 entries of keys
 * and values, 128 KB in f32), so a layer's walk reads 16 MB from L2 for 1 MB of ring.
 * A probe for the design of the next transformer kernel (docs/GPU-PERFORMANCE.md), not part of
 * the library or its tests; the build's `ring-walk-probe` (with the CUDA backend), or by hand:
 *   nvcc -O3 -arch=sm_90 -Iinclude -Isrc/cuda -Isrc -o ring_walk bench/probes/ring_walk.cu
 * Each line: the case and the mean time of one stage (grid barrier included) over `iters` stages
 * of one cooperative launch of a block per SM, 512 threads. Stage k walks layer k % layers's
 * rings with onepass_span, the kernel's own walk (S = 2 steps); 8 layers' rings (8 MB) stay in
 * L2 between stages, 64 (64 MB) do not, as one stream's rings do not between two frames.
 */
#include <stdio.h>
#include <string.h>

#include "attention.cuh"
#include "grid.cuh"
#include "probe_time.cuh"

#define D 512
#define HEADS 8
#define HD 64
#define RING 252
#define CONTEXT 250
#define STEPS 2
#define ITEMS 16  // blocks per head, as one stream's stage 2 on 132 SMs
#define WARPS 16

enum { BARRIER, FULL, FULL_MERGE, FEW, SHARE, CASES };
static const char *case_name[CASES] = {"barrier alone", "whole ring a block (main)", "... + the warps' merge",
                                       "whole ring, one block a head", "a 16th of the ring a block"};

// Stage k: block b < HEADS * ITEMS takes head b / ITEMS of layer k % layers. FULL: its 16 warps
// walk the whole ring, 16 entries a warp (main's stage 2); SHARE: the block walks entries
// [16 i, 16 i + 16) of it, one a warp (i = b % ITEMS: the ring walked once a layer, no merge
// across blocks: what a shared walk's reads alone cost). FEW: as FULL, but only the first block
// of each head walks (8 blocks): if it takes FULL's time, a walk is bound by its block's own
// latencies, not by the 16 MB the 128 blocks read from L2 together.
template <int C>
static __global__ void __launch_bounds__(512, 1)
    walk_kernel(uint32_t *barrier, const float *keys, const float *values, const int32_t *positions, const float *q_in,
                float *out, int layers, int iters) {
    __shared__ float sm_m[WARPS][STEPS], sm_l[WARPS][STEPS];
    __shared__ float4 sm_acc[WARPS][STEPS][HD / 4];
    const int warp = threadIdx.x / 32, li = threadIdx.x % 16;
    float keep = 0.0f;
    for (int k = 0; k < iters; k++) {
        const int b = blockIdx.x;
        if (C != BARRIER && b < HEADS * ITEMS && (C != FEW || b % ITEMS == 0)) {
            const int h = b / ITEMS, item = b % ITEMS, layer = k % layers;
            const size_t ring_at = (size_t)layer * RING * D + (size_t)h * HD;
            const float4 *kr = (const float4 *)(keys + ring_at) + li, *vr = (const float4 *)(values + ring_at) + li;
            float4 q[STEPS], acc[STEPS];
            float m[STEPS], l[STEPS];
#pragma unroll
            for (int s = 0; s < STEPS; s++) {
                q[s] = __ldcg((const float4 *)(q_in + (size_t)s * D + h * HD) + li);
                acc[s] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
                m[s] = -INFINITY;
                l[s] = 0.0f;
            }
            const int share = C == SHARE ? 1 : (RING + WARPS - 1) / WARPS;
            const int j_begin = (C == SHARE ? item * WARPS : 0) + warp * share;
            const int j_end = min(RING, j_begin + share);
            const float scale = 1.0f / sqrtf((float)HD);
            onepass_span<STEPS, float, true>(kr, vr, ring_scales{nullptr, nullptr, 0}, positions, 0, RING, j_begin,
                                             j_end, D / 4, q, STEPS, 1000, CONTEXT, scale, acc, m, l);
            if (C == FULL_MERGE) {
                onepass_store_warp<STEPS>(STEPS, m, l, acc, sm_m[warp], sm_l[warp], sm_acc[warp][0]);
                __syncthreads();
                if (threadIdx.x < STEPS * (HD / 4)) {
                    const float4 o = onepass_merge_warps(WARPS, STEPS, sm_m[0], sm_l[0], sm_acc[0][0],
                                                         threadIdx.x / (HD / 4), threadIdx.x % (HD / 4));
                    keep += o.x + o.w;
                }
            } else {
#pragma unroll
                for (int s = 0; s < STEPS; s++) keep += acc[s].x + l[s] + m[s];
            }
        }
        grid_arrive(barrier);
        grid_wait(barrier, k + 1);
    }
    if (keep == 12345.0f) out[blockIdx.x] = keep;  // keeps the walks live
    grid_exit(barrier);
}

template <int C>
static float run(int blocks, int layers, int iters, uint32_t *barrier, const float *keys, const float *values,
                 const int32_t *positions, const float *q, float *out) {
    void *args[] = {&barrier, &keys, &values, &positions, &q, &out, &layers, &iters};
    const float ms = probe_best_ms(
        "ring_walk", 5, [](int) {},
        [&] { cudaLaunchCooperativeKernel((void *)walk_kernel<C>, blocks, 512, args, 0, 0); });
    return ms < 0 ? -1.0f : ms * 1000.0f / iters;
}

int main(void) {
    int sms = 0;
    if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0) != cudaSuccess || sms < HEADS * ITEMS) {
        fprintf(stderr, "ring_walk: no CUDA device of %d SMs\n", HEADS * ITEMS);
        return 1;
    }
    const int max_layers = 64;
    const size_t ring_floats = (size_t)max_layers * RING * D;
    uint32_t *barrier;
    float *keys, *values, *q, *out;
    int32_t *positions;
    cudaMalloc(&barrier, 2 * sizeof(uint32_t));
    cudaMalloc(&keys, ring_floats * sizeof(float));
    cudaMalloc(&values, ring_floats * sizeof(float));
    cudaMalloc(&q, STEPS * D * sizeof(float));
    cudaMalloc(&out, sms * sizeof(float));
    cudaMalloc(&positions, RING * sizeof(int32_t));
    cudaMemset(barrier, 0, 2 * sizeof(uint32_t));
    // small values (their bits as floats near 1e-3..1e-2 do not matter to the timing, only that
    // they are finite): a byte pattern; positions 751 .. 1002, so that 250 of 252 are visible
    cudaMemset(keys, 0x3b, ring_floats * sizeof(float));
    cudaMemset(values, 0x3b, ring_floats * sizeof(float));
    cudaMemset(q, 0x3b, STEPS * D * sizeof(float));
    int32_t pos[RING];
    for (int e = 0; e < RING; e++) pos[e] = 1000 - CONTEXT + 1 + e;
    cudaMemcpy(positions, pos, sizeof(pos), cudaMemcpyHostToDevice);
    const int iters = 2000;
    typedef float (*runner)(int, int, int, uint32_t *, const float *, const float *, const int32_t *, const float *,
                            float *);
    static const runner cases[CASES] = {run<BARRIER>, run<FULL>, run<FULL_MERGE>, run<FEW>, run<SHARE>};
    for (int layers : {8, max_layers})
        for (int c = 0; c < CASES; c++) {
            const float us = cases[c](sms, layers, iters, barrier, keys, values, positions, q, out);
            if (us < 0) return 1;
            printf("ring_walk %-28s rings of %2d layers (%2d MB), blocks %3d: %.3f us a stage\n", case_name[c], layers,
                   layers, sms, us);
        }
    return 0;
}
