/*
 * bench_util.c - the floors, the cost model and the host facts of bench_util.h.
 *
 * The cost model walks the model description the library loaded (src/internal.h): SEANet
 * layers with their per-frame step counts, transformer widths, resampler and quantizer shapes,
 * so that MACs and bytes follow the checkpoint rather than constants (spec 9.1 - 9.3).
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#if defined(__x86_64__)
#include <immintrin.h>
#endif
#if defined(__linux__)
#include <sys/mman.h>
#endif

#include "bench_util.h"
#include "cpu/cpu.h"

double bench_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

// ---- memory-read probe ----

struct read_job {
    const float *data;
    size_t n;  // floats, a multiple of 64
    float sum;
};

#if defined(__x86_64__)
__attribute__((target("avx2"))) static float read_avx2(const float *p, size_t n) {
    __m256 a = _mm256_setzero_ps(), b = a, c = a, d = a;
    for (size_t i = 0; i < n; i += 32) {
        a = _mm256_add_ps(a, _mm256_load_ps(p + i));
        b = _mm256_add_ps(b, _mm256_load_ps(p + i + 8));
        c = _mm256_add_ps(c, _mm256_load_ps(p + i + 16));
        d = _mm256_add_ps(d, _mm256_load_ps(p + i + 24));
    }
    float t[8];
    _mm256_storeu_ps(t, _mm256_add_ps(_mm256_add_ps(a, b), _mm256_add_ps(c, d)));
    return t[0] + t[1] + t[2] + t[3] + t[4] + t[5] + t[6] + t[7];
}
#endif

static float read_plain(const float *p, size_t n) {
    float acc[16] = {0};
    for (size_t i = 0; i < n; i += 16)
        for (int k = 0; k < 16; k++) acc[k] += p[i + k];
    float s = 0;
    for (int k = 0; k < 16; k++) s += acc[k];
    return s;
}

static void *read_thread(void *arg) {
    struct read_job *j = arg;
#if defined(__x86_64__)
    if (__builtin_cpu_supports("avx2")) {
        j->sum = read_avx2(j->data, j->n);
        return NULL;
    }
#endif
    j->sum = read_plain(j->data, j->n);
    return NULL;
}

double bench_read_bandwidth(int n_threads, size_t bytes, int huge_pages) {
    size_t n = bytes / sizeof(float) / (64 * (size_t)n_threads) * 64 * (size_t)n_threads;
    float *buf = aligned_alloc((size_t)2 << 20, n * sizeof(float));
    if (!buf) return 0.0;
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    // the library asks for huge pages for its weights; the floor gets the same pages
    madvise(buf, n * sizeof(float), huge_pages ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
#else
    (void)huge_pages;
#endif
    for (size_t i = 0; i < n; i++) buf[i] = (float)(i & 7);
    struct read_job jobs[256];
    pthread_t th[256];
    double best = 0.0;
    float sink = 0.0f;
    for (int rep = 0; rep < 5; rep++) {
        double t0 = bench_now();
        for (int i = 0; i < n_threads; i++) {
            jobs[i] = (struct read_job){buf + n / n_threads * i, n / n_threads, 0.0f};
            if (i > 0) pthread_create(&th[i], NULL, read_thread, &jobs[i]);
        }
        read_thread(&jobs[0]);
        for (int i = 1; i < n_threads; i++) pthread_join(th[i], NULL);
        double bw = (double)n * sizeof(float) / (bench_now() - t0);
        best = bw > best ? bw : best;
        for (int i = 0; i < n_threads; i++) sink += jobs[i].sum;
    }
    free(buf);
    if (sink == 1.2345f) fprintf(stderr, " ");  // keeps the sums alive
    return best;
}

// ---- FMA probe ----

struct fma_job {
    int wide;  // 2: 512-bit, 1: 256-bit, 0: plain
    long iters;
    float out;
};

// 12 independent chains in named variables (an array of vectors would live on the stack)
#define CHAINS 12
#define FMA12(F, m, c)                                                                             \
    a0 = F(a0, m, c), a1 = F(a1, m, c), a2 = F(a2, m, c), a3 = F(a3, m, c), a4 = F(a4, m, c),      \
    a5 = F(a5, m, c), a6 = F(a6, m, c), a7 = F(a7, m, c), a8 = F(a8, m, c), a9 = F(a9, m, c),      \
    a10 = F(a10, m, c), a11 = F(a11, m, c)
#if defined(__x86_64__)
__attribute__((target("avx2,fma"))) static float fma_avx2(long iters) {
    __m256 m = _mm256_set1_ps(0.999f), c = _mm256_set1_ps(1e-4f);
    __m256 a0 = _mm256_set1_ps(0), a1 = _mm256_set1_ps(1), a2 = _mm256_set1_ps(2),
           a3 = _mm256_set1_ps(3), a4 = _mm256_set1_ps(4), a5 = _mm256_set1_ps(5),
           a6 = _mm256_set1_ps(6), a7 = _mm256_set1_ps(7), a8 = _mm256_set1_ps(8),
           a9 = _mm256_set1_ps(9), a10 = _mm256_set1_ps(10), a11 = _mm256_set1_ps(11);
    for (long it = 0; it < iters; it++) FMA12(_mm256_fmadd_ps, m, c);
    __m256 s = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)),
                             _mm256_add_ps(_mm256_add_ps(a4, a5), _mm256_add_ps(a6, a7)));
    s = _mm256_add_ps(s, _mm256_add_ps(_mm256_add_ps(a8, a9), _mm256_add_ps(a10, a11)));
    float t[8];
    _mm256_storeu_ps(t, s);
    return t[0] + t[7];
}

__attribute__((target("avx512f"))) static float fma_avx512(long iters) {
    __m512 m = _mm512_set1_ps(0.999f), c = _mm512_set1_ps(1e-4f);
    __m512 a0 = _mm512_set1_ps(0), a1 = _mm512_set1_ps(1), a2 = _mm512_set1_ps(2),
           a3 = _mm512_set1_ps(3), a4 = _mm512_set1_ps(4), a5 = _mm512_set1_ps(5),
           a6 = _mm512_set1_ps(6), a7 = _mm512_set1_ps(7), a8 = _mm512_set1_ps(8),
           a9 = _mm512_set1_ps(9), a10 = _mm512_set1_ps(10), a11 = _mm512_set1_ps(11);
    for (long it = 0; it < iters; it++) FMA12(_mm512_fmadd_ps, m, c);
    __m512 s = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)),
                             _mm512_add_ps(_mm512_add_ps(a4, a5), _mm512_add_ps(a6, a7)));
    s = _mm512_add_ps(s, _mm512_add_ps(_mm512_add_ps(a8, a9), _mm512_add_ps(a10, a11)));
    return _mm512_reduce_add_ps(s);
}
#endif

static float fma_plain(long iters) {
    float a[CHAINS][8];
    for (int i = 0; i < CHAINS; i++)
        for (int k = 0; k < 8; k++) a[i][k] = (float)(i + k);
    for (long it = 0; it < iters; it++)
        for (int i = 0; i < CHAINS; i++)
            for (int k = 0; k < 8; k++) a[i][k] = a[i][k] * 0.999f + 1e-4f;
    return a[0][0] + a[CHAINS - 1][7];
}

static void *fma_thread(void *arg) {
    struct fma_job *j = arg;
#if defined(__x86_64__)
    if (j->wide == 2) j->out = fma_avx512(j->iters);
    else if (j->wide == 1) j->out = fma_avx2(j->iters);
    else
#endif
        j->out = fma_plain(j->iters);
    return NULL;
}

double bench_fma_peak(int n_threads, const char *isa) {
    int wide = 0, lanes = 8;
#if defined(__x86_64__)
    if (!strcmp(isa, "avx512") && __builtin_cpu_supports("avx512f")) wide = 2, lanes = 16;
    else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) wide = 1;
#else
    (void)isa;
#endif
    struct fma_job jobs[256];
    pthread_t th[256];
    double best = 0.0;
    for (int rep = 0; rep < 3; rep++) {
        long iters = 20000000;
        double t0 = bench_now();
        for (int i = 0; i < n_threads; i++) {
            jobs[i] = (struct fma_job){wide, iters, 0.0f};
            if (i > 0) pthread_create(&th[i], NULL, fma_thread, &jobs[i]);
        }
        fma_thread(&jobs[0]);
        for (int i = 1; i < n_threads; i++) pthread_join(th[i], NULL);
        double flops = 2.0 * lanes * CHAINS * (double)iters * n_threads / (bench_now() - t0);
        best = flops > best ? flops : best;
    }
    return best;
}

// ---- cost per frame ----

// Bytes per weight of a packed matrix (or f32 when the reference path reads it).
static double elem_bytes(const struct mimi_packed *p) { return p && p->bf16 ? 2.0 : 4.0; }

static void add_conv(struct frame_cost *c, const struct mimi_conv *cv, int T_in) {
    double w = (double)cv->c_out * (cv->c_in / cv->groups) * cv->kernel;
    // conv MACs: T_out Cout (Cin/g) K; transposed: T_in Cin (Cout/g) K (the same product)
    double steps = cv->transposed ? T_in : T_in / cv->stride;
    c->macs += steps * w;
    c->params += w + (cv->bias ? cv->c_out : 0);
    c->weight_bytes += w * elem_bytes(cv->packed) + (cv->bias ? 4.0 * cv->c_out : 0);
}

static void add_seanet(struct frame_cost *c, const struct seanet *s, int T) {
    for (int i = 0; i < s->n_layers; i++) {
        const struct seanet_layer *l = &s->layers[i];
        if (l->kind == SEANET_ELU) continue;
        add_conv(c, &l->conv, T);
        if (l->kind == SEANET_RESBLOCK) add_conv(c, &l->conv2, T);
        if (l->kind == SEANET_CONV) T /= l->conv.stride;
        if (l->kind == SEANET_CONVTR) T *= l->conv.stride;
    }
}

static void add_transformer(struct frame_cost *c, const struct transformer *t, int steps) {
    const double d = t->d_model, ff = t->d_ff;
    for (int l = 0; l < t->n_layers; l++) {
        const struct transformer_layer *w = &t->layers[l];
        c->macs += steps * (3 * d * d + d * d + 2 * d * ff);
        c->macs += 2.0 * steps * t->context * d;  // q.k and a.v over the full window
        c->params += 3 * d * d + d * d + 2 * d * ff + 6 * d;
        c->weight_bytes +=
            3 * d * d * elem_bytes(w->p_in_proj) + d * d * elem_bytes(w->p_out_proj) +
            d * ff * (elem_bytes(w->p_linear1) + elem_bytes(w->p_linear2)) + 4 * 6 * d;
    }
}

static double linear_bytes(const struct mimi_linear *l) {
    return l ? (double)l->rows * l->cols * elem_bytes(l->packed) : 0.0;
}

struct frame_cost bench_encode_cost(const struct mimi_model *m, int n_q) {
    struct frame_cost c = {0};
    const struct quantizer *q = &m->quantizer;
    add_seanet(&c, &m->encoder, m->frame_size);
    add_transformer(&c, &m->enc_tr, m->steps_per_frame);
    add_conv(&c, &m->downsample, m->steps_per_frame);
    if (q->n_q) {
        // two input projections, then n_q full codebook scans
        c.macs += 2.0 * q->dim * q->latent + (double)n_q * q->bins * q->dim;
        c.params += 2.0 * q->dim * q->latent + (double)n_q * q->bins * q->dim;
        c.weight_bytes += linear_bytes(q->lin_in_first) + linear_bytes(q->lin_in_rest);
        for (int k = 0; k < n_q; k++) c.weight_bytes += linear_bytes(&q->lin_books[k]);
    }
    return c;
}

struct frame_cost bench_decode_cost(const struct mimi_model *m, int n_q) {
    struct frame_cost c = {0};
    const struct quantizer *q = &m->quantizer;
    if (q->n_q) {
        // one row per codebook, two output projections
        c.macs += 2.0 * q->latent * q->dim;
        c.params += 2.0 * q->latent * q->dim + (double)n_q * q->dim;
        c.weight_bytes +=
            linear_bytes(q->lin_out_first) + linear_bytes(q->lin_out_rest) + 4.0 * n_q * q->dim;
    } else {
        c.macs += (double)q->latent * m->frame_dim;
        c.params += (double)q->latent * m->frame_dim;
        c.weight_bytes += 4.0 * q->latent * m->frame_dim;
    }
    add_conv(&c, &m->upsample, 1);
    add_transformer(&c, &m->dec_tr, m->steps_per_frame);
    add_seanet(&c, &m->decoder, m->steps_per_frame);
    return c;
}

const char *bench_kernel_name(const struct mimi_model *m) {
    return m->cpu && m->cpu->k ? m->cpu->k->name : "reference";
}

// ---- host facts ----

void bench_host_cpu(char *buf, size_t len) {
    snprintf(buf, len, "unknown");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return;
    char line[512];
    int cores = 0;
    while (fgets(line, sizeof line, f)) {
        if (!strncmp(line, "processor", 9)) cores++;
        if (!strncmp(line, "model name", 10) && !strcmp(buf, "unknown")) {
            char *v = strchr(line, ':');
            if (v) snprintf(buf, len, "%s", v + 2);
            buf[strcspn(buf, "\n")] = 0;
        }
    }
    fclose(f);
    size_t at = strlen(buf);
    snprintf(buf + at, len - at, ", %d logical CPUs", cores);
}

const char *bench_compiler(void) {
#if defined(__clang__)
    return "clang " __clang_version__;
#elif defined(__GNUC__)
    return "gcc " __VERSION__;
#else
    return "unknown";
#endif
}

void bench_date(char *buf, size_t len) {
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(buf, len, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

void bench_git_sha(char *buf, size_t len) {
    snprintf(buf, len, "unknown");
    FILE *p = popen("git -C '" MIMI_SOURCE_DIR "' rev-parse --short=12 HEAD 2>/dev/null", "r");
    if (!p) return;
    if (fgets(buf, (int)len, p)) buf[strcspn(buf, "\n")] = 0;
    pclose(p);
    p = popen("git -C '" MIMI_SOURCE_DIR "' status --porcelain --untracked-files=no 2>/dev/null",
              "r");
    char line[8];
    if (p && fgets(line, sizeof line, p)) {
        size_t at = strlen(buf);
        snprintf(buf + at, len - at, "-dirty");
    }
    if (p) pclose(p);
}
