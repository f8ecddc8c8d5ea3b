/*
 * bench_kernels.c - the `mimi-bench-kernels` program: each fast CPU kernel alone at real Mimi
 * shapes, with time, effective GB/s (weights) and GFLOP/s, against the FMA peak and memory-read
 * floors measured in the same run. Usage: mimi-bench-kernels [--threads N] [--isa NAME] [--bf16]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "batch.h"
#include "bench_util.h"
#include "cpu/cpu.h"

static float *randoms(size_t n) {
    float *x = aligned_alloc(64, ((n * sizeof(float)) + 63) & ~(size_t)63);
    uint32_t r = 1;
    for (size_t i = 0; i < n; i++) {
        r = r * 1664525u + 1013904223u;
        x[i] = (float)(r >> 8) / 16777216.0f - 0.5f;
    }
    return x;
}

struct gemm_case {
    const struct mimi_cpu *cpu;
    struct mimi_gemm_args a;
};

static void run_gemm(void *ctx) {
    struct gemm_case *g = ctx;
    mimi_cpu_gemm(g->cpu, &g->a);
}

struct conv_case {
    const struct mimi_cpu *cpu;
    struct mimi_conv_args a;
};

static void run_conv(void *ctx) {
    struct conv_case *c = ctx;
    mimi_cpu_conv(c->cpu, &c->a);
}

// Copies of a case's weights (`bytes` each) enough to exceed the last-level cache many times
// over, used in turn: every call streams its weights from memory, as a frame does.
static int weight_copies(size_t bytes) { return (int)((256u << 20) / bytes) + 1; }

// Mean seconds of a call, over at least 21 calls that take the `copies` cases (each `size`
// bytes, with its own copy of the weights) in turn, so that every call reads its weights from
// memory as a frame does.
static double mean_over_copies(void (*run)(void *), void *cases, size_t size, int copies) {
    const int reps = copies < 21 ? 21 : copies;
    const double t0 = bench_now();
    for (int r = 0; r < reps; r++) run((char *)cases + (size_t)(r % copies) * size);
    return (bench_now() - t0) / reps;
}

// The host's share of a large GPU step: the PCM of 7,168 streams (55 MB) copied into the pinned
// stage with its samples checked, and a decode's PCM copied out, on the model's threads
// (mimi_batch_copy_finite, mimi_host_copy), against one memcpy; best of 10.
static void host_copies(struct mimi_cpu *cpu) {
    const size_t n = (size_t)7168 * 1920, bytes = sizeof(float) * n;
    float *src = randoms(n), *dst = randoms(n);
    struct mimi_model m;
    struct mimi_batch b;
    memset(&m, 0, sizeof m), memset(&b, 0, sizeof b);
    m.cpu = cpu, b.model = &m;
    double best[3] = {1e30, 1e30, 1e30};
    for (int rep = 0; rep < 10; rep++)
        for (int k = 0; k < 3; k++) {
            const double t0 = bench_now();
            if (k == 0) memcpy(dst, src, bytes);
            else if (k == 1) mimi_host_copy(&m, dst, src, bytes);
            else if (mimi_batch_copy_finite(&b, dst, src, n, 0, "sample")) return;
            const double t = bench_now() - t0;
            if (t < best[k]) best[k] = t;
        }
    printf("host copy of 7168 streams' PCM (%.0f MB): memcpy %.2f ms (%.1f GB/s); library, %d thread(s): plain "
           "%.2f ms (%.1f GB/s), checked %.2f ms (%.1f GB/s)\n",
           bytes / 1e6, best[0] * 1e3, bytes / best[0] / 1e9, cpu->n_threads, best[1] * 1e3, bytes / best[1] / 1e9,
           best[2] * 1e3, bytes / best[2] / 1e9);
    free(src), free(dst);
}

int main(int argc, char **argv) {
    int threads = 1, isa = MIMI_ISA_AUTO, bf16 = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--threads") && i + 1 < argc) threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--bf16")) bf16 = 1;
        else if (!strcmp(argv[i], "--isa") && i + 1 < argc) {
            const char *v = argv[++i];
            isa = !strcmp(v, "avx2")     ? MIMI_ISA_AVX2
                  : !strcmp(v, "avx512") ? MIMI_ISA_AVX512
                  : !strcmp(v, "neon")   ? MIMI_ISA_NEON
                                         : MIMI_ISA_AUTO;
        }
    }
    struct mimi_cpu cpu = {.k = mimi_kernels_get(isa), .n_threads = threads};
    if (!cpu.k) {
        fprintf(stderr, "no such kernel set on this CPU\n");
        return 1;
    }
    if (threads > 1) cpu.pool = mimi_pool_create(threads);
    mimi_cpu_reserve(&cpu, (size_t)3 << 30);  // weights on huge pages, as a model has them
    const double bw = bench_read_bandwidth(threads, (size_t)1 << 29, 1);
    const double peak = bench_fma_peak(threads, cpu.k->name);
    printf("# kernels %s, %d thread(s), %s weights; floors: read %.2f GB/s, FMA %.1f GFLOP/s\n",
           cpu.k->name, threads, bf16 ? "bf16" : "f32", bw / 1e9, peak / 1e9);
    host_copies(&cpu);
    printf("%-34s %9s %8s %8s %8s\n", "op", "us", "GB/s", "GFLOP/s", "of peak");
    // gemm: (M, N, K) as the model runs them
    static const struct {
        const char *name;
        int M, N, K;
    } gemms[] = {
        {"in_proj 1536x512, 2 steps", 1536, 2, 512},
        {"linear1 2048x512, 2 steps", 2048, 2, 512},
        {"linear2 512x2048, 2 steps", 512, 2, 2048},
        {"codebook 2048x256, 1 frame", 2048, 1, 256},
        {"enc model.12 1024x8192, 2", 1024, 2, 8192},
        {"dec model.2 4096x2048, 2", 4096, 2, 2048},
        {"linear1, 16 streams", 2048, 32, 512},
        {"linear1, 64 streams", 2048, 128, 512},
        {"enc model.12, 16 streams", 1024, 32, 8192},
        {"dec model.5 (16 st.) 1536x1024", 1536, 256, 1024},
        {"dec model.5 1536x1024, 16 columns", 1536, 16, 1024},
        {"enc model.9 512x3072, 16 columns", 512, 16, 3072},
    };
    const char *only = getenv("MIMI_BENCH_ONLY");  // a substring of the op names to run
    for (size_t i = 0; i < sizeof gemms / sizeof gemms[0]; i++) {
        if (only && !strstr(gemms[i].name, only)) continue;
        const int M = gemms[i].M, N = gemms[i].N, K = gemms[i].K;
        float *x = randoms((size_t)N * K), *y = randoms((size_t)M * N);
        const size_t bytes_one = (size_t)M * K * (bf16 ? 2 : 4);
        const int copies = weight_copies(bytes_one);
        struct gemm_case *g = malloc(sizeof *g * copies);
        float *w = randoms((size_t)M * K);
        for (int c = 0; c < copies; c++) {
            struct mimi_packed *p = mimi_pack_matrix(&cpu, w, M, K, (size_t)K, NULL, bf16, 0);
            g[c] = (struct gemm_case){&cpu,
                                      {.M = M,
                                       .N = N,
                                       .K = K,
                                       .w = p->panels,
                                       .w_bf16 = bf16,
                                       .b = x,
                                       .ldb = K,
                                       .out = {.y = y, .group = M, .ms = 1, .cs = M}}};
        }
        free(w);
        const double s = mean_over_copies(run_gemm, g, sizeof *g, copies);
        double bytes = (double)bytes_one, flops = 2.0 * M * N * K;
        printf("%-34s %9.1f %8.2f %8.2f %7.1f%%\n", gemms[i].name, s * 1e6, bytes / s / 1e9,
               flops / s / 1e9, 100 * flops / s / peak);
        free(g);
        // the copies stay owned by cpu until the end
        free(x), free(y);
    }
    // direct conv: (c_in, c_out, K, S, T_out) of the long-time SEANet layers
    static const struct {
        const char *name;
        int c_in, c_out, K, S, T;
    } convs[] = {
        {"enc model.0 1->64 k7 T1920", 1, 64, 7, 1, 1920},
        {"enc res1 64->32 k3 T1920", 64, 32, 3, 1, 1920},
        {"enc res1 32->64 k1 T1920", 32, 64, 1, 1, 1920},
        {"enc model.3 64->128 k8/4 T480", 64, 128, 8, 4, 480},
        {"enc res4 128->64 k3 T480", 128, 64, 3, 1, 480},
        {"enc model.6 128->256 k10/5 T96", 128, 256, 10, 5, 96},
        {"dec model.11 (poly) 256r J256 T480", 128, 256, 2, 1, 480},
        {"dec model.8 (poly) 640r J512 T96", 256, 640, 2, 1, 96},
    };
    for (size_t i = 0; i < sizeof convs / sizeof convs[0]; i++) {
        if (only && !strstr(convs[i].name, only)) continue;
        const int ci = convs[i].c_in, co = convs[i].c_out, K = convs[i].K, S = convs[i].S,
                  T = convs[i].T;
        const int J = ci * K, L = (T - 1) * S + K, Lp = (L + S - 1) / S;
        float *w = randoms((size_t)co * J), *x = randoms((size_t)ci * S * Lp + 64),
              *y = randoms((size_t)co * T);
        int *off = malloc(sizeof(int) * J);
        for (int c = 0; c < ci; c++)
            for (int k = 0; k < K; k++) off[c * K + k] = (c * S + k % S) * Lp + k / S;
        // as for the products: weights from memory, as a frame has them (the input stays hot)
        const int copies = weight_copies(sizeof(float) * co * J);
        struct conv_case *c = malloc(sizeof *c * copies);
        for (int k = 0; k < copies; k++) {
            struct mimi_packed *p = mimi_pack_matrix(&cpu, w, co, J, (size_t)J, NULL, 0, 0);
            c[k] = (struct conv_case){&cpu,
                                      {.M = co,
                                       .J = J,
                                       .T = T,
                                       .w = p->panels,
                                       .off = off,
                                       .x = x,
                                       .out = {.y = y, .group = co, .ms = T, .cs = 1},
                                       .rows_outer = (size_t)co * J * 4 > (512u << 10)}};
        }
        const double s = mean_over_copies(run_conv, c, sizeof *c, copies), flops = 2.0 * co * J * T;
        printf("%-34s %9.1f %8s %8.2f %7.1f%%\n", convs[i].name, s * 1e6, "-", flops / s / 1e9,
               100 * flops / s / peak);
        free(c), free(w), free(x), free(y), free(off);
    }
    mimi_pool_destroy(cpu.pool);
    mimi_cpu_release(&cpu);
    return 0;
}
