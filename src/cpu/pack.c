/*
 * pack.c - the model's weights in the layouts the fast kernels read, made once at load.
 *
 * Every matrix becomes panels of MR rows (kernels.h), f32 or bfloat16. The column order of a
 * conv is (input channel, tap), as in the reference's im2col; a dense transposed conv becomes
 * a polyphase conv: output row (channel o, phase r) = o * stride + r, columns (input channel i,
 * tap jj) for jj < J = ceil(kernel / stride), holding W[i, o, r + (J-1-jj) * stride], so that
 * tap jj reads input step t - (J-1-jj) (see src/nn/conv.c). Depthwise convs stay unpacked (the
 * reference code runs them; they are tiny).
 * Not here: when each layout is used (src/nn/), the kernels (kernels_impl.h).
 */
#include <string.h>

#include "cpu.h"

// ---- element conversion ----

uint16_t mimi_to_bf16(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);  // quiet NaN
    u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest even
    return (uint16_t)(u >> 16);
}

static float bf16_round(float x) {
    uint32_t u = (uint32_t)mimi_to_bf16(x) << 16;
    float r;
    memcpy(&r, &u, sizeof r);
    return r;
}

// ---- panels ----

// Value (m, j) of a matrix being packed.
typedef float (*element_fn)(const void *src, int m, int j);

struct matrix_src {
    const float *w;
    size_t ld;
};

static float matrix_element(const void *src, int m, int j) {
    const struct matrix_src *s = src;
    return s->w[(size_t)m * s->ld + j];
}

struct convtr_src {
    const struct mimi_conv *c;
    int taps;  // J
};

// W[i, o, r + (J-1-jj) * S] for row o*S + r and column i*J + jj, zero past the kernel.
static float convtr_element(const void *src, int m, int j) {
    const struct convtr_src *s = src;
    const struct mimi_conv *c = s->c;
    const int S = c->stride, o = m / S, r = m % S, i = j / s->taps, jj = j % s->taps;
    const int k = r + (s->taps - 1 - jj) * S;
    return k < c->kernel ? c->weight[((size_t)i * c->c_out + o) * c->kernel + k] : 0.0f;
}

static struct mimi_packed *pack(struct mimi_cpu *cpu, element_fn get, const void *src, int rows,
                                int cols, int bf16, int round_only) {
    const int mr = cpu->k->mr, panels = (rows + mr - 1) / mr;
    const size_t n = (size_t)panels * cols * mr;
    struct mimi_packed *p = mimi_cpu_alloc(cpu, sizeof *p);
    void *data = mimi_cpu_alloc(cpu, n * (bf16 ? 2 : 4));
    if (!p || !data) return NULL;
    memset(p, 0, sizeof *p);
    p->cpu = cpu;
    p->rows = rows;
    p->cols = cols;
    p->bf16 = bf16;
    p->panels = data;
    // panel q, column j, lane r <- element (q*mr + r, j); rows past the end are zero
    for (int q = 0; q < panels; q++)
        for (int j = 0; j < cols; j++)
            for (int r = 0; r < mr; r++) {
                const int m = q * mr + r;
                const float v = m < rows ? get(src, m, j) : 0.0f;
                const size_t at = ((size_t)q * cols + j) * mr + r;
                if (bf16) ((uint16_t *)data)[at] = mimi_to_bf16(v);
                else ((float *)data)[at] = round_only ? bf16_round(v) : v;
            }
    cpu->packed_bytes += (int64_t)rows * cols * (bf16 ? 2 : 4);
    return p;
}

// Pads a bias to whole panels; rows_per_value > 1 repeats each value (a polyphase convtr).
static const float *pad_bias(struct mimi_cpu *cpu, const float *bias, int rows,
                             int rows_per_value) {
    if (!bias) return NULL;
    const int mr = cpu->k->mr, padded = (rows + mr - 1) / mr * mr;
    float *b = mimi_cpu_alloc(cpu, sizeof(float) * (size_t)padded);
    if (!b) return NULL;
    for (int m = 0; m < padded; m++) b[m] = m < rows ? bias[m / rows_per_value] : 0.0f;
    return b;
}

struct mimi_packed *mimi_pack_matrix(struct mimi_cpu *cpu, const float *w, int rows, int cols,
                                     size_t ld, const float *bias, int bf16, int round_only) {
    struct matrix_src src = {w, ld};
    struct mimi_packed *p = pack(cpu, matrix_element, &src, rows, cols, bf16, round_only);
    if (p && bias && !(p->bias = pad_bias(cpu, bias, rows, 1))) return NULL;
    return p;
}

// ---- layers ----

// Packs a dense conv or transposed conv whose kernel sees `steps` steps per streaming frame:
// f32 when the direct kernel will run it (long time axis), else bf16 when asked for.
static int pack_conv(struct mimi_cpu *cpu, struct mimi_conv *c, int steps) {
    if (c->groups != 1) return 0;  // depthwise: reference code
    const int direct = steps >= MIMI_DIRECT_MIN_T;
    const int bf16 = cpu->bf16 && !direct, round_only = cpu->bf16 && direct;
    struct mimi_packed *p;
    if (!c->transposed) {
        p = mimi_pack_matrix(cpu, c->weight, c->c_out, c->c_in * c->kernel,
                             (size_t)c->c_in * c->kernel, c->bias, bf16, round_only);
        if (p) p->taps = c->kernel;
    } else {
        struct convtr_src src = {c, (c->kernel + c->stride - 1) / c->stride};
        const int rows = c->c_out * c->stride;
        p = pack(cpu, convtr_element, &src, rows, c->c_in * src.taps, bf16, round_only);
        if (p) p->taps = src.taps;
        if (p && c->bias && !(p->bias = pad_bias(cpu, c->bias, rows, c->stride))) p = NULL;
    }
    c->packed = p;
    return p ? 0 : MIMI_ENOMEM;
}

// Packs a SEANet stack; `steps` is its input length per frame.
static int pack_seanet(struct mimi_cpu *cpu, struct seanet *s, int steps) {
    int rc = 0;
    s->cpu = cpu;
    for (int i = 0; i < s->n_layers && !rc; i++) {
        struct seanet_layer *l = &s->layers[i];
        if (l->kind == SEANET_CONV) {
            steps /= l->conv.stride;
            rc = pack_conv(cpu, &l->conv, steps);
        } else if (l->kind == SEANET_CONVTR) {
            rc = pack_conv(cpu, &l->conv, steps);
            steps *= l->conv.stride;
        } else if (l->kind == SEANET_RESBLOCK) {
            rc = pack_conv(cpu, &l->conv, steps);
            if (!rc) rc = pack_conv(cpu, &l->conv2, steps);
        }
    }
    return rc;
}

static int pack_transformer(struct mimi_cpu *cpu, struct transformer *t) {
    const int d = t->d_model, ff = t->d_ff, h = cpu->bf16;
    t->cpu = cpu;
    for (int l = 0; l < t->n_layers; l++) {
        struct transformer_layer *w = &t->layers[l];
        w->p_in_proj = mimi_pack_matrix(cpu, w->in_proj, 3 * d, d, (size_t)d, NULL, h, 0);
        w->p_out_proj = mimi_pack_matrix(cpu, w->out_proj, d, d, (size_t)d, NULL, h, 0);
        w->p_linear1 = mimi_pack_matrix(cpu, w->linear1, ff, d, (size_t)d, NULL, h, 0);
        w->p_linear2 = mimi_pack_matrix(cpu, w->linear2, d, ff, (size_t)ff, NULL, h, 0);
        if (!w->p_in_proj || !w->p_out_proj || !w->p_linear1 || !w->p_linear2) return MIMI_ENOMEM;
    }
    return 0;
}

// A quantizer map as a struct mimi_linear, packed when the model has fast kernels.
static struct mimi_linear *linear(struct mimi_cpu *cpu, const float *w, int rows, int cols,
                                  int *rc) {
    struct mimi_linear *l = mimi_cpu_alloc(cpu, sizeof *l);
    if (!l) {
        *rc = MIMI_ENOMEM;
        return NULL;
    }
    *l = (struct mimi_linear){.rows = rows, .cols = cols, .weight = w};
    if (cpu->k && w &&
        !(l->packed = mimi_pack_matrix(cpu, w, rows, cols, (size_t)cols, NULL, cpu->bf16, 0)))
        *rc = MIMI_ENOMEM;
    return l;
}

static int pack_quantizer(struct mimi_cpu *cpu, struct quantizer *q, int frame_dim) {
    int rc = 0;
    if (!q->n_q) {
        q->lin_projection = linear(cpu, q->projection, q->latent, frame_dim, &rc);
        return rc;
    }
    q->lin_in_first = linear(cpu, q->in_first, q->dim, q->latent, &rc);
    q->lin_in_rest = linear(cpu, q->in_rest, q->dim, q->latent, &rc);
    q->lin_out_first = linear(cpu, q->out_first, q->latent, q->dim, &rc);
    q->lin_out_rest = linear(cpu, q->out_rest, q->latent, q->dim, &rc);
    q->lin_books = mimi_cpu_alloc(cpu, sizeof(struct mimi_linear) * (size_t)q->n_q);
    if (!q->lin_books) return MIMI_ENOMEM;
    // the codebooks stay f32 even with bf16 weights: the nearest-code search keeps its exact
    // distances (q->norms are those of the f32 entries), and codebooks are a tenth of the bytes
    const int bf16 = cpu->bf16;
    cpu->bf16 = 0;
    for (int k = 0; k < q->n_q && !rc; k++) {
        struct mimi_linear *l =
            linear(cpu, q->codebooks + (size_t)k * q->bins * q->dim, q->bins, q->dim, &rc);
        if (l) q->lin_books[k] = *l;
    }
    cpu->bf16 = bf16;
    return rc;
}

int mimi_pack_model(struct mimi_model *m) {
    struct mimi_cpu *cpu = m->cpu;
    int rc = pack_quantizer(cpu, &m->quantizer, m->frame_dim);
    if (rc || !cpu->k) return rc;
    rc = pack_seanet(cpu, &m->encoder, m->frame_size);
    if (!rc) rc = pack_seanet(cpu, &m->decoder, m->steps_per_frame);
    if (!rc) rc = pack_transformer(cpu, &m->enc_tr);
    if (!rc) rc = pack_transformer(cpu, &m->dec_tr);
    if (!rc) rc = pack_conv(cpu, &m->downsample, 1);
    if (!rc) rc = pack_conv(cpu, &m->upsample, m->steps_per_frame);
    return rc;
}
