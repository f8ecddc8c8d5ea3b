/*
 * kernels_impl.h - the bodies of the fast CPU kernels, written once against simd.h.
 *
 * Included by kernels_<isa>.c after it defines MIMI_SIMD_<ISA> and KSUF(name) (the name suffix);
 * every function here is static except the table at the end, `mimi_kernels_<isa>`. Contracts and
 * layouts are in kernels.h; the definition of correct is src/nn/ops_ref.c.
 *
 * Two matrix kernels share one weight layout (panels of MR rows) and one summation order:
 * - gemm: MR rows (2 vectors) x up to NR columns per tile, weights streamed along j and each
 *   column's value broadcast. The streaming case (few columns) is bound by weight bandwidth,
 *   many columns by the FMA units.
 * - conv: CRB rows x CTB time steps per tile, weights broadcast and time vectorised, reading the
 *   input in place through an offset per tap: the long-T SEANet layers, without im2col.
 */
#include <math.h>
#include <string.h>

#include "kernels.h"
#include "simd.h"

#ifndef KSUF
#error "define KSUF(name) before including kernels_impl.h"
#endif

#define MR (2 * SIMD_W)     // rows per weight panel
#define NR 6                // gemm columns per tile
#define NCB (8 * NR)        // gemm columns per work item
#define CRB 4               // conv rows per tile
#define CTV 3               // conv vectors of time per tile
#define CTB (CTV * SIMD_W)  // conv time steps per tile

_Static_assert(CTB <= MIMI_CONV_SLACK, "conv tiles read past the input by up to CTB floats");
_Static_assert(NR == 6 && CRB == 4 && CTV == 3, "the tiles below are written out for these sizes");

// ---- elementwise math ----

// exp(x): 2^n exp(r) with n = round(x / ln 2), |r| <= ln2 / 2, Taylor to r^7 (< 1e-8).
SIMD_INLINE vf v_exp(vf x) {
    x = v_min(v_max(x, v_set1(-87.0f)), v_set1(88.0f));
    vf n = v_round(v_mul(x, v_set1(1.44269504088896341f)));
    vf r = v_fma(n, v_set1(-0.693145751953125f), x);
    r = v_fma(n, v_set1(-1.428606820309417232e-6f), r);
    vf p = v_set1(1.0f / 5040.0f);
    p = v_fma(p, r, v_set1(1.0f / 720.0f));
    p = v_fma(p, r, v_set1(1.0f / 120.0f));
    p = v_fma(p, r, v_set1(1.0f / 24.0f));
    p = v_fma(p, r, v_set1(1.0f / 6.0f));
    p = v_fma(p, r, v_set1(0.5f));
    p = v_fma(p, r, v_set1(1.0f));
    p = v_fma(p, r, v_set1(1.0f));
    return v_mul(p, v_pow2i(n));
}

// expm1(x) = 2^n expm1(r) + (2^n - 1): exact at n = 0, so no cancellation near 0.
SIMD_INLINE vf v_expm1(vf x) {
    x = v_min(v_max(x, v_set1(-87.0f)), v_set1(88.0f));
    vf n = v_round(v_mul(x, v_set1(1.44269504088896341f)));
    vf r = v_fma(n, v_set1(-0.693145751953125f), x);
    r = v_fma(n, v_set1(-1.428606820309417232e-6f), r);
    vf p = v_set1(1.0f / 5040.0f);
    p = v_fma(p, r, v_set1(1.0f / 720.0f));
    p = v_fma(p, r, v_set1(1.0f / 120.0f));
    p = v_fma(p, r, v_set1(1.0f / 24.0f));
    p = v_fma(p, r, v_set1(1.0f / 6.0f));
    p = v_fma(p, r, v_set1(0.5f));
    vf em = v_fma(v_mul(r, r), p, r);  // expm1(r)
    vf s = v_pow2i(n);
    return v_fma(s, em, v_sub(s, v_set1(1.0f)));
}

// erf(x): odd/even rational approximation on [-4, 4] (|error| < 4e-7), +-1 outside.
SIMD_INLINE vf v_erf(vf x) {
    x = v_min(v_max(x, v_set1(-4.0f)), v_set1(4.0f));
    vf x2 = v_mul(x, x);
    vf p = v_fma(x2, v_set1(-2.72614225801306e-10f), v_set1(2.77068142495902e-08f));
    p = v_fma(x2, p, v_set1(-2.10102402082508e-06f));
    p = v_fma(x2, p, v_set1(-5.69250639462346e-05f));
    p = v_fma(x2, p, v_set1(-7.34990630326855e-04f));
    p = v_fma(x2, p, v_set1(-2.95459980854025e-03f));
    p = v_fma(x2, p, v_set1(-1.60960333262415e-02f));
    p = v_mul(x, p);
    vf q = v_fma(x2, v_set1(-1.45660718464996e-05f), v_set1(-2.13374055278905e-04f));
    q = v_fma(x2, q, v_set1(-1.68282697438203e-03f));
    q = v_fma(x2, q, v_set1(-7.37332916720468e-03f));
    q = v_fma(x2, q, v_set1(-1.42647390514189e-02f));
    return v_div(p, q);
}

SIMD_INLINE vf v_elu(vf x) { return v_select(v_gt(x, v_zero()), x, v_expm1(x)); }

SIMD_INLINE vf v_gelu(vf x) {
    vf e = v_erf(v_mul(x, v_set1(0.70710678118654752f)));
    return v_mul(v_mul(v_set1(0.5f), x), v_add(v_set1(1.0f), e));
}

// The epilogue of a matrix kernel: r and s are the residual and scale (when the epilogue uses
// them).
SIMD_INLINE vf v_epilogue(int epi, vf acc, vf r, vf s) {
    switch (epi) {
    case MIMI_EPI_ELU: return v_elu(acc);
    case MIMI_EPI_GELU: return v_gelu(acc);
    case MIMI_EPI_ADD: return v_add(r, acc);
    case MIMI_EPI_SCALE_ADD: return v_fma(s, acc, r);
    default: return acc;
    }
}

// Applies f to n floats, whole vectors then a zero-padded tail.
#define MAP_ARRAY(f, y, x, n)                                                                      \
    do {                                                                                           \
        size_t i_ = 0;                                                                             \
        for (; i_ + SIMD_W <= (n); i_ += SIMD_W) v_store((y) + i_, f(v_load((x) + i_)));           \
        if (i_ < (n)) v_store_n((y) + i_, f(v_load_n((x) + i_, (int)((n)-i_))), (int)((n)-i_));    \
    } while (0)

static void KSUF(elu)(float *y, const float *x, size_t n) { MAP_ARRAY(v_elu, y, x, n); }
static void KSUF(gelu)(float *y, const float *x, size_t n) { MAP_ARRAY(v_gelu, y, x, n); }
static void KSUF(exp)(float *y, const float *x, size_t n) { MAP_ARRAY(v_exp, y, x, n); }

// ---- output addressing ----

static inline ptrdiff_t row_offset(const struct mimi_out *o, int m) {
    return (ptrdiff_t)(m / o->group) * o->gs + (ptrdiff_t)(m % o->group) * o->ms;
}

// Stores column `col` of a gemm tile: rows m0 .. m0+mv-1 held in acc[0..1] (MR lanes).
static inline void store_rows(const struct mimi_out *o, int epi, const float *scale, int m0, int mv,
                              ptrdiff_t col, const vf *acc) {
    ptrdiff_t base = row_offset(o, m0) + col * o->cs;
    int contiguous = mv == MR && o->ms == 1 && m0 / o->group == (m0 + MR - 1) / o->group;
    int need_r = epi == MIMI_EPI_ADD || epi == MIMI_EPI_SCALE_ADD;
    if (contiguous) {
        for (int v = 0; v < 2; v++) {
            ptrdiff_t at = base + v * SIMD_W;
            vf r = need_r ? v_load(o->r + at) : v_zero();
            vf s = epi == MIMI_EPI_SCALE_ADD ? v_load(scale + m0 + v * SIMD_W) : v_zero();
            v_store(o->y + at, v_epilogue(epi, acc[v], r, s));
        }
        return;
    }
    // scattered rows: gather the epilogue's inputs, apply it as a vector, scatter
    for (int v = 0; v < 2; v++) {
        float rt[SIMD_W] = {0}, st[SIMD_W] = {0}, yt[SIMD_W];
        ptrdiff_t at[SIMD_W];
        int n = mv - v * SIMD_W;
        n = n < 0 ? 0 : (n > SIMD_W ? SIMD_W : n);
        for (int i = 0; i < n; i++) {
            int m = m0 + v * SIMD_W + i;
            at[i] = row_offset(o, m) + col * o->cs;
            if (need_r) rt[i] = o->r[at[i]];
            if (epi == MIMI_EPI_SCALE_ADD) st[i] = scale[m];
        }
        v_store(yt, v_epilogue(epi, acc[v], v_load(rt), v_load(st)));
        for (int i = 0; i < n; i++) o->y[at[i]] = yt[i];
    }
}

// Stores row m of a conv tile: time steps t0 .. t0+tv-1 held in acc[0..CTV-1].
static inline void store_time(const struct mimi_out *o, int epi, int m, int t0, int tv,
                              const vf *acc) {
    ptrdiff_t base = row_offset(o, m) + (ptrdiff_t)t0 * o->cs;
    int need_r = epi == MIMI_EPI_ADD || epi == MIMI_EPI_SCALE_ADD;
    for (int v = 0; v < CTV && v * SIMD_W < tv; v++) {
        int n = tv - v * SIMD_W;
        n = n > SIMD_W ? SIMD_W : n;
        if (o->cs == 1) {
            ptrdiff_t at = base + v * SIMD_W;
            vf r = need_r ? (n == SIMD_W ? v_load(o->r + at) : v_load_n(o->r + at, n)) : v_zero();
            vf e = v_epilogue(epi, acc[v], r, v_zero());
            if (n == SIMD_W) v_store(o->y + at, e);
            else v_store_n(o->y + at, e, n);
        } else {
            float rt[SIMD_W] = {0}, yt[SIMD_W];
            for (int i = 0; i < n && need_r; i++) rt[i] = o->r[base + (v * SIMD_W + i) * o->cs];
            v_store(yt, v_epilogue(epi, acc[v], v_load(rt), v_zero()));
            for (int i = 0; i < n; i++) o->y[base + (v * SIMD_W + i) * o->cs] = yt[i];
        }
    }
}

// ---- gemm ----

// acc[c] (MR rows) += W panel . column c, over j = 0 .. K-1 in order. nr is a constant after
// inlining; the accumulators are plain locals so that they stay in registers.
#define GEMM_STEP(i)                                                                               \
    if (nr > i) {                                                                                  \
        vf b = v_bcast(c##i + j);                                                                  \
        a##i##0 = v_fma(w0, b, a##i##0);                                                           \
        a##i##1 = v_fma(w1, b, a##i##1);                                                           \
    }
#define GEMM_TILE_BODY(LOAD)                                                                       \
    vf a00 = acc[0][0], a01 = acc[0][1], a10 = acc[1][0], a11 = acc[1][1], a20 = acc[2][0],        \
       a21 = acc[2][1], a30 = acc[3][0], a31 = acc[3][1], a40 = acc[4][0], a41 = acc[4][1],        \
       a50 = acc[5][0], a51 = acc[5][1];                                                           \
    const float *c0 = col[0], *c1 = col[1], *c2 = col[2], *c3 = col[3], *c4 = col[4],              \
                *c5 = col[5];                                                                      \
    for (int j = 0; j < K; j++) {                                                                  \
        if (pf) __builtin_prefetch(pf + (size_t)j * pf_step, 0, 2);                                \
        vf w0 = LOAD(w + (size_t)j * MR), w1 = LOAD(w + (size_t)j * MR + SIMD_W);                  \
        GEMM_STEP(0) GEMM_STEP(1) GEMM_STEP(2) GEMM_STEP(3) GEMM_STEP(4) GEMM_STEP(5)              \
    }                                                                                              \
    acc[0][0] = a00, acc[0][1] = a01, acc[1][0] = a10, acc[1][1] = a11, acc[2][0] = a20;           \
    acc[2][1] = a21, acc[3][0] = a30, acc[3][1] = a31, acc[4][0] = a40, acc[4][1] = a41;           \
    acc[5][0] = a50, acc[5][1] = a51;

// clang-format off
// pf: if not NULL, a line at pf + j * pf_step is prefetched at each step (the next panel, so
// that a compute-bound panel overlaps the next one's fetch from memory). The hint asks for L2
// (locality 2), where the L1 hint (the default) was slower: a 16-column product, 1536 x 16 x
// 1024, took 453 us with it and 382-412 us with L2 on 2 AVX2 cores.
SIMD_INLINE void gemm_tile_f32(int nr, int K, const float *w, const float *const *col,
                               vf acc[NR][2], const char *pf, size_t pf_step) {
    GEMM_TILE_BODY(v_load)
}

SIMD_INLINE void gemm_tile_bf16(int nr, int K, const uint16_t *w, const float *const *col,
                                vf acc[NR][2], const char *pf, size_t pf_step) {
    GEMM_TILE_BODY(v_load_bf16)
}
// clang-format on

// One tile: rows m0 .. m0+MR-1 of panel w (K steps from k0 on) times columns n0 .. n0+nr-1,
// continuing the accumulators in acc.
static inline void gemm_tile(const struct mimi_gemm_args *a, const void *w, int k0, int kc, int n0,
                             int nr, vf acc[NR][2], const char *pf) {
    const float *col[NR];
    for (int c = 0; c < NR; c++)
        col[c] = a->b + (ptrdiff_t)(n0 + (c < nr ? c : nr - 1)) * a->ldb + k0;
    const float *wf = (const float *)w + (size_t)k0 * MR;
    const uint16_t *wh = (const uint16_t *)w + (size_t)k0 * MR;
    const int K = kc;
    const size_t step = MR * (a->w_bf16 ? 2 : 4);  // bytes of one panel step
    if (a->w_bf16) {
        switch (nr) {
        case 1: gemm_tile_bf16(1, K, wh, col, acc, pf, step); break;
        case 2: gemm_tile_bf16(2, K, wh, col, acc, pf, step); break;
        case 3: gemm_tile_bf16(3, K, wh, col, acc, pf, step); break;
        case 4: gemm_tile_bf16(4, K, wh, col, acc, pf, step); break;
        case 5: gemm_tile_bf16(5, K, wh, col, acc, pf, step); break;
        default: gemm_tile_bf16(6, K, wh, col, acc, pf, step); break;
        }
    } else {
        switch (nr) {
        case 1: gemm_tile_f32(1, K, wf, col, acc, pf, step); break;
        case 2: gemm_tile_f32(2, K, wf, col, acc, pf, step); break;
        case 3: gemm_tile_f32(3, K, wf, col, acc, pf, step); break;
        case 4: gemm_tile_f32(4, K, wf, col, acc, pf, step); break;
        case 5: gemm_tile_f32(5, K, wf, col, acc, pf, step); break;
        default: gemm_tile_f32(6, K, wf, col, acc, pf, step); break;
        }
    }
}

// Streaming (one or two columns): a tile holds few accumulators, and each gets one FMA per
// step, so a single panel would leave the loop waiting on FMA latency rather than on memory.
// These tiles run PN panels side by side (PN * nr <= 4 chains of 2 vectors): more chains in
// flight and PN weight streams, with every output's chain unchanged.
#define STREAM_STEP(LOAD, P)                                                                       \
    if (np > P) {                                                                                  \
        vf u0 = LOAD(wp##P + (size_t)j * MR), u1 = LOAD(wp##P + (size_t)j * MR + SIMD_W);          \
        a##P##00 = v_fma(u0, b0, a##P##00);                                                        \
        a##P##01 = v_fma(u1, b0, a##P##01);                                                        \
        if (nr > 1) {                                                                              \
            a##P##10 = v_fma(u0, b1, a##P##10);                                                    \
            a##P##11 = v_fma(u1, b1, a##P##11);                                                    \
        }                                                                                          \
    }
#define STREAM_TILE_BODY(LOAD)                                                                     \
    vf a000 = acc[0][0][0], a001 = acc[0][0][1], a010 = acc[0][1][0], a011 = acc[0][1][1];         \
    vf a100 = acc[1][0][0], a101 = acc[1][0][1], a110 = acc[1][1][0], a111 = acc[1][1][1];         \
    vf a200 = acc[2][0][0], a201 = acc[2][0][1], a210 = acc[2][1][0], a211 = acc[2][1][1];         \
    vf a300 = acc[3][0][0], a301 = acc[3][0][1], a310 = acc[3][1][0], a311 = acc[3][1][1];         \
    for (int j = 0; j < K; j++) {                                                                  \
        const vf b0 = v_bcast(col0 + j), b1 = nr > 1 ? v_bcast(col1 + j) : b0;                     \
        STREAM_STEP(LOAD, 0) STREAM_STEP(LOAD, 1) STREAM_STEP(LOAD, 2) STREAM_STEP(LOAD, 3)        \
    }                                                                                              \
    acc[0][0][0] = a000, acc[0][0][1] = a001, acc[0][1][0] = a010, acc[0][1][1] = a011;            \
    acc[1][0][0] = a100, acc[1][0][1] = a101, acc[1][1][0] = a110, acc[1][1][1] = a111;            \
    acc[2][0][0] = a200, acc[2][0][1] = a201, acc[2][1][0] = a210, acc[2][1][1] = a211;            \
    acc[3][0][0] = a300, acc[3][0][1] = a301, acc[3][1][0] = a310, acc[3][1][1] = a311;

// clang-format off
SIMD_INLINE void stream_tile_f32(int np, int nr, int K, const float *wp0, const float *wp1,
                                 const float *wp2, const float *wp3, const float *col0,
                                 const float *col1, vf acc[4][2][2]) {
    STREAM_TILE_BODY(v_load)
}

SIMD_INLINE void stream_tile_bf16(int np, int nr, int K, const uint16_t *wp0,
                                  const uint16_t *wp1, const uint16_t *wp2, const uint16_t *wp3,
                                  const float *col0, const float *col1, vf acc[4][2][2]) {
    STREAM_TILE_BODY(v_load_bf16)
}
// clang-format on

// Panels p0 .. p0+np-1 (np <= 4 / N) times all N <= 2 columns, stored.
static void gemm_stream(const struct mimi_gemm_args *a, int p0, int np) {
    const size_t panel = (size_t)a->K * MR;
    const float *col0 = a->b, *col1 = a->N > 1 ? a->b + a->ldb : a->b;
    vf acc[4][2][2];
    for (int q = 0; q < 4; q++)
        for (int c = 0; c < 2; c++)
            for (int v = 0; v < 2; v++)
                acc[q][c][v] =
                    a->bias && q < np ? v_load(a->bias + (p0 + q) * MR + v * SIMD_W) : v_zero();
    // clang-format off
    if (a->w_bf16) {
        const uint16_t *w = (const uint16_t *)a->w + p0 * panel;
        const uint16_t *w1 = np > 1 ? w + panel : w, *w2 = np > 2 ? w + 2 * panel : w,
                       *w3 = np > 3 ? w + 3 * panel : w;
#define STREAM_BF16(NP, NR) stream_tile_bf16(NP, NR, a->K, w, w1, w2, w3, col0, col1, acc)
        if (a->N == 1) {
            if (np == 4) STREAM_BF16(4, 1); else if (np == 3) STREAM_BF16(3, 1);
            else if (np == 2) STREAM_BF16(2, 1); else STREAM_BF16(1, 1);
        } else {
            if (np == 2) STREAM_BF16(2, 2); else STREAM_BF16(1, 2);
        }
#undef STREAM_BF16
    } else {
        const float *w = (const float *)a->w + p0 * panel;
        const float *w1 = np > 1 ? w + panel : w, *w2 = np > 2 ? w + 2 * panel : w,
                    *w3 = np > 3 ? w + 3 * panel : w;
#define STREAM_F32(NP, NR) stream_tile_f32(NP, NR, a->K, w, w1, w2, w3, col0, col1, acc)
        if (a->N == 1) {
            if (np == 4) STREAM_F32(4, 1); else if (np == 3) STREAM_F32(3, 1);
            else if (np == 2) STREAM_F32(2, 1); else STREAM_F32(1, 1);
        } else {
            if (np == 2) STREAM_F32(2, 2); else STREAM_F32(1, 2);
        }
#undef STREAM_F32
    }
    // clang-format on
    for (int q = 0; q < np; q++) {
        const int m0 = (p0 + q) * MR, mv = a->M - m0 < MR ? a->M - m0 : MR;
        for (int c = 0; c < a->N; c++) store_rows(&a->out, a->epi, a->scale, m0, mv, c, acc[q][c]);
    }
}

// Work items are (panel, block of NCB columns), panel-major. With many columns and a long
// reduction the block runs KC steps at a time over all its tiles, so that the panel's chunk
// stays in L1 and the columns' chunks in L2; the chain per output is unchanged.
#define KC 256
static void KSUF(gemm)(const struct mimi_gemm_args *a, long i0, long i1) {
    const int blocks = (a->N + NCB - 1) / NCB;
    if (a->N <= 2) {
        // streaming: one block, items are panels; up to 4 / N of them at a time
        const int group = 4 / a->N;
        for (long it = i0; it < i1; it += group)
            gemm_stream(a, (int)it, i1 - it < group ? (int)(i1 - it) : group);
        return;
    }
    for (long it = i0; it < i1; it++) {
        const int p = (int)(it / blocks), m0 = p * MR;
        const int mv = a->M - m0 < MR ? a->M - m0 : MR;
        const int n_begin = (int)(it % blocks) * NCB;
        const int n_end = a->N - n_begin < NCB ? a->N : n_begin + NCB;
        const int tiles = (n_end - n_begin + NR - 1) / NR;
        const int kc = tiles > 1 && a->K > KC + KC / 2 ? KC : a->K;
        const void *w = a->w_bf16 ? (const void *)((const uint16_t *)a->w + (size_t)p * a->K * MR)
                                  : (const void *)((const float *)a->w + (size_t)p * a->K * MR);
        vf acc[NCB / NR][NR][2];
        for (int t = 0; t < tiles; t++)
            for (int c = 0; c < NR; c++) {
                acc[t][c][0] = a->bias ? v_load(a->bias + m0) : v_zero();
                acc[t][c][1] = a->bias ? v_load(a->bias + m0 + SIMD_W) : v_zero();
            }
        // the next panel, fetched while this one computes (in its first tile of each chunk)
        const size_t elem = a->w_bf16 ? 2 : 4, panel_bytes = (size_t)a->K * MR * elem;
        const int panels = (a->M + MR - 1) / MR;
        const char *next = p + 1 < panels ? (const char *)w + panel_bytes : NULL;
        for (int k0 = 0; k0 < a->K; k0 += kc)
            for (int t = 0; t < tiles; t++) {
                const int n0 = n_begin + t * NR, nr = n_end - n0 < NR ? n_end - n0 : NR;
                const char *pf = t == 0 && next ? next + (size_t)k0 * MR * elem : NULL;
                gemm_tile(a, w, k0, a->K - k0 < kc ? a->K - k0 : kc, n0, nr, acc[t], pf);
            }
        for (int t = 0; t < tiles; t++) {
            const int n0 = n_begin + t * NR, nr = n_end - n0 < NR ? n_end - n0 : NR;
            for (int c = 0; c < nr; c++)
                store_rows(&a->out, a->epi, a->scale, m0, mv, n0 + c, acc[t][c]);
        }
    }
}

// ---- direct convolution ----

// acc[r] (CTB steps) += sum_j W[m0 + r, j] X_j[t0 ..], j in order (accumulators in locals).
#define CONV_ROW(r)                                                                                \
    {                                                                                              \
        vf c = v_bcast(wj + r);                                                                    \
        a##r##0 = v_fma(c, x0, a##r##0);                                                           \
        a##r##1 = v_fma(c, x1, a##r##1);                                                           \
        a##r##2 = v_fma(c, x2, a##r##2);                                                           \
    }
SIMD_INLINE void conv_tile(int J, const float *w, const int *off, const float *x,
                           vf acc[CRB][CTV]) {
    vf a00 = acc[0][0], a01 = acc[0][1], a02 = acc[0][2], a10 = acc[1][0], a11 = acc[1][1],
       a12 = acc[1][2], a20 = acc[2][0], a21 = acc[2][1], a22 = acc[2][2], a30 = acc[3][0],
       a31 = acc[3][1], a32 = acc[3][2];
    for (int j = 0; j < J; j++) {
        const float *xj = x + off[j];
        const vf x0 = v_load(xj), x1 = v_load(xj + SIMD_W), x2 = v_load(xj + 2 * SIMD_W);
        const float *wj = w + (size_t)j * MR;
        CONV_ROW(0) CONV_ROW(1) CONV_ROW(2) CONV_ROW(3)
    }
    acc[0][0] = a00, acc[0][1] = a01, acc[0][2] = a02, acc[1][0] = a10, acc[1][1] = a11;
    acc[1][2] = a12, acc[2][0] = a20, acc[2][1] = a21, acc[2][2] = a22, acc[3][0] = a30;
    acc[3][1] = a31, acc[3][2] = a32;
}

// Work items are (panel of MR rows, block of CTB steps). A panel's CRB-row blocks run their
// reduction JC indices at a time, all of them before the next JC: that chunk of the input
// (JC x CTB floats) and of the panel (JC x MR) stays in L1 for the MR / CRB blocks, and each
// output's chain runs in the same order as in one pass.
#define JC 128
static void KSUF(conv)(const struct mimi_conv_args *a, long i0, long i1) {
    const int panels = (a->M + MR - 1) / MR, time_blocks = (a->T + CTB - 1) / CTB;
    for (long it = i0; it < i1; it++) {
        const int q = (int)(a->rows_outer ? it / time_blocks : it % panels);
        const int tb = (int)(a->rows_outer ? it % time_blocks : it / panels);
        const int t0 = tb * CTB, tv = a->T - t0 < CTB ? a->T - t0 : CTB;
        const int m_end = (q + 1) * MR < a->M ? (q + 1) * MR : a->M;
        const int blocks = (m_end - q * MR + CRB - 1) / CRB;
        const float *wq = a->w + (size_t)q * a->J * MR;
        vf acc[MR / CRB][CRB][CTV];
        for (int b = 0; b < blocks; b++)
            for (int r = 0; r < CRB; r++) {
                const int m = q * MR + b * CRB + r;
                vf bias = a->bias ? v_bcast(a->bias + m) : v_zero();
                for (int v = 0; v < CTV; v++) acc[b][r][v] = bias;
            }
        for (int j0 = 0; j0 < a->J; j0 += JC) {
            const int jc = a->J - j0 < JC ? a->J - j0 : JC;
            for (int b = 0; b < blocks; b++)
                conv_tile(jc, wq + (size_t)j0 * MR + b * CRB, a->off + j0, a->x + t0, acc[b]);
        }
        for (int b = 0; b < blocks; b++) {
            const int m0 = q * MR + b * CRB;
            for (int r = 0; r < CRB && m0 + r < a->M; r++)
                store_time(&a->out, a->epi, m0 + r, t0, tv, acc[b][r]);
        }
    }
}

// ---- layer norm ----

static void KSUF(layer_norm)(const float *x, float *y, int rows, int d, const float *w,
                             const float *b, float eps) {
    for (int r = 0; r < rows; r++) {
        const float *xr = x + (size_t)r * d;
        float *yr = y + (size_t)r * d;
        // mean, then the biased variance around it
        vf acc = v_zero();
        int i = 0;
        for (; i + SIMD_W <= d; i += SIMD_W) acc = v_add(acc, v_load(xr + i));
        float sum = v_hsum(acc);
        for (; i < d; i++) sum += xr[i];
        const float mean = sum / (float)d;
        const vf vm = v_set1(mean);
        acc = v_zero();
        for (i = 0; i + SIMD_W <= d; i += SIMD_W) {
            vf c = v_sub(v_load(xr + i), vm);
            acc = v_fma(c, c, acc);
        }
        float var = v_hsum(acc);
        for (; i < d; i++) var += (xr[i] - mean) * (xr[i] - mean);
        const float inv_std = 1.0f / sqrtf(var / (float)d + eps);
        const vf inv = v_set1(inv_std);
        for (i = 0; i + SIMD_W <= d; i += SIMD_W) {
            vf n = v_mul(v_sub(v_load(xr + i), vm), inv);
            v_store(yr + i, v_fma(n, v_load(w + i), v_load(b + i)));
        }
        for (; i < d; i++) yr[i] = fmaf((xr[i] - mean) * inv_std, w[i], b[i]);
    }
}

// ---- attention ----

#define MAX_QUERIES 16  // queries served per pass over the keys

// Dot products of a query (AH floats, in the AV vectors qv) with keys idx[i0 .. i0 + nk - 1]
// (nk <= 4), each accumulated over its vectors in order and then summed across lanes by v_hsum,
// as the general loop below does; the four chains run side by side.
#define AH 64
#define AV (AH / SIMD_W)
#if defined(__clang__)
#define UNROLL_AV _Pragma("clang loop unroll(full)")
#elif defined(__GNUC__)
#define UNROLL_AV _Pragma("GCC unroll 16")
#else
#define UNROLL_AV
#endif
SIMD_INLINE void dots4(const vf *qv, const float *keys, ptrdiff_t ld, const int *idx, int i0, int nk,
                       float *dot) {
    const float *k0 = keys + (ptrdiff_t)idx[i0] * ld;
    const float *k1 = nk > 1 ? keys + (ptrdiff_t)idx[i0 + 1] * ld : k0;
    const float *k2 = nk > 2 ? keys + (ptrdiff_t)idx[i0 + 2] * ld : k0;
    const float *k3 = nk > 3 ? keys + (ptrdiff_t)idx[i0 + 3] * ld : k0;
    vf a0 = v_zero(), a1 = v_zero(), a2 = v_zero(), a3 = v_zero();
    UNROLL_AV
    for (int c = 0; c < AV; c++) {
        a0 = v_fma(qv[c], v_load(k0 + c * SIMD_W), a0);
        a1 = v_fma(qv[c], v_load(k1 + c * SIMD_W), a1);
        a2 = v_fma(qv[c], v_load(k2 + c * SIMD_W), a2);
        a3 = v_fma(qv[c], v_load(k3 + c * SIMD_W), a3);
    }
    dot[0] = v_hsum(a0), dot[1] = v_hsum(a1), dot[2] = v_hsum(a2), dot[3] = v_hsum(a3);
}

static void attend_block(const float *q, ptrdiff_t ldq, int n_q, const float *keys,
                         const float *values, ptrdiff_t ld, const int *idx,
                         const unsigned char *vis, int n, int hd, float scale, float *scores,
                         float *out, ptrdiff_t ldo) {
    const int hv = hd - hd % SIMD_W;
    float max[MAX_QUERIES], sum[MAX_QUERIES];
    for (int s = 0; s < n_q; s++) max[s] = -INFINITY;
    if (hd == AH) {
        // a query at a time, held in registers, against four keys at a time
        for (int s = 0; s < n_q; s++) {
            vf qv[AV];
            UNROLL_AV
            for (int c = 0; c < AV; c++) qv[c] = v_load(q + s * ldq + c * SIMD_W);
            const unsigned char *v = vis + (size_t)s * n;
            float *sc = scores + (size_t)s * n, mx = -INFINITY;
            for (int i0 = 0; i0 < n; i0 += 4) {
                const int nk = n - i0 < 4 ? n - i0 : 4;
                float dot[4];
                dots4(qv, keys, ld, idx, i0, nk, dot);
                for (int u = 0; u < nk; u++) {
                    if (!v[i0 + u]) continue;
                    const float d = dot[u] * scale;
                    sc[i0 + u] = d;
                    mx = d > mx ? d : mx;
                }
            }
            max[s] = mx;
        }
    } else {
        // scores: each key read once, dotted with every query that sees it
        for (int i = 0; i < n; i++) {
            const float *k = keys + (ptrdiff_t)idx[i] * ld;
            for (int s = 0; s < n_q; s++) {
                if (!vis[(size_t)s * n + i]) continue;
                const float *qs = q + s * ldq;
                vf acc = v_zero();
                for (int c = 0; c < hv; c += SIMD_W) acc = v_fma(v_load(qs + c), v_load(k + c), acc);
                float dot = v_hsum(acc);
                for (int c = hv; c < hd; c++) dot += qs[c] * k[c];
                dot *= scale;
                scores[(size_t)s * n + i] = dot;
                max[s] = dot > max[s] ? dot : max[s];
            }
        }
    }
    // softmax numerators and sums, per query over its visible entries in list order
    for (int s = 0; s < n_q; s++) {
        float *sc = scores + (size_t)s * n;
        const unsigned char *v = vis + (size_t)s * n;
        for (int i = 0; i < n; i++) sc[i] = v[i] ? sc[i] - max[s] : -INFINITY;
        KSUF(exp)(sc, sc, (size_t)n);
        float sm = 0.0f;
        for (int i = 0; i < n; i++)
            if (v[i]) sm += sc[i];
        sum[s] = sm;
        for (int c = 0; c < hd; c++) out[s * ldo + c] = 0.0f;
    }
    if (hd == AH) {
        // out_s = sum_i (e_si / sum_s) v_i, a query at a time with its sums in registers: the
        // same divisions and the same fma chain per output as below
        for (int s = 0; s < n_q; s++) {
            float *sc = scores + (size_t)s * n;
            const unsigned char *v = vis + (size_t)s * n;
            const vf vs = v_set1(sum[s]);
            int i = 0;
            for (; i + SIMD_W <= n; i += SIMD_W) v_store(sc + i, v_div(v_load(sc + i), vs));
            for (; i < n; i++) sc[i] = sc[i] / sum[s];
            vf o[AV];
            UNROLL_AV
            for (int c = 0; c < AV; c++) o[c] = v_zero();
            for (i = 0; i < n; i++) {
                if (!v[i]) continue;
                const float *vr = values + (ptrdiff_t)idx[i] * ld;
                const vf vw = v_bcast(sc + i);
                UNROLL_AV
                for (int c = 0; c < AV; c++) o[c] = v_fma(vw, v_load(vr + c * SIMD_W), o[c]);
            }
            UNROLL_AV
            for (int c = 0; c < AV; c++) v_store(out + s * ldo + c * SIMD_W, o[c]);
        }
        return;
    }
    // out_s = sum_i (e_si / sum_s) v_i: each value read once
    for (int i = 0; i < n; i++) {
        const float *v = values + (ptrdiff_t)idx[i] * ld;
        for (int s = 0; s < n_q; s++) {
            if (!vis[(size_t)s * n + i]) continue;
            float *os = out + s * ldo;
            const float wgt = scores[(size_t)s * n + i] / sum[s];
            const vf vw = v_set1(wgt);
            for (int c = 0; c < hv; c += SIMD_W)
                v_store(os + c, v_fma(vw, v_load(v + c), v_load(os + c)));
            for (int c = hv; c < hd; c++) os[c] = fmaf(wgt, v[c], os[c]);
        }
    }
}

static void KSUF(attend)(const float *q, ptrdiff_t ldq, int n_q, const float *keys,
                         const float *values, ptrdiff_t ld, const int *idx,
                         const unsigned char *vis, int n, int hd, float scale, float *scores,
                         float *out, ptrdiff_t ldo) {
    // queries in groups (every query's arithmetic is the same whatever its group)
    for (int s0 = 0; s0 < n_q; s0 += MAX_QUERIES)
        attend_block(q + s0 * ldq, ldq, n_q - s0 < MAX_QUERIES ? n_q - s0 : MAX_QUERIES, keys,
                     values, ld, idx, vis + (size_t)s0 * n, n, hd, scale, scores, out + s0 * ldo,
                     ldo);
}

// ---- the table ----

#define KTABLE_(s) mimi_kernels_##s
#define KTABLE(s) KTABLE_(s)

const struct mimi_kernels KTABLE(KSUF_NAME) = {
    .name = KSUF_STR,
    .isa = KSUF_ISA,
    .width = SIMD_W,
    .mr = MR,
    .gemm_cols = NCB,
    .conv_steps = CTB,
    .gemm = KSUF(gemm),
    .conv = KSUF(conv),
    .elu = KSUF(elu),
    .gelu = KSUF(gelu),
    .exp = KSUF(exp),
    .layer_norm = KSUF(layer_norm),
    .attend = KSUF(attend),
};
