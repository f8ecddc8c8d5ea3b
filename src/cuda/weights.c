/*
 * weights.c - the model's tensors as the GPU plans read them (plan.h, "weights"): which geometry
 * the plans cover, the packed and transposed forms of the convs, their bfloat16 copies and mma
 * fragment orders for the fast modes, and the mapping of every tensor through the executor's
 * callback (a device upload, or the identity for the CPU emulator).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "plan.h"

#define MAP(dst, src, n)                                    \
    do {                                                    \
        if ((src) && !rc) {                                 \
            (dst) = map(ctx, (src), (size_t)(n));           \
            if (!(dst)) rc = MIMI_ENOMEM;                   \
        }                                                   \
    } while (0)

static int depthwise(const struct mimi_conv *c) { return c->groups == c->c_in && c->groups == c->c_out; }

int gpu_check_model(const struct mimi_model *m) {
    const struct transformer *trs[2] = {&m->enc_tr, &m->dec_tr};
    for (int i = 0; i < 2; i++) {
        const struct transformer *t = trs[i];
        if (t->n_layers > GPU_MAX_LAYERS || t->head_dim > GPU_MAX_HEAD_DIM || t->head_dim % 4 ||
            t->d_model % 4 || (t->head_dim <= 128 && (t->head_dim / 4 & (t->head_dim / 4 - 1)))) {
            mimi_log(m, MIMI_LOG_ERROR, "cuda: transformer geometry (%d layers, head dim %d) not supported",
                     t->n_layers, t->head_dim);
            return MIMI_EUNSUPPORTED;
        }
    }
    const struct seanet *sns[2] = {&m->encoder, &m->decoder};
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < sns[i]->n_layers; j++) {
            const struct seanet_layer *l = &sns[i]->layers[j];
            if (l->kind == SEANET_ELU) continue;
            const struct mimi_conv *c = &l->conv;
            int ok = c->kernel >= c->stride && (c->groups == 1 || (c->transposed && depthwise(c)));
            if (!ok || (j == 0 && l->kind != SEANET_CONV)) {
                mimi_log(m, MIMI_LOG_ERROR, "cuda: SEANet layer %d (kernel %d, stride %d, groups %d) not supported",
                         j, c->kernel, c->stride, c->groups);
                return MIMI_EUNSUPPORTED;
            }
        }
    if (m->downsample.groups != 1 || !depthwise(&m->upsample) ||
        m->downsample.kernel < m->downsample.stride) {
        mimi_log(m, MIMI_LOG_ERROR, "cuda: resampling convs not supported");
        return MIMI_EUNSUPPORTED;
    }
    return MIMI_OK;
}

// Rotary frequencies exactly as mimi_rope computes them: exp(i * (-ln(max_period) * 2 / hd)).
static void rope_table(float *out, const struct transformer *t) {
    float step = (float)(-log((double)t->max_period) * 2.0 / t->head_dim);
    for (int i = 0; i < t->head_dim / 2; i++) out[i] = expf((float)i * step);
}

int gpu_conv_ld(int k) { return (k + 3) & ~3; }

int gpu_conv_ld_bf16(int k) { return (k + 7) & ~7; }

// n zeroed floats on the host that gpu_weights_release frees; NULL when out of memory or room.
static float *owned_floats(struct gpu_weights *w, size_t n) {
    if (w->n_owned == (int)(sizeof w->owned / sizeof w->owned[0])) return NULL;
    float *p = calloc(n, sizeof(float));
    if (p) w->owned[w->n_owned++] = p;
    return p;
}

// A conv's weight (c_out, c_in*K) with its bias appended as column c_in*K (zeros without bias),
// so that the product over an im2col matrix with a row of ones adds the bias. Rows are padded
// with zeros to gpu_conv_ld(c_in*K + 1) floats (16-byte aligned rows).
static const float *map_with_bias(struct gpu_weights *w, const struct mimi_conv *c, gpu_map_fn map, void *ctx) {
    const size_t ck = (size_t)c->c_in * c->kernel, ld = (size_t)gpu_conv_ld((int)ck + 1);
    float *packed = owned_floats(w, ld * c->c_out);
    if (!packed) return NULL;
    for (int o = 0; o < c->c_out; o++) {
        memcpy(packed + o * ld, c->weight + o * ck, sizeof(float) * ck);
        packed[o * ld + ck] = c->bias ? c->bias[o] : 0.0f;
    }
    return map(ctx, packed, ld * c->c_out);
}

// A conv's weight transposed, outputs contiguous: (c_in*K + 1, c_out), row i*K + k holding
// w[o, i, k] for every o and the last row the bias (zeros without bias); for op_resblock.
static const float *map_transposed(struct gpu_weights *w, const struct mimi_conv *c, gpu_map_fn map, void *ctx) {
    const size_t ck = (size_t)c->c_in * c->kernel;
    float *packed = owned_floats(w, (ck + 1) * c->c_out);
    if (!packed) return NULL;
    for (int o = 0; o < c->c_out; o++) {
        for (size_t k = 0; k < ck; k++) packed[k * c->c_out + o] = c->weight[o * ck + k];
        packed[ck * c->c_out + o] = c->bias ? c->bias[o] : 0.0f;
    }
    return map(ctx, packed, (ck + 1) * c->c_out);
}

// n zeroed bfloat16 values on the host, two to an owned float (owned_floats), and their mapping.
static uint16_t *owned_bf16(struct gpu_weights *w, size_t n) { return (uint16_t *)owned_floats(w, (n + 1) / 2); }
static const float *map_owned_bf16(const uint16_t *h, size_t n, gpu_map_fn map, void *ctx) {
    return h ? map(ctx, (const float *)h, (n + 1) / 2) : NULL;
}

// n values of `src` in bfloat16 (mimi_to_bf16), for mapping.
static const float *map_bf16(struct gpu_weights *w, const float *src, size_t n, gpu_map_fn map, void *ctx) {
    uint16_t *h = owned_bf16(w, n);
    for (size_t i = 0; h && i < n; i++) h[i] = mimi_to_bf16(src[i]);
    return map_owned_bf16(h, n, map, ctx);
}

// map_with_bias's packing in bfloat16, rows padded to gpu_conv_ld_bf16(c_in*K + 1) values.
static const float *map_with_bias_bf16(struct gpu_weights *w, const struct mimi_conv *c, gpu_map_fn map, void *ctx) {
    const size_t ck = (size_t)c->c_in * c->kernel, ld = (size_t)gpu_conv_ld_bf16((int)ck + 1), n = ld * c->c_out;
    uint16_t *h = owned_bf16(w, n);
    for (int o = 0; h && o < c->c_out; o++) {
        for (size_t k = 0; k < ck; k++) h[o * ld + k] = mimi_to_bf16(c->weight[o * ck + k]);
        h[o * ld + ck] = mimi_to_bf16(c->bias ? c->bias[o] : 0.0f);
    }
    return map_owned_bf16(h, n, map, ctx);
}

// A conv's weight (c_out, c_in*K) in bfloat16 in mma fragment order (gpu_mma_fragment_index),
// as a (c_out, K*c_in) matrix whose reduction is tap-major: column k*c_in + i holds w[o, i, k].
static const float *map_fragments(struct gpu_weights *w, const struct mimi_conv *c, gpu_map_fn map, void *ctx) {
    const int rows = c->c_out, K = c->kernel, cols = c->c_in * K;
    const size_t n = (size_t)rows * cols;
    uint16_t *h = owned_bf16(w, n);
    for (int o = 0; h && o < rows; o++)
        for (int i = 0; i < c->c_in; i++)
            for (int k = 0; k < K; k++)
                h[gpu_mma_fragment_index(rows, o, k * c->c_in + i)] = mimi_to_bf16(c->weight[((size_t)o * c->c_in + i) * K + k]);
    return map_owned_bf16(h, n, map, ctx);
}

// Whether a resblock's convs fit op_resblock_mma (at some step count: the plan checks T).
static int resblock_mma_fits(const struct seanet_layer *l) {
    const struct mimi_conv *c = &l->conv;
    return GPU_RESBLOCK_MMA_FITS(c->c_in, c->c_out, GPU_RESBLOCK_MMA_TILE) && c->kernel == GPU_RESBLOCK_K &&
           c->stride == 1 && c->groups == 1 && !c->replicate_first && l->conv2.kernel == 1 && l->conv2.groups == 1;
}

// Whether a conv fits op_conv_mma (at some step count: the plan checks T).
static int conv_mma_fits(const struct mimi_conv *c) {
    const int tile = c->stride == 4 ? GPU_CONV_MMA_TILE_S4 : GPU_CONV_MMA_TILE_S5;
    return GPU_CONV_MMA_FITS(c->c_in, c->c_out, c->kernel, c->stride, c->stride * tile) && c->groups == 1 &&
           !c->replicate_first;
}

// A dense transposed conv's packed weight (c_out*K, c_in), K = 2S, in bfloat16 in mma fragment
// order as op_convtr_mma's (c_out*S, 2*c_in) matrix: row o*S + f, column s*c_in + i holding
// W[o, f + s*S][i].
static const float *map_convtr_fragments(struct gpu_weights *w, const struct mimi_conv *c, gpu_map_fn map, void *ctx) {
    const int S = c->stride, rows = c->c_out * S, cols = 2 * c->c_in;
    const size_t n = (size_t)rows * cols;
    uint16_t *h = owned_bf16(w, n);
    for (int o = 0; h && o < c->c_out; o++)
        for (int f = 0; f < S; f++)
            for (int s = 0; s < 2; s++)
                for (int i = 0; i < c->c_in; i++)
                    h[gpu_mma_fragment_index(rows, o * S + f, s * c->c_in + i)] =
                        mimi_to_bf16(c->weight_t[((size_t)o * c->kernel + f + s * S) * c->c_in + i]);
    return map_owned_bf16(h, n, map, ctx);
}

static int bind_seanet(struct gpu_weights *w, struct gpu_conv_w *out, const struct seanet *s, gpu_map_fn map,
                       void *ctx, int bf16) {
    for (int i = 0; i < s->n_layers; i++) {
        const struct seanet_layer *l = &s->layers[i];
        const struct mimi_conv *c = &l->conv;
        if (l->kind == SEANET_ELU) continue;
        if (l->kind == SEANET_CONVTR) {
            // a dense transposed conv runs as one product with its packed (c_out*K, c_in) weight
            int rc = MIMI_OK;
            MAP(out[i].w, c->groups == 1 ? c->weight_t : c->weight, (size_t)c->c_out * c->kernel * (c->groups == 1 ? c->c_in : 1));
            MAP(out[i].b, c->bias, c->c_out);
            if (rc) return rc;
            if (bf16 && c->groups == 1) {
                out[i].w_bf16 = map_bf16(w, c->weight_t, (size_t)c->c_out * c->kernel * c->c_in, map, ctx);
                if (!out[i].w_bf16) return MIMI_ENOMEM;
                // op_convtr_mma's (at some step count: the plan checks T)
                if (GPU_CONVTR_MMA_FITS(c->c_in, c->c_out, c->kernel, c->stride, 96) &&
                    !(out[i].wf = map_convtr_fragments(w, c, map, ctx)))
                    return MIMI_ENOMEM;
            }
            continue;
        }
        out[i].w = map_with_bias(w, c, map, ctx);
        if (out[i].w && bf16) out[i].w_bf16 = map_with_bias_bf16(w, c, map, ctx);
        if (!out[i].w || (bf16 && !out[i].w_bf16)) return MIMI_ENOMEM;
        // op_conv_mma's (at some step count: the plan checks T)
        if (bf16 && l->kind == SEANET_CONV && conv_mma_fits(c) && !(out[i].wf = map_fragments(w, c, map, ctx)))
            return MIMI_ENOMEM;
        if (l->kind != SEANET_RESBLOCK) continue;
        out[i].w2 = map_with_bias(w, &l->conv2, map, ctx);
        if (out[i].w2 && bf16) out[i].w2_bf16 = map_with_bias_bf16(w, &l->conv2, map, ctx);
        if (!out[i].w2 || (bf16 && !out[i].w2_bf16)) return MIMI_ENOMEM;
        if (bf16 && resblock_mma_fits(l)) {
            out[i].wf = map_fragments(w, c, map, ctx);
            out[i].w2f = map_fragments(w, &l->conv2, map, ctx);
            if (!out[i].wf || !out[i].w2f) return MIMI_ENOMEM;
        }
        if (!GPU_RESBLOCK_FITS(c->c_in, c->c_out) && !GPU_RESBLOCK_STEP_FITS(c->c_in, c->c_out)) continue;
        out[i].w1t = map_transposed(w, c, map, ctx);
        out[i].w2t = map_transposed(w, &l->conv2, map, ctx);
        if (!out[i].w1t || !out[i].w2t) return MIMI_ENOMEM;
    }
    return MIMI_OK;
}

void gpu_weights_release(struct gpu_weights *w) {
    for (int i = 0; i < w->n_owned; i++) free(w->owned[i]);
    w->n_owned = 0;
}

static int bind_transformer(struct gpu_weights *ws, struct gpu_layer_w *out, const struct transformer *t,
                            gpu_map_fn map, void *ctx, int bf16) {
    int rc = MIMI_OK;
    const size_t d = (size_t)t->d_model, ff = (size_t)t->d_ff;
    for (int l = 0; l < t->n_layers; l++) {
        const struct transformer_layer *w = &t->layers[l];
        MAP(out[l].norm1_w, w->norm1_w, d);
        MAP(out[l].norm1_b, w->norm1_b, d);
        MAP(out[l].in_proj, w->in_proj, 3 * d * d);
        MAP(out[l].out_proj, w->out_proj, d * d);
        MAP(out[l].norm2_w, w->norm2_w, d);
        MAP(out[l].norm2_b, w->norm2_b, d);
        MAP(out[l].linear1, w->linear1, ff * d);
        MAP(out[l].linear2, w->linear2, d * ff);
        MAP(out[l].scale1, w->scale1, d);
        MAP(out[l].scale2, w->scale2, d);
        if (rc || !bf16) continue;
        out[l].in_proj16 = map_bf16(ws, w->in_proj, 3 * d * d, map, ctx);
        out[l].linear1_16 = map_bf16(ws, w->linear1, ff * d, map, ctx);
        out[l].linear2_16 = map_bf16(ws, w->linear2, d * ff, map, ctx);
        if (!out[l].in_proj16 || !out[l].linear1_16 || !out[l].linear2_16) rc = MIMI_ENOMEM;
    }
    return rc;
}

int gpu_weights_bind(struct gpu_weights *w, const struct mimi_model *m, gpu_map_fn map, void *ctx) {
    int rc = gpu_check_model(m);
    if (rc) return rc;
    gpu_weights_release(w);  // `w` is zeroed or bound before
    memset(w, 0, sizeof *w);
    rope_table(w->freq_host[0], &m->enc_tr);
    rope_table(w->freq_host[1], &m->dec_tr);
    const int bf16 = gpu_bf16_products(m->precision);
    rc = bind_seanet(w, w->enc, &m->encoder, map, ctx, bf16);
    if (!rc) rc = bind_seanet(w, w->dec, &m->decoder, map, ctx, bf16);
    if (!rc) rc = bind_transformer(w, w->enc_tr, &m->enc_tr, map, ctx, bf16);
    if (!rc) rc = bind_transformer(w, w->dec_tr, &m->dec_tr, map, ctx, bf16);
    MAP(w->enc_freq, w->freq_host[0], m->enc_tr.head_dim / 2);
    MAP(w->dec_freq, w->freq_host[1], m->dec_tr.head_dim / 2);
    const struct mimi_conv *dn = &m->downsample, *up = &m->upsample;
    MAP(w->down, dn->weight, (size_t)dn->c_out * dn->c_in * dn->kernel);
    if (!rc && bf16) {
        w->down_bf16 = map_bf16(w, dn->weight, (size_t)dn->c_out * dn->c_in * dn->kernel, map, ctx);
        if (!w->down_bf16) rc = MIMI_ENOMEM;
    }
    MAP(w->up, up->weight, (size_t)up->c_out * up->kernel);
    const struct quantizer *q = &m->quantizer;
    if (q->n_q > 0) {
        size_t proj = (size_t)q->dim * q->latent;
        MAP(w->in_first, q->in_first, proj);
        MAP(w->in_rest, q->in_rest, proj);
        float *both = rc ? NULL : owned_floats(w, 2 * proj);
        if (!rc && !both) rc = MIMI_ENOMEM;
        for (int o = 0; both && o < q->latent; o++) {
            memcpy(both + (size_t)o * 2 * q->dim, q->out_first + (size_t)o * q->dim, sizeof(float) * q->dim);
            memcpy(both + (size_t)(2 * o + 1) * q->dim, q->out_rest + (size_t)o * q->dim, sizeof(float) * q->dim);
        }
        MAP(w->out_both, both, 2 * proj);
        MAP(w->codebooks, q->codebooks, (size_t)q->n_q * q->bins * q->dim);
        MAP(w->norms, q->norms, (size_t)q->n_q * q->bins);
    } else {
        MAP(w->projection, q->projection, (size_t)q->latent * m->frame_dim);
    }
    return rc;
}
