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

void quantizer_encode(const struct quantizer *q, const float *latent, int n, int32_t *codes,
                      float *scratch) {
    const int dim = q->dim, bins = q->bins;
    float *r = scratch, *scores = scratch + 2 * dim;  // r: (dim), scores: (bins)
    // semantic: nearest entry of codebook 0 to in_first . latent
    mimi_matmul_nt(dim, 1, q->latent, q->in_first, q->latent, latent, q->latent, NULL, r, 1, 1);
    codes[0] = mimi_nearest_code(q->codebooks, q->norms, bins, dim, r, scores);
    if (n < 2) return;
    // acoustic: residual VQ of in_rest . latent
    mimi_matmul_nt(dim, 1, q->latent, q->in_rest, q->latent, latent, q->latent, NULL, r, 1, 1);
    for (int k = 1; k < n; k++) {
        const float *book = q->codebooks + (size_t)k * bins * dim;
        int code = mimi_nearest_code(book, q->norms + (size_t)k * bins, bins, dim, r, scores);
        codes[k] = code;
        for (int i = 0; i < dim; i++) r[i] -= book[(size_t)code * dim + i];
    }
}

void quantizer_decode(const struct quantizer *q, const int32_t *codes, int n, float *latent,
                      float *scratch) {
    const int dim = q->dim, bins = q->bins;
    float *sum = scratch, *acoustic = scratch + dim;  // (dim), (latent)
    // semantic part: out_first . E_0[c_0]
    const float *e0 = q->codebooks + (size_t)codes[0] * dim;
    mimi_matmul_nt(q->latent, 1, dim, q->out_first, dim, e0, dim, NULL, latent, 1, 1);
    if (n < 2) return;
    // acoustic part: out_rest . sum_k E_k[c_k] (summed before projecting), added to the semantic
    memset(sum, 0, sizeof(float) * dim);
    for (int k = 1; k < n; k++) {
        const float *e = q->codebooks + ((size_t)k * bins + codes[k]) * dim;
        for (int i = 0; i < dim; i++) sum[i] += e[i];
    }
    mimi_matmul_nt(q->latent, 1, dim, q->out_rest, dim, sum, dim, NULL, acoustic, 1, 1);
    for (int o = 0; o < q->latent; o++) latent[o] += acoustic[o];
}
