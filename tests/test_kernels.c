/*
 * test_kernels.c - every fast CPU kernel against the scalar reference (src/nn/ops_ref.c, or a
 * plain double-precision loop where ops_ref has no counterpart), for every kernel set compiled
 * in and supported by this CPU, at real Mimi shapes and at odd sizes.
 *
 * Tolerances (stated here, checked below):
 * - gemm / conv: |y - ref| <= 2e-5 * sum_j |w_j x_j| + 1e-30 per output (one f32 FMA chain
 *   against the reference's sums); bf16 weights are compared with the reference run on the
 *   same rounded weights;
 * - conv == gemm over the im2col, a column alone == the same column in a batch, one work range
 *   == many, n_threads 2 == 1: bit for bit (one multiply-add chain per output, whatever the
 *   blocking);
 * - elu, exp: relative 4e-7 (about 3 ulp) or absolute 1e-7 near 0; gelu: absolute
 *   2e-6 * max(1, |x|) (its erf is a rational approximation within 4e-7);
 * - layer_norm: absolute 2e-5 (rows of 512 with f32 statistics vs the reference's doubles);
 * - attend: absolute 2e-6 against a double-precision softmax.
 * - the host copies of a large step (mimi_host_copy, mimi_batch_copy_finite on 2 threads, with
 *   streaming stores where the target has them): bit for bit, the first NaN or infinity found.
 *
 * usage: test_kernels            kernel cases (label unit)
 *        test_kernels model      the model on the fast path: 2 threads == 1 thread bit for bit,
 *                                explicit kernel sets, bf16 weights (label weights)
 */
#include <pthread.h>
#include <stdatomic.h>

#include "batch.h"
#include "cpu/cpu.h"
#include "cpu/threadpool.h"
#include "mimi.h"
#include "nn/ops.h"
#include "safetensors.h"
#include "test.h"
#include "bad_samples.h"

static const int ISAS[] = {MIMI_ISA_AVX2, MIMI_ISA_AVX512, MIMI_ISA_NEON};

// ---- helpers ----

static float *random_floats(size_t n, float scale) {
    float *x = malloc(sizeof(float) * (n ? n : 1));
    for (size_t i = 0; i < n; i++) x[i] = scale * test_rng_float();
    return x;
}

static float bf16_round(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    u += 0x7fffu + ((u >> 16) & 1u);
    u &= 0xffff0000u;
    memcpy(&x, &u, 4);
    return x;
}

// A context with one thread (or a pool of n_threads) for kernel set k.
static struct mimi_cpu make_cpu(const struct mimi_kernels *k, int n_threads) {
    struct mimi_cpu c = {.k = k, .n_threads = n_threads};
    if (n_threads > 1) c.pool = mimi_pool_create(n_threads);
    return c;
}

static void free_cpu(struct mimi_cpu *c) {
    mimi_pool_destroy(c->pool);
    mimi_cpu_release(c);
    memset(c, 0, sizeof *c);
}

// Worst |y - ref| / (sum |terms| + tiny) over outputs; y, ref, mag all (count).
static double worst_rel(const float *y, const double *ref, const double *mag, size_t count) {
    double worst = 0;
    for (size_t i = 0; i < count; i++) {
        double e = fabs((double)y[i] - ref[i]) / (mag[i] + 1e-30);
        worst = e > worst ? e : worst;
    }
    return worst;
}

// ---- gemm ----

static double elu_d(double x) { return x > 0 ? x : expm1(x); }
static double gelu_d(double x) { return 0.5 * x * (1 + erf(x / sqrt(2.0))); }

// One gemm case: y (M, N) in layout `plain` (cs = M, ms = 1) or channel-major (ms = N, cs = 1).
static void gemm_case(const struct mimi_kernels *k, int M, int N, int K, int bias_on, int epi,
                      int bf16, int plain) {
    struct mimi_cpu cpu = make_cpu(k, 1);
    float *w = random_floats((size_t)M * K, 0.5f), *x = random_floats((size_t)N * K, 1.0f);
    float *b = random_floats((size_t)M, 0.5f), *sc = random_floats((size_t)M, 1.0f);
    float *r = random_floats((size_t)M * N, 1.0f), *y = malloc(sizeof(float) * M * N);
    double *ref = malloc(sizeof(double) * M * N), *mag = malloc(sizeof(double) * M * N);
    struct mimi_packed *p = mimi_pack_matrix(&cpu, w, M, K, (size_t)K, bias_on ? b : NULL, bf16, 0);
    const ptrdiff_t ms = plain ? 1 : N, cs = plain ? M : 1;
    // reference: the ops_ref matmul on the weights the kernel sees, then the epilogue in double
    float *wr = malloc(sizeof(float) * M * K), *yr = malloc(sizeof(float) * M * N);
    for (size_t i = 0; i < (size_t)M * K; i++) wr[i] = bf16 ? bf16_round(w[i]) : w[i];
    mimi_matmul_nt(M, N, K, wr, K, x, K, bias_on ? b : NULL, yr, (int)ms, (int)cs);
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) {
            size_t at = (size_t)m * ms + (size_t)n * cs;
            double acc = yr[at], s = bias_on ? fabs(b[m]) : 0;
            for (int j = 0; j < K; j++)
                s += fabs((double)wr[(size_t)m * K + j] * x[(size_t)n * K + j]);
            double out = acc, sc_mag = s;
            if (epi == MIMI_EPI_ELU) out = elu_d(acc);
            if (epi == MIMI_EPI_GELU) out = gelu_d(acc), sc_mag = s + 1e-1 * fabs(acc);
            if (epi == MIMI_EPI_ADD) out = r[at] + acc, sc_mag = s + 1e-1 * fabs(r[at]);
            if (epi == MIMI_EPI_SCALE_ADD)
                out = r[at] + (double)sc[m] * acc, sc_mag = fabs(sc[m]) * s + 1e-1 * fabs(r[at]);
            ref[at] = out;
            mag[at] = sc_mag;
        }
    memcpy(y, r, sizeof(float) * M * N);
    struct mimi_gemm_args a = {.M = M,
                               .N = N,
                               .K = K,
                               .w = p->panels,
                               .w_bf16 = bf16,
                               .bias = p->bias,
                               .b = x,
                               .ldb = K,
                               .out = {.y = y, .r = y, .group = M, .ms = ms, .cs = cs},
                               .epi = epi,
                               .scale = sc};
    mimi_cpu_gemm(&cpu, &a);
    char label[160];
    snprintf(label, sizeof label, "%s gemm M=%d N=%d K=%d bias=%d epi=%d %s %s", k->name, M, N, K,
             bias_on, epi, bf16 ? "bf16" : "f32", plain ? "rows" : "channels");
    double e = worst_rel(y, ref, mag, (size_t)M * N);
    test_checks++;
    if (!(e <= 2e-5)) {
        test_fail_banner(__FILE__, __LINE__);
        fprintf(stderr, "  %s: worst error %.3e of the term magnitude > 2e-5\n", label, e);
    }
    // bit-exact invariants: each column alone, and the work items one at a time
    float *y1 = malloc(sizeof(float) * M * N);
    memcpy(y1, r, sizeof(float) * M * N);
    int same = 1;
    for (int n = 0; n < N; n++) {
        struct mimi_gemm_args a1 = a;
        a1.N = 1;
        a1.b = x + (size_t)n * K;
        a1.out.y = y1 + n * cs;
        a1.out.r = a1.out.y;
        const long items = (long)((M + k->mr - 1) / k->mr);
        for (long i = 0; i < items; i++) k->gemm(&a1, i, i + 1);
    }
    same = memcmp(y, y1, sizeof(float) * M * N) == 0;
    test_checks++;
    if (!same) {
        test_fail_banner(__FILE__, __LINE__);
        fprintf(stderr, "  %s: a column alone differs from the batched column\n", label);
    }
    if (M * N * K > 1000000 || (M < 40 && N < 8))
        printf("  %-64s err %.1e %s\n", label, e, same ? "batch-invariant" : "BATCH-VARIANT");
    free(w), free(x), free(b), free(sc), free(r), free(y), free(y1), free(ref), free(mag), free(wr),
        free(yr);
    free_cpu(&cpu);
}

static void test_gemm(const struct mimi_kernels *k) {
    // real Mimi shapes: transformer linears at 2 steps, a codebook scan, model.12 im2col, a batch
    static const int real[][3] = {{1536, 2, 512},  {512, 2, 2048},  {2048, 1, 256},
                                  {1024, 2, 8192}, {512, 128, 512}, {4096, 2, 2048}};
    for (int i = 0; i < 6; i++)
        gemm_case(k, real[i][0], real[i][1], real[i][2], 0, MIMI_EPI_NONE, 0, 1);
    // odd sizes, every epilogue, both layouts, bias, bf16
    static const int odd[][3] = {{1, 1, 1},   {17, 1, 3},   {33, 7, 13},  {100, 13, 100},
                                 {16, 6, 16}, {5, 49, 300}, {129, 50, 37}};
    for (int i = 0; i < 7; i++)
        for (int epi = MIMI_EPI_NONE; epi <= MIMI_EPI_SCALE_ADD; epi++)
            gemm_case(k, odd[i][0], odd[i][1], odd[i][2], epi & 1, epi, i & 1, (i + epi) & 1);
    gemm_case(k, 512, 2, 512, 0, MIMI_EPI_SCALE_ADD, 1, 1);
}

// ---- direct conv ----

// A stride-S conv of c_in channels over [history | x] of T_out outputs through the direct
// kernel, against a double loop and against the gemm over an im2col (bit for bit).
static void conv_case(const struct mimi_kernels *k, int c_in, int c_out, int K, int S, int T_out,
                      int epi, int bias_on) {
    struct mimi_cpu cpu = make_cpu(k, 1);
    const int L = (T_out - 1) * S + K, J = c_in * K;
    // the input as stride phases, as src/cpu/conv_fast.c lays it out
    const int Lp = (L + S - 1) / S;
    float *xin = random_floats((size_t)c_in * L, 1.0f), *w = random_floats((size_t)c_out * J, 0.3f);
    float *b = random_floats((size_t)c_out, 0.5f);
    float *ph = calloc((size_t)c_in * S * Lp + MIMI_CONV_SLACK, sizeof(float));
    for (int i = 0; i < c_in; i++)
        for (int k0 = 0; k0 < S; k0++)
            for (int u = 0; u < Lp; u++)
                if (u * S + k0 < L)
                    ph[((size_t)i * S + k0) * Lp + u] = xin[(size_t)i * L + u * S + k0];
    int *off = malloc(sizeof(int) * J);
    for (int i = 0; i < c_in; i++)
        for (int kk = 0; kk < K; kk++) off[i * K + kk] = (i * S + kk % S) * Lp + kk / S;
    struct mimi_packed *p =
        mimi_pack_matrix(&cpu, w, c_out, J, (size_t)J, bias_on ? b : NULL, 0, 0);
    float *r = random_floats((size_t)c_out * T_out, 1.0f);
    float *y = malloc(sizeof(float) * c_out * T_out), *y2 = malloc(sizeof(float) * c_out * T_out);
    memcpy(y, r, sizeof(float) * c_out * T_out);
    memcpy(y2, r, sizeof(float) * c_out * T_out);
    struct mimi_conv_args a = {.M = c_out,
                               .J = J,
                               .T = T_out,
                               .w = p->panels,
                               .bias = p->bias,
                               .off = off,
                               .x = ph,
                               .out = {.y = y, .r = y, .group = c_out, .ms = T_out, .cs = 1},
                               .epi = epi,
                               .rows_outer = (c_out + T_out) & 1};
    mimi_cpu_conv(&cpu, &a);
    // the gemm over the im2col: col[t][j] = X_j[t]
    float *col = malloc(sizeof(float) * (size_t)T_out * J);
    for (int t = 0; t < T_out; t++)
        for (int j = 0; j < J; j++) col[(size_t)t * J + j] = ph[off[j] + t];
    struct mimi_gemm_args g = {.M = c_out,
                               .N = T_out,
                               .K = J,
                               .w = p->panels,
                               .bias = p->bias,
                               .b = col,
                               .ldb = J,
                               .out = {.y = y2, .r = y2, .group = c_out, .ms = T_out, .cs = 1},
                               .epi = epi};
    mimi_cpu_gemm(&cpu, &g);
    double worst = 0;
    for (int o = 0; o < c_out; o++)
        for (int t = 0; t < T_out; t++) {
            double acc = bias_on ? b[o] : 0, mag = bias_on ? fabs(b[o]) : 0;
            for (int i = 0; i < c_in; i++)
                for (int kk = 0; kk < K; kk++) {
                    double term =
                        (double)w[(size_t)o * J + i * K + kk] * xin[(size_t)i * L + t * S + kk];
                    acc += term;
                    mag += fabs(term);
                }
            size_t at = (size_t)o * T_out + t;
            double want = epi == MIMI_EPI_ELU   ? elu_d(acc)
                          : epi == MIMI_EPI_ADD ? r[at] + acc
                                                : acc;
            double e = fabs(y[at] - want) / (mag + 0.1 * fabs(want) + 1e-30);
            worst = e > worst ? e : worst;
        }
    int same = memcmp(y, y2, sizeof(float) * c_out * T_out) == 0;
    char label[160];
    snprintf(label, sizeof label, "%s conv %d->%d K=%d S=%d T=%d epi=%d", k->name, c_in, c_out, K,
             S, T_out, epi);
    printf("  %-64s err %.1e %s\n", label, worst, same ? "== gemm" : "!= GEMM");
    CHECK(worst <= 2e-5);
    CHECK(same);
    free(xin), free(w), free(b), free(ph), free(off), free(r), free(y), free(y2), free(col);
    free_cpu(&cpu);
}

static void test_conv(const struct mimi_kernels *k) {
    // E0, E1's k3 and 1x1 at 1920 steps, E2's strided conv, a 128-row output at 96 steps
    conv_case(k, 1, 64, 7, 1, 1920, MIMI_EPI_NONE, 1);
    conv_case(k, 64, 32, 3, 1, 1920, MIMI_EPI_ELU, 1);
    conv_case(k, 32, 64, 1, 1, 1920, MIMI_EPI_ADD, 1);
    conv_case(k, 64, 128, 8, 4, 480, MIMI_EPI_NONE, 1);
    conv_case(k, 256, 128, 3, 1, 96, MIMI_EPI_ELU, 1);
    // odd sizes: one step, tails, rows not a multiple of the tile, a stride larger than K/2
    conv_case(k, 3, 5, 7, 1, 1, MIMI_EPI_NONE, 0);
    conv_case(k, 7, 13, 5, 3, 37, MIMI_EPI_ELU, 1);
    conv_case(k, 1, 1, 3, 1, 1920, MIMI_EPI_NONE, 1);
    conv_case(k, 9, 17, 2, 2, 100, MIMI_EPI_ADD, 0);
}

// ---- elementwise ----

static void test_elementwise(const struct mimi_kernels *k) {
    // a dense sweep of the ranges that matter plus random values; odd count for the tail
    const size_t n = 200003;
    float *x = malloc(sizeof(float) * n), *y = malloc(sizeof(float) * n);
    for (size_t i = 0; i < n; i++)
        x[i] = i < 150000 ? -30.0f + 40.0f * (float)i / 150000 : 12 * test_rng_float();
    double e_elu = 0, e_exp = 0, e_gelu = 0;
    k->elu(y, x, n);
    for (size_t i = 0; i < n; i++) {
        double want = elu_d(x[i]), e = fabs(y[i] - want) / fmax(fabs(want), 0.25);
        e_elu = e > e_elu ? e : e_elu;
    }
    k->gelu(y, x, n);
    for (size_t i = 0; i < n; i++) {
        double e = fabs(y[i] - gelu_d(x[i])) / fmax(1.0, fabs(x[i]));
        e_gelu = e > e_gelu ? e : e_gelu;
    }
    k->exp(y, x, n);
    for (size_t i = 0; i < n; i++) {
        double want = exp((double)x[i]), e = fabs(y[i] - want) / want;
        if (x[i] > -80) e_exp = e > e_exp ? e : e_exp;
    }
    printf("  %s elu rel %.2e, exp rel %.2e, gelu abs %.2e\n", k->name, e_elu, e_exp, e_gelu);
    CHECK(e_elu <= 4e-7);
    CHECK(e_exp <= 4e-7);
    CHECK(e_gelu <= 2e-6);
    // in place gives the same as out of place
    memcpy(y, x, sizeof(float) * n);
    k->elu(y, y, n);
    float *z = malloc(sizeof(float) * n);
    k->elu(z, x, n);
    CHECK(memcmp(y, z, sizeof(float) * n) == 0);
    free(x), free(y), free(z);
}

static void test_layer_norm(const struct mimi_kernels *k) {
    static const int shapes[][2] = {{2, 512}, {5, 37}, {1, 8}};
    for (int s = 0; s < 3; s++) {
        const int rows = shapes[s][0], d = shapes[s][1];
        float *x = random_floats((size_t)rows * d, 3.0f), *w = random_floats((size_t)d, 1.0f);
        float *b = random_floats((size_t)d, 1.0f);
        float *y = malloc(sizeof(float) * rows * d), *yr = malloc(sizeof(float) * rows * d);
        for (int i = 0; i < rows * d; i++) x[i] += 2.0f;  // a mean far from 0
        k->layer_norm(x, y, rows, d, w, b, 1e-5f);
        mimi_layer_norm(x, yr, rows, d, w, b, 1e-5f);
        double worst = 0;
        for (int i = 0; i < rows * d; i++) worst = fmax(worst, fabs(y[i] - yr[i]));
        printf("  %s layer_norm %dx%d abs %.2e\n", k->name, rows, d, worst);
        CHECK(worst <= 2e-5);
        free(x), free(w), free(b), free(y), free(yr);
    }
}

static void test_attend(const struct mimi_kernels *k) {
    // one head of 64 over a ring of 252 rows of 512, 2 queries of a frame (the second sees one
    // more key), 20 queries (more than one pass), and odd sizes
    static const int shapes[][4] = {
        {64, 252, 251, 2}, {64, 252, 1, 1}, {12, 20, 17, 3}, {64, 300, 280, 20}};
    for (int sh = 0; sh < 4; sh++) {
        const int hd = shapes[sh][0], cap = shapes[sh][1], n = shapes[sh][2], nq = shapes[sh][3];
        const int ld = 512, ldq = 3 * 512;
        float *q = random_floats((size_t)nq * ldq, 1.0f),
              *keys = random_floats((size_t)cap * ld, 1.0f);
        float *values = random_floats((size_t)cap * ld, 1.0f);
        float *scores = malloc(sizeof(float) * 16 * n), *out = malloc(sizeof(float) * nq * ld);
        float *one = malloc(sizeof(float) * hd);
        int *idx = malloc(sizeof(int) * n);
        unsigned char *vis = malloc((size_t)nq * n);
        for (int i = 0; i < n; i++) idx[i] = (i * 7 + 3) % cap;  // distinct: 7 and cap coprime
        // query s sees all but the last nq-1-s entries (causal within the frame) and not entry s
        for (int s = 0; s < nq; s++)
            for (int i = 0; i < n; i++)
                vis[(size_t)s * n + i] = i < n - (nq - 1 - s) && (i != s || n < 4);
        const float scale = 1.0f / sqrtf((float)hd);
        k->attend(q, ldq, nq, keys, values, ld, idx, vis, n, hd, scale, scores, out, ld);
        double worst = 0;
        int same = 1;
        for (int s = 0; s < nq; s++) {
            double *p = malloc(sizeof(double) * n), mx = -INFINITY, sum = 0;
            for (int i = 0; i < n; i++) {
                double dot = 0;
                for (int c = 0; c < hd; c++)
                    dot += (double)q[(size_t)s * ldq + c] * keys[(size_t)idx[i] * ld + c];
                p[i] = dot * scale;
                if (vis[(size_t)s * n + i]) mx = fmax(mx, p[i]);
            }
            for (int i = 0; i < n; i++) sum += (p[i] = vis[(size_t)s * n + i] ? exp(p[i] - mx) : 0);
            for (int c = 0; c < hd; c++) {
                double want = 0;
                for (int i = 0; i < n; i++) want += p[i] / sum * values[(size_t)idx[i] * ld + c];
                worst = fmax(worst, fabs(out[(size_t)s * ld + c] - want));
            }
            // the query alone gives the same bits
            k->attend(q + (size_t)s * ldq, ldq, 1, keys, values, ld, idx, vis + (size_t)s * n, n,
                      hd, scale, scores, one, ld);
            same &= memcmp(one, out + (size_t)s * ld, sizeof(float) * hd) == 0;
            free(p);
        }
        printf("  %s attend hd=%d keys=%d queries=%d abs %.2e%s\n", k->name, hd, n, nq, worst,
               same ? ", == one query at a time" : ", != ONE QUERY AT A TIME");
        CHECK(worst <= 2e-6);
        CHECK(same);
        free(q), free(keys), free(values), free(scores), free(out), free(one), free(idx), free(vis);
    }
}

// ---- the pool ----

// A gemm and a direct conv on 2 threads give the same bits as on 1.
static void test_threads(const struct mimi_kernels *k) {
    struct mimi_cpu one = make_cpu(k, 1), two = make_cpu(k, 2);
    const int M = 1536, N = 6, K = 512;
    float *w = random_floats((size_t)M * K, 0.5f), *x = random_floats((size_t)N * K + 4096, 1.0f);
    float *y1 = malloc(sizeof(float) * 128 * 480), *y2 = malloc(sizeof(float) * 128 * 480);
    struct mimi_packed *p = mimi_pack_matrix(&one, w, M, K, (size_t)K, NULL, 0, 0);
    struct mimi_gemm_args a = {.M = M,
                               .N = N,
                               .K = K,
                               .w = p->panels,
                               .b = x,
                               .ldb = K,
                               .out = {.y = y1, .group = M, .ms = 1, .cs = M},
                               .epi = MIMI_EPI_GELU};
    mimi_cpu_gemm(&one, &a);
    a.out.y = y2;
    for (int rep = 0; rep < 50; rep++) mimi_cpu_gemm(&two, &a);
    CHECK(memcmp(y1, y2, sizeof(float) * M * N) == 0);
    // direct conv: 128 rows x 480 steps, 2 threads
    int off[64];
    for (int j = 0; j < 64; j++) off[j] = j * 8;
    struct mimi_conv_args c = {.M = 128,
                               .J = 64,
                               .T = 480,
                               .w = p->panels,
                               .off = off,
                               .x = x,
                               .out = {.y = y1, .group = 128, .ms = 480, .cs = 1}};
    mimi_cpu_conv(&one, &c);
    c.out.y = y2;
    mimi_cpu_conv(&two, &c);
    CHECK(memcmp(y1, y2, sizeof(float) * 128 * 480) == 0);
    printf("  %s: 2 threads == 1 thread (gemm, conv)\n", k->name);
    free(w), free(x), free(y1), free(y2);
    free_cpu(&one);
    free_cpu(&two);
}

// ---- the model on the fast path ----

static float *clip_pcm(const char *clip, int64_t *n) {
    struct st_file refs;
    char err[256], name[128];
    if (st_open(&refs, MIMI_TEST_DATA "/refs_seed0.safetensors", err, sizeof err)) return NULL;
    snprintf(name, sizeof name, "%s.pcm_in", clip);
    const struct st_tensor *t = st_find(&refs, name);
    float *pcm = t ? malloc(sizeof(float) * t->n_elements) : NULL;
    if (pcm && st_to_f32(t, pcm)) pcm = NULL;
    *n = t ? t->n_elements : 0;
    st_close(&refs);
    return pcm;
}

static struct mimi_model *load(int isa, int threads, int weights, int *rc) {
    struct mimi_model_params mp;
    mimi_model_params_default(&mp);
    mp.isa = isa;
    mp.n_threads = threads;
    mp.weights = weights;
    return mimi_model_load(MIMI_TEST_MODELS "/native.safetensors", &mp, rc);
}

// Streams `frames` frames through an encoder and a decoder: codes (frames, n_q), pcm out.
static void run_stream(struct mimi_model *m, const float *pcm, int frames, int n_q, int32_t *codes,
                       const int32_t *decode_codes, float *out) {
    struct mimi_stream_params sp;
    mimi_stream_params_default(&sp);
    sp.n_codebooks = n_q;
    struct mimi_encoder *e = mimi_encoder_create(m, &sp, NULL);
    struct mimi_decoder *d = mimi_decoder_create(m, &sp, NULL);
    for (int f = 0; f < frames; f++) {
        CHECK_EQ(mimi_encoder_step(e, pcm + (size_t)f * 1920, codes + (size_t)f * n_q), MIMI_OK);
        const int32_t *c = (decode_codes ? decode_codes : codes) + (size_t)f * n_q;
        CHECK_EQ(mimi_decoder_step(d, c, out + (size_t)f * 1920), MIMI_OK);
    }
    mimi_encoder_destroy(e);
    mimi_decoder_destroy(d);
}

static double snr_db(const float *x, const float *ref, size_t n) {
    double e = test_rel_l2(x, ref, n);
    return e > 0 ? -20 * log10(e) : INFINITY;
}

static void test_model(void) {
    int rc, frames = 8, n_q = 8;
    int64_t n;
    float *pcm = clip_pcm("dev_speech_en", &n);
    struct mimi_model *m1 = load(MIMI_ISA_AUTO, 1, MIMI_WEIGHTS_F32, &rc);
    if (!m1 || !pcm) SKIP("no synthetic model: %s", mimi_strerror(rc));
    struct mimi_model *m2 = load(MIMI_ISA_AUTO, 2, MIMI_WEIGHTS_F32, &rc);
    CHECK(m2 != NULL);
    int32_t c1[64], c2[64];
    float *o1 = malloc(sizeof(float) * 1920 * frames), *o2 = malloc(sizeof(float) * 1920 * frames);
    run_stream(m1, pcm, frames, n_q, c1, NULL, o1);
    run_stream(m2, pcm, frames, n_q, c2, NULL, o2);
    int same = !memcmp(c1, c2, sizeof c1) && !memcmp(o1, o2, sizeof(float) * 1920 * frames);
    printf("  model: 2 threads %s 1 thread (codes and pcm, bit for bit)\n", same ? "==" : "!=");
    CHECK(same);
    // a batch step's samples past 1 MB are checked by both threads
    struct mimi_batch_params bp;
    mimi_batch_params_default(&bp);
    bp.capacity = BAD_SAMPLES_SLOTS;
    struct mimi_batch *wb = mimi_batch_create(m2, &bp, NULL);
    float *wide = calloc((size_t)BAD_SAMPLES_SLOTS * 1920, sizeof(float));
    int32_t *wide_codes = malloc(sizeof(int32_t) * BAD_SAMPLES_SLOTS * bp.n_codebooks);
    for (int k = 0; wb && k < BAD_SAMPLES_SLOTS; k++) CHECK_EQ(mimi_batch_open(wb), k);
    CHECK(wb && wide && wide_codes);
    if (wb && wide && wide_codes) check_bad_samples(wb, wide, wide_codes);
    free(wide), free(wide_codes);
    mimi_batch_destroy(wb);
    // explicit kernel sets: loadable exactly when compiled in and on this CPU
    for (int i = 0; i < 3; i++) {
        struct mimi_model *m = load(ISAS[i], 1, MIMI_WEIGHTS_F32, &rc);
        printf("  isa %d: %s\n", ISAS[i], m ? "loaded" : mimi_strerror(rc));
        CHECK(m ? mimi_kernels_get(ISAS[i]) != NULL
                : rc == MIMI_EUNSUPPORTED && !mimi_kernels_get(ISAS[i]));
        mimi_model_destroy(m);
    }
    // bf16 weights run and stay close (the full measure: test_kernels fidelity)
    struct mimi_model *mb = load(MIMI_ISA_AUTO, 2, MIMI_WEIGHTS_BF16, &rc);
    if (mimi_kernels_get(MIMI_ISA_AUTO)) {
        int32_t cb[64];
        CHECK(mb != NULL);
        run_stream(mb, pcm, frames, n_q, cb, c1, o2);
        int sem = 0;
        for (int f = 0; f < frames; f++) sem += cb[f * n_q] == c1[f * n_q];
        double snr = snr_db(o2, o1, (size_t)1920 * frames);
        printf("  bf16: semantic codes %d/%d equal, decoder pcm SNR %.1f dB\n", sem, frames, snr);
        CHECK(snr > 20);
    }
    mimi_model_destroy(mb);
    mimi_model_destroy(m1);
    mimi_model_destroy(m2);
    free(pcm), free(o1), free(o2);
}

// bf16 against f32 weights over the three clips: code agreement per codebook (encoder) and the
// SNR of the decoded pcm given the same codes (decoder). The numbers of the README.
static void test_fidelity(void) {
    static const char *clips[] = {"dev_speech_en", "dev_sweep_noise", "dev_long_en"};
    const int n_q = 8;
    int rc;
    struct mimi_model *mf = load(MIMI_ISA_AUTO, 2, MIMI_WEIGHTS_F32, &rc);
    struct mimi_model *mb = load(MIMI_ISA_AUTO, 2, MIMI_WEIGHTS_BF16, &rc);
    if (!mf || !mb || !mimi_kernels_get(MIMI_ISA_AUTO))
        SKIP("no fast kernels or no synthetic model");
    for (int c = 0; c < 3; c++) {
        int64_t n;
        float *pcm = clip_pcm(clips[c], &n);
        const int frames = (int)(n / 1920);
        int32_t *cf = malloc(sizeof(int32_t) * frames * n_q),
                *cb = malloc(sizeof(int32_t) * frames * n_q);
        float *of = malloc(sizeof(float) * 1920 * frames),
              *ob = malloc(sizeof(float) * 1920 * frames);
        run_stream(mf, pcm, frames, n_q, cf, NULL, of);
        run_stream(mb, pcm, frames, n_q, cb, cf, ob);
        printf("  %-16s %3d frames, codes equal per codebook:", clips[c], frames);
        for (int q = 0; q < n_q; q++) {
            int eq = 0;
            for (int f = 0; f < frames; f++) eq += cf[f * n_q + q] == cb[f * n_q + q];
            printf(" %.1f%%", 100.0 * eq / frames);
        }
        printf(" | decoder pcm SNR %.1f dB\n", snr_db(ob, of, (size_t)1920 * frames));
        free(pcm), free(cf), free(cb), free(of), free(ob);
    }
    mimi_model_destroy(mf);
    mimi_model_destroy(mb);
}

// ---- main ----

static void count_share(void *ctx, int ith, int nth) {
    (void)nth;
    atomic_fetch_add((atomic_int *)ctx, 1 << (8 * ith));
}

// A region run right after the pool is made: every share runs once, even when the workers have
// not started yet (the first region once went unseen by a worker that started after it was
// published, and its caller waited forever).
static void test_pool_start(void) {
    int ok = 0;
    for (int k = 0; k < 300; k++) {
        struct mimi_pool *pool = mimi_pool_create(3);
        if (!pool) break;
        atomic_int shares = 0;
        mimi_pool_run(pool, 3, count_share, &shares);
        ok += atomic_load(&shares) == (1 | 1 << 8 | 1 << 16);
        mimi_pool_destroy(pool);
    }
    printf("  pool: a region right after creation ran every share in %d of 300 pools\n", ok);
    CHECK_EQ(ok, 300);
}

// The threaded host copies of a large step (batch.c: above 1 MB, split over the pool, streaming
// stores on x86): sizes that end mid-vector and mid-block, destinations off 16-byte alignment,
// bit for bit; the checked copy names the first non-finite sample, wherever the threads' shares
// meet, and a second one later does not hide it.
static void test_host_copies(void) {
    struct mimi_cpu cpu = {.n_threads = 2, .pool = mimi_pool_create(2)};
    struct mimi_model m;
    struct mimi_batch b;
    memset(&m, 0, sizeof m), memset(&b, 0, sizeof b);
    m.cpu = &cpu, b.model = &m;
    const size_t n = ((size_t)1 << 19) + 77;  // 2 MB of floats and a ragged end
    float *src = malloc(sizeof(float) * n), *dst = malloc(sizeof(float) * n + 64);
    CHECK(cpu.pool && src && dst);
    if (!cpu.pool || !src || !dst) return;
    for (size_t i = 0; i < n; i++) src[i] = test_rng_float() - 0.5f;
    size_t wrong = 0;
    for (int off = 0; off < 16; off += 5) {  // destination offsets of 0, 5, 10 and 15 bytes
        char *d = (char *)dst + off;
        memset(dst, 0, sizeof(float) * n + 64);
        mimi_host_copy(&m, d, src, sizeof(float) * n - 3);
        wrong += memcmp(d, src, sizeof(float) * n - 3) != 0 || d[sizeof(float) * n - 3] != 0;
    }
    memset(dst, 0, sizeof(float) * n);
    CHECK_EQ(mimi_batch_copy_finite(&b, dst, src, n, 0, "sample"), MIMI_OK);
    wrong += memcmp(dst, src, sizeof(float) * n) != 0;
    const size_t bad[3] = {n / 2, n / 2 + 1, n - 1};  // at the threads' meeting point, after it, last
    for (int k = 0; k < 3; k++) {
        float keep = src[bad[k]], keep2 = src[n - 2];
        src[bad[k]] = k == 1 ? INFINITY : NAN;
        if (bad[k] < n - 2) src[n - 2] = NAN;
        CHECK_EQ(mimi_batch_copy_finite(&b, dst, src, n, 0, "sample"), MIMI_EINVAL);
        char want[64];
        snprintf(want, sizeof want, "sample value %zu is", bad[k]);
        CHECK(strstr(b.errmsg, want) != NULL);
        // a piece of a larger input names the value by its place in the whole input
        CHECK_EQ(mimi_batch_copy_finite(&b, dst, src, n, 1000, "sample"), MIMI_EINVAL);
        snprintf(want, sizeof want, "sample value %zu is", bad[k] + 1000);
        CHECK(strstr(b.errmsg, want) != NULL);
        src[bad[k]] = keep, src[n - 2] = keep2;
    }
    printf("  host copies on 2 threads, %zu floats: %zu wrong\n", n, wrong);
    CHECK_EQ(wrong, 0);
    free(src), free(dst);
    mimi_pool_destroy(cpu.pool);
}

int main(int argc, char **argv) {
    test_init(argc, argv);
    test_rng_seed(test_seed);
    if (argc > 1 && !strcmp(argv[1], "model")) {
        test_model();
        return test_summary();
    }
    if (argc > 1 && !strcmp(argv[1], "fidelity")) {
        test_fidelity();
        return test_summary();
    }
    int any = 0;
    for (int i = 0; i < 3; i++) {
        const struct mimi_kernels *k = mimi_kernels_get(ISAS[i]);
        if (!k) continue;
        any = 1;
        printf("# kernels %s (%d floats per vector)\n", k->name, k->width);
        test_gemm(k);
        test_conv(k);
        test_elementwise(k);
        test_layer_norm(k);
        test_attend(k);
        test_threads(k);
    }
    test_pool_start();
    test_host_copies();
    if (!any) SKIP("no SIMD kernel set is compiled in for this CPU");
    return test_summary();
}
