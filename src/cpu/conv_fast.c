/*
 * conv_fast.c - streaming Conv1d and ConvTranspose1d on the fast kernels (the reference is
 * src/nn/conv.c, spec 5.1 and 5.2).
 *
 * A conv keeps the last (kernel - stride) input columns, as the reference does. A transposed
 * conv is run as a polyphase conv (pack.c): output step t*S + r of channel o is row o*S + r at
 * step t, summing input steps t - (J-1) .. t, so it keeps the last J - 1 INPUT columns instead
 * of the reference's carried output tail; both give the reference's result, the bias counted
 * once. Per slot the input [history | x] is gathered once (with the preceding ELU fused in),
 * strided convs de-interleaved into stride phases so that every tap reads a contiguous run of
 * steps; then either the direct kernel (long time axis, per slot) or the gemm kernel over an
 * im2col of all slots at once (short time axis, every weight read once per call) runs.
 */
#include <string.h>

#include "cpu.h"
#include "nn/nn.h"

// ---- geometry ----

struct geom {
    int taps;    // taps per input channel (K, or J for a transposed conv)
    int H;       // history columns kept per channel
    int L;       // H + T: columns of [history | x]
    int Tk;      // steps the kernel produces per slot (T / S, or T input steps of a convtr)
    int phases;  // stride phases of a strided conv's input (1 otherwise)
    int Lp;      // columns per phase
    int J;       // c_in * taps
    int direct;  // the direct kernel runs it
    // row pitches (floats) of [history | x], of a phase, of an im2col row: an odd number of
    // cache lines, so that rows read together do not compete for the same L1 sets
    int xin_pitch, phase_pitch, col_pitch;
};

static int pitch(int n) {
    int lines = (n + 15) / 16;
    return 16 * (lines | 1);
}

static struct geom geometry(const struct mimi_conv *c, int T) {
    struct geom g;
    const struct mimi_packed *p = c->packed;
    g.taps = p->taps;
    if (c->transposed) {
        g.H = g.taps - 1;
        g.Tk = T;
        g.phases = 1;
    } else {
        g.H = c->kernel - c->stride;
        g.Tk = T / c->stride;
        g.phases = c->stride;
    }
    g.L = g.H + T;
    g.Lp = (g.L + g.phases - 1) / g.phases;
    g.J = c->c_in * g.taps;
    g.direct = !p->bf16 && g.Tk >= MIMI_DIRECT_MIN_T;
    g.xin_pitch = pitch(g.L);
    g.phase_pitch = pitch(g.Lp);
    g.col_pitch = pitch(g.J);
    return g;
}

static size_t round16(size_t n) { return (n + 15) & ~(size_t)15; }

size_t mimi_cpu_conv_mem_floats(const struct mimi_conv *c) {
    size_t ref = (size_t)(c->transposed ? c->c_out : c->c_in) * (c->kernel - c->stride);
    if (!c->packed || !c->transposed) return ref;
    size_t hist = (size_t)c->c_in * (c->packed->taps - 1);
    return hist > ref ? hist : ref;
}

// work: offsets (J) | xin (c_in, L) | phases (c_in, S, Lp) | im2col (n * Tk, J), at the pitches
static size_t xin_floats(const struct mimi_conv *c, const struct geom *g) {
    return round16((size_t)c->c_in * g->xin_pitch + MIMI_CONV_SLACK);
}

static size_t phase_floats(const struct mimi_conv *c, const struct geom *g) {
    return g->phases > 1 ? round16((size_t)c->c_in * g->phases * g->phase_pitch + MIMI_CONV_SLACK)
                         : 0;
}

size_t mimi_cpu_conv_work_floats(const struct mimi_conv *c, int n, int T) {
    struct geom g = geometry(c, T);
    size_t w = round16((size_t)g.J) + xin_floats(c, &g) + phase_floats(c, &g);
    if (!g.direct) w += (size_t)n * g.Tk * g.col_pitch;
    return w;
}

// ---- input gathering ----

struct prep {
    const struct mimi_conv *c;
    const struct mimi_kernels *k;
    struct geom g;
    struct conv_mem *mem;
    const float *xs;  // this slot's input: row i at xs + i * NT, T steps
    ptrdiff_t NT;
    int T, elu;
    float *xin, *xph;   // (c_in, L), (c_in, S, Lp)
    const float *base;  // what the offsets index (xin or xph)
    const int *off;     // (J)
    float *col;         // this slot's im2col rows (Tk, J), or NULL
};

// For channels [i0, i1): xin = [history | f(x)], the history advanced, the stride phases and
// the im2col rows of this slot filled.
static void prep_channels(void *ctx, int i0, int i1, int ith) {
    (void)ith;
    const struct prep *P = ctx;
    const struct geom *g = &P->g;
    const int H = g->H, L = g->L, T = P->T, S = g->phases;
    for (int i = i0; i < i1; i++) {
        float *row = P->xin + (size_t)i * g->xin_pitch, *hist = P->mem->buf + (size_t)i * H;
        const float *src = P->xs + (ptrdiff_t)i * P->NT;
        // replicate padding: the first call's history is its first input column
        if (P->c->replicate_first && P->mem->first)
            for (int h = 0; h < H; h++) hist[h] = src[0];
        memcpy(row, hist, sizeof(float) * H);
        if (P->elu) P->k->elu(row + H, src, (size_t)T);
        else memcpy(row + H, src, sizeof(float) * T);
        memcpy(hist, row + T, sizeof(float) * H);
        // phase k0 of a strided conv: ph[u] = row[u * S + k0]
        for (int k0 = 0; S > 1 && k0 < S; k0++) {
            float *ph = P->xph + ((size_t)i * S + k0) * g->phase_pitch;
            for (int u = 0; u < g->Lp; u++) ph[u] = u * S + k0 < L ? row[u * S + k0] : 0.0f;
        }
        // im2col: col[t][j] = X_j[t] for this channel's taps j
        for (int t = 0; P->col && t < g->Tk; t++)
            for (int k = 0; k < g->taps; k++) {
                const int j = i * g->taps + k;
                P->col[(size_t)t * g->col_pitch + j] = P->base[P->off[j] + t];
            }
    }
}

// ---- the call ----

void mimi_cpu_conv_stream(const struct mimi_conv *c, struct conv_mem **mems, int n, const float *x,
                          int T, float *y, float *work, const struct mimi_conv_fuse *fuse) {
    static const struct mimi_conv_fuse none = {0, MIMI_EPI_NONE};
    if (!fuse) fuse = &none;
    const struct mimi_packed *p = c->packed;
    const struct mimi_cpu *cpu = p->cpu;
    const struct geom g = geometry(c, T);
    const int S = c->stride, M = p->rows;
    const ptrdiff_t NT = (ptrdiff_t)n * T;
    int *off = (int *)work;
    float *xin = work + round16((size_t)g.J);
    float *xph = xin + xin_floats(c, &g);
    float *col = xph + phase_floats(c, &g);
    // tap offsets: into xin (stride 1, transposed) or into the phases (strided)
    for (int i = 0; i < c->c_in; i++)
        for (int k = 0; k < g.taps; k++)
            off[i * g.taps + k] =
                g.phases > 1 ? (i * S + k % S) * g.phase_pitch + k / S : i * g.xin_pitch + k;
    // output (row m, column): a conv's rows are channels; a convtr's are (channel, phase)
    struct mimi_out out = {.y = y, .r = y, .group = M, .ms = (ptrdiff_t)n * g.Tk, .cs = 1};
    if (c->transposed)
        out = (struct mimi_out){.y = y, .r = y, .group = S, .gs = NT * S, .ms = 1, .cs = S};
    const ptrdiff_t slot_out = c->transposed ? (ptrdiff_t)T * S : g.Tk;  // a slot's first column
    for (int s = 0; s < n; s++) {
        struct prep P = {.c = c,
                         .k = cpu->k,
                         .g = g,
                         .mem = mems[s],
                         .xs = x + (ptrdiff_t)s * T,
                         .NT = NT,
                         .T = T,
                         .elu = fuse->elu_input,
                         .xin = xin,
                         .xph = xph,
                         .base = g.phases > 1 ? xph : xin,
                         .off = off,
                         .col = g.direct ? NULL : col + (size_t)s * g.Tk * g.col_pitch};
        mimi_cpu_for(cpu, "conv_input", c->c_in, 4, prep_channels, &P);
        mems[s]->first = 0;
        if (!g.direct) continue;
        // direct kernel over this slot
        struct mimi_conv_args a = {.M = M,
                                   .J = g.J,
                                   .T = g.Tk,
                                   .w = p->panels,
                                   .bias = p->bias,
                                   .off = off,
                                   .x = P.base,
                                   .out = out,
                                   .epi = fuse->epi,
                                   .rows_outer = (size_t)M * g.J * 4 > (512u << 10)};
        a.out.y = y + s * slot_out;
        a.out.r = a.out.y;
        mimi_cpu_conv(cpu, &a);
    }
    if (g.direct) return;
    // gemm over the im2col of every slot: column s * Tk + t
    struct mimi_gemm_args a = {.M = M,
                               .N = n * g.Tk,
                               .K = g.J,
                               .w = p->panels,
                               .w_bf16 = p->bf16,
                               .bias = p->bias,
                               .b = col,
                               .ldb = g.col_pitch,
                               .out = out,
                               .epi = fuse->epi};
    if (c->transposed) a.out.cs = S;
    mimi_cpu_gemm(cpu, &a);
}
