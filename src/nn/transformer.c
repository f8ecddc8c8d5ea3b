/*
 * transformer.c - the streaming transformer (spec 3.3 and 5.4): pre-norm layers of rotary
 * multi-head attention over a ring of cached keys and values, and a GELU MLP, each branch scaled
 * per channel before its residual add. No final norm.
 *
 * Attention window: a query at position p sees a cached key at p' when 0 <= p - p' < context
 * and p' is still in the ring. All of a call's keys are written before any query runs, so a ring
 * of exactly `context` slots reproduces the reference's streaming behaviour (the first step of a
 * frame loses its oldest key after 10 s) and a ring of context + steps gives the exact window.
 * This is the reference path; with packed weights src/cpu/transformer_fast.c runs instead.
 */
#include <math.h>
#include <string.h>

#include "cpu/cpu.h"
#include "nn.h"
#include "ops.h"

// ---- layout ----

void transformer_mem_layout(struct arena *a, const struct transformer *t, int capacity,
                            struct transformer_mem *m) {
    const size_t d = (size_t)t->d_model;
    for (int l = 0; l < t->n_layers; l++) {
        m->keys[l] = arena_floats(a, (size_t)capacity * d);
        m->values[l] = arena_floats(a, (size_t)capacity * d);
    }
    m->positions = (int64_t *)arena_take(a, sizeof(int64_t) * (size_t)capacity);
    m->capacity = capacity;
    m->next_position = 0;
}

void transformer_scratch_layout(struct arena *a, const struct transformer *t, int n, int steps,
                                int capacity, struct transformer_scratch *sc) {
    const size_t rows = (size_t)n * steps, d = (size_t)t->d_model;
    sc->x = arena_floats(a, rows * d);
    sc->h = arena_floats(a, rows * d);
    sc->qkv = arena_floats(a, rows * 3 * d);
    sc->att = arena_floats(a, rows * d);
    sc->ff = arena_floats(a, rows * t->d_ff);
    // the fast path (src/cpu/transformer_fast.c) keeps its per-call tables in `scores`
    sc->scores = arena_floats(a, t->cpu ? mimi_cpu_transformer_scratch_floats(t, n, steps, capacity)
                                        : (size_t)capacity);
}

void transformer_reset(const struct transformer *t, struct transformer_mem *m) {
    const size_t d = (size_t)t->d_model;
    for (int l = 0; l < t->n_layers; l++) {
        memset(m->keys[l], 0, sizeof(float) * m->capacity * d);
        memset(m->values[l], 0, sizeof(float) * m->capacity * d);
    }
    // empty slots must never alias position 0
    for (int s = 0; s < m->capacity; s++) m->positions[s] = -1;
    m->next_position = 0;
}

// ---- attention ----

// One head of one query over the ring: out (hd) = softmax(q . K^T / sqrt(hd)) V.
static void attend(const struct transformer *t, const struct transformer_mem *m, int layer,
                   int head, const float *q, int64_t pos, float *scores, float *out) {
    const int hd = t->head_dim, d = t->d_model;
    const float scale = 1.0f / sqrtf((float)hd);
    float max = -INFINITY;
    // scores of the keys inside the window, -inf elsewhere
    for (int s = 0; s < m->capacity; s++) {
        int64_t age = pos - m->positions[s];
        if (m->positions[s] < 0 || age < 0 || age >= t->context) {
            scores[s] = -INFINITY;
            continue;
        }
        const float *k = m->keys[layer] + (size_t)s * d + (size_t)head * hd;
        float dot = 0.0f;
        for (int i = 0; i < hd; i++) dot += q[i] * k[i];
        scores[s] = dot * scale;
        if (scores[s] > max) max = scores[s];
    }
    // softmax, then the weighted sum of values
    float sum = 0.0f;
    for (int s = 0; s < m->capacity; s++) {
        scores[s] = scores[s] == -INFINITY ? 0.0f : expf(scores[s] - max);
        sum += scores[s];
    }
    for (int i = 0; i < hd; i++) out[i] = 0.0f;
    for (int s = 0; s < m->capacity; s++) {
        if (scores[s] == 0.0f) continue;
        const float *v = m->values[layer] + (size_t)s * d + (size_t)head * hd;
        float w = scores[s] / sum;
        for (int i = 0; i < hd; i++) out[i] += w * v[i];
    }
}

// ---- layer ----

// Rotates q and k of `steps` rows of one slot, writes its keys and values into its ring, then
// attends every query of the slot (all keys of the call are in the ring before any query runs).
static void slot_attention(const struct transformer *t, struct transformer_mem *m,
                           struct transformer_scratch *sc, int l, float *qkv, float *att, int steps) {
    const int d = t->d_model, hd = t->head_dim;
    for (int s = 0; s < steps; s++) {
        int64_t pos = m->next_position + s;
        float *q = qkv + (size_t)s * 3 * d, *k = q + d, *v = q + 2 * d;
        for (int h = 0; h < t->n_heads; h++) {
            mimi_rope(q + h * hd, hd, (float)pos, t->max_period);
            mimi_rope(k + h * hd, hd, (float)pos, t->max_period);
        }
        int slot = (int)(pos % m->capacity);
        memcpy(m->keys[l] + (size_t)slot * d, k, sizeof(float) * d);
        memcpy(m->values[l] + (size_t)slot * d, v, sizeof(float) * d);
        m->positions[slot] = pos;
    }
    for (int s = 0; s < steps; s++)
        for (int h = 0; h < t->n_heads; h++)
            attend(t, m, l, h, qkv + (size_t)s * 3 * d + h * hd, m->next_position + s, sc->scores,
                   att + (size_t)s * d + h * hd);
}

static void layer_forward(const struct transformer *t, struct transformer_mem **mems, int n,
                          struct transformer_scratch *sc, int l, int steps) {
    const struct transformer_layer *w = &t->layers[l];
    const int d = t->d_model, rows = n * steps;
    // h = LN1(x); qkv (rows, 3d) = h . in_proj^T for every slot at once
    mimi_layer_norm(sc->x, sc->h, rows, d, w->norm1_w, w->norm1_b, 1e-5f);
    mimi_matmul_nt(3 * d, rows, d, w->in_proj, d, sc->h, d, NULL, sc->qkv, 1, 3 * d);
    for (int k = 0; k < n; k++)
        slot_attention(t, mems[k], sc, l, sc->qkv + (size_t)k * steps * 3 * d,
                       sc->att + (size_t)k * steps * d, steps);
    // x += scale1 * (att . out_proj^T)
    mimi_matmul_nt(d, rows, d, w->out_proj, d, sc->att, d, NULL, sc->h, 1, d);
    for (size_t i = 0; i < (size_t)rows * d; i++) sc->x[i] += w->scale1[i % d] * sc->h[i];
    // x += scale2 * (gelu(LN2(x) . linear1^T) . linear2^T)
    mimi_layer_norm(sc->x, sc->h, rows, d, w->norm2_w, w->norm2_b, 1e-5f);
    mimi_matmul_nt(t->d_ff, rows, d, w->linear1, d, sc->h, d, NULL, sc->ff, 1, t->d_ff);
    mimi_gelu(sc->ff, (size_t)rows * t->d_ff);
    mimi_matmul_nt(d, rows, t->d_ff, w->linear2, t->d_ff, sc->ff, t->d_ff, NULL, sc->h, 1, d);
    for (size_t i = 0; i < (size_t)rows * d; i++) sc->x[i] += w->scale2[i % d] * sc->h[i];
}

void transformer_forward(const struct transformer *t, struct transformer_mem **mems, int n,
                         struct transformer_scratch *sc, float *io, int steps) {
    if (t->cpu) {
        mimi_cpu_transformer_forward(t, mems, n, sc, io, steps);
        return;
    }
    const int d = t->d_model, rows = n * steps;
    // (d, n*steps) -> (n*steps, d)
    for (int c = 0; c < d; c++)
        for (int r = 0; r < rows; r++) sc->x[(size_t)r * d + c] = io[(size_t)c * rows + r];
    for (int l = 0; l < t->n_layers; l++) layer_forward(t, mems, n, sc, l, steps);
    for (int c = 0; c < d; c++)
        for (int r = 0; r < rows; r++) io[(size_t)c * rows + r] = sc->x[(size_t)r * d + c];
    for (int k = 0; k < n; k++) mems[k]->next_position += steps;
}
