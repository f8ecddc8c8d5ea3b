/*
 * quantizer.c - Mimi's split residual vector quantizer (spec section 4).
 *
 * Encode: codebook 0 quantizes in_first . latent; codebooks 1.. quantize in_rest . latent (the
 * same latent, not what the semantic stage left) as an ordinary residual VQ. Decode: each part's
 * codebook entries are summed, projected back with its own out projection, and the two summed.
 */
#include <string.h>

#include "nn.h"
#include "ops.h"

size_t quantizer_work_floats(const struct quantizer *q, int n) {
    // latents transposed (n, latent), residuals (n, dim), scores (n, bins), sums (n, dim),
    // acoustic projections (latent, n)
    return (size_t)n * (2 * (size_t)q->latent + 2 * (size_t)q->dim + q->bins);
}

// For each of the n residuals r (n, dim): code = nearest entry of `book`; r -= that entry.
static void nearest_codes(const struct quantizer *q, int level, float *r, int n, int32_t *codes,
                          int stride, float *scores, int subtract) {
    const int dim = q->dim, bins = q->bins;
    const float *book = q->codebooks + (size_t)level * bins * dim;
    const float *norms = q->norms + (size_t)level * bins;
    // scores (n, bins) = r . book^T: the codebook is read once for all slots
    mimi_linear_apply(&q->lin_books[level], n, r, dim, scores, 1, bins);
    for (int s = 0; s < n; s++) {
        int code = mimi_argmin_distance(norms, scores + (size_t)s * bins, bins);
        codes[(size_t)s * stride] = code;
        if (subtract)
            for (int i = 0; i < dim; i++) r[(size_t)s * dim + i] -= book[(size_t)code * dim + i];
    }
}

void quantizer_encode(const struct quantizer *q, const float *latent, int n, int n_codebooks,
                      int32_t *codes, float *work) {
    const int dim = q->dim, D = q->latent;
    float *xt = work, *r = xt + (size_t)n * D, *scores = r + (size_t)n * dim;
    // latents (D, n) -> rows (n, D)
    for (int c = 0; c < D; c++)
        for (int s = 0; s < n; s++) xt[(size_t)s * D + c] = latent[(size_t)c * n + s];
    // semantic: nearest entry of codebook 0 to in_first . latent
    mimi_linear_apply(q->lin_in_first, n, xt, D, r, 1, dim);
    nearest_codes(q, 0, r, n, codes, n_codebooks, scores, 0);
    if (n_codebooks < 2) return;
    // acoustic: residual VQ of in_rest . latent (the same latent, not the semantic residual)
    mimi_linear_apply(q->lin_in_rest, n, xt, D, r, 1, dim);
    for (int k = 1; k < n_codebooks; k++) nearest_codes(q, k, r, n, codes + k, n_codebooks, scores, 1);
}

void quantizer_decode(const struct quantizer *q, const int32_t *codes, int n, int n_codebooks,
                      float *latent, float *work) {
    const int dim = q->dim, bins = q->bins, D = q->latent;
    float *e0 = work, *sum = e0 + (size_t)n * dim, *acoustic = sum + (size_t)n * dim;
    for (int s = 0; s < n; s++) {
        const int32_t *c = codes + (size_t)s * n_codebooks;
        // E_0[c_0], and sum_k E_k[c_k] over the acoustic levels (summed before projecting)
        memcpy(e0 + (size_t)s * dim, q->codebooks + (size_t)c[0] * dim, sizeof(float) * dim);
        memset(sum + (size_t)s * dim, 0, sizeof(float) * dim);
        for (int k = 1; k < n_codebooks; k++) {
            const float *e = q->codebooks + ((size_t)k * bins + c[k]) * dim;
            for (int i = 0; i < dim; i++) sum[(size_t)s * dim + i] += e[i];
        }
    }
    // latent (D, n) = out_first . E_0 + out_rest . sum
    mimi_linear_apply(q->lin_out_first, n, e0, dim, latent, n, 1);
    if (n_codebooks < 2) return;
    mimi_linear_apply(q->lin_out_rest, n, sum, dim, acoustic, n, 1);
    for (size_t i = 0; i < (size_t)D * n; i++) latent[i] += acoustic[i];
}
