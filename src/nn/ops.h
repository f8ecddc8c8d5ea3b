/*
 * ops.h - the primitive operations the model code is written in.
 *
 * ops_ref.c holds the plain reference implementation of each: the definition of correct that
 * every faster path is tested against. Layouts are stated per op; "rows" are contiguous.
 */
#ifndef MIMI_OPS_H
#define MIMI_OPS_H

#include <stddef.h>

// y[m*y_ms + n*y_ns] = bias[m] + sum_k a[m*lda + k] * b[n*ldb + k]  for m < M, n < N.
// a: (M, K) rows; b: (N, K) rows; bias: (M) or NULL. y must not alias a or b.
void mimi_matmul_nt(int M, int N, int K, const float *a, int lda, const float *b, int ldb,
                    const float *bias, float *y, int y_ms, int y_ns);

// In place ELU with alpha 1: x > 0 ? x : expm1(x).  x: (n)
void mimi_elu(float *x, size_t n);

// In place exact GELU: 0.5 x (1 + erf(x / sqrt 2)).  x: (n)
void mimi_gelu(float *x, size_t n);

// y = (x - mean) / sqrt(var + eps) * w + b over each row of d values.  x, y: (rows, d)
void mimi_layer_norm(const float *x, float *y, int rows, int d, const float *w, const float *b,
                     float eps);

// Interleaved rotary embedding of one head vector at absolute position `pos`:
// pairs (v[2i], v[2i+1]) rotate by pos * max_period^(-2i/head_dim).  v: (head_dim)
void mimi_rope(float *v, int head_dim, float pos, float max_period);

// Index of the smallest norms[j] - 2 dots[j] over j < bins (the squared distance to entry j up to
// a constant); ties go to the lowest index.  norms, dots: (bins)
int mimi_argmin_distance(const float *norms, const float *dots, int bins);

#endif
