/*
 * stage_floor.cu - what a stage of a persistent one-stream kernel costs before any work: the
 * grid barrier of grid.cuh alone, then with the residual-stream read every stage of the
 * transformer begins with, a LayerNorm-shaped statistics section, and a counter of finished
 * blocks with and without the last one's sum of their parts.
 * A probe for the design of the next transformer kernel (docs/GPU-PERFORMANCE.md), not part of
 * the library or its tests; the build's `stage-floor-probe` (with the CUDA backend), or by hand:
 *   nvcc -O3 -arch=sm_90 -Iinclude -Isrc/cuda -Isrc -o stage_floor bench/probes/stage_floor.cu
 * run on a device without arguments (`forms`: the barrier forms only).
 * Each line: the case, the grid, and the mean time of one stage over `iters` stages of one
 * cooperative launch (CUDA events around the launch; the launch itself is amortised). The
 * barrier and read cases run again with other forms of the grid barrier (enum form below), to
 * see which of its steps cost what.
 */
#include <stdio.h>
#include <string.h>

#include "grid.cuh"
#include "probe_time.cuh"

enum { BARRIER, READ, READ_LN, READ_COUNT, READ_COUNT_SUM, CASES };
static const char *case_name[CASES] = {"barrier", "barrier + read x (8 KB)", "... + LN statistics",
                                       "... + one counter for all", "... + the last block sums"};

#define D 512
#define S 2

// Forms of the grid barrier: grid.cuh's; its wait polling relaxed loads with one acquire fence
// after; no release or acquire at all (not a barrier for data: it times the fences); the last
// arriver (an acquire-release add that returns the count) releasing a flag on another line that
// the others poll; arrivals spread over 8 counters on their own lines, each waiter polling all;
// the release alone and the acquire alone (timing only: which of the two fences costs); relaxed
// polls and one acquiring load of the counter once they have seen the count (a barrier: the
// acquiring load reads the count's last add, and so synchronises with every releasing add); the
// same with POLLS polls in flight at once, each issued POLL_GAP clock cycles after the one
// before (a poll that reaches L2 just before the count is complete no longer costs the wait
// for its answer and a whole round trip more).
enum { GRID, RELAXED_POLL, NO_FENCES, FLAG, SPREAD, RELEASE_ONLY, ACQUIRE_ONLY, POLL_THEN_ACQUIRE, PIPELINED, FORMS };
static const char *form_name[FORMS] = {"grid.cuh", "relaxed polls, one fence", "no fences (timing only)",
                                       "last arriver's flag", "8 counters", "release only (timing only)",
                                       "acquire only (timing only)", "relaxed polls, one acquire",
                                       "4 polls in flight, one acquire"};
#define POLLS 4
#define POLL_GAP 96
#define LINE 32  // uint32 a 128-byte line

static __device__ __forceinline__ unsigned ld_relaxed(const uint32_t *p) {
    unsigned v;
    asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}
static __device__ __forceinline__ unsigned ld_acquire(const uint32_t *p) {
    unsigned v;
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}

// The n-th barrier of the launch in form F over bar (SPREAD: 8 lines; FLAG: counter, then flag a
// line later).
template <int F>
static __device__ __forceinline__ void barrier_form(uint32_t *bar, unsigned n) {
    if (F == GRID) {
        grid_arrive(bar);
        grid_wait(bar, n);
        return;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        const unsigned target = n * gridDim.x;
        if (F == FLAG) {
            unsigned before;
            asm volatile("atom.acq_rel.gpu.global.add.u32 %0, [%1], 1;" : "=r"(before) : "l"(bar) : "memory");
            if (before + 1 == target)
                asm volatile("st.release.gpu.global.u32 [%0], %1;" ::"l"(bar + LINE), "r"(n) : "memory");
            else
                while (ld_acquire(bar + LINE) < n) {
                }
        } else if (F == SPREAD) {
            asm volatile("red.release.gpu.global.add.u32 [%0], 1;" ::"l"(bar + blockIdx.x % 8 * LINE) : "memory");
            unsigned sum;
            do {
                sum = 0;
#pragma unroll
                for (int c = 0; c < 8; c++) sum += ld_relaxed(bar + c * LINE);
            } while (sum < target);
            asm volatile("fence.acq_rel.gpu;" ::: "memory");
        } else {
            // one counter: a releasing or relaxed add, acquiring or relaxed polls, then what follows them
            if (F == NO_FENCES || F == ACQUIRE_ONLY)
                asm volatile("red.relaxed.gpu.global.add.u32 [%0], 1;" ::"l"(bar) : "memory");
            else
                asm volatile("red.release.gpu.global.add.u32 [%0], 1;" ::"l"(bar) : "memory");
            if (F == PIPELINED) {
                const auto poll = [&] {  // a poll, then POLL_GAP cycles before the next is issued
                    const unsigned v = ld_relaxed(bar);
                    const long long t0 = clock64();
                    while (clock64() - t0 < POLL_GAP) {
                    }
                    return v;
                };
                unsigned v[POLLS];
#pragma unroll
                for (int k = 0; k < POLLS; k++) v[k] = poll();
                for (bool done = false; !done;)
#pragma unroll
                    for (int k = 0; k < POLLS && !done; k++)
                        if (v[k] >= target)
                            done = true;
                        else
                            v[k] = poll();
            } else {
                while ((F == ACQUIRE_ONLY ? ld_acquire(bar) : ld_relaxed(bar)) < target) {
                }
            }
            if (F == RELAXED_POLL) asm volatile("fence.acq_rel.gpu;" ::: "memory");
            if (F == POLL_THEN_ACQUIRE || F == PIPELINED) (void)ld_acquire(bar);
        }
    }
    __syncthreads();
}

// Stage k: every block reads x[k & 1] (S, D) whole, then stores its slice of x[~k & 1].
template <int C, int F>
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
        if (C >= READ_COUNT) {  // every block stores a part and counts; the last one resets the counter
            if (t < per) part[blockIdx.x * per + t] = keep;
            if (last_block(counter, gridDim.x)) {
                if (t == 0) *counter = 0;
                if (C == READ_COUNT_SUM) {  // and sums the parts (a loop: its loads a few at a time)
                    float a = 0.0f;
                    for (int b = 0; b < (int)gridDim.x && t < per; b++) a += __ldcg(part + b * per + t);
                    keep += a;
                }
            }
        }
        for (int e = t; e < per * S; e += blockDim.x) {
            const int c = blockIdx.x * per + e % per;
            if (c < D) out[(e / per) * D + c] = keep;
        }
        barrier_form<F>(barrier, k + 1);
    }
    if (t == 0 && keep == 12345.0f) x[0] = keep;  // keeps the stages' reads live
}

template <int C, int F = GRID>
static float run(int blocks, int threads, int iters, uint32_t *barrier, float *x, float *part, uint32_t *counter) {
    void *args[] = {&barrier, &x, &part, &counter, &iters};
    const float ms = probe_best_ms(
        "stage_floor", 5, [&](int) { cudaMemset(barrier, 0, 8 * LINE * sizeof(uint32_t)); },
        [&] { cudaLaunchCooperativeKernel((void *)stage_kernel<C, F>, blocks, threads, args, 0, 0); });
    return ms < 0 ? -1.0f : ms * 1000.0f / iters;
}

int main(int argc, char **argv) {
    const bool forms_only = argc > 1 && !strcmp(argv[1], "forms");  // the barrier forms only
    int sms = 0;
    if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0) != cudaSuccess || sms < 1) {
        fprintf(stderr, "stage_floor: no CUDA device\n");
        return 1;
    }
    uint32_t *barrier, *counter;
    float *x, *part;
    cudaMalloc(&barrier, 8 * LINE * sizeof(uint32_t));
    cudaMalloc(&counter, sizeof(uint32_t));
    cudaMalloc(&x, 2 * S * D * sizeof(float));
    cudaMalloc(&part, (size_t)sms * D * sizeof(float));
    cudaMemset(counter, 0, sizeof(uint32_t));
    cudaMemset(x, 0, 2 * S * D * sizeof(float));
    const int iters = 2000;
    const int grids[][2] = {{sms, 512}, {sms, 256}, {sms, 128}, {sms / 2, 512}, {sms / 4, 512}};
    typedef float (*runner)(int, int, int, uint32_t *, float *, float *, uint32_t *);
    static const runner cases[CASES] = {run<BARRIER>, run<READ>, run<READ_LN>, run<READ_COUNT>, run<READ_COUNT_SUM>};
    for (int c = 0; c < (forms_only ? 0 : CASES); c++)
        for (const auto &g : grids) {
            const float us = cases[c](g[0], g[1], iters, barrier, x, part, counter);
            if (us < 0) return 1;
            printf("stage_floor %-32s blocks %3d threads %3d: %.3f us a stage\n", case_name[c], g[0], g[1], us);
        }
    // the barrier's forms, alone and with the read (a block of 512 threads an SM)
    static const runner forms[FORMS][2] = {{run<BARRIER, GRID>, run<READ, GRID>},
                                           {run<BARRIER, RELAXED_POLL>, run<READ, RELAXED_POLL>},
                                           {run<BARRIER, NO_FENCES>, run<READ, NO_FENCES>},
                                           {run<BARRIER, FLAG>, run<READ, FLAG>},
                                           {run<BARRIER, SPREAD>, run<READ, SPREAD>},
                                           {run<BARRIER, RELEASE_ONLY>, run<READ, RELEASE_ONLY>},
                                           {run<BARRIER, ACQUIRE_ONLY>, run<READ, ACQUIRE_ONLY>},
                                           {run<BARRIER, POLL_THEN_ACQUIRE>, run<READ, POLL_THEN_ACQUIRE>},
                                           {run<BARRIER, PIPELINED>, run<READ, PIPELINED>}};
    for (int f = 0; f < FORMS; f++)
        for (int c = 0; c < 2; c++) {
            const float us = forms[f][c](sms, 512, iters, barrier, x, part, counter);
            if (us < 0) return 1;
            printf("stage_floor form %-26s %-24s blocks %3d threads 512: %.3f us a stage\n", form_name[f],
                   case_name[c], sms, us);
        }
    return 0;
}
