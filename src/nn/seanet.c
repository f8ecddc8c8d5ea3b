/*
 * seanet.c - the SEANet encoder and decoder stacks as a loop over their layer table.
 *
 * The table (struct seanet, filled by model.c from the checkpoint) lists convs, transposed
 * convs, ELUs and residual blocks in order; this file only runs it. A residual block is
 * x + conv1x1(elu(conv_k3(elu(x)))): the shortcut adds the pre-activation input (true skip).
 * With packed weights (the fast CPU path) each ELU is fused into the conv that reads it, and a
 * resblock is two fused calls: conv_k3 with ELU in and out, then conv1x1 adding into x.
 */
#include <string.h>

#include "cpu/cpu.h"
#include "nn.h"
#include "ops.h"

// ---- layout ----

// Output steps of a layer for T input steps.
static int layer_steps_out(const struct seanet_layer *l, int T) {
    if (l->kind == SEANET_CONV) return T / l->conv.stride;
    if (l->kind == SEANET_CONVTR) return T * l->conv.stride;
    return T;
}

static size_t max_size(size_t a, size_t b) { return a > b ? a : b; }

void seanet_mem_layout(struct arena *a, const struct seanet *s, struct seanet_mem *m) {
    for (int i = 0; i < s->n_layers; i++)
        if (s->layers[i].kind != SEANET_ELU) conv_mem_layout(a, &s->layers[i].conv, &m->conv[i]);
}

void seanet_scratch_layout(struct arena *a, const struct seanet *s, int n, int T_in,
                           struct seanet_scratch *sc) {
    size_t act = (size_t)s->layers[0].conv.c_in * T_in, res = 0, work = 0;
    int T = T_in;
    for (int i = 0; i < s->n_layers; i++) {
        const struct seanet_layer *l = &s->layers[i];
        if (l->kind != SEANET_ELU) work = max_size(work, conv_work_floats(&l->conv, n, T));
        if (l->kind == SEANET_RESBLOCK) {
            work = max_size(work, conv_work_floats(&l->conv2, n, T));
            res = max_size(res, (size_t)l->channels_out * T);
        }
        T = layer_steps_out(l, T);
        act = max_size(act, (size_t)l->channels_out * T);
    }
    sc->act[0] = arena_floats(a, act * n);
    sc->act[1] = arena_floats(a, act * n);
    sc->res[0] = arena_floats(a, res * n);
    sc->res[1] = arena_floats(a, res * n);
    sc->work = arena_floats(a, work);
    sc->mems = (struct conv_mem **)arena_take(a, sizeof(struct conv_mem *) * (size_t)n);
}

void seanet_reset(const struct seanet *s, struct seanet_mem *m) {
    for (int i = 0; i < s->n_layers; i++)
        if (s->layers[i].kind != SEANET_ELU) conv_mem_reset(&s->layers[i].conv, &m->conv[i]);
}

// ---- forward ----

// x (C, n, T) += conv1x1(elu(conv_k3(elu(x)))), using res[0] (C, n, T) and res[1] (C/2, n, T).
static void resblock(const struct seanet_layer *l, struct conv_mem **mems, int n,
                     struct seanet_scratch *sc, float *x, int T) {
    size_t count = (size_t)l->conv.c_in * n * T;
    float *h = sc->res[0], *mid = sc->res[1];
    memcpy(h, x, sizeof(float) * count);
    mimi_elu(h, count);
    conv1d_stream(&l->conv, mems, n, h, T, mid, sc->work);
    mimi_elu(mid, (size_t)l->conv.c_out * n * T);
    // the 1x1 conv keeps no history
    conv1d_stream(&l->conv2, mems, n, mid, T, h, sc->work);
    for (size_t i = 0; i < count; i++) x[i] += h[i];
}

// ---- fast forward ----

// The stack on the fast kernels: an ELU followed by a conv becomes that conv's input stage.
static float *forward_fast(const struct seanet *s, struct seanet_mem **mems, int n,
                           struct seanet_scratch *sc, const float *x, int T_in, int *T_out) {
    const struct mimi_kernels *k = s->cpu->k;
    int cur = 0, T = T_in, elu_pending = 0;
    const float *in = x;  // the first layer reads the caller's input where it lies
    for (int i = 0; i < s->n_layers; i++) {
        const struct seanet_layer *l = &s->layers[i];
        const int c_in = l->kind == SEANET_CONV || l->kind == SEANET_CONVTR ? l->conv.c_in
                                                                              : l->channels_out;
        const size_t count = (size_t)c_in * n * T;
        const int fused = (l->kind == SEANET_CONV || l->kind == SEANET_CONVTR) && l->conv.packed;
        const int next_fuses = i + 1 < s->n_layers && s->layers[i + 1].conv.packed &&
                               (s->layers[i + 1].kind == SEANET_CONV ||
                                s->layers[i + 1].kind == SEANET_CONVTR);
        for (int j = 0; j < n; j++) sc->mems[j] = &mems[j]->conv[i];
        // in place work needs the input in the scratch, with any pending ELU applied
        if (!fused && !(l->kind == SEANET_ELU && next_fuses)) {
            if (in != sc->act[cur]) memcpy(sc->act[cur], in, sizeof(float) * count);
            in = sc->act[cur];
            if (elu_pending) k->elu(sc->act[cur], in, count);
            elu_pending = 0;
        }
        float *io = sc->act[cur], *out = sc->act[1 - cur];
        switch (l->kind) {
        case SEANET_ELU:
            if (next_fuses) elu_pending = 1;
            else k->elu(io, io, count);
            break;
        case SEANET_RESBLOCK: {
            // mid = elu(conv_k3(elu(x))); x += conv1x1(mid)
            const struct mimi_conv_fuse f1 = {1, MIMI_EPI_ELU}, f2 = {0, MIMI_EPI_ADD};
            mimi_cpu_conv_stream(&l->conv, sc->mems, n, io, T, sc->res[1], sc->work, &f1);
            mimi_cpu_conv_stream(&l->conv2, sc->mems, n, sc->res[1], T, io, sc->work, &f2);
            break;
        }
        case SEANET_CONV:
        case SEANET_CONVTR:
            if (fused) {
                const struct mimi_conv_fuse f = {elu_pending, MIMI_EPI_NONE};
                mimi_cpu_conv_stream(&l->conv, sc->mems, n, in, T, out, sc->work, &f);
            } else if (l->kind == SEANET_CONV) {
                conv1d_stream(&l->conv, sc->mems, n, in, T, out, sc->work);
            } else {
                convtr_stream(&l->conv, sc->mems, n, in, T, out, sc->work);
            }
            elu_pending = 0;
            cur = 1 - cur;
            in = sc->act[cur];
            break;
        }
        T = layer_steps_out(l, T);
    }
    *T_out = T;
    return (float *)in;
}

// ---- reference forward ----

float *seanet_forward(const struct seanet *s, struct seanet_mem **mems, int n,
                      struct seanet_scratch *sc, const float *x, int T_in, int *T_out) {
    if (s->cpu) return forward_fast(s, mems, n, sc, x, T_in, T_out);
    int cur = 0, T = T_in;
    memcpy(sc->act[0], x, sizeof(float) * (size_t)s->layers[0].conv.c_in * n * T_in);
    for (int i = 0; i < s->n_layers; i++) {
        const struct seanet_layer *l = &s->layers[i];
        float *in = sc->act[cur], *out = sc->act[1 - cur];
        // this layer's memory in every slot
        for (int k = 0; k < n; k++) sc->mems[k] = &mems[k]->conv[i];
        switch (l->kind) {
        case SEANET_ELU:
            mimi_elu(in, (size_t)l->channels_out * n * T);
            break;
        case SEANET_RESBLOCK:
            resblock(l, sc->mems, n, sc, in, T);
            break;
        case SEANET_CONV:
            conv1d_stream(&l->conv, sc->mems, n, in, T, out, sc->work);
            cur = 1 - cur;
            break;
        case SEANET_CONVTR:
            convtr_stream(&l->conv, sc->mems, n, in, T, out, sc->work);
            cur = 1 - cur;
            break;
        }
        T = layer_steps_out(l, T);
    }
    *T_out = T;
    return sc->act[cur];
}
