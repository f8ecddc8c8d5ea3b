/*
 * chunk_loop.cu - what one step of a weight-streaming product loop costs a block of 512 threads
 * (docs/GPU-PERFORMANCE.md): cluster_layer's products spend about 0.7 us a 16 KB chunk even with
 * neither weights copied nor arithmetic done; this takes the step apart. Each form adds one part
 * to the one before, in a loop of many steps on one block (and on 16 blocks of a plain grid):
 *   0  one block barrier
 *   1  two block barriers
 *   2  + an empty cp.async group committed and waited for (the ring's bookkeeping)
 *   3  + 16 KB copied by cp.async into a ring of 10 slots, from a 64 KB region L2 holds
 *   4  + the product of the chunk (8 rows of 512) with two input rows: a warp a half row,
 *        16 floats a lane, the warp's butterfly, the parts added by 16 threads (cluster_layer's
 *        and transformer_cluster.cu's form: two of its three shared-memory loads are the inputs)
 *   5  a step of 4 chunks (64 KB, 32 rows) in another form: the inputs held in registers (a lane
 *      4 consecutive columns of every 128), the weights read as float4, a warp two whole rows,
 *      its 4 sums (2 rows, 2 inputs) reduced by one transposing butterfly of 5 shuffles
 * A probe, not part of the library or its tests; the build's `chunk-loop-probe`, or by hand:
 *   nvcc -O3 -arch=sm_90 -Iinclude -Isrc/cuda -Isrc -o chunk_loop bench/probes/chunk_loop.cu
 * Lines: the form, the blocks, ns a step (and for form 5, ns a 16 KB chunk).
 */
#include <stdio.h>

#include "common.cuh"  // cp_async16, warp_sum_f
#include "probe_time.cuh"

#define THREADS 512
#define WARPS (THREADS / 32)
#define CHUNK 4096  // floats (16 KB)
#define SLOTS 12
#define G5 4  // chunks a step of form 5
#define K 512
#define S 2

// slot (CHUNK floats, shared memory) <- from (global), 16 bytes a thread and copy; the caller commits
static __device__ __forceinline__ void copy_chunk(float *slot, const float *from) {
    for (int e = threadIdx.x; e < CHUNK / 4; e += THREADS) cp_async16(slot + 4 * e, from + 4 * e);
}

static __global__ void __launch_bounds__(THREADS, 1) loop_kernel(const float *w, int steps, int form, float *out) {
    extern __shared__ float4 smem4[];
    float *ring = (float *)smem4;            // (SLOTS, CHUNK)
    float *in = ring + SLOTS * CHUNK;        // (S, K)
    float *part = in + S * K;                // (WARPS, 4): the warps' sums
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const float *src = w + (size_t)blockIdx.x * 4 * CHUNK;  // 4 chunks a block, read in turn
    for (int i = threadIdx.x; i < S * K; i += THREADS) in[i] = 0.001f * (i % 13);
    float keep = 0.0f;
    for (int k = 0; k < SLOTS; k++) {
        if (form >= 3) copy_chunk(ring + (size_t)k * CHUNK, src + (size_t)(k % 4) * CHUNK);
        asm volatile("cp.async.commit_group;" ::: "memory");
    }
    __syncthreads();
    if (form == 5) {
        float4 xr[S][K / 128];  // this lane's columns 4 lane + 128 i of both input rows
#pragma unroll
        for (int s = 0; s < S; s++)
#pragma unroll
            for (int i = 0; i < K / 128; i++) xr[s][i] = ((const float4 *)(in + s * K))[lane + 32 * i];
        for (int step = 0; step < steps; step++) {
            asm volatile("cp.async.wait_group %0;" ::"n"(SLOTS - G5) : "memory");
            __syncthreads();
            const int first = (step * G5) % SLOTS;
            const float4 *c = (const float4 *)(ring + (size_t)first * CHUNK);
            float a[4] = {};  // (row 0, s 0), (row 0, s 1), (row 1, s 0), (row 1, s 1)
#pragma unroll
            for (int r = 0; r < 2; r++)
#pragma unroll
                for (int i = 0; i < K / 128; i++) {
                    const float4 wv = c[(size_t)(2 * warp + r) * (K / 4) + lane + 32 * i];
#pragma unroll
                    for (int s = 0; s < S; s++)
                        a[2 * r + s] += wv.x * xr[s][i].x + wv.y * xr[s][i].y + wv.z * xr[s][i].z + wv.w * xr[s][i].w;
                }
            // transposing butterfly: after it, lane l holds the warp's sum of value (l >> 3) & 3
            const bool hi = lane & 16, h8 = lane & 8;
            float k0 = hi ? a[2] : a[0], k1 = hi ? a[3] : a[1];
            k0 += __shfl_xor_sync(0xffffffffu, hi ? a[0] : a[2], 16);
            k1 += __shfl_xor_sync(0xffffffffu, hi ? a[1] : a[3], 16);
            float v = h8 ? k1 : k0;
            v += __shfl_xor_sync(0xffffffffu, h8 ? k0 : k1, 8);
            v += __shfl_xor_sync(0xffffffffu, v, 4);
            v += __shfl_xor_sync(0xffffffffu, v, 2);
            v += __shfl_xor_sync(0xffffffffu, v, 1);
            if (lane % 8 == 0) part[warp * 4 + lane / 8] = v;
            __syncthreads();
            for (int g = 0; g < G5; g++) {
                copy_chunk(ring + (size_t)((first + g) % SLOTS) * CHUNK, src + (size_t)((step * G5 + g) % 4) * CHUNK);
                asm volatile("cp.async.commit_group;" ::: "memory");
            }
            if (threadIdx.x < WARPS * 4) keep += part[threadIdx.x];
        }
    } else {  // forms 0-4: a chunk a step
        for (int step = 0; step < steps; step++) {
            if (form >= 2) asm volatile("cp.async.wait_group %0;" ::"n"(SLOTS - 1) : "memory");
            __syncthreads();
            const float *c = ring + (size_t)(step % SLOTS) * CHUNK;
            if (form >= 4) {  // rows r = warp / 2 of 8, half warp % 2 of it
                const float *wr = c + (size_t)(warp / 2) * K + (warp % 2) * (K / 2);
                const float *x = in + (warp % 2) * (K / 2);
                float acc[S] = {};
                for (int k = lane; k < K / 2; k += 32) {
                    const float wv = wr[k];
#pragma unroll
                    for (int s = 0; s < S; s++) acc[s] += wv * x[s * K + k];
                }
#pragma unroll
                for (int s = 0; s < S; s++) {
                    const float v = warp_sum_f(acc[s]);
                    if (lane == 0) part[warp * S + s] = v;
                }
            }
            if (form >= 1) __syncthreads();
            if (form >= 3) copy_chunk(ring + (size_t)(step % SLOTS) * CHUNK, src + (size_t)(step % 4) * CHUNK);
            if (form >= 2) asm volatile("cp.async.commit_group;" ::: "memory");
            if (form >= 4 && threadIdx.x < 8 * S) {
                const int r = threadIdx.x / S, s = threadIdx.x % S;
                keep += part[(2 * r) * S + s] + part[(2 * r + 1) * S + s];
            }
        }
    }
    asm volatile("cp.async.wait_group 0;" ::: "memory");
    if (keep == 12345.0f) out[blockIdx.x] = keep;
}

int main(void) {
    float *w, *out;
    if (cudaMalloc(&w, (size_t)16 * 4 * CHUNK * sizeof(float)) != cudaSuccess ||
        cudaMalloc(&out, 64 * sizeof(float)) != cudaSuccess) {
        fprintf(stderr, "chunk_loop: no CUDA device\n");
        return 1;
    }
    cudaMemset(w, 0, (size_t)16 * 4 * CHUNK * sizeof(float));
    const size_t smem = sizeof(float) * ((size_t)SLOTS * CHUNK + S * K + WARPS * 4);
    cudaFuncSetAttribute(loop_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    const int steps = 20000;
    static const char *name[6] = {"one block barrier", "two block barriers", "+ an empty cp.async group",
                                  "+ 16 KB by cp.async (L2)", "+ the chunk's product", "64 KB, inputs in registers"};
    for (int form = 0; form < 6; form++)
        for (int blocks : {1, 16}) {
            const float ms = probe_best_ms("chunk_loop", 4, [](int) {},
                                           [&] { loop_kernel<<<blocks, THREADS, smem>>>(w, steps, form, out); });
            if (ms < 0) return 1;
            const float ns = ms * 1e6f / steps;
            printf("chunk_loop form %d %-27s blocks %2d: %.1f ns a step, %.1f a 16 KB chunk\n", form, name[form],
                   blocks, ns, form == 5 ? ns / G5 : ns);
        }
    return 0;
}
