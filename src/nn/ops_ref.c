/*
 * ops_ref.c - the scalar reference implementation of the primitive ops (see ops.h).
 *
 * Plain loops, one step per comment, no tricks beyond letting the compiler vectorise the inner
 * dot products (`omp simd` reductions; no OpenMP runtime is used). These define correct results.
 */
#include <math.h>

#include "ops.h"

// ---- matmul ----

static float dot(const float *a, const float *b, int n) {
    float s = 0.0f;
#pragma omp simd reduction(+ : s)
    for (int k = 0; k < n; k++) s += a[k] * b[k];
    return s;
}

void mimi_matmul_nt(int M, int N, int K, const float *a, int lda, const float *b, int ldb,
                    const float *bias, float *y, int y_ms, int y_ns) {
    for (int m = 0; m < M; m++) {
        const float *row = a + (size_t)m * lda;
        float b0 = bias ? bias[m] : 0.0f;
        for (int n = 0; n < N; n++) y[(size_t)m * y_ms + (size_t)n * y_ns] = b0 + dot(row, b + (size_t)n * ldb, K);
    }
}

// ---- activations ----

void mimi_elu(float *x, size_t n) {
    for (size_t i = 0; i < n; i++) x[i] = x[i] > 0.0f ? x[i] : expm1f(x[i]);
}

void mimi_gelu(float *x, size_t n) {
    for (size_t i = 0; i < n; i++) x[i] = 0.5f * x[i] * (1.0f + erff(x[i] * (float)M_SQRT1_2));
}

// ---- normalisation ----

void mimi_layer_norm(const float *x, float *y, int rows, int d, const float *w, const float *b,
                     float eps) {
    for (int r = 0; r < rows; r++) {
        const float *xr = x + (size_t)r * d;
        float *yr = y + (size_t)r * d;
        // mean and biased variance, accumulated in double
        double mean = 0.0, var = 0.0;
        for (int i = 0; i < d; i++) mean += xr[i];
        mean /= d;
        for (int i = 0; i < d; i++) var += ((double)xr[i] - mean) * ((double)xr[i] - mean);
        var /= d;
        float inv = (float)(1.0 / sqrt(var + eps));
        for (int i = 0; i < d; i++) yr[i] = ((xr[i] - (float)mean) * inv) * w[i] + b[i];
    }
}

// ---- rotary embedding ----

void mimi_rope(float *v, int head_dim, float pos, float max_period) {
    // frequency i = exp(i * (-ln(max_period) * 2 / head_dim)), all in f32 like the reference
    float step = (float)(-log((double)max_period) * 2.0 / head_dim);
    for (int i = 0; i < head_dim / 2; i++) {
        float freq = expf((float)i * step);
        float angle = freq * pos;
        float c = cosf(angle), s = sinf(angle);
        float re = v[2 * i], im = v[2 * i + 1];
        v[2 * i] = re * c - im * s;
        v[2 * i + 1] = re * s + im * c;
    }
}

// ---- nearest codebook entry ----

int mimi_argmin_distance(const float *norms, const float *dots, int bins) {
    int best = 0;
    float best_d = norms[0] - 2.0f * dots[0];
    for (int j = 1; j < bins; j++) {
        float d = norms[j] - 2.0f * dots[j];
        if (d < best_d) {
            best_d = d;
            best = j;
        }
    }
    return best;
}
