/*
 * gemm_tune.cu - the cuBLASLt algorithm of a whole-signal plan's large strict products, chosen
 * once per model and shape, among the candidates that compute exactly what cuBLAS's default
 * does (ops.h, op_gemm.algo).
 *
 * cuBLAS's default for a shape is its heuristic's first choice. For the decoder's transposed
 * convs at whole-signal sizes another candidate runs 10-13% faster on an H200 (a 98304 x 1280 x
 * 256 product: 1,536 -> 1,358 us; bench/results/gpu-h200-2026-12-01.md). A candidate qualifies
 * only if it does not split the reduction (each output one ordered sum, as the default's) and
 * its output on random operands equals the default's bit for bit; the fastest of those is kept
 * when it beats the default by 2%. The choice can change a product's time, never its result:
 * which qualifying candidate wins a timing race does not show in any output. Tuning runs while
 * a batch is made, on temporary buffers, before its plan is captured; the model keeps each
 * shape's outcome for every later batch. Any failure while tuning leaves the default in place.
 */
#include <cublasLt.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "common.cuh"
#include "cuda/runtime.h"

#define TUNE_MIN_FLOP 8e9   // smaller products: the gain would not repay the tuning
#define TUNE_ENTRIES 128    // shapes one model remembers
#define TUNE_CANDIDATES 8   // heuristic candidates looked at
#define TUNE_GAIN 0.98      // a candidate must take at most this fraction of the default's time

struct gemm_key {
    int transa, transb, m, n, k, lda, ldb, ldc, accumulate;
};

struct gemm_tuning {
    pthread_mutex_t lock;
    int n;
    struct {
        struct gemm_key key;
        int tuned;  // 0: the default stays
        cublasLtMatmulAlgo_t algo;
    } e[TUNE_ENTRIES];
};

extern "C" struct gemm_tuning *mimi_cuda_tuning_new(void) {
    struct gemm_tuning *t = (struct gemm_tuning *)calloc(1, sizeof *t);
    if (t && pthread_mutex_init(&t->lock, NULL)) {
        free(t);
        return NULL;
    }
    return t;
}

extern "C" void mimi_cuda_tuning_free(struct gemm_tuning *t) {
    if (!t) return;
    pthread_mutex_destroy(&t->lock);
    free(t);
}

// ---- one product through cuBLASLt ----

struct lt_call {
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t a, b, c;
};

static void lt_free(struct lt_call *d) {
    if (d->op) cublasLtMatmulDescDestroy(d->op);
    if (d->a) cublasLtMatrixLayoutDestroy(d->a);
    if (d->b) cublasLtMatrixLayoutDestroy(d->b);
    if (d->c) cublasLtMatrixLayoutDestroy(d->c);
}

// The descriptors of g's product in strict f32 (column-major, as cublasGemmEx's arguments).
static cublasStatus_t lt_init(const struct op_gemm *g, struct lt_call *d) {
    *d = lt_call{};
    const cublasOperation_t ta = g->transa ? CUBLAS_OP_T : CUBLAS_OP_N, tb = g->transb ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasStatus_t st = cublasLtMatmulDescCreate(&d->op, CUBLAS_COMPUTE_32F, CUDA_R_32F);
    if (!st) st = cublasLtMatmulDescSetAttribute(d->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta);
    if (!st) st = cublasLtMatmulDescSetAttribute(d->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb);
    if (!st) st = cublasLtMatrixLayoutCreate(&d->a, CUDA_R_32F, g->transa ? g->k : g->m, g->transa ? g->m : g->k, g->lda);
    if (!st) st = cublasLtMatrixLayoutCreate(&d->b, CUDA_R_32F, g->transb ? g->n : g->k, g->transb ? g->k : g->n, g->ldb);
    if (!st) st = cublasLtMatrixLayoutCreate(&d->c, CUDA_R_32F, g->m, g->n, g->ldc);
    if (st) lt_free(d);
    return st;
}

static cublasStatus_t lt_run(const struct op_gemm *g, const struct lt_call *d, const cublasLtMatmulAlgo_t *algo,
                             const float *a, const float *b, float *c, const struct gpu_exec *ex) {
    const float alpha = 1.0f, beta = g->beta;
    return cublasLtMatmul((cublasLtHandle_t)ex->cublaslt, d->op, &alpha, a, d->a, b, d->b, &beta, c, d->c, c, d->c,
                          algo, ex->workspace, ex->workspace_bytes, STREAM(ex));
}

// g's product with its tuned algorithm (launch_gemm in matmul.cu runs the rest).
extern "C" int mimi_cuda_gemm_tuned(const struct op_gemm *g, struct gpu_exec *ex) {
    struct lt_call d;
    cublasStatus_t st = lt_init(g, &d);
    if (!st) st = lt_run(g, &d, (const cublasLtMatmulAlgo_t *)g->algo, g->a, g->b, g->c, ex);
    if (!st) lt_free(&d);
    if (!st) return MIMI_OK;
    if (ex->errmsg)
        snprintf(ex->errmsg, ex->errlen, "cublasLtMatmul (%d x %d x %d): %s", g->m, g->n, g->k,
                 cublasGetStatusString(st));
    return MIMI_EDEVICE;
}

// ---- tuning ----

__global__ void tune_fill(float *p, size_t n, uint32_t seed) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        uint32_t h = (uint32_t)i * 2654435761u ^ seed;
        h ^= h >> 13, h *= 0x5bd1e995u, h ^= h >> 15;
        p[i] = (float)(h & 0xffff) / 65536.0f - 0.5f;
    }
}

// *differ += the number of words in which x and y differ
__global__ void tune_compare(const uint32_t *x, const uint32_t *y, size_t n, unsigned long long *differ) {
    unsigned long long c = 0;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        c += x[i] != y[i];
    if (c) atomicAdd(differ, c);
}

// Temporary operands of g's shape: a and b random, c's random start in c0 (accumulating
// products only), the default's result in ref; `differ` a device counter.
struct tune_bufs {
    float *a, *b, *c, *c0, *ref;
    unsigned long long *differ;
    size_t na, nb, nc;
};

static void bufs_free(struct tune_bufs *t) {
    cudaFree(t->a), cudaFree(t->b), cudaFree(t->c), cudaFree(t->c0), cudaFree(t->ref), cudaFree(t->differ);
}

static int bufs_init(const struct op_gemm *g, struct tune_bufs *t, cudaStream_t s) {
    *t = tune_bufs{};
    t->na = (size_t)g->lda * (g->transa ? g->m : g->k);
    t->nb = (size_t)g->ldb * (g->transb ? g->k : g->n);
    t->nc = (size_t)g->ldc * g->n;
    if (cudaMalloc(&t->a, 4 * t->na) || cudaMalloc(&t->b, 4 * t->nb) || cudaMalloc(&t->c, 4 * t->nc) ||
        (g->beta != 0.0f && cudaMalloc(&t->c0, 4 * t->nc)) || cudaMalloc(&t->ref, 4 * t->nc) ||
        cudaMalloc(&t->differ, 8))
        return -1;
    tune_fill<<<1024, 256, 0, s>>>(t->a, t->na, 1);
    tune_fill<<<1024, 256, 0, s>>>(t->b, t->nb, 2);
    if (t->c0) tune_fill<<<1024, 256, 0, s>>>(t->c0, t->nc, 3);
    return cudaGetLastError() ? -1 : 0;
}

// Milliseconds of one run of run() (events on the stream; the caller has run it once), or -1.
template <typename F>
static float time_one(F run, cudaStream_t s) {
    cudaEvent_t e0, e1;
    float ms = -1.0f;
    if (cudaEventCreate(&e0)) return -1.0f;
    if (cudaEventCreate(&e1)) {
        cudaEventDestroy(e0);
        return -1.0f;
    }
    if (!cudaEventRecord(e0, s) && !run() && !cudaEventRecord(e1, s) && !cudaEventSynchronize(e1))
        cudaEventElapsedTime(&ms, e0, e1);
    cudaEventDestroy(e0), cudaEventDestroy(e1);
    return ms;
}

// The fastest qualifying candidate for g's shape into *algo; 0 when none beats the default.
static int choose(const struct op_gemm *g, const struct gpu_exec *ex, cublasLtMatmulAlgo_t *algo) {
    cudaStream_t s = STREAM(ex);
    struct tune_bufs t;
    struct lt_call d;
    int found = 0;
    if (bufs_init(g, &t, s) || lt_init(g, &d)) {
        bufs_free(&t);
        return 0;
    }
    const float alpha = 1.0f, beta = g->beta;
    auto restart = [&]() {  // C's start again (only an accumulating product reads it)
        return g->beta != 0.0f && cudaMemcpyAsync(t.c, t.c0, 4 * t.nc, cudaMemcpyDeviceToDevice, s) != cudaSuccess;
    };
    auto def = [&]() {
        return cublasGemmEx((cublasHandle_t)ex->cublas, g->transa ? CUBLAS_OP_T : CUBLAS_OP_N,
                            g->transb ? CUBLAS_OP_T : CUBLAS_OP_N, g->m, g->n, g->k, &alpha, t.a, CUDA_R_32F, g->lda,
                            t.b, CUDA_R_32F, g->ldb, &beta, t.c, CUDA_R_32F, g->ldc, CUBLAS_COMPUTE_32F,
                            CUBLAS_GEMM_DEFAULT) != CUBLAS_STATUS_SUCCESS;
    };
    cublasLtMatmulPreference_t pref = NULL;
    cublasLtMatmulHeuristicResult_t cand[TUNE_CANDIDATES];
    int n_cand = 0;
    float best = -1.0f;
    if (!restart() && !def() && !cudaMemcpyAsync(t.ref, t.c, 4 * t.nc, cudaMemcpyDeviceToDevice, s) &&
        !cublasLtMatmulPreferenceCreate(&pref) &&
        !cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ex->workspace_bytes,
                                              sizeof ex->workspace_bytes) &&
        !cublasLtMatmulAlgoGetHeuristic((cublasLtHandle_t)ex->cublaslt, d.op, d.a, d.b, d.c, d.c, pref,
                                        TUNE_CANDIDATES, cand, &n_cand))
        best = TUNE_GAIN * time_one(def, s);
    for (int i = 0; i < n_cand && best > 0.0f; i++) {
        int split = 1;
        size_t got = 0;
        if (cand[i].state != CUBLAS_STATUS_SUCCESS ||
            cublasLtMatmulAlgoConfigGetAttribute(&cand[i].algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &split, sizeof split,
                                                 &got) ||
            split > 1)
            continue;
        auto run = [&]() { return lt_run(g, &d, &cand[i].algo, t.a, t.b, t.c, ex) != CUBLAS_STATUS_SUCCESS; };
        unsigned long long differ = 1;
        if (restart() || cudaMemsetAsync(t.differ, 0, 8, s)) break;
        if (run()) continue;  // e.g. not supported for these operands
        tune_compare<<<1024, 256, 0, s>>>((const uint32_t *)t.c, (const uint32_t *)t.ref, t.nc, t.differ);
        if (cudaMemcpyAsync(&differ, t.differ, 8, cudaMemcpyDeviceToHost, s) || cudaStreamSynchronize(s)) break;
        if (differ) continue;
        const float ms = time_one(run, s);
        if (ms > 0.0f && ms < best) best = ms, *algo = cand[i].algo, found = 1;
    }
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    lt_free(&d);
    cudaStreamSynchronize(s);
    bufs_free(&t);
    cudaGetLastError();  // a failed tuning leaves the default; it must not fail a later launch check
    return found;
}

extern "C" void mimi_cuda_gemm_tune(struct op_gemm *g, const struct gpu_exec *ex, struct gemm_tuning *t) {
    // TF32 products are left alone: on an H200 no candidate with the default's bits beat it (the
    // product of test_gpu's test_gemm_tune; 64 files of 60 s within the run-to-run spread)
    if (!t || !ex->cublaslt || ex->precision != MIMI_PRECISION_STRICT || !mimi_cuda_gemm_on_cublas(g) ||
        2.0 * g->m * g->n * g->k < TUNE_MIN_FLOP)
        return;
    const struct gemm_key key = {g->transa, g->transb, g->m, g->n, g->k, g->lda, g->ldb, g->ldc, g->beta != 0.0f};
    pthread_mutex_lock(&t->lock);
    int i = 0;
    while (i < t->n && memcmp(&t->e[i].key, &key, sizeof key)) i++;
    if (i == t->n && i < TUNE_ENTRIES) {
        t->e[i].key = key;
        t->e[i].tuned = choose(g, ex, &t->e[i].algo);
        t->n++;
    }
    g->algo = i < t->n && t->e[i].tuned ? &t->e[i].algo : NULL;
    pthread_mutex_unlock(&t->lock);
}
