/*
 * transformer_fast.c - the streaming transformer on the fast kernels (the reference is
 * src/nn/transformer.c; spec 3.3 and 5.4).
 *
 * Per call, what every layer shares is computed once: each new step's ring slot, the list of
 * ring slots its query may see (in ring order, as the reference visits them) and its rotary
 * cos/sin table (the reference's formulas). The ring keeps the reference's size but is laid
 * out head-major, (heads, capacity, head_dim) per layer, so that one head's keys and values are
 * two contiguous runs. Per layer: LayerNorm, the q|k|v gemm, then one
 * region over (slot, head) pairs that rotates q and k, writes k and v into the ring and attends,
 * then the out_proj gemm adding the layer-scaled result into x, LayerNorm, the linear1 gemm with
 * GELU fused, and the linear2 gemm adding into x.
 */
#include <math.h>
#include <string.h>

#include "cpu.h"
#include "nn/nn.h"

// ---- scratch (inside sc->scores) ----

#define QUERIES_PER_PASS 16  // as MAX_QUERIES in kernels_impl.h: the scores' rows per thread

struct tr_scratch {
    float *scores;       // (n_threads, min(steps, 16), capacity)
    float *rope;         // (rows, head_dim): cos, sin of each rotary pair
    int *listed;         // (n, capacity): ring slots some query of the slot sees, in ring order
    int *n_listed;       // (n)
    unsigned char *vis;  // (rows, capacity): whether each query sees each listed slot
    int *ring_slot;      // (rows): where each new step's key and value go
    size_t scores_per_thread;
};

static size_t round16(size_t n) { return (n + 15) & ~(size_t)15; }

static struct tr_scratch carve(const struct transformer *t, float *base, int n, int steps,
                               int capacity) {
    struct tr_scratch s;
    const size_t rows = (size_t)n * steps;
    const int q = steps < QUERIES_PER_PASS ? steps : QUERIES_PER_PASS;
    s.scores_per_thread = round16((size_t)q * capacity);
    s.scores = base;
    s.rope = s.scores + (size_t)t->cpu->n_threads * s.scores_per_thread;
    s.listed = (int *)(s.rope + round16(rows * t->head_dim));
    s.n_listed = s.listed + round16((size_t)n * capacity);
    s.ring_slot = s.n_listed + round16((size_t)n);
    s.vis = (unsigned char *)(s.ring_slot + round16(rows));
    return s;
}

size_t mimi_cpu_transformer_scratch_floats(const struct transformer *t, int n, int steps,
                                           int capacity) {
    const size_t rows = (size_t)n * steps;
    const int q = steps < QUERIES_PER_PASS ? steps : QUERIES_PER_PASS;
    return (size_t)t->cpu->n_threads * round16((size_t)q * capacity) + round16(rows * t->head_dim) +
           round16((size_t)n * capacity) + round16((size_t)n) + round16(rows) +
           round16(rows * capacity) / 4 + 16;
}

// ---- per-call tables ----

// Writes each new step's position into its slot's ring and lists what its query sees.
static void plan_steps(const struct transformer *t, struct transformer_mem **mems, int n, int steps,
                       const struct tr_scratch *s) {
    const int hd = t->head_dim;
    const float step = (float)(-log((double)t->max_period) * 2.0 / hd);
    for (int k = 0; k < n; k++) {
        struct transformer_mem *m = mems[k];
        for (int i = 0; i < steps; i++) {
            int64_t pos = m->next_position + i;
            s->ring_slot[k * steps + i] = (int)(pos % m->capacity);
            m->positions[pos % m->capacity] = pos;
        }
        // listed: the ring slots some step sees (written, not in its future, inside the window),
        // in ring order; vis says which step sees which
        int *listed = s->listed + (size_t)k * m->capacity, n_listed = 0;
        unsigned char *vis = s->vis + (size_t)k * steps * m->capacity;
        for (int slot = 0; slot < m->capacity; slot++) {
            int any = 0;
            for (int i = 0; i < steps; i++) {
                int64_t age = m->next_position + i - m->positions[slot];
                int sees = m->positions[slot] >= 0 && age >= 0 && age < t->context;
                vis[(size_t)i * m->capacity + n_listed] = (unsigned char)sees;
                any |= sees;
            }
            if (any) listed[n_listed++] = slot;
        }
        s->n_listed[k] = n_listed;
        // vis rows were written at stride capacity; the kernel reads them at stride n_listed
        for (int i = 1; i < steps; i++)
            memmove(vis + (size_t)i * n_listed, vis + (size_t)i * m->capacity, (size_t)n_listed);
        for (int i = 0; i < steps; i++) {
            const int row = k * steps + i;
            const int64_t pos = m->next_position + i;
            // rotary table: frequency exp(i * step), angle in f32 (as mimi_rope computes it)
            float *cs = s->rope + (size_t)row * hd;
            for (int p = 0; p < hd / 2; p++) {
                float angle = expf((float)p * step) * (float)pos;
                cs[2 * p] = cosf(angle);
                cs[2 * p + 1] = sinf(angle);
            }
        }
    }
}

// ---- attention region ----

struct attn {
    const struct transformer *t;
    struct transformer_mem **mems;
    const struct tr_scratch *s;
    int layer, steps;
    float *qkv, *att;  // (rows, 3d), (rows, d)
};

static void rotate(float *v, const float *cs, int hd) {
    for (int p = 0; p < hd / 2; p++) {
        float re = v[2 * p], im = v[2 * p + 1], c = cs[2 * p], sn = cs[2 * p + 1];
        v[2 * p] = re * c - im * sn;
        v[2 * p + 1] = re * sn + im * c;
    }
}

// Items are (slot, head): rotate, fill the ring, then attend with every step of the slot.
static void attention_items(void *ctx, int begin, int end, int ith) {
    const struct attn *A = ctx;
    const struct transformer *t = A->t;
    const int d = t->d_model, hd = t->head_dim, H = t->n_heads;
    const float scale = 1.0f / sqrtf((float)hd);
    for (int item = begin; item < end; item++) {
        const int k = item / H, h = item % H;
        struct transformer_mem *m = A->mems[k];
        // this head's ring: (capacity, hd), contiguous
        float *keys = m->keys[A->layer] + (size_t)h * m->capacity * hd;
        float *values = m->values[A->layer] + (size_t)h * m->capacity * hd;
        for (int i = 0; i < A->steps; i++) {
            const int row = k * A->steps + i;
            float *q = A->qkv + (size_t)row * 3 * d + (size_t)h * hd;
            const float *cs = A->s->rope + (size_t)row * hd;
            rotate(q, cs, hd);
            rotate(q + d, cs, hd);
            const size_t slot = (size_t)A->s->ring_slot[row] * hd;
            memcpy(keys + slot, q + d, sizeof(float) * hd);
            memcpy(values + slot, q + 2 * d, sizeof(float) * hd);
        }
        // every step of the slot in one pass over its keys and values
        const size_t row0 = (size_t)k * A->steps;
        t->cpu->k->attend(A->qkv + row0 * 3 * d + (size_t)h * hd, 3 * d, A->steps, keys, values, hd,
                          A->s->listed + (size_t)k * m->capacity, A->s->vis + row0 * m->capacity,
                          A->s->n_listed[k], hd, scale,
                          A->s->scores + (size_t)ith * A->s->scores_per_thread,
                          A->att + row0 * d + (size_t)h * hd, d);
    }
}

// ---- row-wise helpers ----

struct rows_job {
    const struct mimi_kernels *k;
    const float *x, *w, *b;
    float *y;
    int d;
    // transposes
    const float *src;
    float *dst;
    int rows;
};

static void norm_rows(void *ctx, int begin, int end, int ith) {
    (void)ith;
    const struct rows_job *J = ctx;
    J->k->layer_norm(J->x + (size_t)begin * J->d, J->y + (size_t)begin * J->d, end - begin, J->d,
                     J->w, J->b, 1e-5f);
}

// dst (rows, d) = src (d, rows)^T, for channels [begin, end)
static void to_rows(void *ctx, int begin, int end, int ith) {
    (void)ith;
    const struct rows_job *J = ctx;
    for (int c = begin; c < end; c++)
        for (int r = 0; r < J->rows; r++)
            J->dst[(size_t)r * J->d + c] = J->src[(size_t)c * J->rows + r];
}

// dst (d, rows) = src (rows, d)^T, for channels [begin, end)
static void to_channels(void *ctx, int begin, int end, int ith) {
    (void)ith;
    const struct rows_job *J = ctx;
    for (int c = begin; c < end; c++)
        for (int r = 0; r < J->rows; r++)
            J->dst[(size_t)c * J->rows + r] = J->src[(size_t)r * J->d + c];
}

static void layer_norm(const struct mimi_cpu *cpu, const float *x, float *y, int rows, int d,
                       const float *w, const float *b) {
    struct rows_job J = {.k = cpu->k, .x = x, .y = y, .w = w, .b = b, .d = d};
    mimi_cpu_for(cpu, "layernorm", rows, 2, norm_rows, &J);
}

// y (rows, M) (epilogue) = packed W (M, K) . x (rows, K)^T
static void linear(const struct mimi_cpu *cpu, const struct mimi_packed *p, int rows,
                   const float *x, float *y, int epi, const float *scale) {
    struct mimi_gemm_args a = {.M = p->rows,
                               .N = rows,
                               .K = p->cols,
                               .w = p->panels,
                               .w_bf16 = p->bf16,
                               .b = x,
                               .ldb = p->cols,
                               .out = {.y = y, .r = y, .group = p->rows, .ms = 1, .cs = p->rows},
                               .epi = epi,
                               .scale = scale};
    mimi_cpu_gemm(cpu, &a);
}

// ---- forward ----

void mimi_cpu_transformer_forward(const struct transformer *t, struct transformer_mem **mems, int n,
                                  struct transformer_scratch *sc, float *io, int steps) {
    const struct mimi_cpu *cpu = t->cpu;
    const int d = t->d_model, rows = n * steps;
    const struct tr_scratch s = carve(t, sc->scores, n, steps, mems[0]->capacity);
    // (d, rows) -> (rows, d)
    struct rows_job tj = {.src = io, .dst = sc->x, .rows = rows, .d = d};
    mimi_cpu_for(cpu, "transpose", d, rows >= 16 ? 2 : d + 1, to_rows, &tj);
    plan_steps(t, mems, n, steps, &s);
    for (int l = 0; l < t->n_layers; l++) {
        const struct transformer_layer *w = &t->layers[l];
        // attention branch: x += scale1 * out_proj(attention(in_proj(LN1(x))))
        layer_norm(cpu, sc->x, sc->h, rows, d, w->norm1_w, w->norm1_b);
        linear(cpu, w->p_in_proj, rows, sc->h, sc->qkv, MIMI_EPI_NONE, NULL);
        struct attn A = {.t = t,
                         .mems = mems,
                         .s = &s,
                         .layer = l,
                         .steps = steps,
                         .qkv = sc->qkv,
                         .att = sc->att};
        mimi_cpu_for(cpu, "attention", n * t->n_heads, 2, attention_items, &A);
        linear(cpu, w->p_out_proj, rows, sc->att, sc->x, MIMI_EPI_SCALE_ADD, w->scale1);
        // MLP branch: x += scale2 * linear2(gelu(linear1(LN2(x))))
        layer_norm(cpu, sc->x, sc->h, rows, d, w->norm2_w, w->norm2_b);
        linear(cpu, w->p_linear1, rows, sc->h, sc->ff, MIMI_EPI_GELU, NULL);
        linear(cpu, w->p_linear2, rows, sc->ff, sc->x, MIMI_EPI_SCALE_ADD, w->scale2);
    }
    // (rows, d) -> (d, rows)
    tj = (struct rows_job){.src = sc->x, .dst = io, .rows = rows, .d = d};
    mimi_cpu_for(cpu, "transpose", d, rows >= 16 ? 2 : d + 1, to_channels, &tj);
    for (int k = 0; k < n; k++) mems[k]->next_position += steps;
}
