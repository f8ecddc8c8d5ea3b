/*
 * test_gpu.c - the CUDA backend against the CPU backend and against itself (label gpu; exits 77
 * without a device). Reference parity on the GPU is test_golden with its `cuda` argument.
 *
 * Cases: streaming encode and decode, GPU vs CPU (codes, taps, PCM); batch slots stepped in
 * subsets vs lone GPU streams; reset; submit/collect vs synchronous steps; decode from codes in
 * device memory (offset and stride, a bad code that must not advance its slot); the per-op
 * profile; the fast modes' (TF32, TF32 with bf16 KV rings, bf16 products) fidelity, measured and
 * printed, and the bf16 operands' ops (im2col, conversion, product) against their rounding; many
 * signals in one whole-signal call vs one at a time; the lanes a model keeps between
 * whole-signal calls (same results, mimi_model_trim, a batch made by freeing them) and
 * whole-signal calls from several threads on one model.
 *
 * usage: test_gpu
 */
#include <pthread.h>

#include "mimi.h"
#include "safetensors.h"
#include "test.h"
#include "bad_samples.h"
#include "rows_case.h"
#ifdef MIMI_TEST_CUDA_RUNTIME
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "cuda/ops.h"
#include "gpu.h"
#include "internal.h"
#include "nn/ops.h"
#endif

#define FRAME 1920
#define N_Q 8
#define FRAMES 24
#define TOL 1e-4

static struct mimi_model *cpu, *gpu, *gpu_fast, *gpu_bf16kv, *gpu_bf16, *gpu_int8kv;
static float *clip;  // dev_speech_en, at least FRAMES + 3 * 7 frames
static int64_t clip_frames;

// ---- helpers ----

// The library's error lines, so that a failed call in the log says why (the tests that feed bad
// input on purpose add expected lines).
static char last_error[512];
static void log_errors(void *user, int level, const char *msg) {
    (void)user;
    if (level != MIMI_LOG_ERROR) return;
    fprintf(stderr, "  (library: %s)\n", msg);
    snprintf(last_error, sizeof last_error, "%s", msg);
}

// The strict GPU model runs with two host threads: large steps split their staging copies; the
// CPU model with eight (its results do not depend on them).
static struct mimi_model *load(int backend, int precision) {
    struct mimi_model_params mp;
    mimi_model_params_default(&mp);
    mp.log = log_errors;
    mp.backend = backend;
    mp.precision = precision;
    if (backend == MIMI_BACKEND_CUDA && precision == MIMI_PRECISION_STRICT) mp.n_threads = 2;
    if (backend == MIMI_BACKEND_CPU) mp.n_threads = 8;
    int rc;
    struct mimi_model *m = mimi_model_load(MIMI_TEST_MODELS "/native.safetensors", &mp, &rc);
    if (!m) SKIP("no synthetic model or no device: %s", mimi_strerror(rc));
    return m;
}

// Taps accumulated over a stream: (channels, steps) per name, steps appended.
#define N_TAPS 3
struct taps {
    const char *names[N_TAPS];
    float *data[N_TAPS];
    int channels[N_TAPS], steps[N_TAPS], cap;
};

static void on_tap(void *user, const char *name, const float *data, int channels, int steps) {
    struct taps *t = user;
    for (int i = 0; i < N_TAPS; i++) {
        if (strcmp(name, t->names[i])) continue;
        if (!t->data[i]) t->data[i] = calloc((size_t)channels * t->cap, sizeof(float));
        t->channels[i] = channels;
        for (int c = 0; c < channels; c++)
            for (int s = 0; s < steps && t->steps[i] + s < t->cap; s++)
                t->data[i][(size_t)c * t->cap + t->steps[i] + s] = data[(size_t)c * steps + s];
        t->steps[i] += steps;
    }
}

static double rel_l2(const float *a, const float *b, size_t n) { return test_rel_l2(a, b, n); }

// Streams FRAMES frames of the clip through an encoder of `m`; codes (FRAMES, N_Q).
static void encode_stream(struct mimi_model *m, int32_t *codes, struct taps *t) {
    struct mimi_stream_params sp;
    mimi_stream_params_default(&sp);
    sp.n_codebooks = N_Q;
    if (t) {
        sp.tap = on_tap;
        sp.tap_user = t;
    }
    struct mimi_encoder *e = mimi_encoder_create(m, &sp, NULL);
    CHECK(e != NULL);
    if (!e) return;
    for (int f = 0; f < FRAMES; f++) CHECK_EQ(mimi_encoder_step(e, clip + (size_t)f * FRAME, codes + f * N_Q), MIMI_OK);
    mimi_encoder_destroy(e);
}

static void decode_stream(struct mimi_model *m, const int32_t *codes, float *pcm) {
    struct mimi_stream_params sp;
    mimi_stream_params_default(&sp);
    sp.n_codebooks = N_Q;
    struct mimi_decoder *d = mimi_decoder_create(m, &sp, NULL);
    CHECK(d != NULL);
    if (!d) return;
    for (int f = 0; f < FRAMES; f++) CHECK_EQ(mimi_decoder_step(d, codes + f * N_Q, pcm + (size_t)f * FRAME), MIMI_OK);
    mimi_decoder_destroy(d);
}

static double code_agreement(const int32_t *a, const int32_t *b, int n, int *semantic_equal) {
    int eq = 0;
    *semantic_equal = 1;
    for (int i = 0; i < n; i++) {
        eq += a[i] == b[i];
        if (i % N_Q == 0 && a[i] != b[i]) *semantic_equal = 0;
    }
    return (double)eq / n;
}

// ---- the products alone ----

#ifdef MIMI_TEST_CUDA_RUNTIME
// C (m, n) = op(A) op(B) + beta C in column-major terms (struct op_gemm), in double, then GELU
// as the library's CPU reference rounds it.
static void gemm_reference(const struct op_gemm *g, const float *A, const float *B, float *C) {
    for (int j = 0; j < g->n; j++)
        for (int i = 0; i < g->m; i++) {
            double v = 0.0;
            for (int p = 0; p < g->k; p++) {
                const double a = g->transa ? A[p + (size_t)i * g->lda] : A[i + (size_t)p * g->lda];
                const double b = g->transb ? B[j + (size_t)p * g->ldb] : B[p + (size_t)j * g->ldb];
                v += a * b;
            }
            float *c = C + i + (size_t)j * g->ldc;
            *c = (float)(g->beta != 0.0f ? v + (double)g->beta * *c : v);  // beta 0: C is not read (BLAS)
            if (g->gelu) mimi_gelu(c, 1);
        }
}

// One product of the skinny kernels on the device against gemm_reference: shape (m, n, k),
// `small` columns on the small side (the convs' form: small A; else the linears': small B).
static void product_case(int small_a, int S, int J, int K, int ld, float beta, int gelu) {
    struct op_gemm g = {0};
    g.k = K, g.beta = beta, g.gelu = gelu;
    if (small_a) g.transa = 0, g.m = S, g.n = J, g.lda = S, g.ldb = ld, g.ldc = S;  // x (S, K), W rows of ld
    else g.transa = 1, g.m = J, g.n = S, g.lda = ld, g.ldb = K, g.ldc = J;         // W rows of ld, x (K, S)
    const size_t na = small_a ? (size_t)S * K : (size_t)J * ld, nb = small_a ? (size_t)J * ld : (size_t)K * S,
                 nc = (size_t)S * J;
    float *A = malloc(sizeof(float) * na), *Bm = malloc(sizeof(float) * nb), *C = malloc(sizeof(float) * nc),
          *R = malloc(sizeof(float) * nc);
    for (size_t i = 0; i < na; i++) A[i] = 0.5f * test_rng_float();
    for (size_t i = 0; i < nb; i++) Bm[i] = 0.5f * test_rng_float();
    for (size_t i = 0; i < nc; i++) C[i] = R[i] = 0.5f * test_rng_float() + 0.5f;
    float *dA = NULL, *dB = NULL, *dC = NULL;
    CHECK_EQ(cudaMalloc((void **)&dA, sizeof(float) * na), cudaSuccess);
    CHECK_EQ(cudaMalloc((void **)&dB, sizeof(float) * nb), cudaSuccess);
    CHECK_EQ(cudaMalloc((void **)&dC, sizeof(float) * nc), cudaSuccess);
    cudaMemcpy(dA, A, sizeof(float) * na, cudaMemcpyHostToDevice);
    cudaMemcpy(dB, Bm, sizeof(float) * nb, cudaMemcpyHostToDevice);
    cudaMemcpy(dC, C, sizeof(float) * nc, cudaMemcpyHostToDevice);
    g.a = dA, g.b = dB, g.c = dC;
    char msg[256] = "";
    struct gpu_exec ex = {NULL, NULL, MIMI_PRECISION_STRICT, msg, sizeof msg, 0, NULL, NULL, 0};
    const int rc = mimi_cuda_gemm(&g, &ex);
    CHECK_EQ(cudaDeviceSynchronize(), cudaSuccess);
    cudaMemcpy(C, dC, sizeof(float) * nc, cudaMemcpyDeviceToHost);
    gemm_reference(&g, A, Bm, R);
    const double e = rel_l2(C, R, nc);
    printf("  product %s %d x %d x %d%s%s: rc %d, rel_l2 %.2e %s\n", small_a ? "conv form" : "linear form", J, S, K,
           beta != 0.0f ? ", beta 1" : "", gelu ? ", GELU" : "", rc, e, msg);
    CHECK_EQ(rc, MIMI_OK);
    CHECK(e <= 1e-5);  // f32 sums in another order; a wrong row, column or layout gives ~1
    cudaFree(dA), cudaFree(dB), cudaFree(dC);
    free(A), free(Bm), free(C), free(R);
}

// The skinny kernels over the shapes that pick each form: the rows kernel (at most 8 columns,
// 1 M weights or more, x within 96 KB, including exactly 48 KB of x and odd column counts and
// reductions), and skinny_kernel around it (more columns, fewer weights, x too large).
static void test_products(void) {
    test_rng_seed(test_seed);  // the values follow the printed seed
    product_case(1, 2, 1024, 8193, 8196, 0.0f, 0);  // one stream's encoder downsampling: rows
    product_case(1, 2, 8192, 1024, 1024, 0.0f, 0);  // the decoder's transposed conv: rows
    product_case(1, 6, 512, 2048, 2048, 0.0f, 0);   // 48 KB of x plus the static sums: rows
    product_case(1, 3, 700, 4097, 4100, 1.0f, 0);   // odd columns, a partial float4: rows
    product_case(1, 8, 512, 2049, 2052, 0.0f, 0);   // eight columns: rows
    product_case(1, 4, 512, 8193, 8196, 0.0f, 0);   // x past 96 KB: skinny_kernel
    product_case(1, 16, 256, 1024, 1024, 0.0f, 0);  // sixteen columns: skinny_kernel
    product_case(1, 2, 100, 333, 336, 0.0f, 0);     // a small product: skinny_kernel
    product_case(0, 2, 2048, 512, 512, 0.0f, 1);    // a linear with GELU, contiguous x: rows
    product_case(0, 5, 2048, 600, 600, 1.0f, 0);    // odd columns, accumulating: rows
    product_case(0, 5, 1536, 512, 512, 0.0f, 0);    // under 1 M weights: skinny_kernel
}

// ---- MIMI_PRECISION_FAST_BF16's operands ----

// The bfloat16 value whose bits are h.
static double bf16_value(uint16_t h) {
    const uint32_t u = (uint32_t)h << 16;
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

// One im2col over random x and histories (row 1 a padding row), ELU on, in f32 and in bf16: the
// bf16 matrix must be the f32 one rounded by mimi_to_bf16, every value and the rows of ones, but
// for the few that the fast ELU puts one bf16 step away.
static void im2col_bf16_case(int c_in, int R, int T, int K, int S) {
    const int H = K - S, ones = 3;
    const size_t N = (size_t)R * (T / S), n = ((size_t)c_in * K + ones) * N, stride = (size_t)c_in * H + 32;
    const size_t nx = (size_t)c_in * R * T;
    float *x = malloc(sizeof(float) * nx), *state = calloc(stride * R, sizeof(float));
    float *col = malloc(sizeof(float) * n);
    uint16_t *col16 = malloc(sizeof(uint16_t) * n);
    int32_t row_slot[64];
    CHECK(x && state && col && col16 && R <= 64);
    if (!x || !state || !col || !col16 || R > 64) return;
    for (size_t i = 0; i < nx; i++) x[i] = 2.0f * test_rng_float() - 1.0f;
    for (int r = 0; r < R; r++) {
        row_slot[r] = r == 1 ? -1 : r;
        ((int32_t *)state)[r * stride] = 1;  // started
        for (size_t i = 0; i < (size_t)c_in * H; i++) state[r * stride + 32 + i] = test_rng_float() - 0.5f;
    }
    float *dx = NULL, *dstate = NULL, *dcol = NULL, *dcol16 = NULL;
    int32_t *drs = NULL;
    CHECK_EQ(cudaMalloc((void **)&dx, sizeof(float) * nx), cudaSuccess);
    CHECK_EQ(cudaMalloc((void **)&dstate, sizeof(float) * stride * R), cudaSuccess);
    CHECK_EQ(cudaMalloc((void **)&dcol, sizeof(float) * n), cudaSuccess);
    CHECK_EQ(cudaMalloc((void **)&dcol16, sizeof(uint16_t) * n), cudaSuccess);
    CHECK_EQ(cudaMalloc((void **)&drs, sizeof(int32_t) * R), cudaSuccess);
    cudaMemcpy(dx, x, sizeof(float) * nx, cudaMemcpyHostToDevice);
    cudaMemcpy(dstate, state, sizeof(float) * stride * R, cudaMemcpyHostToDevice);
    cudaMemcpy(drs, row_slot, sizeof(int32_t) * R, cudaMemcpyHostToDevice);
    struct op_im2col a = {dx, dcol, dstate + 32, (const int32_t *)dstate, drs, stride, c_in, K, S, H, T, R, 1, 0,
                          ones, 0, 0, NULL};
    char msg[256] = "";
    struct gpu_exec ex = {NULL, NULL, MIMI_PRECISION_FAST_BF16, msg, sizeof msg, 0, NULL, NULL, 0};
    CHECK_EQ(mimi_cuda_im2col(&a, &ex), MIMI_OK);
    a.col = dcol16, a.col_bf16 = 1;
    CHECK_EQ(mimi_cuda_im2col(&a, &ex), MIMI_OK);
    CHECK_EQ(cudaDeviceSynchronize(), cudaSuccess);
    cudaMemcpy(col, dcol, sizeof(float) * n, cudaMemcpyDeviceToHost);
    cudaMemcpy(col16, dcol16, sizeof(uint16_t) * n, cudaMemcpyDeviceToHost);
    // the bf16 matrix's ELU (elu_bf16) may round to the next bf16 value; nothing further
    size_t step = 0, differ = 0;
    for (size_t i = 0; i < n; i++) {
        const int d = (int)col16[i] - (int)mimi_to_bf16(col[i]);
        step += d == 1 || d == -1;
        differ += d > 1 || d < -1;
    }
    printf("  im2col in bf16, %d channels, %d rows x %d, K %d S %d: of %zu values %zu one bf16 step from f32 rounded, "
           "%zu further %s\n",
           c_in, R, T, K, S, n, step, differ, msg);
    CHECK_EQ(differ, 0);
    CHECK(step <= n / 100);
    cudaFree(dx), cudaFree(dstate), cudaFree(dcol), cudaFree(dcol16), cudaFree(drs);
    free(x), free(state), free(col), free(col16);
}

// A bf16 product (cuBLAS, f32 accumulation) against a double product of the same bf16 values,
// its output poisoned before, and the conversion op (EW_BF16) against mimi_to_bf16 over a length
// that is not a multiple of 4.
static void gemm_bf16_case(void) {
    struct op_gemm g = {0};
    g.m = 4096, g.n = 48, g.k = 136, g.lda = g.m, g.ldb = g.k, g.ldc = g.m, g.ab_bf16 = 1;
    const size_t na = (size_t)g.m * g.k, nb = (size_t)g.k * g.n, nc = (size_t)g.m * g.n;
    float *A = malloc(sizeof(float) * na), *Bm = malloc(sizeof(float) * nb), *C = malloc(sizeof(float) * nc);
    float *R = malloc(sizeof(float) * nc);
    uint16_t *A16 = malloc(sizeof(uint16_t) * na), *B16 = malloc(sizeof(uint16_t) * nb);
    cublasHandle_t h = NULL;
    float *dA = NULL, *dB = NULL, *dC = NULL;
    CHECK(A && Bm && C && R && A16 && B16);
    CHECK_EQ(cublasCreate(&h), CUBLAS_STATUS_SUCCESS);
    CHECK_EQ(cudaMalloc((void **)&dA, sizeof(float) * na), cudaSuccess);
    CHECK_EQ(cudaMalloc((void **)&dB, sizeof(float) * nb), cudaSuccess);
    CHECK_EQ(cudaMalloc((void **)&dC, sizeof(float) * nc), cudaSuccess);
    if (!A || !Bm || !C || !R || !A16 || !B16 || !h || !dA || !dB || !dC) return;
    for (size_t i = 0; i < na; i++) A[i] = test_rng_float() - 0.5f;
    for (size_t i = 0; i < nb; i++) Bm[i] = test_rng_float() - 0.5f;
    // A converted on the device by the op, B on the host
    for (size_t i = 0; i < nb; i++) B16[i] = mimi_to_bf16(Bm[i]);
    cudaMemcpy(dB, B16, sizeof(uint16_t) * nb, cudaMemcpyHostToDevice);
    char msg[256] = "";
    struct gpu_exec ex = {NULL, h, MIMI_PRECISION_FAST_BF16, msg, sizeof msg, 0, NULL, NULL, 0};
    float *dX = NULL;
    CHECK_EQ(cudaMalloc((void **)&dX, sizeof(float) * na), cudaSuccess);
    cudaMemcpy(dX, A, sizeof(float) * na, cudaMemcpyHostToDevice);
    const size_t odd = na - 3;  // the last values through the kernel's scalar tail
    for (int elu = 1; elu >= 0; elu--) {
        struct op_pointwise cv = {dA, dX, NULL, 1, odd, elu ? EW_ELU_BF16 : EW_BF16, 0};
        CHECK_EQ(cudaMemset(dA, 0, sizeof(float) * na), cudaSuccess);
        CHECK_EQ(mimi_cuda_pointwise(&cv, &ex), MIMI_OK);
        CHECK_EQ(cudaDeviceSynchronize(), cudaSuccess);
        cudaMemcpy(A16, dA, sizeof(uint16_t) * na, cudaMemcpyDeviceToHost);
        size_t differ = 0;
        for (size_t i = 0; i < odd; i++) {
            float v = A[i];
            if (elu) mimi_elu(&v, 1);
            // the fast ELU (elu_bf16) may round to the next bf16 value: one step allowed
            const int d = (int)A16[i] - (int)mimi_to_bf16(v);
            differ += elu ? d > 1 || d < -1 : d != 0;
        }
        for (size_t i = odd; i < na; i++) differ += A16[i] != 0;  // past n: untouched
        printf("  bf16 conversion%s of %zu values: %zu differ from mimi_to_bf16 %s\n", elu ? " with the ELU (within a step)" : "",
               odd, differ, msg);
        CHECK_EQ(differ, 0);
    }
    for (size_t i = odd; i < na; i++) A16[i] = mimi_to_bf16(A[i]);
    cudaMemcpy(dA, A16, sizeof(uint16_t) * na, cudaMemcpyHostToDevice);
    for (size_t i = 0; i < na; i++) A[i] = (float)bf16_value(A16[i]);
    for (size_t i = 0; i < nb; i++) Bm[i] = (float)bf16_value(B16[i]);
    g.a = dA, g.b = dB, g.c = dC;
    // C poisoned with NaN: with beta = 0 the product must write every output and read none
    // (the plans' products land in scratch that earlier ops left as they were)
    CHECK_EQ(cudaMemset(dC, 0xFF, sizeof(float) * nc), cudaSuccess);
    const int rc = mimi_cuda_gemm(&g, &ex);
    CHECK_EQ(cudaDeviceSynchronize(), cudaSuccess);
    cudaMemcpy(C, dC, sizeof(float) * nc, cudaMemcpyDeviceToHost);
    gemm_reference(&g, A, Bm, R);
    const double e = rel_l2(C, R, nc);
    size_t nans = 0, far = 0, first = nc;  // outputs left unwritten (the poison), or far from the reference
    for (size_t i = 0; i < nc; i++) {
        const int bad = C[i] != C[i] || fabsf(C[i] - R[i]) > 1e-3f * (1.0f + fabsf(R[i]));
        nans += C[i] != C[i], far += bad;
        if (bad && first == nc) first = i;
    }
    printf("  bf16 product %d x %d x %d: rc %d, rel_l2 %.2e against the rounded operands; %zu NaN, %zu far", g.m, g.n,
           g.k, rc, e, nans, far);
    if (far) printf(" (the first at row %zu, column %zu)", first % g.m, first / g.m);
    printf(" %s\n", msg);
    CHECK_EQ(rc, MIMI_OK);
    CHECK(e <= 1e-5);
    cublasDestroy(h), cudaFree(dA), cudaFree(dB), cudaFree(dC), cudaFree(dX);
    free(A), free(Bm), free(C), free(R), free(A16), free(B16);
}

// EW_ELU_BF16 with rows of ones after the channels (the resblock's 1x1 input in FAST_BF16): the
// channels within one bf16 step of mimi_to_bf16(elu), then exactly 1.0, over a length that is a
// multiple of 4 (8-byte stores) and one that is not.
static void ones_bf16_case(int channels, int cols, int ones) {
    const size_t n = (size_t)channels * cols, total = n + (size_t)ones * cols;
    float *x = malloc(sizeof(float) * n), *dx = NULL, *dy = NULL;
    uint16_t *y = malloc(sizeof(uint16_t) * (total + 8));
    CHECK(x && y);
    CHECK_EQ(cudaMalloc((void **)&dx, sizeof(float) * n), cudaSuccess);
    CHECK_EQ(cudaMalloc((void **)&dy, sizeof(uint16_t) * (total + 8)), cudaSuccess);
    if (!x || !y || !dx || !dy) return;
    for (size_t i = 0; i < n; i++) x[i] = 4.0f * (test_rng_float() - 0.5f);
    cudaMemcpy(dx, x, sizeof(float) * n, cudaMemcpyHostToDevice);
    cudaMemset(dy, 0, sizeof(uint16_t) * (total + 8));
    char msg[256] = "";
    struct gpu_exec ex = {NULL, NULL, MIMI_PRECISION_FAST_BF16, msg, sizeof msg, 0, NULL, NULL, 0};
    struct op_pointwise cv = {dy, dx, NULL, channels, (size_t)cols, EW_ELU_BF16, ones};
    CHECK_EQ(mimi_cuda_pointwise(&cv, &ex), MIMI_OK);
    CHECK_EQ(cudaDeviceSynchronize(), cudaSuccess);
    cudaMemcpy(y, dy, sizeof(uint16_t) * (total + 8), cudaMemcpyDeviceToHost);
    size_t differ = 0;
    for (size_t i = 0; i < n; i++) {
        float v = x[i];
        mimi_elu(&v, 1);
        const int d = (int)y[i] - (int)mimi_to_bf16(v);
        differ += d > 1 || d < -1;
    }
    for (size_t i = n; i < total; i++) differ += y[i] != mimi_to_bf16(1.0f);
    for (size_t i = total; i < total + 8; i++) differ += y[i] != 0;  // past the ones: untouched
    printf("  bf16 conversion with the ELU, %d x %d and %d rows of ones: %zu values wrong %s\n", channels, cols, ones,
           differ, msg);
    CHECK_EQ(differ, 0);
    cudaFree(dx), cudaFree(dy), free(x), free(y);
}

// A long step's attention over bf16 rings on bf16 tensor cores (mma_bf16: attention_mma.cu)
// against the f32 tiled kernel over the same rings: 3 rows of 128 query steps, one slot deep in
// its signal (a full window), one at its start (a partly empty ring), one padding row (zeros).
static void attention_mma_case(void) {
    enum { R = 3, STEPS = 128, D = 512, HEADS = 8, HD = 64, CONTEXT = 250, RING = 400 };
    const size_t stride = (size_t)RING * D + RING + 4;  // keys and values (bf16), positions, counter
    const size_t n_qkv = (size_t)R * STEPS * 3 * D, n_out = (size_t)R * STEPS * D;
    float *qkv = malloc(sizeof(float) * n_qkv), *state = calloc(2 * stride, sizeof(float));
    float *o32 = malloc(sizeof(float) * n_out), *o16 = malloc(sizeof(float) * n_out);
    float *dqkv = NULL, *dout = NULL, *dstate = NULL;
    int32_t *drs = NULL;
    const int32_t row_slot[R] = {1, 0, -1}, next_pos[2] = {0, 300};
    CHECK(qkv && state && o32 && o16);
    CHECK_EQ(cudaMalloc((void **)&dqkv, sizeof(float) * n_qkv), cudaSuccess);
    CHECK_EQ(cudaMalloc((void **)&dout, sizeof(float) * n_out), cudaSuccess);
    CHECK_EQ(cudaMalloc((void **)&dstate, sizeof(float) * 2 * stride), cudaSuccess);
    CHECK_EQ(cudaMalloc((void **)&drs, sizeof row_slot), cudaSuccess);
    if (!qkv || !state || !o32 || !o16 || !dqkv || !dout || !dstate || !drs) return;
    for (size_t i = 0; i < n_qkv; i++) qkv[i] = 3.0f * (test_rng_float() - 0.5f);
    for (int slot = 0; slot < 2; slot++) {
        float *st = state + slot * stride;
        uint16_t *kv = (uint16_t *)st;  // keys, then values: RING * D bf16 each
        int32_t *pos = (int32_t *)(st + (size_t)RING * D);
        for (size_t i = 0; i < (size_t)2 * RING * D; i++) kv[i] = mimi_to_bf16(2.0f * (test_rng_float() - 0.5f));
        for (int j = 0; j < RING; j++) pos[j] = -1;
        // the window of the step's last query, and the step's own positions
        for (int32_t p = next_pos[slot] - CONTEXT + 1; p < next_pos[slot] + STEPS; p++)
            if (p >= 0) pos[p % RING] = p;
        pos[RING + 0] = next_pos[slot];  // the counter, right after the positions
    }
    cudaMemcpy(dqkv, qkv, sizeof(float) * n_qkv, cudaMemcpyHostToDevice);
    cudaMemcpy(dstate, state, sizeof(float) * 2 * stride, cudaMemcpyHostToDevice);
    cudaMemcpy(drs, row_slot, sizeof row_slot, cudaMemcpyHostToDevice);
    char msg[256] = "";
    struct gpu_exec ex = {NULL, NULL, MIMI_PRECISION_FAST_BF16, msg, sizeof msg, 0, NULL, NULL, 0};
    struct op_attention a = {dqkv, dout, dstate, dstate + (size_t)RING * D / 2, (int32_t *)(dstate + (size_t)RING * D),
                             (int32_t *)(dstate + (size_t)RING * D + RING), drs, NULL, stride, R, STEPS, D, HEADS, HD,
                             RING, CONTEXT, 0, 1, 0, 0};
    for (int mma = 0; mma < 2; mma++) {
        a.mma_bf16 = mma;
        cudaMemset(dout, 0xFF, sizeof(float) * n_out);  // NaN: every value must be written
        CHECK_EQ(mimi_cuda_attention(&a, &ex), MIMI_OK);
        CHECK_EQ(cudaDeviceSynchronize(), cudaSuccess);
        cudaMemcpy(mma ? o16 : o32, dout, sizeof(float) * n_out, cudaMemcpyDeviceToHost);
    }
    size_t pad = 0;
    for (size_t i = (size_t)2 * STEPS * D; i < n_out; i++) pad += o16[i] != 0.0f || o32[i] != 0.0f;
    const double deep = rel_l2(o16, o32, (size_t)STEPS * D), start = rel_l2(o16 + (size_t)STEPS * D, o32 + (size_t)STEPS * D,
                                                                           (size_t)STEPS * D);
    printf("  attention on bf16 tensor cores vs f32 tiles, %d x %d steps: rel_l2 %.2e (full window), %.2e (ring "
           "start), %zu padding values not 0 %s\n", R, STEPS, deep, start, pad, msg);
    CHECK(deep > 0 && deep < 1e-2);
    CHECK(start > 0 && start < 1e-2);
    CHECK_EQ(pad, 0);
    cudaFree(dqkv), cudaFree(dout), cudaFree(dstate), cudaFree(drs);
    free(qkv), free(state), free(o32), free(o16);
}

// The decoder's last conv inside the top resblock's kernel (op_resblock.last) against the same
// resblock storing y, then the narrow conv and the carry: 3 rows (a padding row among them, one
// slot deep in its signal with a history, one fresh) of T columns. In MIMI_PRECISION_FAST both
// take the same ELU and summation order: outputs and the carried history agree bit for bit. In
// FAST_BF16 the fused kernel takes elu_bf16 on every column, the narrow one elu_f on its first
// tile and in the history (within about 1e-7 of each other): gated at rel. L2 1e-2.
static void resblock_last_case(int precision, int T) {
    enum { R = 3, C = 64, HID = 32, K = 3 };
    const size_t stride = 260, nx = (size_t)C * R * T;  // a slot: the resblock's history, the last conv's, started
    const size_t n1 = (size_t)(C * K + 1) * HID, n2 = (size_t)(HID + 1) * C, nl = C * K + 1;
    float *x = malloc(sizeof(float) * nx), *w = malloc(sizeof(float) * (n1 + n2 + nl)), *state = calloc(2 * stride, sizeof(float));
    float *out[2] = {malloc(sizeof(float) * R * T), malloc(sizeof(float) * R * T)}, *hist[2] = {calloc(2 * stride, 4), calloc(2 * stride, 4)};
    float *dx = NULL, *dy = NULL, *dw = NULL, *dstate = NULL, *dout = NULL, *dedges = NULL;
    int32_t *drs = NULL;
    const int32_t row_slot[R] = {1, -1, 0};
    CHECK(x && w && state && out[0] && out[1] && hist[0] && hist[1]);
    CHECK_EQ(cudaMalloc((void **)&dx, sizeof(float) * nx), cudaSuccess);
    CHECK_EQ(cudaMalloc((void **)&dy, sizeof(float) * nx), cudaSuccess);
    CHECK_EQ(cudaMalloc((void **)&dw, sizeof(float) * (n1 + n2 + nl)), cudaSuccess);
    CHECK_EQ(cudaMalloc((void **)&dstate, sizeof(float) * 2 * stride), cudaSuccess);
    CHECK_EQ(cudaMalloc((void **)&dout, sizeof(float) * R * T), cudaSuccess);
    CHECK_EQ(cudaMalloc((void **)&dedges, sizeof(float) * R * GPU_RESBLOCK_EDGES(C, T)), cudaSuccess);
    CHECK_EQ(cudaMalloc((void **)&drs, sizeof row_slot), cudaSuccess);
    if (!x || !w || !state || !out[0] || !out[1] || !hist[0] || !hist[1] || !dx || !dy || !dw || !dstate || !dout ||
        !dedges || !drs)
        return;
    for (size_t i = 0; i < nx; i++) x[i] = 3.0f * (test_rng_float() - 0.5f);
    for (size_t i = 0; i < n1 + n2 + nl; i++) w[i] = 0.3f * (test_rng_float() - 0.5f);
    for (size_t i = 0; i < 2 * C * (K - 1); i++) state[stride + i] = test_rng_float() - 0.5f;  // slot 1's histories
    ((int32_t *)state)[256] = 0, ((int32_t *)state)[stride + 256] = 1;
    cudaMemcpy(dx, x, sizeof(float) * nx, cudaMemcpyHostToDevice);
    cudaMemcpy(dw, w, sizeof(float) * (n1 + n2 + nl), cudaMemcpyHostToDevice);
    cudaMemcpy(drs, row_slot, sizeof row_slot, cudaMemcpyHostToDevice);
    char msg[256] = "";
    struct gpu_exec ex = {NULL, NULL, precision, msg, sizeof msg, 0, NULL, NULL, 0};
    const int fast_elu = precision == MIMI_PRECISION_FAST_BF16;
    const struct op_im2col in = {dx, NULL, dstate, (const int32_t *)(dstate + 256), drs, stride, C, K, 1, K - 1, T, R,
                                 1, 0, 0, 0, fast_elu, NULL};
    struct op_im2col last_in = in;
    last_in.x = dy, last_in.hist = dstate + C * (K - 1);
    for (int fused = 0; fused < 2; fused++) {
        cudaMemcpy(dstate, state, sizeof(float) * 2 * stride, cudaMemcpyHostToDevice);
        cudaMemset(dout, 0xFF, sizeof(float) * R * T);  // NaN: every output must be written
        struct op_resblock rb = {in, dw, dw + n1, dy, HID, fused, {dw + n1 + n2, dout, dstate + C * (K - 1), dedges},
                                 0, {{0}, NULL, 0}, {0, 0, NULL, NULL}};
        CHECK_EQ(mimi_cuda_resblock(&rb, &ex), MIMI_OK);
        if (!fused) {
            struct op_conv conv = {last_in, dw + n1 + n2, dout, 1, C * K + 1, 1, 0, 0, {1, 0, NULL, NULL}, 1, NULL, 0};
            CHECK_EQ(mimi_cuda_conv(&conv, &ex), MIMI_OK);
            CHECK_EQ(mimi_cuda_carry(&last_in, &ex), MIMI_OK);
        }
        CHECK_EQ(cudaDeviceSynchronize(), cudaSuccess);
        cudaMemcpy(out[fused], dout, sizeof(float) * R * T, cudaMemcpyDeviceToHost);
        cudaMemcpy(hist[fused], dstate, sizeof(float) * 2 * stride, cudaMemcpyDeviceToHost);
    }
    size_t differ = 0, hist_differ = 0, nans = 0;
    for (size_t i = 0; i < (size_t)R * T; i++) differ += out[0][i] != out[1][i], nans += out[1][i] != out[1][i];
    for (size_t i = 0; i < 2 * stride; i++) hist_differ += hist[0][i] != hist[1][i];
    const double rel = rel_l2(out[1], out[0], (size_t)R * T), hrel = rel_l2(hist[1], hist[0], 2 * stride);
    printf("  resblock with the last conv (%s, T %d) vs resblock, narrow conv, carry: %zu of %d outputs differ "
           "(rel_l2 %.2e), history rel_l2 %.2e (%zu values differ), %zu NaN %s\n",
           fast_elu ? "bf16" : "TF32", T, differ, R * T, rel, hrel, hist_differ, nans, msg);
    CHECK_EQ(nans, 0);
    if (!fast_elu) {
        CHECK_EQ(differ, 0);
        CHECK_EQ(hist_differ, 0);
    } else {
        CHECK(rel < 1e-2 && hrel < 1e-2);
    }
    cudaFree(dx), cudaFree(dy), cudaFree(dw), cudaFree(dstate), cudaFree(dout), cudaFree(dedges), cudaFree(drs);
    free(x), free(w), free(state), free(out[0]), free(out[1]), free(hist[0]), free(hist[1]);
}

// Column u (from -2) of [history | elu(x)] of channel i and row r, x (C, R, T) and each slot's
// history (C, 2) at state + slot * stride (zeros on a padding row): resblock_step_case's window.
static float step_window(const float *x, const float *state, const int32_t *row_slot, size_t stride, int R, int T,
                         int i, int r, int u) {
    if (u < 0) return row_slot[r] < 0 ? 0.0f : state[row_slot[r] * stride + (size_t)i * 2 + u + 2];
    float v = x[((size_t)i * R + r) * T + u];
    mimi_elu(&v, 1);
    return v;
}

// A small step's resblock kernel (op_resblock.step) over 3 rows (a padding row among them, one
// slot deep in its signal with a history, one fresh) of T columns, C channels:
// - against a host reference in double (both ELUs from mimi_elu): rel. L2 below 1e-6;
// - at 64 channels against op_resblock's f32 kernel and its carry, which sum in the same order:
//   the outputs and the staged history against the carried one bit for bit;
// - with elu_out, the outputs against the ELU of the first run's (host ELU, 1e-6);
// - the staged history against the window's newest two columns, exactly;
// and the kernel refuses a block it does not take.
static void resblock_step_case(int C, int T) {
    enum { R = 3, K = 3, H = K - 1 };
    const int HID = C / 2;
    const size_t stride = (size_t)C * H + 4, nx = (size_t)C * R * T;  // a slot: the history, its started flag
    const size_t n1 = (size_t)(C * K + 1) * HID, n2 = (size_t)(HID + 1) * C, nt = (size_t)C * R * H;
    float *x = malloc(sizeof(float) * nx), *w = malloc(sizeof(float) * (n1 + n2)), *state = calloc(2 * stride, 4);
    float *y[3] = {malloc(sizeof(float) * nx), malloc(sizeof(float) * nx), malloc(sizeof(float) * nx)};
    float *tail = malloc(sizeof(float) * nt), *carried = malloc(sizeof(float) * 2 * stride), *want = malloc(sizeof(float) * nx);
    float *dx = NULL, *dy = NULL, *dw = NULL, *dstate = NULL, *dtail = NULL;
    int32_t *drs = NULL;
    const int32_t row_slot[R] = {1, -1, 0};
    CHECK(x && w && state && y[0] && y[1] && y[2] && tail && carried && want);
    CHECK_EQ(cudaMalloc((void **)&dx, sizeof(float) * nx), cudaSuccess);
    CHECK_EQ(cudaMalloc((void **)&dy, sizeof(float) * nx), cudaSuccess);
    CHECK_EQ(cudaMalloc((void **)&dw, sizeof(float) * (n1 + n2)), cudaSuccess);
    CHECK_EQ(cudaMalloc((void **)&dstate, sizeof(float) * 2 * stride), cudaSuccess);
    CHECK_EQ(cudaMalloc((void **)&dtail, sizeof(float) * nt), cudaSuccess);
    CHECK_EQ(cudaMalloc((void **)&drs, sizeof row_slot), cudaSuccess);
    if (!x || !w || !state || !y[0] || !y[1] || !y[2] || !tail || !carried || !want || !dx || !dy || !dw || !dstate ||
        !dtail || !drs)
        return;
    for (size_t i = 0; i < nx; i++) x[i] = 3.0f * (test_rng_float() - 0.5f);
    for (size_t i = 0; i < n1 + n2; i++) w[i] = 0.3f * (test_rng_float() - 0.5f);
    for (int i = 0; i < C * H; i++) state[stride + i] = test_rng_float() - 0.5f;  // slot 1's history
    ((int32_t *)state)[C * H] = 0, ((int32_t *)state)[stride + C * H] = 1;
    // the host reference: w1t (C*K + 1, HID) and w2t (HID + 1, C) with their bias rows
    for (int r = 0; r < R; r++)
        for (int t = 0; t < T; t++) {
            double h[128];
            for (int j = 0; j < HID; j++) {
                double v = w[(size_t)C * K * HID + j];
                for (int i = 0; i < C; i++)
                    for (int k = 0; k < K; k++) {
                        const int u = t + k - H;  // [history | elu(x)] column
                        const float xv = step_window(x, state, row_slot, stride, R, T, i, r, u);
                        v += (double)w[(size_t)(i * K + k) * HID + j] * xv;
                    }
                float e = (float)v;
                mimi_elu(&e, 1);
                h[j] = e;
            }
            for (int o = 0; o < C; o++) {
                double v = w[n1 + (size_t)HID * C + o];
                for (int j = 0; j < HID; j++) v += (double)w[n1 + (size_t)j * C + o] * h[j];
                const size_t at = ((size_t)o * R + r) * T + t;
                want[at] = (float)(x[at] + v);
            }
        }
    cudaMemcpy(dx, x, sizeof(float) * nx, cudaMemcpyHostToDevice);
    cudaMemcpy(dw, w, sizeof(float) * (n1 + n2), cudaMemcpyHostToDevice);
    cudaMemcpy(drs, row_slot, sizeof row_slot, cudaMemcpyHostToDevice);
    char msg[256] = "";
    struct gpu_exec ex = {NULL, NULL, MIMI_PRECISION_STRICT, msg, sizeof msg, 0, NULL, NULL, 0};
    const struct op_im2col in = {dx, NULL, dstate, (const int32_t *)(dstate + C * H), drs, stride, C, K, 1, H, T, R,
                                 1, 0, 0, 0, 0, NULL};
    // run 0: the step kernel; 1: with elu_out; 2: op_resblock and its carry (64 channels)
    for (int run = 0; run < (C == 64 ? 3 : 2); run++) {
        cudaMemcpy(dstate, state, sizeof(float) * 2 * stride, cudaMemcpyHostToDevice);
        cudaMemset(dy, 0xFF, sizeof(float) * nx);  // NaN: every output must be written
        cudaMemset(dtail, 0xFF, sizeof(float) * nt);
        struct op_resblock rb = {in, dw, dw + n1, dy, HID, 0, {NULL, NULL, NULL, NULL}, 0, {{0}, NULL, 0},
                                 {run < 2, run == 1, run == 0 ? dtail : NULL, NULL}};
        CHECK_EQ(mimi_cuda_resblock(&rb, &ex), MIMI_OK);
        if (run == 2) CHECK_EQ(mimi_cuda_carry(&in, &ex), MIMI_OK);
        CHECK_EQ(cudaDeviceSynchronize(), cudaSuccess);
        cudaMemcpy(y[run], dy, sizeof(float) * nx, cudaMemcpyDeviceToHost);
        if (run == 0) cudaMemcpy(tail, dtail, sizeof(float) * nt, cudaMemcpyDeviceToHost);
        if (run == 2) cudaMemcpy(carried, dstate, sizeof(float) * 2 * stride, cudaMemcpyDeviceToHost);
    }
    size_t nans = 0, tail_wrong = 0, differ = 0, hist_differ = 0;
    for (size_t i = 0; i < nx; i++) nans += y[0][i] != y[0][i];
    const double rel = rel_l2(y[0], want, nx);
    for (size_t i = 0; i < nx; i++) want[i] = y[0][i];
    mimi_elu(want, nx);
    const double rel_elu = rel_l2(y[1], want, nx);
    // the staged history: (C, R, H), the newest H columns of [history | elu(x)]
    for (int i = 0; i < C; i++)
        for (int r = 0; r < R; r++)
            for (int j = 0; j < H; j++) {
                const int u = T - H + j;
                const float v = step_window(x, state, row_slot, stride, R, T, i, r, u);
                const float got = tail[((size_t)i * R + r) * H + j];
                tail_wrong += fabsf(got - v) > 1e-6f * (1.0f + fabsf(v)) || got != got;
                if (C == 64 && row_slot[r] >= 0)
                    hist_differ += memcmp(&got, &carried[row_slot[r] * stride + (size_t)i * H + j], sizeof got) != 0;
            }
    if (C == 64)
        for (size_t i = 0; i < nx; i++) differ += memcmp(&y[0][i], &y[2][i], sizeof(float)) != 0;
    printf("  resblock step kernel (%d channels, T %d): rel_l2 %.2e vs double, %.2e with its ELU; %zu outputs and %zu "
           "history values differ from op_resblock's; %zu staged history values wrong, %zu NaN %s\n", C, T, rel,
           rel_elu, differ, hist_differ, tail_wrong, nans, msg);
    CHECK(rel < 1e-6);
    CHECK(rel_elu < 1e-6);
    CHECK_EQ(nans, 0);
    CHECK_EQ(tail_wrong, 0);
    CHECK_EQ(differ, 0);
    CHECK_EQ(hist_differ, 0);
    // refused: the step form with the last conv, in place, or 256 channels
    struct op_resblock bad = {in, dw, dw + n1, dy, HID, 1, {NULL, NULL, NULL, NULL}, 0, {{0}, NULL, 0}, {1, 0, NULL, NULL}};
    CHECK_EQ(mimi_cuda_resblock(&bad, &ex), MIMI_EUNSUPPORTED);
    bad.has_last = 0, bad.y = dx;
    CHECK_EQ(mimi_cuda_resblock(&bad, &ex), MIMI_EUNSUPPORTED);
    bad.y = dy, bad.in.c_in = 256, bad.hid = 128;
    CHECK_EQ(mimi_cuda_resblock(&bad, &ex), MIMI_EUNSUPPORTED);
    cudaFree(dx), cudaFree(dy), cudaFree(dw), cudaFree(dstate), cudaFree(dtail), cudaFree(drs);
    free(x), free(w), free(state), free(y[0]), free(y[1]), free(y[2]), free(tail), free(carried), free(want);
}

// The encoder's first conv inside the top resblock's kernel (op_resblock.first) against the same
// resblock over x computed here (each output's taps in ascending order from zero, then the bias,
// the order the kernel takes), then the carries of both histories: 3 rows (a padding row among
// them, one slot with histories, one fresh) of T samples. In every precision both read the same
// x: the outputs and the histories must agree bit for bit. So must the step form's in strict (its
// histories staged, not carried).
static void resblock_first_case(int precision, int T) {
    enum { R = 3, C = 64, HID = 32, K = 3, KF = 7, LD = 8 };
    // a slot: the resblock's history (C, K - 1), the first conv's (KF - 1), its started flag at 256
    const size_t stride = 260, nx = (size_t)C * R * T, n1 = (size_t)(C * K + 1) * HID, n2 = (size_t)(HID + 1) * C;
    float *pcm = malloc(sizeof(float) * R * T), *x = malloc(sizeof(float) * nx), *w = malloc(sizeof(float) * (n1 + n2));
    float *wf = malloc(sizeof(float) * C * LD), *state = calloc(2 * stride, sizeof(float));
    float *y[3] = {malloc(sizeof(float) * nx), malloc(sizeof(float) * nx), malloc(sizeof(float) * nx)};
    float *hist[2] = {calloc(2 * stride, sizeof(float)), calloc(2 * stride, sizeof(float))};
    // the step form's staged histories: the block's (C, R, K - 1), then the PCM's (1, R, KF - 1)
    const size_t nt = (size_t)C * R * (K - 1) + R * (KF - 1);
    float *tails = malloc(sizeof(float) * nt);
    float *dpcm = NULL, *dx = NULL, *dy = NULL, *dw = NULL, *dwf = NULL, *dstate = NULL, *dtails = NULL;
    int32_t *drs = NULL;
    const int32_t row_slot[R] = {1, -1, 0};
    CHECK(pcm && x && w && wf && state && y[0] && y[1] && y[2] && hist[0] && hist[1] && tails);
    CHECK_EQ(cudaMalloc((void **)&dtails, sizeof(float) * nt), cudaSuccess);
    CHECK_EQ(cudaMalloc((void **)&dpcm, sizeof(float) * R * T), cudaSuccess);
    CHECK_EQ(cudaMalloc((void **)&dx, sizeof(float) * nx), cudaSuccess);
    CHECK_EQ(cudaMalloc((void **)&dy, sizeof(float) * nx), cudaSuccess);
    CHECK_EQ(cudaMalloc((void **)&dw, sizeof(float) * (n1 + n2)), cudaSuccess);
    CHECK_EQ(cudaMalloc((void **)&dwf, sizeof(float) * C * LD), cudaSuccess);
    CHECK_EQ(cudaMalloc((void **)&dstate, sizeof(float) * 2 * stride), cudaSuccess);
    CHECK_EQ(cudaMalloc((void **)&drs, sizeof row_slot), cudaSuccess);
    if (!pcm || !x || !w || !wf || !state || !y[0] || !y[1] || !y[2] || !hist[0] || !hist[1] || !tails || !dpcm ||
        !dx || !dy || !dw || !dwf || !dstate || !drs || !dtails)
        return;
    for (int i = 0; i < R * T; i++) pcm[i] = 2.0f * (test_rng_float() - 0.5f);
    for (size_t i = 0; i < n1 + n2; i++) w[i] = 0.3f * (test_rng_float() - 0.5f);
    for (int i = 0; i < C * LD; i++) wf[i] = i % LD <= KF ? test_rng_float() - 0.5f : 0.0f;
    for (int i = 0; i < C * (K - 1) + KF - 1; i++) state[stride + i] = test_rng_float() - 0.5f;  // slot 1's histories
    ((int32_t *)state)[256] = 0, ((int32_t *)state)[stride + 256] = 1;
    // x = the first conv over [history | pcm], as the kernel sums it
    for (int r = 0; r < R; r++)
        for (int t = 0; t < T; t++)
            for (int c = 0; c < C; c++) {
                float acc = 0.0f;
                for (int k = 0; k < KF; k++) {
                    const int j = t - (KF - 1) + k;
                    const float v = j >= 0 ? pcm[r * T + j] : row_slot[r] < 0 ? 0.0f
                                                              : state[row_slot[r] * stride + C * (K - 1) + KF - 1 + j];
                    acc = fmaf(wf[c * LD + k], v, acc);
                }
                x[((size_t)c * R + r) * T + t] = acc + wf[c * LD + KF];
            }
    cudaMemcpy(dpcm, pcm, sizeof(float) * R * T, cudaMemcpyHostToDevice);
    cudaMemcpy(dx, x, sizeof(float) * nx, cudaMemcpyHostToDevice);
    cudaMemcpy(dw, w, sizeof(float) * (n1 + n2), cudaMemcpyHostToDevice);
    cudaMemcpy(dwf, wf, sizeof(float) * C * LD, cudaMemcpyHostToDevice);
    cudaMemcpy(drs, row_slot, sizeof row_slot, cudaMemcpyHostToDevice);
    char msg[256] = "";
    struct gpu_exec ex = {NULL, NULL, precision, msg, sizeof msg, 0, NULL, NULL, 0};
    const int fast_elu = precision == MIMI_PRECISION_FAST_BF16;
    const int32_t *started = (const int32_t *)(dstate + 256);
    const struct op_im2col in = {dx, NULL, dstate, started, drs, stride, C, K, 1, K - 1, T, R, 1, 0, 0, 0, fast_elu, NULL};
    const struct op_im2col pin = {dpcm, NULL, dstate + C * (K - 1), started, drs, stride, 1, KF, 1, KF - 1, T, R,
                                  0, 0, 0, 0, fast_elu, NULL};
    // run 0: the resblock over x and both carries; 1: with the first conv, and the PCM's carry;
    // 2: the step form with the first conv, staging both histories instead of carrying them (in
    // strict only: the fast precisions' kernel takes TF32 products, FAST_BF16 bf16 ELUs too, and
    // the step form f32 in all)
    const int runs = precision == MIMI_PRECISION_STRICT ? 3 : 2;
    for (int run = 0; run < runs; run++) {
        cudaMemcpy(dstate, state, sizeof(float) * 2 * stride, cudaMemcpyHostToDevice);
        cudaMemset(dy, 0xFF, sizeof(float) * nx);  // NaN: every output must be written
        cudaMemset(dtails, 0xFF, sizeof(float) * nt);
        struct op_resblock rb = {in, dw, dw + n1, dy, HID, 0, {NULL, NULL, NULL, NULL}, run > 0, {pin, dwf, LD},
                                 {run == 2, 0, run == 2 ? dtails : NULL, run == 2 ? dtails + C * R * (K - 1) : NULL}};
        if (run > 0) rb.in.x = NULL;
        CHECK_EQ(mimi_cuda_resblock(&rb, &ex), MIMI_OK);
        if (run == 0) CHECK_EQ(mimi_cuda_carry(&in, &ex), MIMI_OK);
        if (run < 2) CHECK_EQ(mimi_cuda_carry(&pin, &ex), MIMI_OK);
        CHECK_EQ(cudaDeviceSynchronize(), cudaSuccess);
        cudaMemcpy(y[run], dy, sizeof(float) * nx, cudaMemcpyDeviceToHost);
        if (run < 2) cudaMemcpy(hist[run], dstate, sizeof(float) * 2 * stride, cudaMemcpyDeviceToHost);
        if (run == 2) cudaMemcpy(tails, dtails, sizeof(float) * nt, cudaMemcpyDeviceToHost);
    }
    size_t differ = 0, hist_differ = 0, nans = 0, step_differ = 0, staged_differ = 0;
    for (size_t i = 0; i < nx; i++) {
        const size_t r = i / T % R;
        if (row_slot[r] < 0) continue;  // a padding row's output is not defined
        differ += memcmp(&y[0][i], &y[1][i], sizeof(float)) != 0, nans += y[1][i] != y[1][i];
        if (runs == 3) step_differ += memcmp(&y[0][i], &y[2][i], sizeof(float)) != 0, nans += y[2][i] != y[2][i];
    }
    for (size_t i = 0; i < 2 * stride; i++) hist_differ += memcmp(&hist[0][i], &hist[1][i], sizeof(float)) != 0;
    // the staged histories against run 0's carried ones, slot by slot
    for (int r = 0; runs == 3 && r < R; r++) {
        if (row_slot[r] < 0) continue;
        const float *carried = hist[0] + row_slot[r] * stride;
        for (int i = 0; i < C; i++)
            for (int j = 0; j < K - 1; j++)
                staged_differ += memcmp(&tails[((size_t)i * R + r) * (K - 1) + j], &carried[i * (K - 1) + j],
                                        sizeof(float)) != 0;
        for (int j = 0; j < KF - 1; j++)
            staged_differ += memcmp(&tails[(size_t)C * R * (K - 1) + r * (KF - 1) + j], &carried[C * (K - 1) + j],
                                    sizeof(float)) != 0;
    }
    printf("  resblock with the first conv (precision %d, T %d) vs resblock over x, carries: %zu of %zu outputs "
           "differ, %zu history values differ, %zu NaN; step form: %zu outputs, %zu staged history values differ "
           "%s\n", precision, T, differ, nx / R * 2, hist_differ, nans, step_differ, staged_differ, msg);
    CHECK_EQ(differ, 0);
    CHECK_EQ(hist_differ, 0);
    CHECK_EQ(nans, 0);
    CHECK_EQ(step_differ, 0);
    CHECK_EQ(staged_differ, 0);
    // the kernel refuses a first conv it does not take
    struct op_resblock bad = {in, dw, dw + n1, dy, HID, 0, {NULL, NULL, NULL, NULL}, 1, {pin, dwf, LD}, {0, 0, NULL, NULL}};
    bad.first.in.K = bad.first.in.H + 2;
    CHECK_EQ(mimi_cuda_resblock(&bad, &ex), MIMI_EUNSUPPORTED);
    // and its step form without a place to stage the PCM's history
    bad = (struct op_resblock){in, dw, dw + n1, dy, HID, 0, {NULL, NULL, NULL, NULL}, 1, {pin, dwf, LD},
                               {1, 0, dtails, NULL}};
    CHECK_EQ(mimi_cuda_resblock(&bad, &ex), MIMI_EUNSUPPORTED);
    cudaFree(dpcm), cudaFree(dx), cudaFree(dy), cudaFree(dw), cudaFree(dwf), cudaFree(dstate), cudaFree(drs);
    cudaFree(dtails);
    free(pcm), free(x), free(w), free(wf), free(state), free(y[0]), free(y[1]), free(y[2]), free(hist[0]), free(hist[1]);
    free(tails);
}

// op_resblock_mma against its definition computed here (the window, weights and h rounded to
// bf16, sums in double, biases f32): 3 rows of T columns (a slot deep in its signal with a
// history, a padding row, a fresh slot). The residual branch y - x must agree within the f32
// summation order (a rounding of h may flip), y must be written everywhere (poisoned with NaN
// before) and the histories must stay as they were (the carry is a separate op).
static void resblock_mma_case(int C, int T) {
    enum { R = 3, K = 3 };
    const int HID = C / 2, ck = C * K, ld1 = (ck + 1 + 3) & ~3, ld2 = (HID + 1 + 3) & ~3;
    const size_t stride = (size_t)C * (K - 1) + 4, nx = (size_t)C * R * T;  // a slot: history, started
    const size_t n1 = (size_t)HID * ld1, n2 = (size_t)C * ld2, nf1 = (size_t)HID * ck, nf2 = (size_t)C * HID;
    float *x = malloc(sizeof(float) * nx), *y = malloc(sizeof(float) * nx), *ref = malloc(sizeof(float) * nx);
    float *w = malloc(sizeof(float) * (n1 + n2)), *state = calloc(2 * stride, sizeof(float));
    float *st = malloc(sizeof(float) * 2 * stride), *v = malloc(sizeof(float) * ck), *h = malloc(sizeof(float) * HID);
    uint16_t *f = malloc(sizeof(uint16_t) * (nf1 + nf2));
    float *dx = NULL, *dy = NULL, *dw = NULL, *dstate = NULL;
    uint16_t *df = NULL;
    int32_t *drs = NULL;
    const int32_t row_slot[R] = {1, -1, 0};
    CHECK(x && y && ref && w && state && st && v && h && f);
    CHECK_EQ(cudaMalloc((void **)&dx, sizeof(float) * nx), cudaSuccess);
    CHECK_EQ(cudaMalloc((void **)&dy, sizeof(float) * nx), cudaSuccess);
    CHECK_EQ(cudaMalloc((void **)&dw, sizeof(float) * (n1 + n2)), cudaSuccess);
    CHECK_EQ(cudaMalloc((void **)&df, sizeof(uint16_t) * (nf1 + nf2)), cudaSuccess);
    CHECK_EQ(cudaMalloc((void **)&dstate, sizeof(float) * 2 * stride), cudaSuccess);
    CHECK_EQ(cudaMalloc((void **)&drs, sizeof row_slot), cudaSuccess);
    if (!x || !y || !ref || !w || !state || !st || !v || !h || !f || !dx || !dy || !dw || !df || !dstate || !drs) return;
    for (size_t i = 0; i < nx; i++) x[i] = 3.0f * (test_rng_float() - 0.5f);
    for (size_t i = 0; i < n1 + n2; i++) w[i] = 0.2f * (test_rng_float() - 0.5f);
    for (size_t i = 0; i < (size_t)C * (K - 1); i++) state[stride + i] = test_rng_float() - 0.5f;  // slot 1's history
    ((int32_t *)state)[stride - 1] = 0, ((int32_t *)state)[2 * stride - 1] = 1;
    // the fragments: W1 as (HID, K*C) tap-major, W2 as (C, HID)
    for (int j = 0; j < HID; j++)
        for (int i = 0; i < C; i++)
            for (int k = 0; k < K; k++) f[gpu_mma_fragment_index(HID, j, k * C + i)] = mimi_to_bf16(w[(size_t)j * ld1 + i * K + k]);
    for (int o = 0; o < C; o++)
        for (int j = 0; j < HID; j++) f[nf1 + gpu_mma_fragment_index(C, o, j)] = mimi_to_bf16(w[n1 + (size_t)o * ld2 + j]);
    // the definition: v = bf16 of [history | elu(x)], h = bf16(elu(b1 + W1 v)), y = x + (b2 + W2 h)
    for (int r = 0; r < R; r++)
        for (int t = 0; t < T; t++) {
            for (int i = 0; i < C; i++)
                for (int k = 0; k < K; k++) {
                    const int j = t + k;
                    float e = 0.0f;
                    if (j >= K - 1) {
                        e = x[((size_t)i * R + r) * T + j - (K - 1)];
                        mimi_elu(&e, 1);
                    } else if (row_slot[r] >= 0) {
                        e = state[(size_t)row_slot[r] * stride + i * (K - 1) + j];
                    }
                    v[i * K + k] = (float)bf16_value(mimi_to_bf16(e));
                }
            for (int j = 0; j < HID; j++) {
                double acc = 0.0;
                for (int p = 0; p < ck; p++) acc += bf16_value(mimi_to_bf16(w[(size_t)j * ld1 + p])) * v[p];
                float e = (float)acc + w[(size_t)j * ld1 + ck];
                mimi_elu(&e, 1);
                h[j] = (float)bf16_value(mimi_to_bf16(e));
            }
            for (int o = 0; o < C; o++) {
                double acc = 0.0;
                for (int j = 0; j < HID; j++) acc += bf16_value(mimi_to_bf16(w[n1 + (size_t)o * ld2 + j])) * h[j];
                const size_t at = ((size_t)o * R + r) * T + t;
                ref[at] = (float)acc + w[n1 + (size_t)o * ld2 + HID];  // the branch
            }
        }
    cudaMemcpy(dx, x, sizeof(float) * nx, cudaMemcpyHostToDevice);
    cudaMemcpy(dw, w, sizeof(float) * (n1 + n2), cudaMemcpyHostToDevice);
    cudaMemcpy(df, f, sizeof(uint16_t) * (nf1 + nf2), cudaMemcpyHostToDevice);
    cudaMemcpy(dstate, state, sizeof(float) * 2 * stride, cudaMemcpyHostToDevice);
    cudaMemcpy(drs, row_slot, sizeof row_slot, cudaMemcpyHostToDevice);
    cudaMemset(dy, 0xFF, sizeof(float) * nx);  // NaN: every output must be written
    char msg[256] = "";
    struct gpu_exec ex = {NULL, NULL, MIMI_PRECISION_FAST_BF16, msg, sizeof msg, 0, NULL, NULL, 0};
    const struct op_im2col in = {dx, NULL, dstate, (const int32_t *)(dstate + stride - 1), drs, stride, C, K, 1, K - 1, T, R,
                                 1, 0, 0, 1, 1, NULL};
    const struct op_resblock_mma rb = {in, df, df + nf1, dw, dw + n1, ld1, ld2, HID, dy};
    CHECK_EQ(mimi_cuda_resblock_mma(&rb, &ex), MIMI_OK);
    CHECK_EQ(cudaDeviceSynchronize(), cudaSuccess);
    cudaMemcpy(y, dy, sizeof(float) * nx, cudaMemcpyDeviceToHost);
    cudaMemcpy(st, dstate, sizeof(float) * 2 * stride, cudaMemcpyDeviceToHost);
    size_t nans = 0;
    for (size_t i = 0; i < nx; i++) nans += y[i] != y[i], y[i] -= x[i];
    const double rel = rel_l2(y, ref, nx);
    const int state_same = memcmp(st, state, sizeof(float) * 2 * stride) == 0;
    printf("  resblock on bf16 tensor cores (%d channels, T %d) vs its definition: branch rel_l2 %.2e, %zu NaN, "
           "history %s %s\n", C, T, rel, nans, state_same ? "kept" : "CHANGED", msg);
    CHECK(rel < 1e-4);
    CHECK_EQ(nans, 0);
    CHECK(state_same);
    // a geometry it does not take is refused with a reason
    struct op_resblock_mma bad = rb;
    bad.in.T = T + 2;
    CHECK_EQ(mimi_cuda_resblock_mma(&bad, &ex), MIMI_EUNSUPPORTED);
    CHECK(strstr(msg, "no kernel") != NULL);
    cudaFree(dx), cudaFree(dy), cudaFree(dw), cudaFree(df), cudaFree(dstate), cudaFree(drs);
    free(x), free(y), free(ref), free(w), free(state), free(st), free(v), free(h), free(f);
}

// op_conv_mma against its definition computed here (the window and weights rounded to bf16,
// sums in double, the bias f32): 3 rows of T input steps (a slot deep in its signal with a
// history, a padding row, a fresh slot). y must agree within the f32 summation order, be written
// everywhere (poisoned with NaN before), and the histories must stay as they were (the carry is
// a separate op).
static void conv_mma_case(int CIN, int COUT, int S, int T) {
    enum { R = 3 };
    const int K = 2 * S, H = K - S, ck = CIN * K, ld = (ck + 1 + 3) & ~3, To = T / S;
    const size_t stride = (size_t)CIN * H + 4, nx = (size_t)CIN * R * T, ny = (size_t)COUT * R * To;
    float *x = malloc(sizeof(float) * nx), *y = malloc(sizeof(float) * ny), *ref = malloc(sizeof(float) * ny);
    float *w = malloc(sizeof(float) * COUT * ld), *state = calloc(2 * stride, sizeof(float));
    float *st = malloc(sizeof(float) * 2 * stride), *v = malloc(sizeof(float) * ck);
    uint16_t *f = malloc(sizeof(uint16_t) * COUT * ck);
    float *dx = NULL, *dy = NULL, *dw = NULL, *dstate = NULL;
    uint16_t *df = NULL;
    int32_t *drs = NULL;
    const int32_t row_slot[R] = {1, -1, 0};
    CHECK(x && y && ref && w && state && st && v && f);
    CHECK_EQ(cudaMalloc((void **)&dx, sizeof(float) * nx), cudaSuccess);
    CHECK_EQ(cudaMalloc((void **)&dy, sizeof(float) * ny), cudaSuccess);
    CHECK_EQ(cudaMalloc((void **)&dw, sizeof(float) * COUT * ld), cudaSuccess);
    CHECK_EQ(cudaMalloc((void **)&df, sizeof(uint16_t) * COUT * ck), cudaSuccess);
    CHECK_EQ(cudaMalloc((void **)&dstate, sizeof(float) * 2 * stride), cudaSuccess);
    CHECK_EQ(cudaMalloc((void **)&drs, sizeof row_slot), cudaSuccess);
    if (!x || !y || !ref || !w || !state || !st || !v || !f || !dx || !dy || !dw || !df || !dstate || !drs) return;
    for (size_t i = 0; i < nx; i++) x[i] = 3.0f * (test_rng_float() - 0.5f);
    for (size_t i = 0; i < (size_t)COUT * ld; i++) w[i] = 0.2f * (test_rng_float() - 0.5f);
    for (size_t i = 0; i < (size_t)CIN * H; i++) state[stride + i] = test_rng_float() - 0.5f;  // slot 1's history
    ((int32_t *)state)[stride - 1] = 0, ((int32_t *)state)[2 * stride - 1] = 1;
    // the fragments: W as (COUT, K*CIN) tap-major
    for (int o = 0; o < COUT; o++)
        for (int i = 0; i < CIN; i++)
            for (int k = 0; k < K; k++) f[gpu_mma_fragment_index(COUT, o, k * CIN + i)] = mimi_to_bf16(w[(size_t)o * ld + i * K + k]);
    // the definition: v = bf16 of [history | elu(x)], y = b + W v
    for (int r = 0; r < R; r++)
        for (int t = 0; t < To; t++) {
            for (int i = 0; i < CIN; i++)
                for (int k = 0; k < K; k++) {
                    const int j = S * t + k;
                    float e = 0.0f;
                    if (j >= H) {
                        e = x[((size_t)i * R + r) * T + j - H];
                        mimi_elu(&e, 1);
                    } else if (row_slot[r] >= 0) {
                        e = state[(size_t)row_slot[r] * stride + i * H + j];
                    }
                    v[i * K + k] = (float)bf16_value(mimi_to_bf16(e));
                }
            for (int o = 0; o < COUT; o++) {
                double acc = 0.0;
                for (int p = 0; p < ck; p++) acc += bf16_value(mimi_to_bf16(w[(size_t)o * ld + p])) * v[p];
                ref[((size_t)o * R + r) * To + t] = (float)acc + w[(size_t)o * ld + ck];
            }
        }
    cudaMemcpy(dx, x, sizeof(float) * nx, cudaMemcpyHostToDevice);
    cudaMemcpy(dw, w, sizeof(float) * COUT * ld, cudaMemcpyHostToDevice);
    cudaMemcpy(df, f, sizeof(uint16_t) * COUT * ck, cudaMemcpyHostToDevice);
    cudaMemcpy(dstate, state, sizeof(float) * 2 * stride, cudaMemcpyHostToDevice);
    cudaMemcpy(drs, row_slot, sizeof row_slot, cudaMemcpyHostToDevice);
    cudaMemset(dy, 0xFF, sizeof(float) * ny);  // NaN: every output must be written
    char msg[256] = "";
    struct gpu_exec ex = {NULL, NULL, MIMI_PRECISION_FAST_BF16, msg, sizeof msg, 0, NULL, NULL, 0};
    const struct op_im2col in = {dx, NULL, dstate, (const int32_t *)(dstate + stride - 1), drs, stride, CIN, K, S, H, T, R,
                                 1, 0, 0, 1, 1, NULL};
    const struct op_conv_mma cm = {in, df, dw, ld, COUT, dy};
    CHECK_EQ(mimi_cuda_conv_mma(&cm, &ex), MIMI_OK);
    CHECK_EQ(cudaDeviceSynchronize(), cudaSuccess);
    cudaMemcpy(y, dy, sizeof(float) * ny, cudaMemcpyDeviceToHost);
    cudaMemcpy(st, dstate, sizeof(float) * 2 * stride, cudaMemcpyDeviceToHost);
    size_t nans = 0;
    for (size_t i = 0; i < ny; i++) nans += y[i] != y[i];
    const double rel = rel_l2(y, ref, ny);
    const int state_same = memcmp(st, state, sizeof(float) * 2 * stride) == 0;
    printf("  strided conv on bf16 tensor cores (%d -> %d channels, S %d, T %d) vs its definition: rel_l2 %.2e, %zu "
           "NaN, history %s %s\n", CIN, COUT, S, T, rel, nans, state_same ? "kept" : "CHANGED", msg);
    CHECK(rel < 1e-5);
    CHECK_EQ(nans, 0);
    CHECK(state_same);
    // a geometry it does not take is refused with a reason
    struct op_conv_mma bad = cm;
    bad.in.T = T + S;
    CHECK_EQ(mimi_cuda_conv_mma(&bad, &ex), MIMI_EUNSUPPORTED);
    CHECK(strstr(msg, "no kernel") != NULL);
    cudaFree(dx), cudaFree(dy), cudaFree(dw), cudaFree(df), cudaFree(dstate), cudaFree(drs);
    free(x), free(y), free(ref), free(w), free(state), free(st), free(v), free(f);
}

// op_convtr_mma and its tail launch against their definition computed here (f(x) and W rounded
// to bf16, sums in double, the bias f32): 20 rows (a slot with a tail, a padding row, then fresh
// slots; the tail launch's 16-row blocks, the second partly past the rows), the ELU on. Outputs
// within the f32 summation order; the tails the launch leaves too, and the padding row's slot
// state untouched.
static void convtr_mma_case(int CIN, int COUT, int S, int T) {
    enum { R = 20, NS = R - 1 };
    const int K = 2 * S, P = S;
    const size_t stride = (size_t)COUT * P + 4, nx = (size_t)CIN * R * T, ny = (size_t)COUT * R * T * S;
    const size_t nw = (size_t)COUT * K * CIN, nf = (size_t)COUT * S * 2 * CIN;
    float *x = malloc(sizeof(float) * nx), *y = malloc(sizeof(float) * ny), *ref = malloc(sizeof(float) * ny);
    float *w = malloc(sizeof(float) * (nw + COUT)), *state = calloc(NS * stride, sizeof(float));
    float *st = malloc(sizeof(float) * NS * stride), *want = malloc(sizeof(float) * NS * stride), *v = malloc(sizeof(float) * nx);
    uint16_t *f = malloc(sizeof(uint16_t) * nf);
    float *dx = NULL, *dy = NULL, *dw = NULL, *dstate = NULL;
    uint16_t *df = NULL;
    int32_t *drs = NULL;
    int32_t row_slot[R] = {1, -1, 0};  // then slots 2 .. (fresh)
    for (int r = 3; r < R; r++) row_slot[r] = r - 1;
    CHECK(x && y && ref && w && state && st && want && v && f);
    CHECK_EQ(cudaMalloc((void **)&dx, sizeof(float) * nx), cudaSuccess);
    CHECK_EQ(cudaMalloc((void **)&dy, sizeof(float) * ny), cudaSuccess);
    CHECK_EQ(cudaMalloc((void **)&dw, sizeof(float) * (nw + COUT)), cudaSuccess);
    CHECK_EQ(cudaMalloc((void **)&df, sizeof(uint16_t) * nf), cudaSuccess);
    CHECK_EQ(cudaMalloc((void **)&dstate, sizeof(float) * NS * stride), cudaSuccess);
    CHECK_EQ(cudaMalloc((void **)&drs, sizeof row_slot), cudaSuccess);
    if (!x || !y || !ref || !w || !state || !st || !want || !v || !f || !dx || !dy || !dw || !df || !dstate || !drs) return;
    for (size_t i = 0; i < nx; i++) x[i] = 3.0f * (test_rng_float() - 0.5f);
    for (size_t i = 0; i < nw + COUT; i++) w[i] = 0.2f * (test_rng_float() - 0.5f);  // packed (COUT*K, CIN), then the bias
    for (size_t i = 0; i < (size_t)COUT * P; i++) state[stride + i] = test_rng_float() - 0.5f;  // slot 1's tail
    for (int o = 0; o < COUT; o++)
        for (int ph = 0; ph < S; ph++)
            for (int s2 = 0; s2 < 2; s2++)
                for (int i = 0; i < CIN; i++)
                    f[gpu_mma_fragment_index(COUT * S, o * S + ph, s2 * CIN + i)] =
                        mimi_to_bf16(w[((size_t)o * K + ph + s2 * S) * CIN + i]);
    for (size_t n = 0; n < nx; n++) {
        float e = x[n];
        mimi_elu(&e, 1);
        v[n] = (float)bf16_value(mimi_to_bf16(e));
    }
    memcpy(want, state, sizeof(float) * NS * stride);
    for (int r = 0; r < R; r++)
        for (int o = 0; o < COUT; o++)
            for (int ph = 0; ph < S; ph++) {
                for (int t = 0; t <= T; t++) {  // t = T: the next tail
                    double acc = 0.0;
                    for (int s2 = 0; s2 < 2; s2++)
                        for (int i = 0; i < CIN && t - s2 >= 0 && t - s2 < T; i++)
                            acc += bf16_value(mimi_to_bf16(w[((size_t)o * K + ph + s2 * S) * CIN + i])) *
                                   v[((size_t)i * R + r) * T + t - s2];
                    if (t == T) {
                        if (row_slot[r] >= 0) want[(size_t)row_slot[r] * stride + o * P + ph] = (float)acc;
                        continue;
                    }
                    float yv = (float)acc + w[nw + o];
                    if (t == 0 && row_slot[r] >= 0) yv += state[(size_t)row_slot[r] * stride + o * P + ph];
                    ref[((size_t)o * R + r) * T * S + t * S + ph] = yv;
                }
            }
    cudaMemcpy(dx, x, sizeof(float) * nx, cudaMemcpyHostToDevice);
    cudaMemcpy(dw, w, sizeof(float) * (nw + COUT), cudaMemcpyHostToDevice);
    cudaMemcpy(df, f, sizeof(uint16_t) * nf, cudaMemcpyHostToDevice);
    cudaMemcpy(dstate, state, sizeof(float) * NS * stride, cudaMemcpyHostToDevice);
    cudaMemcpy(drs, row_slot, sizeof row_slot, cudaMemcpyHostToDevice);
    cudaMemset(dy, 0xFF, sizeof(float) * ny);  // NaN: every output must be written
    char msg[256] = "";
    struct gpu_exec ex = {NULL, NULL, MIMI_PRECISION_FAST_BF16, msg, sizeof msg, 0, NULL, NULL, 0};
    const struct op_convtr_mma a = {{NULL, dx, dw, dw + nw, dy, dstate, drs, stride, COUT, K, S, T, R, 0, NULL}, df,
                                    CIN, 1};
    CHECK_EQ(mimi_cuda_convtr_mma(&a, &ex), MIMI_OK);
    CHECK_EQ(mimi_cuda_convtr_mma_tail(&a, &ex), MIMI_OK);
    CHECK_EQ(cudaDeviceSynchronize(), cudaSuccess);
    cudaMemcpy(y, dy, sizeof(float) * ny, cudaMemcpyDeviceToHost);
    cudaMemcpy(st, dstate, sizeof(float) * NS * stride, cudaMemcpyDeviceToHost);
    size_t nans = 0;
    for (size_t i = 0; i < ny; i++) nans += y[i] != y[i];
    const double rel = rel_l2(y, ref, ny), trel = rel_l2(st, want, NS * stride);
    printf("  transposed conv on bf16 tensor cores (%d -> %d channels, S %d, T %d) vs its definition: rel_l2 %.2e, "
           "tails rel_l2 %.2e, %zu NaN %s\n", CIN, COUT, S, T, rel, trel, nans, msg);
    CHECK(rel < 1e-4 && trel < 1e-4);
    CHECK_EQ(nans, 0);
    for (int s = 0; s < NS; s++) CHECK(st[(s + 1) * stride - 1] == 0.0f);  // past the tails: untouched
    struct op_convtr_mma bad = a;
    bad.tr.T = T + 1;
    CHECK_EQ(mimi_cuda_convtr_mma(&bad, &ex), MIMI_EUNSUPPORTED);
    CHECK(strstr(msg, "no kernel") != NULL);
    cudaFree(dx), cudaFree(dy), cudaFree(dw), cudaFree(df), cudaFree(dstate), cudaFree(drs);
    free(x), free(y), free(ref), free(w), free(state), free(st), free(want), free(v), free(f);
}

// A transposed conv's output launch storing the new tails (op_convtr.carry) against the output
// launch and then the tail launch, bit for bit: the depthwise upsampling (K 4, S 2) and a dense
// layer's taps (K 8, S 4) over 5 rows (slots with tails, a padding row, a fresh slot), T steps.
// Then a geometry whose new tail would take old columns (S*T < K - S) is refused by name. A
// dense layer with K = 2S also stages its new tails (op_convtr.next, small steps): the outputs
// and the old tails as the tail launch's run leaves them, the staged tails as it stores them.
static void convtr_carry_case(int dense, int K, int S, int T) {
    enum { R = 5, C = 6, NS = 4 };
    const int P = K - S;
    const size_t stride = (size_t)C * P + 4, nt = dense ? (size_t)C * K * R * T : 0, nx = (size_t)C * R * T;
    const size_t ny = (size_t)C * R * T * S;
    const int32_t row_slot[R] = {2, -1, 0, 3, 1};
    float *h = malloc(sizeof(float) * (nt + nx + C * K + C + NS * stride)), *y[2] = {malloc(sizeof(float) * ny), malloc(sizeof(float) * ny)};
    float *st[2] = {malloc(sizeof(float) * NS * stride), malloc(sizeof(float) * NS * stride)};
    float *dh = NULL, *dy = NULL;
    int32_t *drs = NULL;
    CHECK(h && y[0] && y[1] && st[0] && st[1]);
    CHECK_EQ(cudaMalloc((void **)&dh, sizeof(float) * (nt + nx + C * K + C + NS * stride)), cudaSuccess);
    CHECK_EQ(cudaMalloc((void **)&dy, sizeof(float) * ny), cudaSuccess);
    CHECK_EQ(cudaMalloc((void **)&drs, sizeof row_slot), cudaSuccess);
    if (!h || !y[0] || !y[1] || !st[0] || !st[1] || !dh || !dy || !drs) return;
    const size_t n = nt + nx + C * K + C;
    for (size_t i = 0; i < n; i++) h[i] = test_rng_float() - 0.5f;  // taps, x, w, bias
    for (size_t i = 0; i < NS * stride; i++) h[n + i] = i % stride < (size_t)C * P && i / stride != 1 ? test_rng_float() : 0.0f;
    cudaMemcpy(drs, row_slot, sizeof row_slot, cudaMemcpyHostToDevice);
    char msg[256] = "";
    struct gpu_exec ex = {NULL, NULL, MIMI_PRECISION_STRICT, msg, sizeof msg, 0, NULL, NULL, 0};
    struct op_convtr a = {dense ? dh : NULL, dh + nt, dense ? NULL : dh + nt + nx, dh + nt + nx + C * K, dy, dh + n, drs,
                          stride, C, K, S, T, R, 0, NULL};
    const int staged = dense && K == 2 * S;
    float *next = malloc(sizeof(float) * C * R * P), *dnext = NULL;
    CHECK(next != NULL);
    if (staged) CHECK_EQ(cudaMalloc((void **)&dnext, sizeof(float) * C * R * P), cudaSuccess);
    if (!next || (staged && !dnext)) return;
    size_t ydiff = 0, tdiff = 0, moved = 0, sdiff = 0, kept = 0;
    // run 0: the output and tail launches; 1: the output launch carrying; 2: staging
    for (int run = 0; run < 2 + staged; run++) {
        cudaMemcpy(dh, h, sizeof(float) * (n + NS * stride), cudaMemcpyHostToDevice);
        a.carry = run == 1, a.next = run == 2 ? dnext : NULL;
        if (run == 2) cudaMemset(dnext, 0xFF, sizeof(float) * C * R * P);  // NaN: every value must be written
        CHECK_EQ(mimi_cuda_convtr_out(&a, &ex), MIMI_OK);
        if (run == 0) CHECK_EQ(mimi_cuda_convtr_tail(&a, &ex), MIMI_OK);
        CHECK_EQ(cudaDeviceSynchronize(), cudaSuccess);
        cudaMemcpy(y[run % 2], dy, sizeof(float) * ny, cudaMemcpyDeviceToHost);
        if (run < 2) cudaMemcpy(st[run], dh + n, sizeof(float) * NS * stride, cudaMemcpyDeviceToHost);
        if (run == 2) cudaMemcpy(next, dnext, sizeof(float) * C * R * P, cudaMemcpyDeviceToHost);
        if (run == 1) {
            for (size_t i = 0; i < ny; i++) ydiff += memcmp(&y[0][i], &y[1][i], sizeof(float)) != 0;
            for (size_t i = 0; i < NS * stride; i++) {
                tdiff += memcmp(&st[0][i], &st[1][i], sizeof(float)) != 0;
                moved += st[1][i] != h[n + i];
            }
        }
    }
    if (staged) {
        float *now = st[1];  // the state the staging run left: untouched
        cudaMemcpy(now, dh + n, sizeof(float) * NS * stride, cudaMemcpyDeviceToHost);
        for (size_t i = 0; i < NS * stride; i++) kept += memcmp(&now[i], &h[n + i], sizeof(float)) == 0;
        for (int o = 0; o < C; o++)
            for (int r = 0; r < R; r++)
                for (int j = 0; j < P && row_slot[r] >= 0; j++)
                    sdiff += memcmp(&next[((size_t)o * R + r) * P + j], &st[0][row_slot[r] * stride + (size_t)o * P + j],
                                    sizeof(float)) != 0;
        // the staging run's outputs (y[0]) against the carrying run's (y[1], equal to the first's)
        for (size_t i = 0; i < ny; i++) ydiff += memcmp(&y[0][i], &y[1][i], sizeof(float)) != 0;
    }
    printf("  transposed conv (%s, K %d, S %d, T %d), its tails stored by the output launch vs the tail launch: "
           "%zu outputs and %zu state values differ, %zu tail values new%s%zu staged values differ, %zu of %zu state "
           "values kept\n", dense ? "dense" : "depthwise", K, S, T, ydiff, tdiff, moved, staged ? "; staged: " : "; ",
           sdiff, kept, staged ? NS * stride : 0);
    CHECK_EQ(ydiff, 0);
    CHECK_EQ(tdiff, 0);
    CHECK(moved > 0);
    CHECK_EQ(sdiff, 0);
    if (staged) CHECK_EQ(kept, NS * stride);
    cudaFree(dnext);
    free(next);
    struct op_convtr bad = a;
    bad.carry = 1, bad.next = NULL;
    bad.K = 2 * S + 2 * S * T;  // P = S + 2 S T > S T
    CHECK_EQ(mimi_cuda_convtr_out(&bad, &ex), MIMI_EUNSUPPORTED);
    CHECK(strstr(msg, "tail launch") != NULL);
    bad = a;  // a staged tail where K != 2S
    bad.carry = 0, bad.next = dy, bad.K = 2 * S + 1;
    CHECK_EQ(mimi_cuda_convtr_out(&bad, &ex), MIMI_EINVAL);
    CHECK(strstr(msg, "staged tail") != NULL);
    cudaFree(dh), cudaFree(dy), cudaFree(drs);
    free(h), free(y[0]), free(y[1]), free(st[0]), free(st[1]);
}

// The decoder's projection of a small step with the upsampling in its kernel (op_gemm.up: J
// latent channels of R rows, K = 4, S = 2, one step a row, a padding row among them) against the
// projection and then the upsampling's own launch: the latent, the upsampled output and the
// carried tails agree bit for bit. A product past the skinny kernel's rows is refused.
static void projection_up_case(void) {
    enum { R = 3, J = 512, KD = 512, K = 4, S = 2, P = K - S, NS = 2 };
    const size_t stride = (size_t)J * P + 4, nw = (size_t)J * KD, nx = (size_t)R * KD, ny = (size_t)J * R * S;
    const int32_t row_slot[R] = {1, -1, 0};
    const size_t n = nw + nx + (size_t)J * K;  // weights, input rows, upsampling weights
    float *h = malloc(sizeof(float) * (n + NS * stride)), *out[2][3];
    for (int v = 0; v < 2; v++)
        out[v][0] = malloc(sizeof(float) * J * R), out[v][1] = malloc(sizeof(float) * ny),
        out[v][2] = malloc(sizeof(float) * NS * stride);
    float *dh = NULL, *dc = NULL, *dy = NULL;
    int32_t *drs = NULL;
    CHECK(h && out[0][0] && out[0][1] && out[0][2] && out[1][0] && out[1][1] && out[1][2]);
    CHECK_EQ(cudaMalloc((void **)&dh, sizeof(float) * (n + NS * stride)), cudaSuccess);
    CHECK_EQ(cudaMalloc((void **)&dc, sizeof(float) * J * R), cudaSuccess);
    CHECK_EQ(cudaMalloc((void **)&dy, sizeof(float) * ny), cudaSuccess);
    CHECK_EQ(cudaMalloc((void **)&drs, sizeof row_slot), cudaSuccess);
    if (!h || !out[0][0] || !out[0][1] || !out[0][2] || !out[1][0] || !out[1][1] || !out[1][2] || !dh || !dc || !dy ||
        !drs)
        return;
    for (size_t i = 0; i < n; i++) h[i] = 0.2f * (test_rng_float() - 0.5f);
    for (size_t i = 0; i < NS * stride; i++) h[n + i] = i % stride < (size_t)J * P ? test_rng_float() : 0.0f;
    cudaMemcpy(drs, row_slot, sizeof row_slot, cudaMemcpyHostToDevice);
    char msg[256] = "";
    struct gpu_exec ex = {NULL, NULL, MIMI_PRECISION_STRICT, msg, sizeof msg, 0, NULL, NULL, 0};
    struct op_gemm g = {0};  // latent (J, R) = W (J, KD) . x^T, x (R, KD): the decode projection's form
    g.transa = 1, g.m = R, g.n = J, g.k = KD, g.a = dh + nw, g.lda = KD, g.b = dh, g.ldb = KD, g.c = dc, g.ldc = R;
    const struct op_convtr up = {NULL, dc, dh + nw + nx, NULL, dy, dh + n, drs, stride, J, K, S, 1, R, 1, NULL};
    for (int v = 0; v < 2; v++) {  // 0: the product, then the upsampling's launch; 1: in the product
        cudaMemcpy(dh, h, sizeof(float) * (n + NS * stride), cudaMemcpyHostToDevice);
        cudaMemset(dy, 0xFF, sizeof(float) * ny);  // NaN: every output must be written
        g.up = up, g.with_up = v;
        CHECK_EQ(mimi_cuda_gemm(&g, &ex), MIMI_OK);
        if (v == 0) CHECK_EQ(mimi_cuda_convtr_out(&up, &ex), MIMI_OK);
        CHECK_EQ(cudaDeviceSynchronize(), cudaSuccess);
        cudaMemcpy(out[v][0], dc, sizeof(float) * J * R, cudaMemcpyDeviceToHost);
        cudaMemcpy(out[v][1], dy, sizeof(float) * ny, cudaMemcpyDeviceToHost);
        cudaMemcpy(out[v][2], dh + n, sizeof(float) * NS * stride, cudaMemcpyDeviceToHost);
    }
    const size_t sizes[3] = {(size_t)J * R, ny, NS * stride};
    size_t differ[3] = {0, 0, 0}, nans = 0, moved = 0;
    for (int k = 0; k < 3; k++)
        for (size_t i = 0; i < sizes[k]; i++) differ[k] += memcmp(&out[0][k][i], &out[1][k][i], sizeof(float)) != 0;
    for (size_t i = 0; i < ny; i++) nans += out[1][1][i] != out[1][1][i];
    for (size_t i = 0; i < NS * stride; i++) moved += out[1][2][i] != h[n + i];
    printf("  projection with the upsampling in its kernel vs the upsampling's launch: %zu latent, %zu upsampled and "
           "%zu state values differ, %zu NaN, %zu tail values new %s\n", differ[0], differ[1], differ[2], nans, moved,
           msg);
    CHECK_EQ(differ[0] + differ[1] + differ[2], 0);
    CHECK_EQ(nans, 0);
    CHECK(moved > 0);
    struct op_gemm bad = g;  // more rows than the skinny kernel takes
    bad.m = GPU_SKINNY_MAX + 1;
    CHECK_EQ(mimi_cuda_gemm(&bad, &ex), MIMI_EINVAL);
    CHECK(strstr(msg, "upsampling") != NULL);
    cudaFree(dh), cudaFree(dc), cudaFree(dy), cudaFree(drs);
    free(h);
    for (int v = 0; v < 2; v++) free(out[v][0]), free(out[v][1]), free(out[v][2]);
}

// Slot r's position ring (ring entries, then its counter) after a step's positions op, for a
// slot fresh (r % 3 == 0), deep in its signal (1) or at the ring's wrap (2).
static void short_step_positions(int32_t *pos, int ring, int r, int steps) {
    const int32_t next = r % 3 == 0 ? 0 : r % 3 == 1 ? 1000 + r : ring - 1;
    for (int j = 0; j < ring; j++) pos[j] = -1;
    for (int32_t p = next + steps - ring; p < next + steps; p++)
        if (p >= 0) pos[p % ring] = p;
    pos[ring] = next;
}

// A streaming step's attention `a` run once by the one-pass kernel (mma_bf16 0) and once on
// tensor cores (1), each from the host's qkv and state (a->qkv, a->keys: the device's copies;
// the state starts at a->keys) with its output poisoned with NaN; o[k] and st[k] get each run's
// output and state, rot (when given) the qkv the first leaves (q and k rotated).
static void short_attention_runs(struct op_attention *a, struct gpu_exec *ex, const float *qkv, size_t n_qkv,
                                 const float *state, size_t n_state, size_t n_out, float *o[2], float *st[2],
                                 float *rot) {
    for (int mma = 0; mma < 2; mma++) {
        a->mma_bf16 = mma;
        cudaMemcpy(a->qkv, qkv, sizeof(float) * n_qkv, cudaMemcpyHostToDevice);
        cudaMemcpy(a->keys, state, sizeof(float) * n_state, cudaMemcpyHostToDevice);
        cudaMemset(a->out, 0xFF, sizeof(float) * n_out);  // NaN: every value must be written
        CHECK_EQ(mimi_cuda_attention(a, ex), MIMI_OK);
        CHECK_EQ(cudaDeviceSynchronize(), cudaSuccess);
        cudaMemcpy(o[mma], a->out, sizeof(float) * n_out, cudaMemcpyDeviceToHost);
        cudaMemcpy(st[mma], a->keys, sizeof(float) * n_state, cudaMemcpyDeviceToHost);
        if (rot && mma == 0) cudaMemcpy(rot, a->qkv, sizeof(float) * n_qkv, cudaMemcpyDeviceToHost);
    }
}

// A streaming step's attention over bf16 rings on tensor cores (attention_mma.cu's short steps)
// against the one-pass kernel over the same rings, rotation and ring
// store inline in both (a block per row, a warp per head): 20 rows of `steps` queries (past
// GPU_SKINNY_MAX, where the mode takes it), slots deep in their signals, fresh, and just past a ring's wrap, and a padding row. The
// rings both leave must agree bit for bit (the same rotation), the outputs within the rounding
// of q and the probabilities.
static void attention_short_case(int steps) {
    enum { R = 20, D = 512, HEADS = 8, HD = 64, RING = 250 };
    const size_t stride = (size_t)RING * D + 256;  // keys and values (bf16), positions, counter; a multiple of 4
    const size_t n_qkv = (size_t)R * steps * 3 * D, n_out = (size_t)R * steps * D, n_state = (size_t)R * stride;
    float *qkv = malloc(sizeof(float) * n_qkv), *state = calloc(n_state, sizeof(float)), *freq = malloc(sizeof(float) * HD / 2);
    float *o[2] = {malloc(sizeof(float) * n_out), malloc(sizeof(float) * n_out)};
    float *st[2] = {malloc(sizeof(float) * n_state), malloc(sizeof(float) * n_state)};
    float *dqkv = NULL, *dout = NULL, *dstate = NULL, *dfreq = NULL;
    int32_t *drs = NULL, row_slot[R];
    CHECK(qkv && state && freq && o[0] && o[1] && st[0] && st[1]);
    CHECK_EQ(cudaMalloc((void **)&dqkv, sizeof(float) * n_qkv), cudaSuccess);
    CHECK_EQ(cudaMalloc((void **)&dout, sizeof(float) * n_out), cudaSuccess);
    CHECK_EQ(cudaMalloc((void **)&dstate, sizeof(float) * n_state), cudaSuccess);
    CHECK_EQ(cudaMalloc((void **)&dfreq, sizeof(float) * HD / 2), cudaSuccess);
    CHECK_EQ(cudaMalloc((void **)&drs, sizeof row_slot), cudaSuccess);
    if (!qkv || !state || !freq || !o[0] || !o[1] || !st[0] || !st[1] || !dqkv || !dout || !dstate || !dfreq || !drs) return;
    for (size_t i = 0; i < n_qkv; i++) qkv[i] = 3.0f * (test_rng_float() - 0.5f);
    for (int i = 0; i < HD / 2; i++) freq[i] = powf(10000.0f, -2.0f * i / HD);
    for (int r = 0; r < R; r++) {
        row_slot[r] = r == 7 ? -1 : R - 1 - r;  // rows in another order than slots
        float *sl = state + (size_t)r * stride;
        uint16_t *kv = (uint16_t *)sl;
        int32_t *pos = (int32_t *)(sl + (size_t)RING * D);
        for (size_t i = 0; i < (size_t)2 * RING * D; i++) kv[i] = mimi_to_bf16(2.0f * (test_rng_float() - 0.5f));
        short_step_positions(pos, RING, r, steps);
    }
    cudaMemcpy(dfreq, freq, sizeof(float) * HD / 2, cudaMemcpyHostToDevice);
    cudaMemcpy(drs, row_slot, sizeof row_slot, cudaMemcpyHostToDevice);
    char msg[256] = "";
    struct gpu_exec ex = {NULL, NULL, MIMI_PRECISION_FAST_BF16, msg, sizeof msg, 0, NULL, NULL, 0};
    struct op_attention a = {dqkv, dout, dstate, dstate + (size_t)RING * D / 2, (int32_t *)(dstate + (size_t)RING * D),
                             (int32_t *)(dstate + (size_t)RING * D + RING), drs, dfreq, stride, R, steps, D, HEADS, HD,
                             RING, RING, 1, 1, 0, 0};
    short_attention_runs(&a, &ex, qkv, n_qkv, state, n_state, n_out, o, st, NULL);
    size_t pad = 0, ring_differ = 0;
    for (int i = 0; i < steps * D; i++) pad += o[1][(size_t)7 * steps * D + i] != 0.0f || o[0][(size_t)7 * steps * D + i] != 0.0f;
    for (size_t i = 0; i < n_state; i++) ring_differ += memcmp(&st[0][i], &st[1][i], sizeof(float)) != 0;
    const double rel = rel_l2(o[1], o[0], n_out);
    printf("  streaming attention (%d steps, %d rows) on bf16 tensor cores vs the one-pass kernel: rel_l2 %.2e, %zu "
           "ring values differ, %zu padding values not 0 %s\n", steps, R, rel, ring_differ, pad, msg);
    CHECK(rel > 0 && rel < 1e-2);  // above 0: the mode took the tensor cores
    CHECK_EQ(ring_differ, 0);
    CHECK_EQ(pad, 0);
    cudaFree(dqkv), cudaFree(dout), cudaFree(dstate), cudaFree(dfreq), cudaFree(drs);
    free(qkv), free(state), free(freq), free(o[0]), free(o[1]), free(st[0]), free(st[1]);
}

// A streaming step's attention over int8 rings (MIMI_PRECISION_FAST_INT8_KV), through the
// one-pass kernel (f32 arithmetic) and the short steps' tensor-core kernel, rotation and ring
// store inline: 20 rows of `steps` queries as attention_short_case. Each new key and value must
// be stored as gpu_kv_int8_code / _scale give for the rotated values the kernel leaves in qkv,
// both kernels must leave the same rings, and each output must match attention over the stored
// (dequantized) ring computed here: the one-pass kernel's to f32 rounding, the tensor-core
// kernel's within the rounding of q and the probabilities to bf16.
static void attention_int8_case(int steps) {
    enum { R = 20, D = 512, HEADS = 8, HD = 64, RING = 250, CONTEXT = 250 };
    const size_t half = (size_t)RING * (D / 4 + HEADS);  // one ring: int8 values, then scales (floats)
    const size_t stride = (2 * half + RING + 1 + 3) & ~(size_t)3;
    const size_t n_qkv = (size_t)R * steps * 3 * D, n_out = (size_t)R * steps * D, n_state = (size_t)R * stride;
    float *qkv = malloc(sizeof(float) * n_qkv), *state = calloc(n_state, sizeof(float)), *freq = malloc(sizeof(float) * HD / 2);
    float *o[2] = {malloc(sizeof(float) * n_out), malloc(sizeof(float) * n_out)}, *want = malloc(sizeof(float) * n_out);
    float *st[2] = {malloc(sizeof(float) * n_state), malloc(sizeof(float) * n_state)}, *rot = malloc(sizeof(float) * n_qkv);
    float *dqkv = NULL, *dout = NULL, *dstate = NULL, *dfreq = NULL;
    int32_t *drs = NULL, row_slot[R];
    CHECK(qkv && state && freq && o[0] && o[1] && want && st[0] && st[1] && rot);
    CHECK_EQ(cudaMalloc((void **)&dqkv, sizeof(float) * n_qkv), cudaSuccess);
    CHECK_EQ(cudaMalloc((void **)&dout, sizeof(float) * n_out), cudaSuccess);
    CHECK_EQ(cudaMalloc((void **)&dstate, sizeof(float) * n_state), cudaSuccess);
    CHECK_EQ(cudaMalloc((void **)&dfreq, sizeof(float) * HD / 2), cudaSuccess);
    CHECK_EQ(cudaMalloc((void **)&drs, sizeof row_slot), cudaSuccess);
    if (!qkv || !state || !freq || !o[0] || !o[1] || !want || !st[0] || !st[1] || !rot || !dqkv || !dout || !dstate ||
        !dfreq || !drs)
        return;
    for (size_t i = 0; i < n_qkv; i++) qkv[i] = 3.0f * (test_rng_float() - 0.5f);
    for (int i = 0; i < HD / 2; i++) freq[i] = powf(10000.0f, -2.0f * i / HD);
    for (int r = 0; r < R; r++) {
        row_slot[r] = r == 7 ? -1 : R - 1 - r;  // rows in another order than slots
        float *sl = state + (size_t)r * stride;
        for (int kv = 0; kv < 2; kv++) {
            int8_t *v8 = (int8_t *)(sl + kv * half);
            float *scale = sl + kv * half + (size_t)RING * D / 4;
            for (size_t i = 0; i < (size_t)RING * D; i++) v8[i] = (int8_t)(int)(254.0f * test_rng_float() - 127.0f);
            for (int i = 0; i < RING * HEADS; i++) scale[i] = 0.005f + 0.015f * test_rng_float();
        }
        int32_t *pos = (int32_t *)(sl + 2 * half);
        short_step_positions(pos, RING, r, steps);
    }
    cudaMemcpy(dfreq, freq, sizeof(float) * HD / 2, cudaMemcpyHostToDevice);
    cudaMemcpy(drs, row_slot, sizeof row_slot, cudaMemcpyHostToDevice);
    char msg[256] = "";
    struct gpu_exec ex = {NULL, NULL, MIMI_PRECISION_FAST_INT8_KV, msg, sizeof msg, 0, NULL, NULL, 0};
    struct op_attention a = {dqkv, dout, dstate, dstate + half, (int32_t *)(dstate + 2 * half),
                             (int32_t *)(dstate + 2 * half + RING), drs, dfreq, stride, R, steps, D, HEADS, HD,
                             RING, CONTEXT, 1, 0, 0, 1};
    short_attention_runs(&a, &ex, qkv, n_qkv, state, n_state, n_out, o, st, rot);
    // the new entries as the quantizer gives them, and the attention over the stored rings
    size_t stored_differ = 0, old_differ = 0, pad = 0, ring_differ = 0;
    for (size_t i = 0; i < n_state; i++) ring_differ += memcmp(&st[0][i], &st[1][i], sizeof(float)) != 0;
    for (int r = 0; r < R; r++) {
        const int slot = row_slot[r] < 0 ? 0 : row_slot[r];
        const float *sl = st[0] + (size_t)slot * stride, *sl0 = state + (size_t)slot * stride;
        const int32_t next = ((const int32_t *)(sl + 2 * half))[RING], *pos = (const int32_t *)(sl + 2 * half);
        for (int s = 0; s < steps; s++)
            for (int h = 0; h < HEADS; h++) {
                float *out = want + ((size_t)r * steps + s) * D + h * HD;
                const float *q = rot + ((size_t)r * steps + s) * 3 * D + h * HD;
                for (int kv = 0; kv < 2 && row_slot[r] >= 0; kv++) {
                    const float *x = q + (kv + 1) * D;
                    float absmax = 0.0f;
                    for (int i = 0; i < HD; i++) absmax = fmaxf(absmax, fabsf(x[i]));
                    const size_t e = (size_t)((next + s) % RING);
                    const int8_t *v8 = (const int8_t *)(sl + kv * half) + e * D + h * HD;
                    const float scale = sl[kv * half + (size_t)RING * D / 4 + e * HEADS + h];
                    stored_differ += memcmp(&scale, &(float){gpu_kv_int8_scale(absmax)}, sizeof scale) != 0;
                    for (int i = 0; i < HD; i++) stored_differ += v8[i] != gpu_kv_int8_code(x[i], absmax);
                }
                memset(out, 0, sizeof(float) * HD);
                if (row_slot[r] < 0) continue;
                double sc[RING], mxs = -INFINITY, sum = 0.0, acc[HD] = {0};
                for (int j = 0; j < RING; j++) {
                    const int32_t age = next + s - pos[j];
                    sc[j] = -INFINITY;
                    if (pos[j] < 0 || age < 0 || age >= CONTEXT) continue;
                    const int8_t *k8 = (const int8_t *)sl + (size_t)j * D + h * HD;
                    const float ks = sl[(size_t)RING * D / 4 + (size_t)j * HEADS + h];
                    double dot = 0.0;
                    for (int i = 0; i < HD; i++) dot += (double)q[i] * (k8[i] * ks);
                    sc[j] = dot / 8.0;
                    if (sc[j] > mxs) mxs = sc[j];
                }
                for (int j = 0; j < RING; j++) {
                    if (sc[j] == -INFINITY) continue;
                    const double p = exp(sc[j] - mxs);
                    const int8_t *v8 = (const int8_t *)(sl + half) + (size_t)j * D + h * HD;
                    const float vs = sl[half + (size_t)RING * D / 4 + (size_t)j * HEADS + h];
                    sum += p;
                    for (int i = 0; i < HD; i++) acc[i] += p * (v8[i] * vs);
                }
                for (int i = 0; i < HD; i++) out[i] = (float)(acc[i] / sum);
            }
        // entries the step did not write are as they were
        for (size_t i = 0; i < 2 * half && row_slot[r] >= 0; i++) {
            const size_t in_ring = i % half;
            const int is_scale = in_ring >= (size_t)RING * D / 4;
            const size_t e = is_scale ? (in_ring - (size_t)RING * D / 4) / HEADS : in_ring * 4 / D;
            int written = 0;
            for (int s = 0; s < steps; s++) written |= e == (size_t)((next + s) % RING);
            if (!written) old_differ += memcmp(&sl[i], &sl0[i], sizeof(float)) != 0;
        }
    }
    for (int i = 0; i < steps * D; i++) pad += o[1][(size_t)7 * steps * D + i] != 0.0f || o[0][(size_t)7 * steps * D + i] != 0.0f;
    const double rel1 = rel_l2(o[0], want, n_out), rel2 = rel_l2(o[1], want, n_out);
    printf("  streaming attention (%d steps, %d rows) over int8 rings: one-pass kernel rel_l2 %.2e, tensor cores %.2e "
           "against the stored rings; %zu stored values not as quantized, %zu others changed, %zu ring values differ "
           "between the kernels, %zu padding values not 0 %s\n",
           steps, R, rel1, rel2, stored_differ, old_differ, ring_differ, pad, msg);
    CHECK(rel1 < 1e-5);
    CHECK(rel2 > 0 && rel2 < 1e-2);  // above 0: the mode took the tensor cores
    CHECK_EQ(stored_differ, 0);
    CHECK_EQ(old_differ, 0);
    CHECK_EQ(ring_differ, 0);
    CHECK_EQ(pad, 0);
    cudaFree(dqkv), cudaFree(dout), cudaFree(dstate), cudaFree(dfreq), cudaFree(drs);
    free(qkv), free(state), free(freq), free(o[0]), free(o[1]), free(want), free(st[0]), free(st[1]), free(rot);
}

static void test_bf16_operands(void) {
    attention_short_case(2);  // a frame's two transformer steps
    attention_short_case(1);
    attention_int8_case(2);
    attention_int8_case(1);
    resblock_last_case(MIMI_PRECISION_FAST, 1920);       // 15 whole tiles a row
    resblock_last_case(MIMI_PRECISION_FAST, 1924);       // and a last tile of 4 columns
    resblock_last_case(MIMI_PRECISION_FAST_BF16, 1920);
    for (int p = 0; p < 3; p++) {
        const int precision[3] = {MIMI_PRECISION_STRICT, MIMI_PRECISION_FAST, MIMI_PRECISION_FAST_BF16};
        resblock_first_case(precision[p], 1920);  // 15 whole tiles a row
        resblock_first_case(precision[p], 200);   // and a last tile of 72 columns
        resblock_first_case(precision[p], 8);     // the carried columns read the PCM's history
    }
    resblock_step_case(64, 1920);  // one stream's top level: 120 tiles
    resblock_step_case(64, 1930);  // and a last tile of 10 columns
    resblock_step_case(128, 480);  // the level below: 120 tiles
    resblock_step_case(64, 1);     // one column: the history is read and staged again
    resblock_mma_case(128, 480);  // the two levels it takes in Mimi
    resblock_mma_case(256, 96);
    resblock_mma_case(128, 192);  // two tiles a row
    conv_mma_case(64, 128, 4, 1920);  // the encoder's first downsampling (5 tiles a row)
    conv_mma_case(128, 256, 5, 480);  // and the second (2 tiles a row)
    convtr_mma_case(128, 64, 4, 480);  // the decoder's last upsampling
    convtr_mma_case(256, 128, 5, 96);  // and the one before
    convtr_carry_case(0, 4, 2, 1);  // the upsampling of a streaming step
    convtr_carry_case(0, 4, 2, 7);
    convtr_carry_case(1, 8, 4, 3);
    convtr_carry_case(1, 8, 4, 4);   // four steps a thread, and staged tails there
    convtr_carry_case(1, 16, 8, 2);  // one stream's first SEANet upsampling
    projection_up_case();
    attention_mma_case();
    ones_bf16_case(64, 1000, 8);  // n % 4 == 0: the ones as 8-byte stores
    ones_bf16_case(3, 1001, 5);   // n % 4 != 0: one by one
    im2col_bf16_case(4, 64, 2048, 8, 4);  // 32768 columns, (8, 4): four columns a thread, 16-byte loads
    im2col_bf16_case(2, 36, 3644, 7, 1);  // 131184 columns, (7, 1)
    im2col_bf16_case(2, 16, 2048, 5, 1);  // 32768 columns, a (K, S) without its own kernel
    im2col_bf16_case(3, 3, 30, 3, 1);     // few columns: one a thread
    gemm_bf16_case();
}

// gemm_tune.cu on one large strict product: tuned once, remembered by shape, and
// giving cuBLAS's default result bit for bit. C0 and C1 are host buffers of C's size.
static void tune_case(struct op_gemm g, struct gpu_exec *ex, struct gemm_tuning *tuning, float *C0, float *C1) {
    const size_t nc = (size_t)g.m * g.n;
    mimi_cuda_gemm_tune(&g, ex, tuning);
    struct op_gemm again = g;
    again.algo = NULL;
    mimi_cuda_gemm_tune(&again, ex, tuning);
    CHECK(again.algo == g.algo);  // remembered, not tuned twice
    const void *tuned = g.algo;
    g.algo = NULL;
    CHECK_EQ(cudaMemset(g.c, 0x3f, sizeof(float) * nc), cudaSuccess);  // 0.747 everywhere, for beta != 0
    CHECK_EQ(mimi_cuda_gemm(&g, ex), MIMI_OK);
    CHECK_EQ(cudaMemcpy(C0, g.c, sizeof(float) * nc, cudaMemcpyDeviceToHost), cudaSuccess);
    g.algo = tuned;
    CHECK_EQ(cudaMemset(g.c, 0x3f, sizeof(float) * nc), cudaSuccess);
    CHECK_EQ(mimi_cuda_gemm(&g, ex), MIMI_OK);
    CHECK_EQ(cudaMemcpy(C1, g.c, sizeof(float) * nc, cudaMemcpyDeviceToHost), cudaSuccess);
    size_t differ = 0;
    for (size_t i = 0; i < nc; i++) differ += memcmp(C0 + i, C1 + i, sizeof(float)) != 0;
    printf("  tuned product %d x %d x %d, beta %g: %s; %zu of %zu outputs differ from the default's %s\n", g.m, g.n,
           g.k, g.beta, tuned ? "another algorithm" : "the default kept", differ, nc, ex->errmsg);
    CHECK_EQ(differ, 0);
}

// The decoder's 256 -> 128 transposed conv in a whole-signal step of 16 x 64 frames (tuned on
// an H200); a small product and TF32 products are left on the default.
static void test_gemm_tune(void) {
    struct op_gemm g = {0};
    g.m = 98304, g.n = 1280, g.k = 256, g.lda = g.m, g.ldb = g.k, g.ldc = g.m;
    const size_t na = (size_t)g.m * g.k, nb = (size_t)g.k * g.n, nc = (size_t)g.m * g.n, ws_bytes = (size_t)32 << 20;
    float *A = malloc(sizeof(float) * na), *Bm = malloc(sizeof(float) * nb), *C0 = malloc(sizeof(float) * nc),
          *C1 = malloc(sizeof(float) * nc);
    float *dA = NULL, *dB = NULL, *dC = NULL;
    void *ws = NULL;
    cublasHandle_t h = NULL;
    cublasLtHandle_t lt = NULL;
    struct gemm_tuning *tuning = mimi_cuda_tuning_new();
    CHECK(A && Bm && C0 && C1 && tuning);
    CHECK_EQ(cudaMalloc((void **)&dA, sizeof(float) * na), cudaSuccess);
    CHECK_EQ(cudaMalloc((void **)&dB, sizeof(float) * nb), cudaSuccess);
    CHECK_EQ(cudaMalloc((void **)&dC, sizeof(float) * nc), cudaSuccess);
    CHECK_EQ(cudaMalloc(&ws, ws_bytes), cudaSuccess);
    CHECK_EQ(cublasCreate(&h), CUBLAS_STATUS_SUCCESS);
    CHECK_EQ(cublasLtCreate(&lt), CUBLAS_STATUS_SUCCESS);
    CHECK_EQ(cublasSetWorkspace(h, ws, ws_bytes), CUBLAS_STATUS_SUCCESS);
    if (!A || !Bm || !C0 || !C1 || !tuning || !dA || !dB || !dC || !ws || !h || !lt) return;
    for (size_t i = 0; i < na; i++) A[i] = test_rng_float();
    for (size_t i = 0; i < nb; i++) Bm[i] = test_rng_float();
    cudaMemcpy(dA, A, sizeof(float) * na, cudaMemcpyHostToDevice);
    cudaMemcpy(dB, Bm, sizeof(float) * nb, cudaMemcpyHostToDevice);
    g.a = dA, g.b = dB, g.c = dC;
    char msg[256] = "";
    struct gpu_exec ex = {NULL, h, MIMI_PRECISION_STRICT, msg, sizeof msg, 0, lt, ws, ws_bytes};
    tune_case(g, &ex, tuning, C0, C1);
    struct op_gemm acc = g;  // accumulating, as a resblock's 1x1 conv into its input
    acc.beta = 1.0f;
    tune_case(acc, &ex, tuning, C0, C1);
    struct op_gemm small = g;
    small.m = 2048;  // 1.3 GFLOP: not worth tuning
    mimi_cuda_gemm_tune(&small, &ex, tuning);
    CHECK(small.algo == NULL);
    struct op_gemm fast = g;  // TF32 products keep the default
    ex.precision = MIMI_PRECISION_FAST;
    mimi_cuda_gemm_tune(&fast, &ex, tuning);
    CHECK(fast.algo == NULL);
    cublasLtDestroy(lt), cublasDestroy(h), cudaFree(ws), cudaFree(dA), cudaFree(dB), cudaFree(dC);
    mimi_cuda_tuning_free(tuning);
    free(A), free(Bm), free(C0), free(C1);
}
#endif

// ---- GPU vs CPU ----

// The fast modes: measured, printed, and held to bounds that leave rounding a wide margin (TF32
// and bf16 rings measured on an H200: codes 98-100% equal, PCM rel. L2 1e-3 at most; bf16
// products round their operands to 8 bits instead of 11, about 8 times the error) but catch a
// kernel that is wrong on some columns or rows; the modes' fidelity is documented from
// mimi-bench-gpu.
struct fast_mode {
    struct mimi_model **model;
    const char *name;
    double min_agree, max_rel_l2;
};
static const struct fast_mode FAST_MODES[] = {
    {&gpu_fast, "fast (TF32)", 0.97, 0.01},
    {&gpu_bf16kv, "fast (bf16 KV)", 0.97, 0.01},
    {&gpu_bf16, "fast (bf16)", 0.85, 0.03},
    {&gpu_int8kv, "fast (int8 KV)", 0.85, 0.03},
};
#define N_FAST_MODES 4

static void fast_vs_cpu(const struct fast_mode *fm, const int32_t *codes_cpu, const float *pcm_cpu) {
    struct mimi_model *m = *fm->model;
    const char *mode = fm->name;
    static int32_t codes[FRAMES * N_Q];
    static float pcm[FRAMES * FRAME];
    int sem;
    encode_stream(m, codes, NULL);
    decode_stream(m, codes_cpu, pcm);
    double agree = code_agreement(codes, codes_cpu, FRAMES * N_Q, &sem);
    double e = rel_l2(pcm, pcm_cpu, (size_t)FRAMES * FRAME);
    printf("  %s vs cpu: codes equal %.4f, semantic %s, decode pcm rel_l2 %.3e\n", mode, agree,
           sem ? "all equal" : "differ", e);
    CHECK(agree >= fm->min_agree && e < fm->max_rel_l2);
}

static void test_vs_cpu(void) {
    static int32_t codes_cpu[FRAMES * N_Q], codes_gpu[FRAMES * N_Q];
    static float pcm_cpu[FRAMES * FRAME], pcm_gpu[FRAMES * FRAME];
    struct taps tc = {{"enc_seanet", "enc_transformer", "latent"}, {0}, {0}, {0}, FRAMES * 2};
    struct taps tg = tc;
    encode_stream(cpu, codes_cpu, &tc);
    encode_stream(gpu, codes_gpu, &tg);
    int sem;
    double agree = code_agreement(codes_gpu, codes_cpu, FRAMES * N_Q, &sem);
    printf("  gpu vs cpu encode: codes equal %.4f, semantic %s\n", agree, sem ? "all equal" : "DIFFER");
    CHECK(agree >= 0.995);
    CHECK(sem);
    for (int i = 0; i < N_TAPS; i++) {
        char label[64];
        snprintf(label, sizeof label, "gpu vs cpu tap %s", tc.names[i]);
        CHECK(tg.steps[i] == tc.steps[i] && tc.data[i] && tg.data[i]);
        if (tc.data[i] && tg.data[i]) CHECK_REL_L2(tg.data[i], tc.data[i], (size_t)tc.channels[i] * tc.cap, TOL, label);
        free(tc.data[i]);
        free(tg.data[i]);
    }
    decode_stream(cpu, codes_cpu, pcm_cpu);
    decode_stream(gpu, codes_cpu, pcm_gpu);
    CHECK_REL_L2(pcm_gpu, pcm_cpu, (size_t)FRAMES * FRAME, TOL, "gpu vs cpu decode pcm");
    for (int i = 0; i < N_FAST_MODES; i++) fast_vs_cpu(&FAST_MODES[i], codes_cpu, pcm_cpu);
}

// ---- batches ----

#define SLOTS 3
#define CAPACITY 5

// An encode and a decode batch of `capacity` slots (N_Q codebooks) with slots 0 .. open-1 open
// in both; 0, or -1 (a failed check) with nothing left.
static int batch_pair(struct mimi_model *m, int capacity, int open, struct mimi_batch **enc, struct mimi_batch **dec) {
    struct mimi_batch_params bp;
    mimi_batch_params_default(&bp);
    bp.capacity = capacity;
    bp.n_codebooks = N_Q;
    *enc = mimi_batch_create(m, &bp, NULL);
    bp.direction = MIMI_DIRECTION_DECODE;
    *dec = mimi_batch_create(m, &bp, NULL);
    CHECK(*enc && *dec);
    int ok = *enc && *dec;
    for (int s = 0; s < open && ok; s++) {
        CHECK_EQ(mimi_batch_open(*enc), s);
        CHECK_EQ(mimi_batch_open(*dec), s);
    }
    if (ok) return 0;
    mimi_batch_destroy(*enc), mimi_batch_destroy(*dec);
    return -1;
}

// ---- fast modes on the cuBLAS products ----

#define WIDE 160  // slots, in a 256-row bucket with padding rows: the SEANet products go through
                  // cuBLAS, and the decoder's last conv through the narrow kernel
#define WIDE_F 6

// WIDE_F steps of WIDE slots (slot s reads the clip from frame s % 24): codes (WIDE_F, WIDE, N_Q),
// and the PCM of decoding `codes_in` (or this run's codes when NULL).
static void wide_run(struct mimi_model *m, int32_t *codes, const int32_t *codes_in, float *pcm) {
    struct mimi_batch *enc, *dec;
    if (batch_pair(m, WIDE, WIDE, &enc, &dec)) return;
    int slots[WIDE];
    for (int s = 0; s < WIDE; s++) slots[s] = s;
    static float in[WIDE * FRAME];
    for (int f = 0; f < WIDE_F; f++) {
        for (int s = 0; s < WIDE; s++)
            memcpy(in + (size_t)s * FRAME, clip + ((size_t)(s % 24) + f) * FRAME, sizeof(float) * FRAME);
        int32_t *c = codes + (size_t)f * WIDE * N_Q;
        CHECK_EQ(mimi_batch_encode(enc, WIDE, slots, in, c), MIMI_OK);
        CHECK_EQ(mimi_batch_decode(dec, WIDE, slots, codes_in ? codes_in + (size_t)f * WIDE * N_Q : c,
                                   pcm + (size_t)f * WIDE * FRAME), MIMI_OK);
    }
    mimi_batch_destroy(enc);
    mimi_batch_destroy(dec);
}

// The fast modes (cuBLAS products in TF32; bf16 KV rings too) against strict at the same width:
// measured, printed, held to the bounds of fast_vs_cpu.
static void test_fast_wide(void) {
    static int32_t strict_codes[WIDE_F * WIDE * N_Q], codes[WIDE_F * WIDE * N_Q];
    static float strict_pcm[WIDE_F * WIDE * FRAME], pcm[WIDE_F * WIDE * FRAME];
    wide_run(gpu, strict_codes, NULL, strict_pcm);
    // strict at this width (im2col and cuBLAS) against lone streams (the direct kernels)
    const int probe[3] = {0, 37, WIDE - 1};
    struct mimi_stream_params sp;
    mimi_stream_params_default(&sp);
    sp.n_codebooks = N_Q;
    int equal = 0;
    double worst = 0;
    for (int i = 0; i < 3; i++) {
        const int s = probe[i];
        struct mimi_encoder *e = mimi_encoder_create(gpu, &sp, NULL);
        struct mimi_decoder *d = mimi_decoder_create(gpu, &sp, NULL);
        for (int f = 0; f < WIDE_F && e && d; f++) {
            int32_t c[N_Q];
            static float p[FRAME];
            const int32_t *wc = strict_codes + ((size_t)f * WIDE + s) * N_Q;
            CHECK_EQ(mimi_encoder_step(e, clip + ((size_t)(s % 24) + f) * FRAME, c), MIMI_OK);
            for (int q = 0; q < N_Q; q++) equal += c[q] == wc[q];
            CHECK_EQ(mimi_decoder_step(d, wc, p), MIMI_OK);
            double err = rel_l2(strict_pcm + ((size_t)f * WIDE + s) * FRAME, p, FRAME);
            if (err > worst) worst = err;
        }
        mimi_encoder_destroy(e);
        mimi_decoder_destroy(d);
    }
    printf("  strict, %d slots vs lone streams: codes equal %d/%d, worst frame pcm rel_l2 %.3e\n", WIDE, equal,
           3 * WIDE_F * N_Q, worst);
    CHECK(equal >= 3 * WIDE_F * N_Q * 995 / 1000);
    CHECK(worst <= 1e-5);
    for (int i = 0; i < N_FAST_MODES; i++) {
        const struct fast_mode *fm = &FAST_MODES[i];
        wide_run(*fm->model, codes, strict_codes, pcm);
        int sem;
        double agree = code_agreement(codes, strict_codes, WIDE_F * WIDE * N_Q, &sem);
        double e = rel_l2(pcm, strict_pcm, (size_t)WIDE_F * WIDE * FRAME);
        printf("  %s vs strict, %d slots: codes equal %.4f, decode pcm rel_l2 %.3e\n", fm->name, WIDE, agree, e);
        CHECK(agree >= fm->min_agree && e > 0 && e < fm->max_rel_l2);
    }
}

// Whole-signal encode and decode of the clip in the fast modes against strict: one slot steps
// the clip's 74 frames at once, which puts its convs on the large-product kernels (im2col + cuBLAS,
// or the windowed tensor-core conv) that lone streams never use.
static void test_fast_offline(void) {
    const int64_t n = clip_frames * FRAME, max = clip_frames * N_Q;
    struct mimi_stream_params sp;
    mimi_stream_params_default(&sp);
    sp.n_codebooks = N_Q;
    int32_t *strict_codes = malloc(sizeof(int32_t) * max), *codes = malloc(sizeof(int32_t) * max);
    float *strict_pcm = malloc(sizeof(float) * n), *pcm = malloc(sizeof(float) * n);
    CHECK(strict_codes && codes && strict_pcm && pcm);
    if (!strict_codes || !codes || !strict_pcm || !pcm) goto done;
    CHECK_EQ(mimi_encode_offline(gpu, &sp, clip, n, strict_codes, max), clip_frames);
    CHECK_EQ(mimi_decode_offline(gpu, &sp, strict_codes, clip_frames, strict_pcm, n), n);
    for (int i = 0; i < N_FAST_MODES; i++) {
        const struct fast_mode *fm = &FAST_MODES[i];
        CHECK_EQ(mimi_encode_offline(*fm->model, &sp, clip, n, codes, max), clip_frames);
        CHECK_EQ(mimi_decode_offline(*fm->model, &sp, strict_codes, clip_frames, pcm, n), n);
        int eq = 0;
        for (int64_t j = 0; j < max; j++) eq += codes[j] == strict_codes[j];
        const double agree = (double)eq / max, e = rel_l2(pcm, strict_pcm, (size_t)n);
        printf("  %s vs strict, whole signal of %lld frames: codes equal %.4f, decode pcm rel_l2 %.3e\n", fm->name,
               (long long)clip_frames, agree, e);
        CHECK(agree >= fm->min_agree && e > 0 && e < fm->max_rel_l2);
    }
done:
    free(strict_codes), free(codes), free(strict_pcm), free(pcm);
}

// A signal longer than the largest whole-signal step (1024 frames: two steps, the second seeing
// a full step's history) against the CPU, and LONG_MANY such signals in one call (smaller steps
// of several slots) against one-signal calls.
#define LONG_FRAMES 1800
#define LONG_MANY 16
static void test_offline_long(void) {
    const int64_t n = (int64_t)LONG_FRAMES * FRAME, max = (int64_t)LONG_FRAMES * N_Q;
    const int64_t total = n + (LONG_MANY - 1) * 997;
    float *pcm = malloc(sizeof(float) * total), *pcm_cpu = malloc(sizeof(float) * n), *out = malloc(sizeof(float) * n);
    int32_t *codes_cpu = malloc(sizeof(int32_t) * max), *codes = malloc(sizeof(int32_t) * max);
    const float *sig[LONG_MANY];
    int32_t *many[LONG_MANY] = {NULL};
    float *many_pcm[LONG_MANY] = {NULL};
    int64_t lens[LONG_MANY], nf[LONG_MANY], max_codes[LONG_MANY], out_size[LONG_MANY];
    CHECK(pcm && pcm_cpu && out && codes_cpu && codes);
    if (!pcm || !pcm_cpu || !out || !codes_cpu || !codes) goto done;
    // the clip over and over, each pass at another gain
    for (int64_t i = 0; i < total; i++) {
        const int64_t pass = i / (clip_frames * FRAME);
        pcm[i] = clip[i % (clip_frames * FRAME)] * (0.4f + 0.3f * (float)(pass % 3));
    }
    struct mimi_stream_params sp;
    mimi_stream_params_default(&sp);
    sp.n_codebooks = N_Q;
    CHECK_EQ(mimi_encode_offline(cpu, &sp, pcm, n, codes_cpu, max), LONG_FRAMES);
    CHECK_EQ(mimi_encode_offline(gpu, &sp, pcm, n, codes, max), LONG_FRAMES);
    int sem;
    const double agree = code_agreement(codes, codes_cpu, (int)max, &sem);
    CHECK_EQ(mimi_decode_offline(cpu, &sp, codes_cpu, LONG_FRAMES, pcm_cpu, n), n);
    CHECK_EQ(mimi_decode_offline(gpu, &sp, codes_cpu, LONG_FRAMES, out, n), n);
    printf("  whole signal of %d frames vs cpu: codes equal %.4f, semantic %s\n", LONG_FRAMES, agree,
           sem ? "all equal" : "DIFFER");
    CHECK(agree >= 0.995 && sem);
    CHECK_REL_L2(out, pcm_cpu, (size_t)n, TOL, "whole signal of 1800 frames, gpu vs cpu decode pcm");
    // many long signals in one call: each as its own call gives it
    for (int i = 0; i < LONG_MANY; i++) {
        sig[i] = pcm + (int64_t)i * 997;
        lens[i] = n - (int64_t)i * 300;
        nf[i] = mimi_frames_for_samples(gpu, lens[i]);
        max_codes[i] = N_Q * nf[i];
        out_size[i] = FRAME * nf[i];
        many[i] = malloc(sizeof(int32_t) * max_codes[i]);
        many_pcm[i] = malloc(sizeof(float) * out_size[i]);
        CHECK(many[i] && many_pcm[i]);
        if (!many[i] || !many_pcm[i]) goto done;
    }
    CHECK_EQ(mimi_encode_offline_many(gpu, &sp, LONG_MANY, sig, lens, many, max_codes), MIMI_OK);
    CHECK_EQ(mimi_decode_offline_many(gpu, &sp, LONG_MANY, (const int32_t *const *)many, nf, many_pcm, out_size),
             MIMI_OK);
    int equal = 0, all = 0;
    double worst = 0;
    for (int i = 0; i < LONG_MANY; i++) {
        CHECK_EQ(mimi_encode_offline(gpu, &sp, sig[i], lens[i], codes, max_codes[i]), nf[i]);
        for (int64_t k = 0; k < max_codes[i]; k++) equal += codes[k] == many[i][k];
        all += (int)max_codes[i];
        CHECK_EQ(mimi_decode_offline(gpu, &sp, many[i], nf[i], out, out_size[i]), out_size[i]);
        const double e = rel_l2(many_pcm[i], out, (size_t)out_size[i]);
        worst = e > worst ? e : worst;
    }
    printf("  %d signals of about %d frames in one call vs one at a time: codes equal %d/%d, worst pcm rel_l2 %.3e\n",
           LONG_MANY, LONG_FRAMES, equal, all, worst);
    CHECK(equal >= all * 995 / 1000);
    CHECK(worst <= 1e-5);
done:
    for (int i = 0; i < LONG_MANY; i++) free(many[i]), free(many_pcm[i]);
    free(pcm), free(pcm_cpu), free(out), free(codes_cpu), free(codes);
}

#ifdef MIMI_TEST_CUDA_RUNTIME
static size_t free_now(void) {
    size_t free_bytes = 0, total = 0;
    cudaMemGetInfo(&free_bytes, &total);
    return free_bytes;
}

// A streaming batch that fits only when the lanes another model keeps are given back is made:
// the other model (fast) encodes the clip and keeps its lane, the device is filled to leave half
// the batch's size free, and the batch of `gpu` is made by freeing the kept lanes of every model
// on the device.
static void kept_lanes_yield(const struct mimi_stream_params *sp, int32_t *codes, int64_t max) {
    struct mimi_batch_params bp;
    mimi_batch_params_default(&bp);
    bp.capacity = 4;
    bp.n_codebooks = N_Q;
    size_t before = free_now();
    struct mimi_batch *b = mimi_batch_create(gpu, &bp, NULL);
    CHECK(b != NULL);
    const size_t need = before - free_now();
    mimi_batch_destroy(b);
    mimi_model_trim(gpu_fast);
    before = free_now();
    CHECK_EQ(mimi_encode_offline(gpu_fast, sp, clip, clip_frames * FRAME, codes, max), clip_frames);
    const size_t kept = before - free_now();
    if (kept < 2 * need) {
        printf("  kept lane (%zu bytes) too small against a batch (%zu bytes): yield not tried\n", kept, need);
        return;
    }
    void *fill = NULL;
    if (cudaMalloc(&fill, free_now() - need / 2) != cudaSuccess) {
        cudaGetLastError();
        printf("  could not fill the device: yield not tried\n");
        return;
    }
    b = mimi_batch_create(gpu, &bp, NULL);
    CHECK(b != NULL);  // made once the other model's kept lane was freed
    mimi_batch_destroy(b);
    cudaFree(fill);
    before = free_now();
    mimi_model_trim(gpu_fast);
    CHECK(free_now() == before);  // nothing was left kept
    printf("  a batch of %zu bytes made on a full device by freeing the %zu bytes of lanes another model kept\n", need,
           kept);
}
#endif

// Whole-signal lanes kept between calls: a call after another of the same shape (on a kept
// lane, its slots reset) gives what the first call gave, so does one after mimi_model_trim,
// which gives the kept lanes' device memory back.
static void test_offline_kept(void) {
    const int64_t n = clip_frames * FRAME, max = clip_frames * N_Q;
    int32_t *first = malloc(sizeof(int32_t) * max), *codes = malloc(sizeof(int32_t) * max);
    float *other = malloc(sizeof(float) * n);
    CHECK(first && codes && other);
    if (!first || !codes || !other) goto done;
    for (int64_t i = 0; i < n; i++) other[i] = 0.5f * clip[n - 1 - i];
    struct mimi_stream_params sp;
    mimi_stream_params_default(&sp);
    sp.n_codebooks = N_Q;
    CHECK_EQ(mimi_encode_offline(gpu, &sp, clip, n, first, max), clip_frames);
    CHECK_EQ(mimi_encode_offline(gpu, &sp, other, n, codes, max), clip_frames);
    CHECK_EQ(mimi_encode_offline(gpu, &sp, clip, n, codes, max), clip_frames);
    CHECK(memcmp(first, codes, sizeof(int32_t) * max) == 0);
#ifdef MIMI_TEST_CUDA_RUNTIME
    const size_t before = free_now();
    mimi_model_trim(gpu);
    const size_t after = free_now();
    printf("  whole-signal lanes kept between calls: trim gave back %.0f MB\n", ((double)after - before) / 1e6);
    CHECK(after > before);
#else
    mimi_model_trim(gpu);
#endif
    mimi_model_trim(gpu);  // nothing kept: nothing to do
#ifdef MIMI_TEST_CUDA_RUNTIME
    kept_lanes_yield(&sp, codes, max);
#endif
    memset(codes, 0, sizeof(int32_t) * max);
    CHECK_EQ(mimi_encode_offline(gpu, &sp, clip, n, codes, max), clip_frames);
    CHECK(memcmp(first, codes, sizeof(int32_t) * max) == 0);
done:
    free(first), free(codes), free(other);
}

// Whole-signal calls on one model from several threads at once, sharing its kept lanes: each
// thread encodes one of two signals and decodes codes of two lengths, in turns, and every result
// equals the same call made alone. (Results are compared on the main thread.)
#define OFFLINE_THREADS 4
#define OFFLINE_ROUNDS 4
struct offline_worker {
    pthread_t thread;
    int index;
    const float *pcm[2];       // the two signals, n samples each
    const int32_t *want[2];    // their codes alone
    const float *want_pcm[2];  // the decode alone of want[0], whole and its first half
    int64_t n, frames;
    int wrong_codes, wrong_pcm, failed;
};

// dst: the first nf frames of src's `frames` frames of codes (both codebook-major).
static void first_frames(int32_t *dst, const int32_t *src, int64_t frames, int64_t nf) {
    for (int q = 0; q < N_Q; q++) memcpy(dst + q * nf, src + q * frames, sizeof(int32_t) * nf);
}

static void *offline_worker_run(void *arg) {
    struct offline_worker *w = arg;
    const int64_t max = w->frames * N_Q, half = w->frames / 2;
    int32_t *codes = malloc(sizeof(int32_t) * max);
    float *pcm = malloc(sizeof(float) * w->n);
    if (!codes || !pcm) w->failed++;
    for (int r = 0; codes && pcm && r < OFFLINE_ROUNDS; r++) {
        const int k = (w->index + r) % 2;
        if (mimi_encode_offline(gpu, NULL, w->pcm[k], w->n, codes, max) != w->frames) w->failed++;
        else if (memcmp(codes, w->want[k], sizeof(int32_t) * max) != 0) w->wrong_codes++;
        // codes of `frames` (k 0) or of half as many frames (k 1), codebook-major
        const int64_t nf = k ? half : w->frames;
        first_frames(codes, w->want[0], w->frames, nf);
        if (mimi_decode_offline(gpu, NULL, codes, nf, pcm, nf * FRAME) != nf * FRAME) w->failed++;
        else if (memcmp(pcm, w->want_pcm[k], sizeof(float) * nf * FRAME) != 0) w->wrong_pcm++;
    }
    free(codes), free(pcm);
    return NULL;
}

static void test_offline_threads(void) {
    const int64_t n = clip_frames * FRAME, max = clip_frames * N_Q, half = clip_frames / 2;
    float *other = malloc(sizeof(float) * n), *pcm0 = malloc(sizeof(float) * n), *pcm1 = malloc(sizeof(float) * n);
    int32_t *codes0 = malloc(sizeof(int32_t) * max), *codes1 = malloc(sizeof(int32_t) * max);
    int32_t *halfc = malloc(sizeof(int32_t) * max);
    CHECK(other && pcm0 && pcm1 && codes0 && codes1 && halfc);
    if (!other || !pcm0 || !pcm1 || !codes0 || !codes1 || !halfc) goto done;
    for (int64_t i = 0; i < n; i++) other[i] = 0.25f * clip[(i * 7) % n];
    CHECK_EQ(mimi_encode_offline(gpu, NULL, clip, n, codes0, max), clip_frames);
    CHECK_EQ(mimi_encode_offline(gpu, NULL, other, n, codes1, max), clip_frames);
    first_frames(halfc, codes0, clip_frames, half);
    CHECK_EQ(mimi_decode_offline(gpu, NULL, codes0, clip_frames, pcm0, n), n);
    CHECK_EQ(mimi_decode_offline(gpu, NULL, halfc, half, pcm1, half * FRAME), half * FRAME);
    struct offline_worker w[OFFLINE_THREADS];
    for (int t = 0; t < OFFLINE_THREADS; t++) {
        w[t] = (struct offline_worker){.index = t, .pcm = {clip, other}, .want = {codes0, codes1},
                                       .want_pcm = {pcm0, pcm1}, .n = n, .frames = clip_frames};
        CHECK(pthread_create(&w[t].thread, NULL, offline_worker_run, &w[t]) == 0);
    }
    int wrong_codes = 0, wrong_pcm = 0, failed = 0;
    for (int t = 0; t < OFFLINE_THREADS; t++) {
        pthread_join(w[t].thread, NULL);
        wrong_codes += w[t].wrong_codes, wrong_pcm += w[t].wrong_pcm, failed += w[t].failed;
    }
    printf("  %d threads x %d rounds of whole-signal encode + decode on one model: %d failed, %d codes and %d pcm "
           "different from a lone call\n", OFFLINE_THREADS, OFFLINE_ROUNDS, failed, wrong_codes, wrong_pcm);
    CHECK_EQ(failed, 0);
    CHECK_EQ(wrong_codes, 0);
    CHECK_EQ(wrong_pcm, 0);
done:
    free(other), free(pcm0), free(pcm1), free(codes0), free(codes1), free(halfc);
}

// Many signals in one whole-signal call, more than the two lanes have slots (so slots are reset
// and reused), of lengths from one sample to the whole clip: each as a one-signal call gives it.
#define MANY 37
static void test_offline_many(void) {
    const float *pcm[MANY];
    int32_t *codes[MANY];
    float *out[MANY];
    int64_t lens[MANY], nf[MANY], max_codes[MANY];
    for (int i = 0; i < MANY; i++) {
        // mostly short signals, a few long ones (the step is then 32 frames for every slot)
        const int64_t frames = i % 9 == 4 ? clip_frames - i / 9 : 1 + i % 6;
        lens[i] = i == 3 ? 1 : frames * FRAME - (i % 4) * 301;
        nf[i] = mimi_frames_for_samples(gpu, lens[i]);
        pcm[i] = clip + (clip_frames - nf[i]) * FRAME * (i % 2);
        codes[i] = malloc(sizeof(int32_t) * N_Q * nf[i]), out[i] = malloc(sizeof(float) * FRAME * nf[i]);
        max_codes[i] = N_Q * nf[i];
    }
    struct mimi_stream_params sp;
    mimi_stream_params_default(&sp);
    sp.n_codebooks = N_Q;
    int64_t out_size[MANY];
    for (int i = 0; i < MANY; i++) out_size[i] = nf[i] * FRAME;
    CHECK_EQ(mimi_encode_offline_many(gpu, &sp, MANY, pcm, lens, codes, max_codes), MIMI_OK);
    CHECK_EQ(mimi_decode_offline_many(gpu, &sp, MANY, (const int32_t *const *)codes, nf, out, out_size), MIMI_OK);
    int equal = 0, total = 0;
    double worst = 0;
    for (int i = 0; i < MANY; i++) {
        int32_t *one = malloc(sizeof(int32_t) * N_Q * nf[i]);
        float *one_pcm = malloc(sizeof(float) * FRAME * nf[i]);
        CHECK_EQ(mimi_encode_offline(gpu, &sp, pcm[i], lens[i], one, max_codes[i]), nf[i]);
        for (int64_t k = 0; k < N_Q * nf[i]; k++) equal += one[k] == codes[i][k];
        total += (int)(N_Q * nf[i]);
        CHECK_EQ(mimi_decode_offline(gpu, &sp, codes[i], nf[i], one_pcm, out_size[i]), out_size[i]);
        const double e = rel_l2(out[i], one_pcm, (size_t)out_size[i]);
        if (e > worst) worst = e;
        free(one), free(one_pcm), free(codes[i]), free(out[i]);
    }
    printf("  offline many, %d signals in one call vs one at a time: codes equal %d/%d, worst pcm rel_l2 %.3e\n", MANY,
           equal, total, worst);
    CHECK(equal >= total * 995 / 1000);
    CHECK(worst <= 1e-5);
    // the last signal, checked only once earlier ones have been stepped, with a NaN: refused,
    // named, and the model still works
    const int64_t n_bad = lens[MANY - 1];
    float *bad = malloc(sizeof(float) * n_bad);
    memcpy(bad, pcm[MANY - 1], sizeof(float) * n_bad);
    bad[n_bad - 5] = NAN;
    pcm[MANY - 1] = bad;
    for (int i = 0; i < MANY; i++) codes[i] = malloc(sizeof(int32_t) * N_Q * nf[i]);
    CHECK_EQ(mimi_encode_offline_many(gpu, &sp, MANY, pcm, lens, codes, max_codes), MIMI_EINVAL);
    char want_msg[64];
    snprintf(want_msg, sizeof want_msg, "signal %d: sample value %lld is NaN", MANY - 1, (long long)(n_bad - 5));
    CHECK(strstr(last_error, want_msg) != NULL);
    printf("  offline many with a NaN in the last signal: %s\n", last_error);
    pcm[MANY - 1] = clip;
    CHECK_EQ(mimi_encode_offline_many(gpu, &sp, 1, pcm + MANY - 1, lens + MANY - 1, codes + MANY - 1,
                                      max_codes + MANY - 1), MIMI_OK);
    for (int i = 0; i < MANY; i++) free(codes[i]);
    free(bad);
}

// Slot s reads the clip from frame 7 s; slot 1 skips step 2, slot 0 skips steps 3 and 4.
static void test_batch_vs_lone(void) {
    struct mimi_batch *enc, *dec;
    if (batch_pair(gpu, CAPACITY, SLOTS, &enc, &dec)) return;
    enum { F = 8 };
    static int32_t codes[SLOTS][F][N_Q];
    static float pcm[SLOTS][F][FRAME];
    int done[SLOTS] = {0};
    for (int step = 0; step < F + 2; step++) {
        int list[SLOTS], n = 0;
        static float in[SLOTS * FRAME], pout[SLOTS * FRAME];
        int32_t out[SLOTS * N_Q];
        for (int s = SLOTS - 1; s >= 0; s--) {
            if (done[s] == F || (s == 1 && step == 2) || (s == 0 && (step == 3 || step == 4))) continue;
            memcpy(in + n * FRAME, clip + ((size_t)s * 7 + done[s]) * FRAME, sizeof(float) * FRAME);
            list[n++] = s;
        }
        if (!n) continue;
        CHECK_EQ(mimi_batch_encode(enc, n, list, in, out), MIMI_OK);
        CHECK_EQ(mimi_batch_decode(dec, n, list, out, pout), MIMI_OK);
        for (int k = 0; k < n; k++) {
            memcpy(codes[list[k]][done[list[k]]], out + k * N_Q, sizeof out[0] * N_Q);
            memcpy(pcm[list[k]][done[list[k]]], pout + k * FRAME, sizeof(float) * FRAME);
            done[list[k]]++;
        }
    }
    struct mimi_stream_params sp;
    mimi_stream_params_default(&sp);
    sp.n_codebooks = N_Q;
    int equal = 0, total = 0;
    double worst = 0;
    for (int s = 0; s < SLOTS; s++) {
        struct mimi_encoder *e = mimi_encoder_create(gpu, &sp, NULL);
        struct mimi_decoder *d = mimi_decoder_create(gpu, &sp, NULL);
        for (int f = 0; f < F; f++) {
            int32_t c[N_Q];
            static float p[FRAME];
            CHECK_EQ(mimi_encoder_step(e, clip + ((size_t)s * 7 + f) * FRAME, c), MIMI_OK);
            for (int q = 0; q < N_Q; q++) equal += c[q] == codes[s][f][q];
            total += N_Q;
            // the lone decoder takes the batch's codes, so PCM compares like for like
            CHECK_EQ(mimi_decoder_step(d, codes[s][f], p), MIMI_OK);
            double err = rel_l2(pcm[s][f], p, FRAME);
            if (err > worst) worst = err;
        }
        mimi_encoder_destroy(e);
        mimi_decoder_destroy(d);
    }
    printf("  batch slots vs lone streams: codes equal %d/%d, worst frame pcm rel_l2 %.3e\n", equal, total, worst);
    CHECK(equal >= total * 995 / 1000);
    CHECK(worst <= 1e-5);
    // reset: slot 2 starts over and matches a fresh stream's first frame
    CHECK_EQ(mimi_batch_reset(enc, 2), MIMI_OK);
    int slot = 2;
    int32_t again[N_Q];
    CHECK_EQ(mimi_batch_encode(enc, 1, &slot, clip + (size_t)14 * FRAME, again), MIMI_OK);
    CHECK(memcmp(again, codes[2][0], sizeof again) == 0);
    mimi_batch_destroy(enc);
    mimi_batch_destroy(dec);
}

#ifdef MIMI_TEST_CUDA_RUNTIME
// The persistent kernels' versioned words zeroed between steps (as the batch does every
// GPU_VERSION_PERIOD launches) change nothing: a schedule of one- and three-slot steps (so that
// the larger bucket's words lie untouched across the small steps) gives the same codes and PCM,
// bit for bit, with the words zeroed before every other step (clear 1) as without (clear 0), and
// with the batches brought to three launches before the period's end (clear 2), so that the
// steps' own count zeroes them during the third step and counts on from there.
enum { VERSION_STEPS = 10 };
static void version_run(int clear, int32_t *codes, float *pcm) {
    struct mimi_batch *enc, *dec;
    if (batch_pair(gpu, CAPACITY, SLOTS, &enc, &dec)) return;
    enum { STEPS = VERSION_STEPS };
    if (clear == 2) {
        const uint32_t near_end = GPU_VERSION_PERIOD - 3;
        CHECK_EQ(mimi_cuda_launches(enc, &near_end), near_end);
        CHECK_EQ(mimi_cuda_launches(dec, &near_end), near_end);
    }
    int done[SLOTS] = {0};
    for (int step = 0; step < STEPS; step++) {
        const int n = step % 3 == 2 ? SLOTS : 1;
        int list[SLOTS];
        static float in[SLOTS * FRAME];
        for (int k = 0; k < n; k++) {
            list[k] = (step + k) % SLOTS;
            memcpy(in + (size_t)k * FRAME, clip + ((size_t)list[k] * 7 + done[list[k]]) * FRAME, sizeof(float) * FRAME);
        }
        if (clear == 1 && step % 2) {
            CHECK_EQ(mimi_cuda_clear_versions(enc), MIMI_OK);
            CHECK_EQ(mimi_cuda_clear_versions(dec), MIMI_OK);
        }
        int32_t *c = codes + (size_t)step * SLOTS * N_Q;
        CHECK_EQ(mimi_batch_encode(enc, n, list, in, c), MIMI_OK);
        CHECK_EQ(mimi_batch_decode(dec, n, list, c, pcm + (size_t)step * SLOTS * FRAME), MIMI_OK);
        for (int k = 0; k < n; k++) done[list[k]]++;
    }
    if (clear == 2) {  // zeroed at the period's end, then the seven steps after it counted
        printf("  launches counted after the period's end: encode %u, decode %u (7 each)\n",
               (unsigned)mimi_cuda_launches(enc, NULL), (unsigned)mimi_cuda_launches(dec, NULL));
        CHECK_EQ(mimi_cuda_launches(enc, NULL), STEPS - 3);
        CHECK_EQ(mimi_cuda_launches(dec, NULL), STEPS - 3);
    }
    mimi_batch_destroy(enc);
    mimi_batch_destroy(dec);
}

static void test_version_clear(void) {
    enum { STEPS = VERSION_STEPS };
    static int32_t codes[3][STEPS * SLOTS * N_Q];
    static float pcm[3][STEPS * SLOTS * FRAME];
    for (int clear = 0; clear < 3; clear++) version_run(clear, codes[clear], pcm[clear]);
    for (int clear = 1; clear < 3; clear++) {
        double worst = 0;
        for (size_t i = 0; i < (size_t)STEPS * SLOTS * FRAME; i++)
            if (fabs((double)pcm[0][i] - pcm[clear][i]) > worst) worst = fabs((double)pcm[0][i] - pcm[clear][i]);
        printf("  versioned words zeroed %s: codes %s, pcm max |diff| %.3e\n",
               clear == 1 ? "between steps" : "at the period's end",
               memcmp(codes[0], codes[clear], sizeof codes[0]) ? "DIFFER" : "equal", worst);
        CHECK(memcmp(codes[0], codes[clear], sizeof codes[0]) == 0);
        CHECK(worst == 0);
    }
}
#endif

// ---- bad input ----

// A device batch refuses PCM with a NaN or infinity as it stages it: the step and the submit
// name the first bad sample and queue nothing; the slots then step on as if it never came.
static void test_bad_pcm(void) {
    struct mimi_batch *enc, *dec;
    if (batch_pair(gpu, 2, 2, &enc, &dec)) return;
    static float in[2 * FRAME];
    int32_t codes[2 * N_Q], again[2 * N_Q];
    int list[2] = {0, 1};
    memcpy(in, clip, sizeof in);
    in[FRAME + 5] = NAN;
    CHECK_EQ(mimi_batch_encode(enc, 2, list, in, codes), MIMI_EINVAL);
    CHECK(strstr(mimi_batch_errmsg(enc), "sample value 1925 is NaN or infinite") != NULL);
    in[FRAME + 5] = clip[FRAME + 5];
    in[0] = -INFINITY;
    CHECK_EQ(mimi_batch_submit_encode(enc, 2, list, in), MIMI_EINVAL);
    CHECK(strstr(mimi_batch_errmsg(enc), "sample value 0 is NaN or infinite") != NULL);
    CHECK_EQ(mimi_batch_collect(enc, codes), MIMI_ESTATE);  // nothing was queued
    in[0] = clip[0];
    CHECK_EQ(mimi_batch_encode(enc, 2, list, in, codes), MIMI_OK);
    // a fresh batch's first step on the same input gives the same codes: the refused steps left no trace
    struct mimi_batch *enc2, *dec2;
    if (batch_pair(gpu, 2, 2, &enc2, &dec2) == 0) {
        CHECK_EQ(mimi_batch_encode(enc2, 2, list, in, again), MIMI_OK);
        CHECK(memcmp(codes, again, sizeof codes) == 0);
        mimi_batch_destroy(enc2);
        mimi_batch_destroy(dec2);
    }
    mimi_batch_destroy(enc);
    mimi_batch_destroy(dec);
    // a step large enough that the two host threads share the copy: the first bad sample is
    // named whichever thread's share it falls in
    enum { WIDE_N = BAD_SAMPLES_SLOTS };
    if (batch_pair(gpu, WIDE_N, WIDE_N, &enc, &dec)) return;
    float *wide = calloc((size_t)WIDE_N * FRAME, sizeof(float));
    int32_t *wide_codes = malloc(sizeof(int32_t) * WIDE_N * N_Q);
    int wide_list[WIDE_N];
    for (int s = 0; s < WIDE_N; s++) wide_list[s] = s;
    if (wide && wide_codes) check_bad_samples(enc, wide, wide_codes);
    CHECK_EQ(mimi_batch_encode(enc, WIDE_N, wide_list, wide, wide_codes), MIMI_OK);
    free(wide), free(wide_codes);
    mimi_batch_destroy(enc);
    mimi_batch_destroy(dec);
}

// ---- large steps' copies in pieces ----

// A step's PCM of more than 8 MB is checked, copied and sent in pieces, and its output copied
// back in pieces (cuda_step.cu): the same codes and PCM as the same step from the batches' own
// rows (one copy each way), and a NaN in a later piece is named by its place in the whole input,
// the step refused with the pieces before it already sent.
#define PIECES_N 2400  // 18 MB of PCM each way: 4 pieces (FAST_INT8_KV: 2.2 MB of state a slot)
static void test_copy_pieces(void) {
    struct mimi_batch *enc, *dec;
    if (batch_pair(gpu_int8kv, PIECES_N, PIECES_N, &enc, &dec)) return;
    float *in = malloc(sizeof(float) * PIECES_N * FRAME), *pcm = malloc(sizeof(float) * PIECES_N * FRAME);
    int32_t *codes = malloc(sizeof(int32_t) * PIECES_N * N_Q), *again = malloc(sizeof(int32_t) * PIECES_N * N_Q);
    static int list[PIECES_N];
    CHECK(in && pcm && codes && again);
    if (!in || !pcm || !codes || !again) goto out;
    for (int s = 0; s < PIECES_N; s++) {
        list[s] = s;
        memcpy(in + (size_t)s * FRAME, clip + (size_t)(s % 24) * FRAME, sizeof(float) * FRAME);
    }
    const size_t bad = (size_t)(PIECES_N - 3) * FRAME + 7;  // in the last piece
    in[bad] = NAN;
    CHECK_EQ(mimi_batch_encode(enc, PIECES_N, list, in, codes), MIMI_EINVAL);
    char want[64];
    snprintf(want, sizeof want, "sample value %zu is NaN or infinite", bad);
    CHECK(strstr(mimi_batch_errmsg(enc), want) != NULL);
    CHECK_EQ(mimi_batch_collect(enc, codes), MIMI_ESTATE);
    in[bad] = clip[(size_t)((PIECES_N - 3) % 24) * FRAME + 7];
    CHECK_EQ(mimi_batch_encode(enc, PIECES_N, list, in, codes), MIMI_OK);
    CHECK_EQ(mimi_batch_decode(dec, PIECES_N, list, codes, pcm), MIMI_OK);
    // the same first step from the batches' own rows
    for (int s = 0; s < PIECES_N; s++) {
        CHECK_EQ(mimi_batch_reset(enc, s), MIMI_OK);
        CHECK_EQ(mimi_batch_reset(dec, s), MIMI_OK);
    }
    float *rows = mimi_batch_input_rows(enc);
    CHECK(rows != NULL);
    if (!rows) goto out;
    memcpy(rows, in, sizeof(float) * PIECES_N * FRAME);
    CHECK_EQ(mimi_batch_encode(enc, PIECES_N, list, rows, again), MIMI_OK);
    CHECK(memcmp(codes, again, sizeof(int32_t) * PIECES_N * N_Q) == 0);
    CHECK_EQ(mimi_batch_submit_decode(dec, PIECES_N, list, again), MIMI_OK);
    CHECK_EQ(mimi_batch_collect(dec, NULL), MIMI_OK);
    const float *out_rows = mimi_batch_output_rows(dec);
    CHECK(out_rows && memcmp(out_rows, pcm, sizeof(float) * PIECES_N * FRAME) == 0);
    printf("  %d slots, PCM copied in pieces vs in place: codes and pcm %s\n", PIECES_N,
           out_rows && !memcmp(codes, again, sizeof(int32_t) * PIECES_N * N_Q) &&
                   !memcmp(out_rows, pcm, sizeof(float) * PIECES_N * FRAME)
               ? "equal"
               : "DIFFER");
out:
    free(in), free(pcm), free(codes), free(again);
    mimi_batch_destroy(enc);
    mimi_batch_destroy(dec);
}

// ---- asynchronous steps ----

static void test_async(void) {
    struct mimi_batch_params bp;
    mimi_batch_params_default(&bp);
    bp.capacity = 2;
    bp.n_codebooks = N_Q;
    struct mimi_batch *a = mimi_batch_create(gpu, &bp, NULL), *b = mimi_batch_create(gpu, &bp, NULL);
    bp.direction = MIMI_DIRECTION_DECODE;
    struct mimi_batch *da = mimi_batch_create(gpu, &bp, NULL), *db = mimi_batch_create(gpu, &bp, NULL);
    CHECK(a && b && da && db);
    if (!a || !b || !da || !db) return;
    int slots[2] = {0, 1};
    for (int s = 0; s < 2; s++) {
        CHECK_EQ(mimi_batch_open(a), s);
        CHECK_EQ(mimi_batch_open(b), s);
        CHECK_EQ(mimi_batch_open(da), s);
        CHECK_EQ(mimi_batch_open(db), s);
    }
    int32_t dummy[2 * N_Q];
    CHECK_EQ(mimi_batch_collect(a, dummy), MIMI_ESTATE);
    int same_codes = 1, same_pcm = 1;
    for (int f = 0; f < 4; f++) {
        static float in[2 * FRAME], pa[2 * FRAME], pb[2 * FRAME];
        int32_t ca[2 * N_Q], cb[2 * N_Q];
        memcpy(in, clip + (size_t)f * FRAME, sizeof(float) * FRAME);
        memcpy(in + FRAME, clip + (size_t)(f + 30) * FRAME, sizeof(float) * FRAME);
        CHECK_EQ(mimi_batch_encode(a, 2, slots, in, ca), MIMI_OK);
        CHECK_EQ(mimi_batch_submit_encode(b, 2, slots, in), MIMI_OK);
        CHECK_EQ(mimi_batch_submit_encode(b, 2, slots, in), MIMI_ESTATE);  // one outstanding step
        CHECK_EQ(mimi_batch_collect(b, cb), MIMI_OK);
        same_codes &= memcmp(ca, cb, sizeof ca) == 0;
        CHECK_EQ(mimi_batch_decode(da, 2, slots, ca, pa), MIMI_OK);
#ifdef MIMI_TEST_CUDA_RUNTIME
        // the same codes from device memory, laid out as an LM token buffer: 1 text + 8 audio
        int32_t host[2 * 9], *dev = NULL;
        for (int k = 0; k < 2; k++) {
            host[k * 9] = 77;
            memcpy(host + k * 9 + 1, ca + k * N_Q, sizeof(int32_t) * N_Q);
        }
        CHECK_EQ(cudaMalloc((void **)&dev, sizeof host), cudaSuccess);
        CHECK_EQ(cudaMemcpy(dev, host, sizeof host, cudaMemcpyHostToDevice), cudaSuccess);
        CHECK_EQ(mimi_batch_submit_decode_device(db, 2, slots, dev, 1, 9, NULL), MIMI_OK);
        CHECK_EQ(mimi_batch_collect(db, pb), MIMI_OK);
        cudaFree(dev);
#else
        CHECK_EQ(mimi_batch_submit_decode(db, 2, slots, ca), MIMI_OK);
        CHECK_EQ(mimi_batch_collect(db, pb), MIMI_OK);
#endif
        same_pcm &= memcmp(pa, pb, sizeof pa) == 0;
    }
    printf("  submit/collect vs synchronous: codes %s, decode from device codes %s\n", same_codes ? "identical" : "DIFFER",
           same_pcm ? "identical" : "DIFFER");
    CHECK(same_codes);
    CHECK(same_pcm);
#ifdef MIMI_TEST_CUDA_RUNTIME
    // a bad code in device memory: that slot does not advance, the other does
    int32_t host[2 * N_Q], *dev = NULL;
    for (int i = 0; i < 2 * N_Q; i++) host[i] = i * 37 % 2048;
    host[N_Q + 3] = 5000;
    static float pa[2 * FRAME], pb[2 * FRAME];
    CHECK_EQ(cudaMalloc((void **)&dev, sizeof host), cudaSuccess);
    CHECK_EQ(cudaMemcpy(dev, host, sizeof host, cudaMemcpyHostToDevice), cudaSuccess);
    CHECK_EQ(mimi_batch_submit_decode_device(db, 2, slots, dev, 0, N_Q, NULL), MIMI_OK);
    CHECK_EQ(mimi_batch_collect(db, pb), MIMI_EINVAL);
    printf("  bad device code: %s\n", mimi_batch_errmsg(db));
    cudaFree(dev);
    CHECK_EQ(mimi_batch_decode(da, 1, slots, host, pa), MIMI_OK);  // slot 0 advances in both
    // next step: both slots again, the twins must still agree (slot 1 did not advance in either)
    for (int i = 0; i < N_Q; i++) host[N_Q + i] = (i * 11 + 5) % 2048;
    CHECK_EQ(mimi_batch_decode(da, 2, slots, host, pa), MIMI_OK);
    CHECK_EQ(mimi_batch_decode(db, 2, slots, host, pb), MIMI_OK);
    CHECK_REL_L2(pb, pa, 2 * FRAME, 1e-5, "after a bad device code, twin batches");
#endif
    mimi_batch_destroy(a);
    mimi_batch_destroy(b);
    mimi_batch_destroy(da);
    mimi_batch_destroy(db);
}

// ---- profile ----

struct prof {
    int ops;
    double total;
};

static void on_op(void *user, const char *op, const char *stage, double us) {
    struct prof *p = user;
    (void)op;
    (void)stage;
    p->ops++;
    p->total += us;
}

static void test_profile(void) {
    struct mimi_batch_params bp;
    mimi_batch_params_default(&bp);
    bp.n_codebooks = N_Q;
    struct mimi_batch *enc = mimi_batch_create(gpu, &bp, NULL);
    bp.direction = MIMI_DIRECTION_DECODE;
    struct mimi_batch *dec = mimi_batch_create(gpu, &bp, NULL);
    CHECK(enc && dec);
    if (!enc || !dec) return;
    int slot = mimi_batch_open(enc);
    CHECK_EQ(mimi_batch_open(dec), 0);
    int32_t codes[N_Q];
    static float pcm[FRAME];
    struct prof pe = {0}, pd = {0};
    CHECK_EQ(mimi_batch_profile(enc, 1, &slot, clip, codes, on_op, &pe), MIMI_OK);
    CHECK_EQ(mimi_batch_profile(dec, 1, &slot, codes, pcm, on_op, &pd), MIMI_OK);
    printf("  profile: encode %d ops %.1f us, decode %d ops %.1f us\n", pe.ops, pe.total, pd.ops, pd.total);
    // an op each reported: at least the SEANets' 12 layer ops (19 and 18 ops in all in this build)
    CHECK(pe.ops >= 12 && pd.ops >= 12 && pe.total > 0 && pd.total > 0);
    mimi_batch_destroy(enc);
    mimi_batch_destroy(dec);
}

int main(int argc, char **argv) {
    test_init(argc, argv);
    if (!mimi_backend_available(MIMI_BACKEND_CUDA)) SKIP("no CUDA device");
    cpu = load(MIMI_BACKEND_CPU, MIMI_PRECISION_STRICT);
    gpu = load(MIMI_BACKEND_CUDA, MIMI_PRECISION_STRICT);
    gpu_fast = load(MIMI_BACKEND_CUDA, MIMI_PRECISION_FAST);
    gpu_bf16kv = load(MIMI_BACKEND_CUDA, MIMI_PRECISION_FAST_BF16_KV);
    gpu_bf16 = load(MIMI_BACKEND_CUDA, MIMI_PRECISION_FAST_BF16);
    gpu_int8kv = load(MIMI_BACKEND_CUDA, MIMI_PRECISION_FAST_INT8_KV);
    CHECK(strcmp(mimi_model_backend_name(gpu), "cuda") == 0);
    struct st_file refs;
    char err[256];
    if (st_open(&refs, MIMI_TEST_DATA "/refs_seed0.safetensors", err, sizeof err)) return 1;
    const struct st_tensor *t = st_find(&refs, "dev_speech_en.pcm_in");
    clip = malloc(sizeof(float) * t->n_elements);
    if (!clip || st_to_f32(t, clip)) return 1;
    clip_frames = t->n_elements / FRAME;
    st_close(&refs);
    if (clip_frames < FRAMES + 30) SKIP("clip too short");
#ifdef MIMI_TEST_CUDA_RUNTIME
    test_products();
    test_gemm_tune();
    test_bf16_operands();
#endif
    test_vs_cpu();
    test_batch_vs_lone();
#ifdef MIMI_TEST_CUDA_RUNTIME
    test_version_clear();
#endif
    test_fast_wide();
    test_fast_offline();
    test_offline_many();
    test_offline_long();
    test_offline_kept();
    test_offline_threads();
    test_bad_pcm();
    test_copy_pieces();
    test_async();
    check_rows_in_place(gpu, clip, FRAME);
    test_profile();
    free(clip);
    mimi_model_destroy(gpu_fast);
    mimi_model_destroy(gpu_bf16kv);
    mimi_model_destroy(gpu_bf16);
    mimi_model_destroy(gpu_int8kv);
    mimi_model_destroy(gpu);
    mimi_model_destroy(cpu);
    return test_summary();
}
