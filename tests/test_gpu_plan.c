/*
 * test_gpu_plan.c - the GPU backend's static plans, run on the CPU.
 *
 * Builds the same op lists the CUDA backend captures (src/cuda/plan.c) over host memory and
 * interprets them with plain loops, one function per op (this file is the reference of what each
 * op in src/cuda/ops.h computes). A batch of slots stepped with subsets of its slots must give
 * what the CPU backend gives: this checks the plan's layouts, state handling, row buckets and
 * matrix-product arguments on any machine, with no GPU.
 *
 * usage: test_gpu_plan
 */
#include "mimi.h"
#include "cpu/cpu.h"
#include "cuda/plan.h"
#include "offline_sched.h"
#include "safetensors.h"
#include "test.h"

#define SLOTS 3
#define CAP 5  // emulated capacity: 3 listed slots run in a bucket of 4 rows with one padding row
#define WIDE 8  // a capacity whose largest bucket takes the large-step ops (op_resblock)
#define FRAMES 5
#define N_Q 8

static int32_t slot_of(const int32_t *row_slot, int r) { return row_slot[r]; }
static float elu(float x) { return x > 0.0f ? x : expm1f(x); }

// ---- op interpreters ----

// [hist | f(x)] at column j for row r, channel i.
static float xin(const struct op_im2col *a, int i, int r, int j) {
    int slot = slot_of(a->row_slot, r);
    const float *xr = a->x + ((size_t)i * a->R + r) * a->T;
    if (j >= a->H) return a->elu ? elu(xr[j - a->H]) : xr[j - a->H];
    if (slot < 0) return 0.0f;
    if (a->replicate && !a->started[(size_t)slot * a->slot_stride]) return a->elu ? elu(xr[0]) : xr[0];
    return a->hist[(size_t)slot * a->slot_stride + (size_t)i * a->H + j];
}

// Value i of an array of floats, or of bfloat16 values (2 bytes each) with bf16.
static void put_value(float *p, size_t i, float x, int bf16) {
    if (!bf16) {
        p[i] = x;
        return;
    }
    const uint16_t h = mimi_to_bf16(x);
    memcpy((char *)p + 2 * i, &h, sizeof h);
}

static float get_value(const float *p, size_t i, int bf16) {
    if (!bf16) return p[i];
    uint16_t h;
    memcpy(&h, (const char *)p + 2 * i, sizeof h);
    const uint32_t u = (uint32_t)h << 16;
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

// x rounded to bfloat16 (nearest even), as a float.
static float bf16_round(float x) {
    float y;
    put_value(&y, 0, x, 1);
    return get_value(&y, 0, 1);
}

static void emu_im2col(const struct op_im2col *a) {
    const int To = a->T / a->S;
    const size_t N = (size_t)a->R * To;
    for (int o = 0; o < a->ones; o++)
        for (size_t n = 0; n < N; n++) put_value(a->col, ((size_t)a->c_in * a->K + o) * N + n, 1.0f, a->col_bf16);
    for (int i = 0; i < a->c_in; i++)
        for (int k = 0; k < a->K; k++)
            for (int r = 0; r < a->R; r++)
                for (int t = 0; t < To; t++)
                    put_value(a->col, ((size_t)i * a->K + k) * N + (size_t)r * To + t, xin(a, i, r, t * a->S + k),
                              a->col_bf16);
    if (a->tail)  // the newest H columns of [hist | f(x)], (c_in, R, H), for the step's tails op
        for (int i = 0; i < a->c_in; i++)
            for (int r = 0; r < a->R; r++)
                for (int j = 0; j < a->H; j++) a->tail[((size_t)i * a->R + r) * a->H + j] = xin(a, i, r, a->T + j);
}

static void emu_carry(const struct op_im2col *a) {
    for (int r = 0; r < a->R; r++) {
        int slot = slot_of(a->row_slot, r);
        if (slot < 0) continue;
        float *h = (float *)a->hist + (size_t)slot * a->slot_stride;
        // ascending: column j reads column T + j > j, not yet overwritten
        for (int i = 0; i < a->c_in; i++)
            for (int j = 0; j < a->H; j++) h[(size_t)i * a->H + j] = xin(a, i, r, a->T + j);
    }
}

static void emu_conv(const struct op_conv *a) {
    const struct op_im2col *in = &a->in;
    const int To = in->T / in->S, KK = in->c_in * in->K;
    if (a->tail)  // the newest H columns of [hist | f(x)], (c_in, R, H), for the step's tails op
        for (int i = 0; i < in->c_in; i++)
            for (int r = 0; r < in->R; r++)
                for (int j = 0; j < in->H; j++) a->tail[((size_t)i * in->R + r) * in->H + j] = xin(in, i, r, in->T + j);
    for (int o = 0; o < a->c_out; o++)
        for (int r = 0; r < in->R; r++)
            for (int t = 0; t < To; t++) {
                float v = 0.0f;
                for (int i = 0; i < in->c_in; i++)
                    for (int k = 0; k < in->K; k++) v += a->w[(size_t)o * a->ld + i * in->K + k] * xin(in, i, r, t * in->S + k);
                if (a->bias) v += a->w[(size_t)o * a->ld + KK];
                if (a->post_elu) v = elu(v);
                float *y = a->y + ((size_t)o * in->R + r) * To + t;
                v = a->accumulate ? *y + v : v;
                *y = a->elu_out ? elu(v) : v;
            }
}

// The last conv of op_resblock.last over y (c, R, T): [hist | elu(y)] with one output channel,
// then the newest K - 1 columns into the history (as emu_conv and emu_carry would).
static void emu_last_conv(const struct op_resblock *a, const float *y) {
    struct op_im2col in = a->in;
    in.x = y, in.hist = a->last.hist, in.H = in.K - 1, in.elu = 1, in.replicate = 0;
    struct op_conv conv = {in, a->last.w, a->last.out, 1, in.c_in * in.K + 1, 1, 0, 0, {0, 0, NULL, NULL}, 1, NULL, 0};
    emu_conv(&conv);
    emu_carry(&in);
}

// x (c, R, T) of op_resblock.first: its conv over [history | PCM].
static float *emu_first_conv(const struct op_resblock *a) {
    const struct gpu_first_conv *f = &a->first;
    const int c = a->in.c_in, R = a->in.R, T = a->in.T, K = f->in.K;
    float *x = malloc(sizeof(float) * c * R * T);
    for (int o = 0; o < c; o++)
        for (int r = 0; r < R; r++)
            for (int t = 0; t < T; t++) {
                float v = 0.0f;
                for (int k = 0; k < K; k++) v += f->w[(size_t)o * f->ld + k] * xin(&f->in, 0, r, t + k);
                x[((size_t)o * R + r) * T + t] = v + f->w[(size_t)o * f->ld + K];
            }
    return x;
}

static void emu_resblock(const struct op_resblock *a) {
    if (a->has_first) {
        // the block over x, then the history's carry (the kernel's second launch); the step form
        // stages it, and the PCM's newest samples too
        struct op_resblock b = *a;
        b.has_first = 0;
        b.in.x = emu_first_conv(a);
        emu_resblock(&b);
        if (!a->step.on) emu_carry(&b.in);
        const struct op_im2col *f = &a->first.in;
        for (int r = 0; a->step.on && r < f->R; r++)
            for (int j = 0; j < f->H; j++) a->step.first_tail[(size_t)r * f->H + j] = xin(f, 0, r, f->T + j);
        free((float *)b.in.x);
        return;
    }
    const struct op_im2col *in = &a->in;
    const int c = in->c_in, K = in->K, ck = c * K;
    float *y = a->has_last ? malloc(sizeof(float) * c * in->R * in->T) : a->y;
    float *h = malloc(sizeof(float) * a->hid);
    for (int r = 0; r < in->R; r++)
        for (int t = 0; t < in->T; t++) {
            for (int j = 0; j < a->hid; j++) {
                float v = 0.0f;
                for (int i = 0; i < c; i++)
                    for (int k = 0; k < K; k++) v += a->w1t[(size_t)(i * K + k) * a->hid + j] * xin(in, i, r, t + k);
                h[j] = elu(v + a->w1t[(size_t)ck * a->hid + j]);
            }
            for (int o = 0; o < c; o++) {
                float v = 0.0f;
                for (int j = 0; j < a->hid; j++) v += a->w2t[(size_t)j * c + o] * h[j];
                const size_t at = ((size_t)o * in->R + r) * in->T + t;
                y[at] = in->x[at] + (v + a->w2t[(size_t)a->hid * c + o]);
                if (a->step.elu_out) y[at] = elu(y[at]);
            }
        }
    free(h);
    // the step form's staged history: the newest H columns of [hist | elu(x)]
    for (int i = 0; a->step.tail && i < c; i++)
        for (int r = 0; r < in->R; r++)
            for (int j = 0; j < in->H; j++) a->step.tail[((size_t)i * in->R + r) * in->H + j] = xin(in, i, r, in->T + j);
    if (a->has_last) emu_last_conv(a, y), free(y);
}

// The first `cols` values of each of `rows` rows of w (ld apart), rounded to bfloat16 once, as a
// packed (rows, cols) matrix (malloc'd; NULL when out of memory).
static float *rounded_rows(const float *w, int rows, int cols, size_t ld) {
    float *r = malloc(sizeof(float) * rows * cols);
    for (int o = 0; r && o < rows; o++)
        for (int p = 0; p < cols; p++) r[(size_t)o * cols + p] = bf16_round(w[(size_t)o * ld + p]);
    return r;
}

// op_resblock_mma: the window, W1, W2 and h rounded to bfloat16, the sums and biases in f32.
static void emu_resblock_mma(const struct op_resblock_mma *a) {
    const struct op_im2col *in = &a->in;
    const int c = in->c_in, K = in->K, ck = c * K, hid = a->hid;
    float *w1 = rounded_rows(a->w1, hid, ck, a->ld1), *w2 = rounded_rows(a->w2, c, hid, a->ld2);
    float *v = malloc(sizeof(float) * ck), *h = malloc(sizeof(float) * hid);
    CHECK(w1 && w2 && v && h);
    if (!w1 || !w2 || !v || !h) {
        free(w1), free(w2), free(v), free(h);
        return;
    }
    for (int r = 0; r < in->R; r++)
        for (int t = 0; t < in->T; t++) {
            for (int i = 0; i < c; i++)
                for (int k = 0; k < K; k++) v[i * K + k] = bf16_round(xin(in, i, r, t + k));
            for (int j = 0; j < hid; j++) {
                float s = 0.0f;
                for (int p = 0; p < ck; p++) s += w1[j * ck + p] * v[p];
                h[j] = bf16_round(elu(s + a->w1[(size_t)j * a->ld1 + ck]));
            }
            for (int o = 0; o < c; o++) {
                float s = 0.0f;
                for (int j = 0; j < hid; j++) s += w2[o * hid + j] * h[j];
                const size_t at = ((size_t)o * in->R + r) * in->T + t;
                a->y[at] = in->x[at] + (s + a->w2[(size_t)o * a->ld2 + hid]);
            }
        }
    free(w1), free(w2), free(v), free(h);
}

// op_conv_mma: the window and W rounded to bfloat16, the sums and the bias in f32.
static void emu_conv_mma(const struct op_conv_mma *a) {
    const struct op_im2col *in = &a->in;
    const int To = in->T / in->S, ck = in->c_in * in->K;
    float *w = rounded_rows(a->w, a->c_out, ck, a->ld);
    float *v = malloc(sizeof(float) * ck);  // the window of one output, (c_in, K)
    CHECK(w && v);
    if (!w || !v) {
        free(w), free(v);
        return;
    }
    for (int r = 0; r < in->R; r++)
        for (int t = 0; t < To; t++) {
            for (int p = 0; p < ck; p++) v[p] = bf16_round(xin(in, p / in->K, r, t * in->S + p % in->K));
            for (int o = 0; o < a->c_out; o++) {
                float s = 0.0f;
                for (int p = 0; p < ck; p++) s += w[(size_t)o * ck + p] * v[p];
                a->y[((size_t)o * in->R + r) * To + t] = s + a->w[(size_t)o * a->ld + ck];
            }
        }
    free(w), free(v);
}

// op_convtr_mma: f(x) and W rounded to bfloat16, the sums and the bias in f32, v(-1) = 0 with
// the tail added at step 0.
static float *convtr_mma_inputs(const struct op_convtr_mma *a) {
    const struct op_convtr *tr = &a->tr;
    float *v = malloc(sizeof(float) * a->c_in * tr->R * tr->T);
    CHECK(v != NULL);
    for (size_t n = 0; v && n < (size_t)a->c_in * tr->R * tr->T; n++) v[n] = bf16_round(a->elu ? elu(tr->x[n]) : tr->x[n]);
    return v;
}

// Output phase f of step t of row r before bias and tail: sum over s = 0, 1 (steps t - s in [0,
// T)) of bf16(W[o, f + s*S]) . v(t - s); at t = T the next tail.
static float convtr_mma_phase(const struct op_convtr_mma *a, const float *v, int o, int f, int r, int t) {
    const struct op_convtr *tr = &a->tr;
    const int S = tr->S, T = tr->T, R = tr->R, ci = a->c_in;
    float s = 0.0f;
    for (int u = 0; u < 2; u++)
        for (int i = 0; i < ci && t - u >= 0 && t - u < T; i++)
            s += bf16_round(tr->w[((size_t)o * tr->K + f + u * S) * ci + i]) * v[((size_t)i * R + r) * T + t - u];
    return s;
}

static void emu_convtr_mma(const struct op_convtr_mma *a) {
    const struct op_convtr *tr = &a->tr;
    const int S = tr->S, T = tr->T, R = tr->R;
    float *v = convtr_mma_inputs(a);
    if (!v) return;
    for (int o = 0; o < tr->c_out; o++)
        for (int r = 0; r < R; r++)
            for (int t = 0; t < T; t++)
                for (int f = 0; f < S; f++) {
                    float y = convtr_mma_phase(a, v, o, f, r, t) + (tr->bias ? tr->bias[o] : 0.0f);
                    if (t == 0 && tr->row_slot[r] >= 0) y += tr->tail[(size_t)tr->row_slot[r] * tr->slot_stride + o * S + f];
                    tr->y[((size_t)o * R + r) * T * S + t * S + f] = y;
                }
    free(v);
}

static void emu_convtr_mma_tail(const struct op_convtr_mma *a) {
    const struct op_convtr *tr = &a->tr;
    float *v = convtr_mma_inputs(a);
    if (!v) return;
    for (int r = 0; r < tr->R; r++) {
        if (tr->row_slot[r] < 0) continue;
        float *tail = tr->tail + (size_t)tr->row_slot[r] * tr->slot_stride;
        for (int o = 0; o < tr->c_out; o++)
            for (int f = 0; f < tr->S; f++) tail[o * tr->S + f] = convtr_mma_phase(a, v, o, f, r, tr->T);
    }
    free(v);
}

// out = LayerNorm(x) * w + b over d values (out may be x); double mean and biased variance.
static void layer_norm(const float *x, float *out, const float *w, const float *b, int d, float eps) {
    double mean = 0.0, var = 0.0;
    for (int i = 0; i < d; i++) mean += x[i];
    mean /= d;
    for (int i = 0; i < d; i++) var += ((double)x[i] - mean) * ((double)x[i] - mean);
    var /= d;
    float inv = (float)(1.0 / sqrt(var + eps));
    for (int i = 0; i < d; i++) out[i] = ((x[i] - (float)mean) * inv) * w[i] + b[i];
}

static float gelu(float v) { return 0.5f * v * (1.0f + erff(v * (float)M_SQRT1_2)); }

static void emu_convtr_out(const struct op_convtr *a);

static void emu_gemm(const struct op_gemm *g) {
    // op(A) rows and op(B) columns packed contiguous, then one dot per output
    float *pa = malloc(sizeof(float) * (size_t)g->m * g->k), *pb = malloc(sizeof(float) * (size_t)g->n * g->k);
    for (int i = 0; i < g->m; i++)
        for (int p = 0; p < g->k; p++)
            pa[(size_t)i * g->k + p] =
                get_value(g->a, g->transa ? p + (size_t)i * g->lda : i + (size_t)p * g->lda, g->ab_bf16);
    for (int j = 0; j < g->n; j++) {
        if (g->ln_w) {  // op(B) row j = LN(x + scale * y), x + scale * y stored to ln_out
            float *row = pb + (size_t)j * g->k;
            for (int p = 0; p < g->k; p++) {
                float v = g->ln_x[(size_t)j * g->k + p];
                if (g->ln_y) v += g->ln_scale[p] * g->ln_y[(size_t)j * g->k + p];
                row[p] = v;
            }
            if (g->ln_out) memcpy(g->ln_out + (size_t)j * g->k, row, sizeof(float) * g->k);
            layer_norm(row, row, g->ln_w, g->ln_b, g->k, g->ln_eps);
            continue;
        }
        for (int p = 0; p < g->k; p++)
            pb[(size_t)j * g->k + p] =
                get_value(g->b, g->transb ? j + (size_t)p * g->ldb : p + (size_t)j * g->ldb, g->ab_bf16);
    }
    for (int j = 0; j < g->n; j++)
        for (int i = 0; i < g->m; i++) {
            const float *x = pa + (size_t)i * g->k, *y = pb + (size_t)j * g->k;
            float s = 0.0f;
            for (int p = 0; p < g->k; p++) s += x[p] * y[p];
            float *c = g->c + i + (size_t)j * g->ldc;
            *c = g->gelu ? gelu(s) : g->elu ? elu(s) : g->beta != 0.0f ? s + g->beta * *c : s;
        }
    free(pa);
    free(pb);
    if (g->with_up) emu_convtr_out(&g->up);  // the upsampling over C, in the same op
}

static void emu_pointwise(const struct op_pointwise *a) {
    if (a->mode == EW_BF16 || a->mode == EW_ELU_BF16 || a->mode == EW_GELU_BF16) {
        for (size_t i = 0; i < (size_t)a->channels * a->cols; i++)
            put_value(a->y, i, a->mode == EW_ELU_BF16 ? elu(a->x[i]) : a->mode == EW_GELU_BF16 ? gelu(a->x[i]) : a->x[i], 1);
        for (size_t i = 0; i < (size_t)a->ones * a->cols; i++) put_value(a->y, (size_t)a->channels * a->cols + i, 1.0f, 1);
        return;
    }
    for (int o = 0; a->mode == EW_ELU_ONES && o < a->ones; o++)
        for (size_t j = 0; j < a->cols; j++) a->y[(size_t)(a->channels + o) * a->cols + j] = 1.0f;
    for (int c = 0; c < a->channels; c++)
        for (size_t j = 0; j < a->cols; j++) {
            size_t i = (size_t)c * a->cols + j;
            float b = a->bias ? a->bias[c] : 0.0f, v = a->y[i];
            switch (a->mode) {
            case EW_BIAS: a->y[i] = v + b; break;
            case EW_BIAS_ELU: a->y[i] = elu(v + b); break;
            case EW_RESIDUAL: a->x[i] += v + b; break;
            case EW_ELU:
            case EW_ELU_ONES: a->y[i] = elu(v); break;
            case EW_GELU: a->y[i] = gelu(v); break;
            }
        }
}

static void emu_transpose(const struct op_transpose *a) {
    for (int i = 0; i < a->rows; i++)
        for (int j = 0; j < a->cols; j++) a->out[(size_t)j * a->rows + i] = a->in[(size_t)i * a->cols + j];
}

static void emu_finish(const struct op_finish *a) {
    for (int r = 0; r < a->R; r++) {
        int slot = slot_of(a->row_slot, r);
        if (slot < 0) continue;
        a->next_pos[(size_t)slot * a->slot_stride] += a->steps;
        a->started[(size_t)slot * a->slot_stride] = 1;
    }
}

// Full-output column q (0 <= q < S*T + P) of row r, channel o, without bias and tail.
static float convtr_col(const struct op_convtr *a, int o, int r, int q) {
    float v = 0.0f;
    const size_t N = (size_t)a->R * a->T;
    for (int t = 0; t < a->T; t++) {
        int k = q - t * a->S;
        if (k < 0 || k >= a->K) continue;
        v += a->taps ? a->taps[((size_t)o * a->K + k) * N + (size_t)r * a->T + t]
                     : a->w[(size_t)o * a->K + k] * a->x[((size_t)o * a->R + r) * a->T + t];
    }
    return v;
}

static void emu_convtr_tail(const struct op_convtr *a) {
    const int P = a->K - a->S, L = a->S * a->T;
    for (int o = 0; o < a->c_out; o++)
        for (int r = 0; r < a->R; r++) {
            int slot = slot_of(a->row_slot, r);
            if (slot < 0) continue;
            float *tail = a->tail + (size_t)slot * a->slot_stride + (size_t)o * P;
            float b = a->bias ? a->bias[o] : 0.0f;
            for (int j = 0; j < P; j++) {
                float v = b + convtr_col(a, o, r, L + j);
                if (L + j < P) v += tail[L + j];
                tail[j] = v - b;
            }
        }
}

// (with `carry` the tail step's stores too, after every old tail column is read; with `next`
// the values it would store, staged as (c_out, R, P))
static void emu_convtr_out(const struct op_convtr *a) {
    const int P = a->K - a->S, L = a->S * a->T;
    for (int o = 0; a->next && o < a->c_out; o++)
        for (int r = 0; r < a->R; r++) {
            const int slot = slot_of(a->row_slot, r);
            const float *tail = a->tail + (size_t)(slot < 0 ? 0 : slot) * a->slot_stride + (size_t)o * P;
            const float b = a->bias ? a->bias[o] : 0.0f;
            for (int j = 0; j < P; j++) {
                float v = b + convtr_col(a, o, r, L + j);
                if (L + j < P && slot >= 0) v += tail[L + j];
                a->next[((size_t)o * a->R + r) * P + j] = v - b;
            }
        }
    for (int o = 0; o < a->c_out; o++)
        for (int r = 0; r < a->R; r++) {
            int slot = slot_of(a->row_slot, r);
            const float *tail = a->tail + (size_t)(slot < 0 ? 0 : slot) * a->slot_stride + (size_t)o * P;
            for (int j = 0; j < L; j++) {
                float v = (a->bias ? a->bias[o] : 0.0f) + convtr_col(a, o, r, j);
                if (j < P && slot >= 0) v += tail[j];
                a->y[((size_t)o * a->R + r) * L + j] = v;
            }
        }
    if (a->carry) emu_convtr_tail(a);
}

static void emu_convtr_direct(const struct op_convtr_direct *a) {
    const struct op_convtr *tr = &a->tr;
    const int S = tr->S, T = tr->T, R = tr->R, K = tr->K;
    for (int o = 0; o < tr->c_out; o++)
        for (int r = 0; r < R; r++) {
            const float b = tr->bias ? tr->bias[o] : 0.0f;
            const int slot = slot_of(tr->row_slot, r);
            for (int t = 0; t <= T; t++)
                for (int f = 0; f < S; f++) {
                    float v = 0.0f;
                    for (int u = 0; u < 2; u++) {
                        if (t - u < 0 || t - u >= T) continue;
                        const float *w = tr->w + ((size_t)o * K + f + u * S) * a->c_in;
                        for (int i = 0; i < a->c_in; i++) v += w[i] * tr->x[((size_t)i * R + r) * T + t - u];
                    }
                    v += b;
                    if (t == T) {
                        a->next[((size_t)o * R + r) * S + f] = v - b;
                        continue;
                    }
                    if (t == 0 && slot >= 0) v += tr->tail[(size_t)slot * tr->slot_stride + (size_t)o * S + f];
                    tr->y[((size_t)o * R + r) * S * T + t * S + f] = v;
                }
        }
}

static void emu_convtr_copy(const struct op_convtr_direct *a) {
    const struct op_convtr *tr = &a->tr;
    for (int o = 0; o < tr->c_out; o++)
        for (int r = 0; r < tr->R; r++) {
            const int slot = slot_of(tr->row_slot, r);
            if (slot < 0) continue;
            memcpy(tr->tail + (size_t)slot * tr->slot_stride + (size_t)o * tr->S, a->next + ((size_t)o * tr->R + r) * tr->S,
                   sizeof(float) * tr->S);
        }
}

static void emu_tails(const struct op_tails *a) {
    if (a->with_finish) emu_finish(&a->finish);
    for (int e = 0; e < a->n; e++) {
        const struct gpu_tail *t = &a->e[e];
        for (int r = 0; r < a->R; r++) {
            const int slot = slot_of(a->row_slot, r);
            if (slot < 0) continue;
            for (int c = 0; c < t->C; c++)
                memcpy(t->dst + (size_t)slot * a->slot_stride + (size_t)c * t->P, t->src + ((size_t)c * a->R + r) * t->P,
                       sizeof(float) * t->P);
        }
    }
}

static void emu_norm(const struct op_norm *a) {
    for (int r = 0; r < a->rows; r++) {
        float *x = a->x + (size_t)r * a->d;
        if (a->mode != NORM_LN)
            for (int i = 0; i < a->d; i++) x[i] += a->scale[i] * a->y[(size_t)r * a->d + i];
        if (a->mode == NORM_RESID) continue;
        static float row[4096];  // a bf16 output's f32 values first
        CHECK(!a->out_bf16 || a->d <= 4096);
        float *o = a->out_bf16 ? row : a->out + (size_t)r * a->d;
        layer_norm(x, o, a->w, a->b, a->d, a->eps);
        for (int i = 0; a->out_bf16 && i < a->d; i++) put_value(a->out, (size_t)r * a->d + i, o[i], 1);
    }
}

static void emu_positions(const struct op_attention *a) {
    for (int r = 0; r < a->R; r++) {
        int slot = slot_of(a->row_slot, r);
        if (slot < 0) continue;
        int32_t base = a->next_pos[(size_t)slot * a->slot_stride];
        for (int s = 0; s < a->steps; s++)
            a->positions[(size_t)slot * a->slot_stride + (base + s) % a->ring] = base + s;
    }
}

// Value i of slot `slot`'s ring: f32, or bfloat16 (the high half of an f32, rounded to nearest
// even when stored) with kv_bf16, or with kv_int8 an int8 times its entry's scale for the head
// (ops.h's layout: the ring's int8 values, then its scales); slot_stride counts 4-byte elements.
static void ring_store(const struct op_attention *a, void *ring, int slot, size_t i, float x) {
    put_value((float *)ring + a->slot_stride * (size_t)slot, i, x, a->kv_bf16);
}

// Head h of ring entry e from the head's hd values x, quantized (kv_int8).
static void ring_store_int8(const struct op_attention *a, void *ring, int slot, size_t e, int h, const float *x) {
    float *base = (float *)ring + a->slot_stride * (size_t)slot, absmax = 0.0f;
    int8_t *v8 = (int8_t *)base + e * a->d + (size_t)h * a->head_dim;
    for (int i = 0; i < a->head_dim; i++) absmax = fmaxf(absmax, fabsf(x[i]));
    for (int i = 0; i < a->head_dim; i++) v8[i] = (int8_t)gpu_kv_int8_code(x[i], absmax);
    base[(size_t)a->ring * a->d / 4 + e * a->n_heads + h] = gpu_kv_int8_scale(absmax);
}

// An int8 ring's value i, and its scale (kv_int8).
static int ring_code(const struct op_attention *a, const void *ring, int slot, size_t i) {
    return ((const int8_t *)((const float *)ring + a->slot_stride * (size_t)slot))[i];
}

static float ring_scale(const struct op_attention *a, const void *ring, int slot, size_t i) {
    const size_t e = i / a->d, h = i % a->d / a->head_dim;
    return ((const float *)ring + a->slot_stride * (size_t)slot)[(size_t)a->ring * a->d / 4 + e * a->n_heads + h];
}

static float ring_load(const struct op_attention *a, const void *ring, int slot, size_t i) {
    if (a->kv_int8) return ring_code(a, ring, slot, i) * ring_scale(a, ring, slot, i);
    return get_value((const float *)ring + a->slot_stride * (size_t)slot, i, a->kv_bf16);
}

// x rounded to f16 (nearest even; below 2^-14 in steps of 2^-24), for |x| <= 65504.
static float f16_round(float x) {
    const float ax = fabsf(x);
    if (ax < 6.103515625e-05f) return rintf(x * 16777216.0f) / 16777216.0f;
    int e;
    frexpf(ax, &e);
    const float step = ldexpf(1.0f, e - 11);
    return rintf(x / step) * step;
}

static void emu_rope_kv(const struct op_attention *a) {
    const int d = a->d, hd = a->head_dim;
    for (int r = 0; r < a->R; r++) {
        int slot = slot_of(a->row_slot, r);
        int32_t base = slot < 0 ? 0 : a->next_pos[(size_t)slot * a->slot_stride];
        for (int s = 0; s < a->steps; s++) {
            float *q = a->qkv + ((size_t)r * a->steps + s) * 3 * d, *k = q + d, *v = q + 2 * d;
            int32_t pos = base + s;
            for (int p = 0; p < d / 2; p++) {
                float f = a->freq[p % (hd / 2)] * (float)pos, c = cosf(f), sn = sinf(f);
                float re = q[2 * p], im = q[2 * p + 1];
                q[2 * p] = re * c - im * sn;
                q[2 * p + 1] = re * sn + im * c;
                re = k[2 * p], im = k[2 * p + 1];
                k[2 * p] = re * c - im * sn;
                k[2 * p + 1] = re * sn + im * c;
            }
            if (slot < 0) continue;
            for (int h = 0; a->kv_int8 && h < a->n_heads; h++) {
                ring_store_int8(a, a->keys, slot, (size_t)(pos % a->ring), h, k + h * hd);
                ring_store_int8(a, a->values, slot, (size_t)(pos % a->ring), h, v + h * hd);
            }
            for (int i = 0; !a->kv_int8 && i < d; i++) {
                ring_store(a, a->keys, slot, (size_t)(pos % a->ring) * d + i, k[i]);
                ring_store(a, a->values, slot, (size_t)(pos % a->ring) * d + i, v[i]);
            }
        }
    }
}

// With mma_bf16, long steps (attention_mma.cu: 64 query steps or more) and short steps of many
// rows (GPU_ATT_MMA_SHORT) round the scaled q and the probabilities to bfloat16 (here the
// probabilities against the final maximum, the kernel's against the running one). Over int8
// rings the short steps quantize the scaled q as a key (a score: the integer dot product times
// both scales) and round each probability times its value's scale to f16.
static void emu_attention(const struct op_attention *a) {
    const int d = a->d, hd = a->head_dim, mma = a->mma_bf16 && (a->steps >= 64 || GPU_ATT_MMA_SHORT(a->R, a->steps));
    const int int8_mma = mma && a->kv_int8;
    if (a->rope) emu_rope_kv(a);
    float *scores = malloc(sizeof(float) * a->ring);
    CHECK(hd <= 256);
    for (int r = 0; r < a->R; r++) {
        int slot = slot_of(a->row_slot, r);
        for (int s = 0; s < a->steps; s++)
            for (int h = 0; h < a->n_heads; h++) {
                float *out = a->out + ((size_t)r * a->steps + s) * d + h * hd;
                memset(out, 0, sizeof(float) * hd);
                if (slot < 0) continue;
                const float *q = a->qkv + ((size_t)r * a->steps + s) * 3 * d + h * hd;
                const int32_t *pos = a->positions + (size_t)slot * a->slot_stride;
                int32_t pq = a->next_pos[(size_t)slot * a->slot_stride] + s;
                float mx = -INFINITY, sum = 0.0f, qmax = 0.0f;
                const float scale = 1.0f / sqrtf((float)hd);
                int qc[256];
                for (int i = 0; int8_mma && i < hd; i++) qmax = fmaxf(qmax, fabsf(q[i] * scale));
                for (int i = 0; int8_mma && i < hd; i++) qc[i] = gpu_kv_int8_code(q[i] * scale, qmax);
                for (int j = 0; j < a->ring; j++) {
                    int32_t age = pq - pos[j];
                    scores[j] = -INFINITY;
                    if (pos[j] < 0 || age < 0 || age >= a->context) continue;
                    const size_t k = (size_t)j * d + h * hd;
                    float dot = 0.0f;
                    int dot8 = 0;
                    for (int i = 0; int8_mma && i < hd; i++) dot8 += qc[i] * ring_code(a, a->keys, slot, k + i);
                    for (int i = 0; !int8_mma && i < hd; i++)
                        dot += (mma ? bf16_round(q[i] * scale) : q[i]) * ring_load(a, a->keys, slot, k + i);
                    scores[j] = int8_mma ? (float)dot8 * (gpu_kv_int8_scale(qmax) * ring_scale(a, a->keys, slot, k))
                                : mma    ? dot
                                         : dot * scale;
                    if (scores[j] > mx) mx = scores[j];
                }
                for (int j = 0; j < a->ring; j++) {
                    scores[j] = scores[j] == -INFINITY ? 0.0f : expf(scores[j] - mx);
                    sum += scores[j];
                    const size_t v = (size_t)j * d + h * hd;
                    if (int8_mma) scores[j] = f16_round(fminf(scores[j] * ring_scale(a, a->values, slot, v), 65504.0f));
                    else if (mma) scores[j] = bf16_round(scores[j]);
                }
                for (int j = 0; j < a->ring; j++) {
                    if (scores[j] == 0.0f) continue;
                    const size_t v = (size_t)j * d + h * hd;
                    for (int i = 0; i < hd; i++)
                        out[i] += scores[j] / sum *
                                  (int8_mma ? (float)ring_code(a, a->values, slot, v + i) : ring_load(a, a->values, slot, v + i));
                }
            }
    }
    free(scores);
}

// The persistent transformer as the unfused op sequence it stands for (plan.c's unfolded path).
static void emu_transformer(const struct op_transformer *t) {
    const struct op_attention *base = &t->att;
    const int d = base->d, rows = base->R * base->steps, ff = t->d_ff;
    float *h = malloc(sizeof(float) * (size_t)rows * d), *y = malloc(sizeof(float) * (size_t)rows * d);
    float *x = t->x[0], *qkv = base->qkv, *att = base->out;
    emu_positions(base);
    emu_transpose(&(struct op_transpose){t->in, x, d, rows});
    emu_norm(&(struct op_norm){x, NULL, NULL, h, t->layers[0].norm1_w, t->layers[0].norm1_b, rows, d, NORM_LN, t->eps, 0});
    for (int l = 0; l < t->n_layers; l++) {
        const struct op_tr_layer *w = &t->layers[l];
        emu_gemm(&(struct op_gemm){.transa = 1, .m = 3 * d, .n = rows, .k = d, .a = w->in_proj, .lda = d, .b = h,
                                   .ldb = d, .c = qkv, .ldc = 3 * d});
        struct op_attention a = *base;
        a.keys = w->keys, a.values = w->values, a.rope = 1;
        emu_attention(&a);
        emu_gemm(&(struct op_gemm){.transa = 1, .m = d, .n = rows, .k = d, .a = w->out_proj, .lda = d, .b = att,
                                   .ldb = d, .c = y, .ldc = d});
        emu_norm(&(struct op_norm){x, y, w->scale1, h, w->norm2_w, w->norm2_b, rows, d, NORM_RESID_LN, t->eps, 0});
        emu_gemm(&(struct op_gemm){.transa = 1, .m = ff, .n = rows, .k = d, .a = w->linear1, .lda = d, .b = h,
                                   .ldb = d, .c = t->ff, .ldc = ff, .gelu = 1});
        emu_gemm(&(struct op_gemm){.transa = 1, .m = d, .n = rows, .k = ff, .a = w->linear2, .lda = ff, .b = t->ff,
                                   .ldb = ff, .c = y, .ldc = d});
        const int last = l + 1 == t->n_layers;
        emu_norm(&(struct op_norm){x, y, w->scale2, h, last ? NULL : w[1].norm1_w, last ? NULL : w[1].norm1_b, rows,
                                   d, last ? NORM_RESID : NORM_RESID_LN, t->eps, 0});
    }
    emu_transpose(&(struct op_transpose){x, t->out, rows, d});
    free(h), free(y);
}

static void emu_argmin(const struct op_argmin *a) {
    float *own = NULL;
    if (!a->scores) {  // the fused form: scores from the query
        own = malloc(sizeof(float) * (size_t)a->R * a->bins);
        for (int r = 0; r < a->R; r++)
            for (int j = 0; j < a->bins; j++) {
                float v = 0.0f;
                for (int i = 0; i < a->dim; i++) v += a->query[(size_t)r * a->dim + i] * a->book[(size_t)j * a->dim + i];
                own[(size_t)r * a->bins + j] = v;
            }
    }
    for (int r = 0; r < a->R; r++) {
        const float *sc = (own ? own : a->scores) + (size_t)r * a->bins;
        int best = 0;
        float bd = a->norms[0] - 2.0f * sc[0];
        for (int j = 1; j < a->bins; j++) {
            float v = a->norms[j] - 2.0f * sc[j];
            if (v < bd) bd = v, best = j;
        }
        a->codes[(size_t)r * a->code_stride] = best;
        if (a->residual)
            for (int i = 0; i < a->dim; i++)
                a->residual[(size_t)r * a->dim + i] -= a->book[(size_t)best * a->dim + i];
    }
    free(own);
}

// The chained levels as one argmin per level; with `latent`, the two projections and the
// semantic level first.
static void emu_rvq_chain(const struct op_rvq_chain *c) {
    const int R = c->first.R, dim = c->first.dim;
    if (c->latent) {
        for (int r = 0; r < R; r++)
            for (int j = 0; j < dim; j++) {
                float s = 0.0f, a = 0.0f;
                for (int p = 0; p < c->D; p++) {
                    s += c->in_first[(size_t)j * c->D + p] * c->latent[(size_t)p * R + r];
                    a += c->in_rest[(size_t)j * c->D + p] * c->latent[(size_t)p * R + r];
                }
                c->sem_query[(size_t)r * dim + j] = s;
                c->first.residual[(size_t)r * dim + j] = a;
            }
        struct op_argmin s0 = c->semantic;
        s0.scores = NULL;
        s0.residual = NULL;
        s0.R = R;
        s0.dim = dim;
        s0.query = c->sem_query;
        emu_argmin(&s0);
    }
    for (int k = 0; k < c->levels; k++) {
        struct op_argmin a = c->first;
        a.book += (size_t)k * a.bins * a.dim;
        a.norms += (size_t)k * a.bins;
        a.codes += k;
        a.scores = NULL;
        a.query = a.residual;
        emu_argmin(&a);
    }
}

static void emu_gather(const struct op_gather *a) {
    for (int r = 0; r < a->R; r++) {
        const int32_t *c = a->codes + (size_t)r * a->n_cb;
        int bad = 0;
        for (int q = 0; q < a->n_cb; q++) bad |= c[q] < 0 || c[q] >= a->bins;
        if (bad) a->row_slot[r / a->frames] = -1, *a->error = 1;
        for (int i = 0; i < a->dim; i++) {
            float e = bad ? 0.0f : a->books[(size_t)c[0] * a->dim + i], s = 0.0f;
            for (int q = 1; q < a->n_cb && !bad; q++)
                s += a->books[((size_t)q * a->bins + c[q]) * a->dim + i];
            a->e0[(size_t)r * a->ld + i] = e;
            a->sum[(size_t)r * a->ld + i] = s;
        }
    }
}

static void emu_run(const struct gpu_plan *p) {
    for (int i = 0; i < p->n_ops; i++) {
        const struct gpu_op *op = &p->ops[i];
        switch (op->kind) {
        case GOP_IM2COL: emu_im2col(&op->u.im2col); break;
        case GOP_CARRY: emu_carry(&op->u.im2col); break;
        case GOP_CONV: emu_conv(&op->u.conv); break;
        case GOP_GEMM: emu_gemm(&op->u.gemm); break;
        case GOP_POINTWISE: emu_pointwise(&op->u.pointwise); break;
        case GOP_TRANSPOSE: emu_transpose(&op->u.transpose); break;
        case GOP_FINISH: emu_finish(&op->u.finish); break;
        case GOP_CONVTR_OUT: emu_convtr_out(&op->u.convtr); break;
        case GOP_CONVTR_TAIL: emu_convtr_tail(&op->u.convtr); break;
        case GOP_CONVTR_DIRECT: emu_convtr_direct(&op->u.convtr_direct); break;
        case GOP_CONVTR_COPY: emu_convtr_copy(&op->u.convtr_direct); break;
        case GOP_NORM: emu_norm(&op->u.norm); break;
        case GOP_POSITIONS: emu_positions(&op->u.attention); break;
        case GOP_ATTENTION: emu_attention(&op->u.attention); break;
        case GOP_ARGMIN: emu_argmin(&op->u.argmin); break;
        case GOP_GATHER: emu_gather(&op->u.gather); break;
        case GOP_RESBLOCK: emu_resblock(&op->u.resblock); break;
        case GOP_RESBLOCK_MMA: emu_resblock_mma(&op->u.resblock_mma); break;
        case GOP_CONV_MMA: emu_conv_mma(&op->u.conv_mma); break;
        case GOP_CONVTR_MMA: emu_convtr_mma(&op->u.convtr_mma); break;
        case GOP_CONVTR_MMA_TAIL: emu_convtr_mma_tail(&op->u.convtr_mma); break;
        case GOP_TRANSFORMER: emu_transformer(&op->u.transformer); break;
        case GOP_RVQ_CHAIN: emu_rvq_chain(&op->u.rvq_chain); break;
        case GOP_TAILS: emu_tails(&op->u.tails); break;
        }
    }
}

// ---- an emulated batch ----

static const float *map_host(void *ctx, const float *host, size_t n) {
    (void)ctx;
    (void)n;
    return host;
}

struct emu_batch {
    struct gpu_layout L;
    struct gpu_plan plans[WIDE + 1];  // by bucket R
    float *state, *scratch;
};

// The *_mma kernels' threshold for the plans emu_create builds (-1: the layout's own).
static long emu_mma_min_cols = -1;
// The blocks a direct conv of those plans aims for (0: the layout's own).
static int emu_direct_blocks = 0;
static size_t emu_smem_optin = 0;  // the shared memory a block may opt in to, when > 0

// A batch of `capacity` slots whose step advances each listed slot by `frames` frames.
static void emu_create(struct emu_batch *e, const struct mimi_model *m, const struct gpu_weights *w,
                       int direction, int capacity, int attention, int frames) {
    memset(e, 0, sizeof *e);
    CHECK_EQ(gpu_layout_init(&e->L, m, direction, capacity, N_Q, attention, frames), MIMI_OK);
    if (emu_mma_min_cols >= 0) e->L.mma_min_cols = emu_mma_min_cols;
    if (emu_direct_blocks > 0) e->L.direct_blocks = emu_direct_blocks;
    if (emu_smem_optin > 0) e->L.smem_optin = emu_smem_optin;
    e->state = calloc(e->L.slot_elems * capacity, sizeof(float));
    e->scratch = calloc(e->L.scratch_elems, sizeof(float));
    for (int R = 1; R <= capacity; R++)
        if (gpu_bucket(R, capacity) == R)
            CHECK_EQ(gpu_plan_build(&e->plans[R], &e->L, m, w, e->state, e->scratch, R), MIMI_OK);
    for (int s = 0; s < capacity; s++) {
        int32_t *pos = (int32_t *)(e->state + s * e->L.slot_elems + e->L.st_positions);
        for (int j = 0; j < e->L.ring; j++) pos[j] = -1;
    }
}

static void emu_step(struct emu_batch *e, int n, const int *slots, const void *in, void *out) {
    const struct gpu_plan *p = &e->plans[gpu_bucket(n, e->L.capacity)];
    for (int r = 0; r < p->R; r++) p->stage[r] = r < n ? slots[r] : -1;
    p->stage[p->R] = 0;
    memset(p->input, 0, sizeof(float) * (size_t)p->R * e->L.in_per_row);
    memcpy(p->input, in, sizeof(float) * (size_t)n * e->L.in_per_row);
    emu_run(p);
    memcpy(out, p->output, sizeof(float) * (size_t)n * e->L.out_per_row);
}

static void emu_destroy(struct emu_batch *e) {
    for (int R = 0; R <= WIDE; R++) gpu_plan_free(&e->plans[R]);
    free(e->state);
    free(e->scratch);
}

// ---- a wide step ----

static int count_ops(const struct gpu_plan *p, int kind) {
    int n = 0;
    for (int i = 0; i < p->n_ops; i++) n += p->ops[i].kind == kind;
    return n;
}

// The first op of a kind, or NULL.
static const struct gpu_op *find_op(const struct gpu_plan *p, int kind) {
    for (int i = 0; i < p->n_ops; i++)
        if (p->ops[i].kind == kind) return &p->ops[i];
    return NULL;
}

// Ops of a kind in one stage of the plan.
static int count_stage_ops(const struct gpu_plan *p, const char *stage, int kind) {
    int n = 0;
    for (int i = 0; i < p->n_ops; i++) n += p->ops[i].kind == kind && !strcmp(p->ops[i].stage, stage);
    return n;
}

// ELU passes, and convs and products that apply the ELU after them in their own kernel.
static int count_elu(const struct gpu_plan *p, int *folded) {
    int n = 0;
    *folded = 0;
    for (int i = 0; i < p->n_ops; i++) {
        const struct gpu_op *op = &p->ops[i];
        n += op->kind == GOP_POINTWISE && op->u.pointwise.mode == EW_ELU;
        *folded += (op->kind == GOP_CONV && op->u.conv.elu_out) || (op->kind == GOP_GEMM && op->u.gemm.elu) ||
                   (op->kind == GOP_RESBLOCK && op->u.resblock.step.elu_out);
    }
    return n;
}

// Resblocks in the small steps' form (op_resblock.step).
static int count_steps(const struct gpu_plan *p) {
    int n = 0;
    for (int i = 0; i < p->n_ops; i++) n += p->ops[i].kind == GOP_RESBLOCK && p->ops[i].u.resblock.step.on;
    return n;
}

// Resblocks that run the encoder's first conv too (op_resblock.first).
static int count_first(const struct gpu_plan *p) {
    int n = 0;
    for (int i = 0; i < p->n_ops; i++) n += p->ops[i].kind == GOP_RESBLOCK && p->ops[i].u.resblock.has_first;
    return n;
}

// Resblocks that run the decoder's last conv too (op_resblock.last), and narrow convs.
static int count_last(const struct gpu_plan *p, int *narrow) {
    int n = 0;
    *narrow = 0;
    for (int i = 0; i < p->n_ops; i++) {
        n += p->ops[i].kind == GOP_RESBLOCK && p->ops[i].u.resblock.has_last;
        *narrow += p->ops[i].kind == GOP_CONV && p->ops[i].u.conv.narrow;
    }
    return n;
}

// An encode and a decode batch of the CPU backend, `capacity` slots open in each.
static void cpu_pair(struct mimi_model *model, int capacity, struct mimi_batch **enc, struct mimi_batch **dec) {
    struct mimi_batch_params bp;
    mimi_batch_params_default(&bp);
    bp.capacity = capacity;
    bp.n_codebooks = N_Q;
    *enc = mimi_batch_create(model, &bp, NULL);
    bp.direction = MIMI_DIRECTION_DECODE;
    *dec = mimi_batch_create(model, &bp, NULL);
    for (int s = 0; s < capacity; s++) {
        CHECK_EQ(mimi_batch_open(*enc), s);
        CHECK_EQ(mimi_batch_open(*dec), s);
    }
}

struct agreement {
    int64_t equal, total;  // codes
    double num, den;       // PCM error and signal energy
};

// One step of the n listed slots through the emulated plans and the CPU batches: their codes
// compared, then both decoders given the CPU's codes and their PCM compared.
static void step_both(struct emu_batch *enc, struct emu_batch *dec, struct mimi_batch *cenc,
                      struct mimi_batch *cdec, int n, const int *list, const float *in, struct agreement *a) {
    static float pcm_emu[WIDE * 1920], pcm_cpu[WIDE * 1920];
    int32_t codes_emu[WIDE * N_Q], codes_cpu[WIDE * N_Q];
    emu_step(enc, n, list, in, codes_emu);
    CHECK_EQ(mimi_batch_encode(cenc, n, list, in, codes_cpu), MIMI_OK);
    for (int i = 0; i < n * N_Q; i++) a->equal += codes_emu[i] == codes_cpu[i];
    a->total += n * N_Q;
    emu_step(dec, n, list, codes_cpu, pcm_emu);
    CHECK_EQ(mimi_batch_decode(cdec, n, list, codes_cpu, pcm_cpu), MIMI_OK);
    for (int i = 0; i < n * 1920; i++) {
        double dlt = (double)pcm_emu[i] - pcm_cpu[i];
        a->num += dlt * dlt, a->den += (double)pcm_cpu[i] * pcm_cpu[i];
    }
}

// Reports and gates an agreement: codes >= 99.5% equal, PCM rel. L2 <= 1e-5.
static void agreement_check(const struct agreement *a, const char *what) {
    const double rel = sqrt(a->num / (a->den > 0 ? a->den : 1));
    printf("  %s: codes equal %lld/%lld, decoded pcm rel_l2 %.3e\n", what, (long long)a->equal, (long long)a->total, rel);
    CHECK(a->equal >= a->total * 995 / 1000);
    CHECK(rel <= 1e-5);
}

// The im2col and resblock scratch filled with NaN, so that a product reading a row that no op of
// the step wrote (a missing row of ones) poisons the output.
static void poison_products(struct emu_batch *e) {
    // the layout's scratch order: resblock hidden activations, then im2col, then taps; a NaN
    // whose halves are bfloat16 NaNs too
    const uint32_t nan2 = 0x7fc07fc0u;
    for (size_t i = e->L.sc_res[1]; i < e->L.sc_taps; i++) memcpy(&e->scratch[i], &nan2, sizeof nan2);
}

// Two steps of WIDE slots through the emulated plans and a CPU batch pair of `model`; with
// `poison` the product scratch is poisoned before each step.
static struct agreement wide_steps(struct mimi_model *model, struct emu_batch *enc, struct emu_batch *dec,
                                   const float *clip, int poison) {
    struct mimi_batch *cenc, *cdec;
    cpu_pair(model, WIDE, &cenc, &cdec);
    int list[WIDE];
    for (int s = 0; s < WIDE; s++) list[s] = s;
    struct agreement agree = {0};
    for (int step = 0; step < 2; step++) {
        static float in[WIDE * 1920];
        for (int s = 0; s < WIDE; s++) memcpy(in + s * 1920, clip + ((size_t)s * 3 + step) * 1920, sizeof(float) * 1920);
        if (poison) poison_products(enc), poison_products(dec);
        step_both(enc, dec, cenc, cdec, WIDE, list, in, &agree);
    }
    mimi_batch_destroy(cenc);
    mimi_batch_destroy(cdec);
    return agree;
}

// wide_steps gated by agreement_check.
static void wide_agreement(struct mimi_model *model, struct emu_batch *enc, struct emu_batch *dec, const float *clip,
                           int poison, const char *what) {
    const struct agreement agree = wide_steps(model, enc, dec, clip, poison);
    agreement_check(&agree, what);
}

// WIDE slots in one bucket: the plan takes the large-step ops (the fused resblock out of place,
// then the history carry), and two steps of it give the CPU batch's codes and PCM.
static void test_wide_plan(struct mimi_model *model, const struct gpu_weights *w, const float *clip) {
    struct emu_batch enc, dec;
    emu_create(&enc, model, w, MIMI_DIRECTION_ENCODE, WIDE, MIMI_ATTENTION_RING, 1);
    emu_create(&dec, model, w, MIMI_DIRECTION_DECODE, WIDE, MIMI_ATTENTION_RING, 1);
    CHECK_EQ(count_ops(&enc.plans[WIDE], GOP_RESBLOCK), 1);  // the 64-channel level
    CHECK_EQ(count_ops(&dec.plans[WIDE], GOP_RESBLOCK), 1);
    CHECK_EQ(count_steps(&enc.plans[WIDE]), 0);
    // one stream: the top two levels' blocks in the step form, the others direct kernels
    CHECK_EQ(count_steps(&enc.plans[1]), 2);
    CHECK_EQ(count_steps(&dec.plans[1]), 2);
    CHECK_EQ(count_ops(&enc.plans[1], GOP_RESBLOCK), 2);
    CHECK_EQ(count_first(&enc.plans[WIDE]), 1);  // the encoder's first conv rides in it
    CHECK_EQ(count_first(&dec.plans[WIDE]), 0);
    CHECK_EQ(count_first(&enc.plans[1]), 1);  // and in one stream's step form
    // and no ELU pass in the decoder: the ELU before each of its four transposed convs and its
    // last conv is applied by the kernel before it (the first conv's product, the resblocks'
    // last kernels)
    int folded;
    CHECK_EQ(count_elu(&dec.plans[1], &folded), 0);
    CHECK_EQ(folded, 5);
    // one stream's encoder: the ELU before each downsampling by the resblock's last kernel, and
    // the one before the last conv by the last downsampling's product
    CHECK_EQ(count_elu(&enc.plans[1], &folded), 0);
    CHECK_EQ(folded, 5);
    // one stream: every history and tail staged for the step's tails launch, none carried by a
    // launch of its own
    for (int d = 0; d < 2; d++) {
        const struct gpu_plan *one = d ? &dec.plans[1] : &enc.plans[1];
        CHECK_EQ(count_ops(one, GOP_CARRY) + count_ops(one, GOP_CONVTR_TAIL) + count_ops(one, GOP_CONVTR_COPY), 0);
        CHECK_EQ(count_ops(one, GOP_TAILS), 1);
    }
    int narrow;  // strict: the decoder's last conv on its own kernel
    CHECK_EQ(count_last(&dec.plans[WIDE], &narrow), 0);
    // up to 4 slots (8 transformer rows): the whole transformer as one persistent op
    CHECK_EQ(count_ops(&enc.plans[1], GOP_TRANSFORMER), 1);
    CHECK_EQ(count_ops(&dec.plans[2], GOP_TRANSFORMER), 1);
    CHECK_EQ(count_ops(&enc.plans[1], GOP_ATTENTION), 0);
    CHECK_EQ(count_ops(&enc.plans[WIDE], GOP_TRANSFORMER), 0);
    // one stream: the projections, the semantic level and the acoustic levels in one launch;
    // WIDE slots: the projections and the semantic level before the chain
    CHECK_EQ(count_ops(&enc.plans[1], GOP_RVQ_CHAIN), 1);
    CHECK_EQ(count_ops(&enc.plans[1], GOP_ARGMIN), 0);
    const struct gpu_op *chain = find_op(&enc.plans[1], GOP_RVQ_CHAIN);
    CHECK(chain && chain->u.rvq_chain.latent);
    CHECK_EQ(count_ops(&enc.plans[WIDE], GOP_RVQ_CHAIN), 1);
    CHECK_EQ(count_ops(&enc.plans[WIDE], GOP_ARGMIN), 1);
    chain = find_op(&enc.plans[WIDE], GOP_RVQ_CHAIN);
    CHECK(chain && !chain->u.rvq_chain.latent);
    // the decoder's two output projections are one product; a small step's finish rides in its
    // tails launch
    CHECK_EQ(count_ops(&dec.plans[1], GOP_GATHER), 1);
    CHECK_EQ(count_stage_ops(&dec.plans[1], "dec.quantizer", GOP_GEMM), 1);
    // and a small step's projection emits the upsampling too: no upsampling op of its own
    const struct gpu_op *proj = find_op(&dec.plans[1], GOP_GEMM);
    CHECK(proj && proj->u.gemm.with_up);
    CHECK_EQ(count_stage_ops(&dec.plans[1], "dec.upsample", GOP_CONVTR_OUT), 0);
    CHECK_EQ(count_ops(&enc.plans[1], GOP_FINISH), 0);
    CHECK_EQ(count_ops(&dec.plans[1], GOP_FINISH), 0);
    const struct gpu_op *tails = find_op(&enc.plans[1], GOP_TAILS);
    CHECK(tails && tails->u.tails.with_finish);
    wide_agreement(model, &enc, &dec, clip, 0, "wide plan vs CPU, 2 steps");
    emu_destroy(&enc);
    emu_destroy(&dec);
}

// ---- fast mode: products over reductions padded to a multiple of 4 ----

// The synthetic model in a precision mode (NULL, after a failed check, when it does not load).
static struct mimi_model *load_precision(int precision) {
    struct mimi_model_params mp;
    mimi_model_params_default(&mp);
    mp.precision = precision;
    int rc;
    struct mimi_model *m = mimi_model_load(MIMI_TEST_MODELS "/native.safetensors", &mp, &rc);
    CHECK(m != NULL);
    return m;
}

// In fast mode every conv product of a wide step reduces over a multiple of 4 rows (the bias row
// and rows of ones against zero weights), and the emulated plan, whose products are exact f32
// loops, still gives the CPU's codes and PCM with the padding rows poisoned beforehand. Returns
// the TF32 wide encode plan's scratch size.
static size_t test_fast_padding(const float *clip) {
    struct mimi_model *m = load_precision(MIMI_PRECISION_FAST);
    if (!m) return 0;
    static struct gpu_weights w;
    CHECK_EQ(gpu_weights_bind(&w, m, map_host, NULL), MIMI_OK);
    struct emu_batch enc, dec;
    emu_create(&enc, m, &w, MIMI_DIRECTION_ENCODE, WIDE, MIMI_ATTENTION_RING, 1);
    emu_create(&dec, m, &w, MIMI_DIRECTION_DECODE, WIDE, MIMI_ATTENTION_RING, 1);
    int im2cols = 0, padded = 0, gemms = 0, aligned = 0;
    for (int d = 0; d < 2; d++) {
        const struct gpu_plan *p = d ? &dec.plans[WIDE] : &enc.plans[WIDE];
        for (int i = 0; i < p->n_ops; i++) {
            const struct gpu_op *op = &p->ops[i];
            if (op->kind == GOP_IM2COL) {
                im2cols++;
                padded += op->u.im2col.ones >= 1 && (op->u.im2col.c_in * op->u.im2col.K + op->u.im2col.ones) % 4 == 0;
            } else if (op->kind == GOP_GEMM) {
                gemms++;
                aligned += op->u.gemm.k % 4 == 0;
            }
        }
    }
    printf("  fast-mode wide plans: %d/%d im2col padded, %d/%d products over a multiple of 4\n", padded, im2cols,
           aligned, gemms);
    CHECK(im2cols > 0);
    CHECK_EQ(padded, im2cols);
    CHECK_EQ(aligned, gemms);
    // the decoder's last conv rides in its top resblock's kernel, with no narrow conv left
    int narrow;
    CHECK_EQ(count_last(&dec.plans[WIDE], &narrow), 1);
    CHECK_EQ(narrow, 0);
    CHECK_EQ(count_last(&enc.plans[WIDE], &narrow), 0);
    wide_agreement(m, &enc, &dec, clip, 1, "fast-mode wide plan vs CPU, 2 steps");
    const size_t scratch = enc.L.scratch_elems;
    emu_destroy(&enc);
    emu_destroy(&dec);
    gpu_weights_release(&w);
    mimi_model_destroy(m);
    return scratch;
}

// ---- bfloat16 conv products (MIMI_PRECISION_FAST_BF16) ----

// The bf16 mode's wide plans: the resblocks below the top level on op_resblock_mma, the first two
// downsamplings on op_conv_mma, and every other product over 64 or more values and more columns
// than the skinny kernel takes has bf16 operands, from an im2col written in bf16 (a transposed
// conv's input converted first, with the ELU before it), over a reduction and weight rows of a multiple
// of 8 values; the others stay f32; the scratch shrinks; and two steps stay close to the CPU's
// f32 with the scratch poisoned (a sanity bound on the rounding, not a parity gate: the mode's
// measured fidelity is mimi-bench-gpu's).
static void test_bf16_convs(const float *clip, size_t fast_scratch_elems) {
    struct mimi_model *m = load_precision(MIMI_PRECISION_FAST_BF16);
    if (!m) return;
    static struct gpu_weights w;
    CHECK_EQ(gpu_weights_bind(&w, m, map_host, NULL), MIMI_OK);
    struct emu_batch enc, dec;
    // at their own threshold WIDE slots take none of the *_mma kernels; at none, every layer they fit
    emu_create(&enc, m, &w, MIMI_DIRECTION_ENCODE, WIDE, MIMI_ATTENTION_RING, 1);
    CHECK_EQ(count_ops(&enc.plans[WIDE], GOP_RESBLOCK_MMA), 0);
    CHECK_EQ(count_ops(&enc.plans[WIDE], GOP_CONV_MMA), 0);
    emu_destroy(&enc);
    emu_mma_min_cols = 0;
    emu_create(&enc, m, &w, MIMI_DIRECTION_ENCODE, WIDE, MIMI_ATTENTION_RING, 1);
    emu_create(&dec, m, &w, MIMI_DIRECTION_DECODE, WIDE, MIMI_ATTENTION_RING, 1);
    emu_mma_min_cols = -1;
    CHECK(enc.L.conv_bf16 && dec.L.conv_bf16 && enc.L.kv_bf16);
    int im2col16 = 0, im2col32 = 0, gemm16 = 0, aligned = 0, convert = 0, convert_elu = 0, elu_passes = 0;
    int ones16 = 0, ones32 = 0, ones_mismatch = 0;  // a resblock's 1x1 input: bf16 exactly when its k3's was
    for (int d = 0; d < 2; d++) {
        const struct gpu_plan *p = d ? &dec.plans[WIDE] : &enc.plans[WIDE];
        int last_col_bf16 = -1;
        for (int i = 0; i < p->n_ops; i++) {
            const struct gpu_op *op = &p->ops[i];
            if (op->kind == GOP_POINTWISE && op->u.pointwise.ones > 0) {
                const int bf16 = op->u.pointwise.mode == EW_ELU_BF16;
                ones16 += bf16, ones32 += op->u.pointwise.mode == EW_ELU_ONES;
                ones_mismatch += bf16 != last_col_bf16;
            }
            if (op->kind == GOP_IM2COL) {
                const struct op_im2col *a = &op->u.im2col;
                last_col_bf16 = a->col_bf16;
                if (a->col_bf16) im2col16++;
                else im2col32++;
                CHECK_EQ(a->col_bf16, a->c_in * a->K >= 64 && a->R * (a->T / a->S) > GPU_SKINNY_MAX);
            } else if (op->kind == GOP_GEMM && op->u.gemm.ab_bf16) {
                gemm16++;
                aligned += op->u.gemm.k % 8 == 0 && op->u.gemm.ldb % 8 == 0;
            } else if (op->kind == GOP_POINTWISE && op->u.pointwise.mode == EW_ELU) {
                elu_passes++;
            } else if (op->kind == GOP_POINTWISE &&
                       (op->u.pointwise.mode == EW_BF16 || op->u.pointwise.mode == EW_ELU_BF16)) {
                convert++;
                convert_elu += op->u.pointwise.mode == EW_ELU_BF16;
            }
        }
    }
    printf("  bf16 wide plans: %d im2col in bf16 (%d f32), %d bf16 products (%d aligned), %d conversions (%d with "
           "the ELU, %d of them resblock 1x1 inputs with their ones rows, %d such in f32; %d ELU passes left); scratch "
           "%zu floats (TF32 %zu)\n",
           im2col16, im2col32, gemm16, aligned, convert, convert_elu, ones16, ones32, elu_passes, enc.L.scratch_elems,
           fast_scratch_elems);
    CHECK(im2col16 > 0);
    CHECK(convert > 0 && convert_elu == convert);  // each with the decoder's ELU before its convtr, or the resblock's
    // the 128- and 256-channel resblocks on bf16 tensor cores, not im2col and two products
    CHECK_EQ(count_ops(&enc.plans[WIDE], GOP_RESBLOCK_MMA), 2);
    CHECK_EQ(count_ops(&dec.plans[WIDE], GOP_RESBLOCK_MMA), 2);
    CHECK_EQ(count_ops(&enc.plans[1], GOP_RESBLOCK_MMA), 0);  // one stream: direct kernels
    // the encoder's first two downsamplings read elu(x) in place, without im2col
    CHECK_EQ(count_ops(&enc.plans[WIDE], GOP_CONV_MMA), 2);
    CHECK_EQ(count_ops(&enc.plans[1], GOP_CONV_MMA), 0);
    // and the decoder's last two upsamplings without per-tap products
    CHECK_EQ(count_ops(&dec.plans[WIDE], GOP_CONVTR_MMA), 2);
    CHECK_EQ(count_ops(&dec.plans[WIDE], GOP_CONVTR_MMA_TAIL), 2);
    CHECK_EQ(count_ops(&dec.plans[1], GOP_CONVTR_MMA), 0);
    CHECK_EQ(ones_mismatch, 0);
    // the decoder's four upsamplings: ELU in the conversion to bf16, in op_convtr_mma, or (the
    // narrowest, 16 columns, in f32) in the kernel of the conv before it
    const int convtr_mma = count_ops(&dec.plans[WIDE], GOP_CONVTR_MMA);
    int folded;
    count_elu(&dec.plans[WIDE], &folded);
    CHECK_EQ(folded, 1);
    CHECK_EQ(convert - ones16 + elu_passes + convtr_mma + folded, 4);
    CHECK_EQ(gemm16, im2col16 + convert);
    CHECK_EQ(aligned, gemm16);
    CHECK(enc.L.scratch_elems < fast_scratch_elems);
    // a whole-signal lane's step (one slot of 16 frames: at least 32 transformer rows, more than
    // the skinny kernel takes): the qkv and feed-forward products on bf16 operands, fed by
    // LayerNorms and a GELU pass that write bf16; the out-projection on f32 (the attention's)
    for (int d = 0; d < 2; d++) {
        struct emu_batch lane;
        emu_create(&lane, m, &w, d ? MIMI_DIRECTION_DECODE : MIMI_DIRECTION_ENCODE, 1, MIMI_ATTENTION_WINDOW, 16);
        const struct gpu_plan *p = &lane.plans[1];
        const int layers = d ? m->dec_tr.n_layers : m->enc_tr.n_layers;
        int tr16 = 0, tr32 = 0, norms16 = 0, gelu16 = 0;
        for (int i = 0; i < p->n_ops; i++) {
            const struct gpu_op *op = &p->ops[i];
            if (!strstr(op->stage, "transformer")) continue;
            if (op->kind == GOP_GEMM) tr16 += op->u.gemm.ab_bf16, tr32 += !op->u.gemm.ab_bf16;
            if (op->kind == GOP_NORM) norms16 += op->u.norm.out_bf16 && op->u.norm.mode != NORM_RESID;
            if (op->kind == GOP_POINTWISE) gelu16 += op->u.pointwise.mode == EW_GELU_BF16;
        }
        printf("  bf16 lane (1 x 16 frames) %s transformer: %d bf16 products, %d f32, %d LayerNorms and %d GELUs "
               "into bf16\n", d ? "decode" : "encode", tr16, tr32, norms16, gelu16);
        CHECK_EQ(tr16, 3 * layers);
        CHECK_EQ(tr32, layers);
        CHECK_EQ(norms16, 2 * layers);
        CHECK_EQ(gelu16, layers);
        emu_destroy(&lane);
    }
    const struct agreement a = wide_steps(m, &enc, &dec, clip, 1);
    const double rel = sqrt(a.num / (a.den > 0 ? a.den : 1));
    printf("  bf16 wide plan vs CPU f32, 2 steps: codes equal %lld/%lld, decoded pcm rel_l2 %.3e\n",
           (long long)a.equal, (long long)a.total, rel);
    CHECK(a.equal >= a.total * 9 / 10);
    CHECK(rel > 0 && rel <= 2e-2);
    emu_destroy(&enc);
    emu_destroy(&dec);
    gpu_weights_release(&w);
    mimi_model_destroy(m);
}

// ---- submit / collect on the CPU backend ----

// The asynchronous calls give what the synchronous ones give, on a CPU batch too.
static void test_cpu_async(struct mimi_model *model, const float *clip) {
    struct mimi_batch_params bp;
    mimi_batch_params_default(&bp);
    bp.capacity = 2;
    bp.n_codebooks = N_Q;
    struct mimi_batch *a = mimi_batch_create(model, &bp, NULL), *b = mimi_batch_create(model, &bp, NULL);
    int slots[2] = {1, 0};
    for (int s = 0; s < 2; s++) {
        CHECK_EQ(mimi_batch_open(a), s);
        CHECK_EQ(mimi_batch_open(b), s);
    }
    int32_t ca[2 * N_Q], cb[2 * N_Q];
    CHECK_EQ(mimi_batch_collect(b, cb), MIMI_ESTATE);
    CHECK_EQ(mimi_batch_encode(a, 2, slots, clip, ca), MIMI_OK);
    CHECK_EQ(mimi_batch_submit_encode(b, 2, slots, clip), MIMI_OK);
    CHECK_EQ(mimi_batch_submit_encode(b, 2, slots, clip), MIMI_ESTATE);
    CHECK_EQ(mimi_batch_collect(b, cb), MIMI_OK);
    CHECK(memcmp(ca, cb, sizeof ca) == 0);
    CHECK_EQ(mimi_batch_submit_decode_device(b, 2, slots, cb, 0, N_Q, NULL), MIMI_EUNSUPPORTED);
    CHECK(mimi_batch_cuda_stream(b) == NULL);
    CHECK(strcmp(mimi_model_backend_name(model), "cpu") == 0);
    mimi_batch_destroy(a);
    mimi_batch_destroy(b);
}

// ---- whole-signal plans: several frames per step ----

#define OFF_FRAMES 3  // frames per step
#define OFF_PASSES 2

// A one-slot batch stepping OFF_FRAMES frames at a time (the CUDA backend's offline plans, with
// the exact window) gives the CPU's whole-signal encode and decode.
static void test_offline_plan(struct mimi_model *model, const struct gpu_weights *w, const float *clip) {
    const int F = OFF_FRAMES, n = OFF_FRAMES * OFF_PASSES, frame = 1920;
    struct emu_batch enc, dec;
    emu_create(&enc, model, w, MIMI_DIRECTION_ENCODE, 1, MIMI_ATTENTION_WINDOW, F);
    emu_create(&dec, model, w, MIMI_DIRECTION_DECODE, 1, MIMI_ATTENTION_WINDOW, F);
    struct mimi_stream_params sp;
    mimi_stream_params_default(&sp);
    sp.n_codebooks = N_Q;
    static int32_t want[N_Q * OFF_FRAMES * OFF_PASSES], got[OFF_FRAMES * OFF_PASSES * N_Q];
    static float pcm_cpu[1920 * OFF_FRAMES * OFF_PASSES], pcm_emu[1920 * OFF_FRAMES * OFF_PASSES];
    CHECK_EQ(mimi_encode_offline(model, &sp, clip, (int64_t)n * frame, want, N_Q * n), n);
    CHECK_EQ(mimi_decode_offline(model, &sp, want, n, pcm_cpu, (int64_t)n * frame), (int64_t)n * frame);
    const int slot = 0;
    for (int k = 0; k < OFF_PASSES; k++) emu_step(&enc, 1, &slot, clip + (size_t)k * F * frame, got + k * F * N_Q);
    int equal = 0;
    for (int f = 0; f < n; f++)
        for (int q = 0; q < N_Q; q++) equal += got[f * N_Q + q] == want[q * n + f];
    // the decoder takes the CPU's codes, frame-major
    static int32_t frames_in[OFF_FRAMES * OFF_PASSES * N_Q];
    for (int f = 0; f < n; f++)
        for (int q = 0; q < N_Q; q++) frames_in[f * N_Q + q] = want[q * n + f];
    for (int k = 0; k < OFF_PASSES; k++)
        emu_step(&dec, 1, &slot, frames_in + k * F * N_Q, pcm_emu + (size_t)k * F * frame);
    double num = 0, den = 0;
    for (int i = 0; i < n * frame; i++) {
        double d = (double)pcm_emu[i] - pcm_cpu[i];
        num += d * d;
        den += (double)pcm_cpu[i] * pcm_cpu[i];
    }
    double rel = sqrt(num / (den > 0 ? den : 1));
    printf("  %d-frame plan vs CPU offline: codes equal %d/%d, decoded pcm rel_l2 %.3e\n", F, equal, n * N_Q, rel);
    CHECK(equal >= n * N_Q * 995 / 1000);
    CHECK(rel <= 1e-5);
    emu_destroy(&enc);
    emu_destroy(&dec);
}

// ---- many signals over lanes of multi-frame batches (src/offline_sched.c) ----

#define SCHED_LANES 2
#define SCHED_SLOTS 2
#define SCHED_FRAMES 2
#define SCHED_SIGNALS 5

// The schedule's callbacks over emulated batches: a step runs at submit, its rows wait for collect.
struct sched_emu {
    struct emu_batch lanes[SCHED_LANES];
    void *in[SCHED_LANES], *out[SCHED_LANES];  // each lane's step rows
    int retired[SCHED_LANES];                  // retire calls
    int steps;  // submitted so far
    size_t copied;  // bytes moved through sched_copy
};

static int sched_submit(void *ctx, int lane, int n, const int *slots, const void *in, int valid) {
    struct sched_emu *x = ctx;
    (void)valid;
    x->steps++;
    emu_step(&x->lanes[lane], n, slots, in, x->out[lane]);
    return MIMI_OK;
}

static void sched_retire(void *ctx, int lane) {
    ((struct sched_emu *)ctx)->retired[lane]++;
}

static void sched_copy(void *ctx, void *dst, const void *src, size_t bytes) {
    ((struct sched_emu *)ctx)->copied += bytes;
    memcpy(dst, src, bytes);
}

static int sched_input(void *ctx, int lane, void **rows) {
    *rows = ((struct sched_emu *)ctx)->in[lane];
    return MIMI_OK;
}

static int sched_collect(void *ctx, int lane, const void **out) {
    *out = ((struct sched_emu *)ctx)->out[lane];
    return MIMI_OK;
}

static int sched_reset(void *ctx, int lane, int slot) {
    const struct emu_batch *e = &((struct sched_emu *)ctx)->lanes[lane];
    float *state = e->state + (size_t)slot * e->L.slot_elems;
    memset(state, 0, sizeof(float) * e->L.slot_elems);
    int32_t *pos = (int32_t *)(state + e->L.st_positions);
    for (int j = 0; j < e->L.ring; j++) pos[j] = -1;
    return MIMI_OK;
}

// The check callback: signals come in index order, each once, each before the steps that
// carry it (sched_submit counts steps); `fail_at` refuses that signal.
struct sched_check {
    int next, fail_at, in_order, steps_at[SCHED_SIGNALS];
    const int *steps;
};

static int sched_check(void *ctx, int signal) {
    struct sched_check *c = ctx;
    c->in_order &= signal == c->next;
    c->steps_at[signal] = *c->steps;
    c->next = signal + 1;
    return signal == c->fail_at ? MIMI_EINVAL : MIMI_OK;
}

// Signals of different lengths (partial last frames, one shorter than a frame), more than the
// lanes have slots, give each what the CPU's one-signal offline helpers give.
static void test_offline_schedule(struct mimi_model *model, const struct gpu_weights *w, const float *clip) {
    static const int64_t n_samples[SCHED_SIGNALS] = {3 * 1920 - 500, 1920, 1, 2 * 1920 + 7, 4 * 1920};
    struct offline_signal enc[SCHED_SIGNALS], dec[SCHED_SIGNALS];
    int32_t *want[SCHED_SIGNALS], *got[SCHED_SIGNALS];
    float *pcm_cpu[SCHED_SIGNALS], *pcm_emu[SCHED_SIGNALS];
    struct mimi_stream_params sp;
    mimi_stream_params_default(&sp);
    sp.n_codebooks = N_Q;
    for (int i = 0; i < SCHED_SIGNALS; i++) {
        const int64_t n = mimi_frames_for_samples(model, n_samples[i]), at = (int64_t)i * 1920 + 300 * i;
        want[i] = malloc(sizeof(int32_t) * N_Q * n), got[i] = malloc(sizeof(int32_t) * N_Q * n);
        pcm_cpu[i] = malloc(sizeof(float) * 1920 * n), pcm_emu[i] = malloc(sizeof(float) * 1920 * n);
        CHECK_EQ(mimi_encode_offline(model, &sp, clip + at, n_samples[i], want[i], N_Q * n), n);
        CHECK_EQ(mimi_decode_offline(model, &sp, want[i], n, pcm_cpu[i], 1920 * n), 1920 * n);
        enc[i] = (struct offline_signal){clip + at, n_samples[i], n, got[i]};
        dec[i] = (struct offline_signal){want[i], 0, n, pcm_emu[i]};
    }
    struct offline_lanes d = {SCHED_LANES, SCHED_SLOTS, SCHED_FRAMES, 1, 1920, N_Q,
                              sched_input, sched_submit, sched_collect, sched_reset, sched_retire, NULL, NULL, NULL,
                              sched_copy};
    static struct sched_emu x;
    for (int dir = 0; dir < 2; dir++) {
        d.encode = dir == 0;
        d.ctx = &x;
        const size_t in_row = d.encode ? 1920 : N_Q, out_row = d.encode ? N_Q : 1920;
        for (int l = 0; l < SCHED_LANES; l++) {
            emu_create(&x.lanes[l], model, w, d.encode ? MIMI_DIRECTION_ENCODE : MIMI_DIRECTION_DECODE, SCHED_SLOTS,
                       MIMI_ATTENTION_WINDOW, SCHED_FRAMES);
            x.in[l] = malloc(sizeof(float) * SCHED_SLOTS * SCHED_FRAMES * in_row);
            x.out[l] = malloc(sizeof(float) * SCHED_SLOTS * SCHED_FRAMES * out_row);
        }
        struct sched_check c = {0, -1, 1, {0}, &x.steps};
        d.check = d.encode ? sched_check : NULL, d.check_ctx = &c;
        memset(x.retired, 0, sizeof x.retired);
        x.copied = 0;
        CHECK_EQ(mimi_offline_schedule(&d, SCHED_SIGNALS, d.encode ? enc : dec), MIMI_OK);
        for (int l = 0; l < SCHED_LANES; l++) CHECK_EQ(x.retired[l], 1);  // each lane once
        CHECK(x.copied > 0);  // the samples went through the lanes' copy
        if (d.encode) {
            // every signal checked, in order; the last two only once the first steps were queued
            CHECK(c.in_order && c.next == SCHED_SIGNALS);
            CHECK(c.steps_at[0] == 0 && c.steps_at[SCHED_SIGNALS - 1] > 0);
            // a refused signal ends the pass with its code, before any later signal is checked
            c = (struct sched_check){0, 3, 1, {0}, &x.steps};
            for (int l = 0; l < SCHED_LANES; l++)
                for (int s = 0; s < SCHED_SLOTS; s++) sched_reset(&x, l, s);
            CHECK_EQ(mimi_offline_schedule(&d, SCHED_SIGNALS, enc), MIMI_EINVAL);
            CHECK(c.in_order && c.next == 4);
            printf("  offline schedule: signals checked in order before their first step; a refusal stops the pass\n");
        }
        for (int l = 0; l < SCHED_LANES; l++) {
            emu_destroy(&x.lanes[l]);
            free(x.out[l]);
            free(x.in[l]);
        }
    }
    int equal = 0, total = 0;
    double worst = 0;
    for (int i = 0; i < SCHED_SIGNALS; i++) {
        const int64_t n = enc[i].n_frames;
        for (int64_t k = 0; k < N_Q * n; k++) equal += got[i][k] == want[i][k];
        total += (int)(N_Q * n);
        double num = 0, den = 0;
        for (int64_t k = 0; k < 1920 * n; k++) {
            double dl = (double)pcm_emu[i][k] - pcm_cpu[i][k];
            num += dl * dl;
            den += (double)pcm_cpu[i][k] * pcm_cpu[i][k];
        }
        double rel = sqrt(num / (den > 0 ? den : 1));
        worst = rel > worst ? rel : worst;
        free(want[i]), free(got[i]), free(pcm_cpu[i]), free(pcm_emu[i]);
    }
    printf("  %d signals over %d lanes of %d slots x %d frames vs CPU offline: codes equal %d/%d, worst decoded pcm "
           "rel_l2 %.3e\n", SCHED_SIGNALS, SCHED_LANES, SCHED_SLOTS, SCHED_FRAMES, equal, total, worst);
    CHECK(equal >= total * 995 / 1000);
    CHECK(worst <= 1e-5);
}

// ---- bfloat16 and int8 attention rings (MIMI_PRECISION_FAST_BF16_KV, _FAST_BF16, _FAST_INT8_KV) ----

#define BF16_FRAMES 12

// The bf16 layout halves the rings (int8 takes about a quarter), and one row's plan, which rounds
// every stored key and value to bfloat16 or int8 (and, in _FAST_BF16 and _FAST_INT8_KV, its
// transposed convs fed by the ELU in place), stays close to the CPU's f32 stream: a sanity bound
// on the rounding (the measured fidelity of the mode is mimi-bench-gpu's), not a parity gate.
static void test_bf16_rings(const float *clip, size_t f32_slot_elems, int precision) {
    struct mimi_model *m = load_precision(precision);
    if (!m) return;
    static struct gpu_weights w;
    CHECK_EQ(gpu_weights_bind(&w, m, map_host, NULL), MIMI_OK);
    struct emu_batch enc, dec;
    emu_create(&enc, m, &w, MIMI_DIRECTION_ENCODE, 1, MIMI_ATTENTION_RING, 1);
    emu_create(&dec, m, &w, MIMI_DIRECTION_DECODE, 1, MIMI_ATTENTION_RING, 1);
    const int int8 = precision == MIMI_PRECISION_FAST_INT8_KV;
    CHECK(int8 ? enc.L.kv_int8 && dec.L.kv_int8 && !enc.L.kv_bf16 : enc.L.kv_bf16 && dec.L.kv_bf16 && !enc.L.kv_int8);
    CHECK(enc.L.slot_elems < f32_slot_elems * (int8 ? 35 : 60) / 100);
    // whole-signal layouts keep bfloat16 rings
    struct gpu_layout whole;
    CHECK_EQ(gpu_layout_init(&whole, m, MIMI_DIRECTION_ENCODE, 2, N_Q, MIMI_ATTENTION_RING, 4), MIMI_OK);
    CHECK(whole.kv_bf16 && !whole.kv_int8);
    if (int8) {
        // the attention of one row (in the persistent transformer) and of more than
        // GPU_SKINNY_MAX (per-layer ops, on tensor cores) reads int8 rings (plans built, not run)
        enum { MANY = GPU_SKINNY_MAX + 4 };
        struct gpu_layout L;
        CHECK_EQ(gpu_layout_init(&L, m, MIMI_DIRECTION_DECODE, MANY, N_Q, MIMI_ATTENTION_RING, 1), MIMI_OK);
        float *state = calloc(L.slot_elems * MANY, sizeof(float)), *scratch = calloc(L.scratch_elems, sizeof(float));
        CHECK(state && scratch && L.kv_int8);
        for (int k = 0; k < 2 && state && scratch; k++) {
            const int R = k ? MANY : 1;
            struct gpu_plan p;
            CHECK_EQ(gpu_plan_build(&p, &L, m, &w, state, scratch, R), MIMI_OK);
            int attention = 0, flagged = 0, mma = 0;
            for (int i = 0; i < p.n_ops; i++) {
                const struct gpu_op *op = &p.ops[i];
                const struct op_attention *at = op->kind == GOP_ATTENTION     ? &op->u.attention
                                                : op->kind == GOP_TRANSFORMER ? &op->u.transformer.att
                                                                              : NULL;
                if (!at) continue;
                attention++;
                flagged += at->kv_int8 && !at->kv_bf16;
                mma += op->kind == GOP_ATTENTION && at->mma_bf16 && GPU_ATT_MMA_SHORT(at->R, at->steps);
            }
            CHECK_EQ(count_ops(&p, GOP_TRANSFORMER), k ? 0 : 1);
            CHECK_EQ(attention, k ? m->dec_tr.n_layers : 1);
            CHECK_EQ(flagged, attention);
            CHECK_EQ(mma, k ? attention : 0);
            gpu_plan_free(&p);
        }
        free(state), free(scratch);
    }
    struct mimi_stream_params sp;
    mimi_stream_params_default(&sp);
    sp.n_codebooks = N_Q;
    struct mimi_encoder *ce = mimi_encoder_create(m, &sp, NULL);
    struct mimi_decoder *cd = mimi_decoder_create(m, &sp, NULL);
    const int slot = 0;
    int equal = 0;
    double num = 0, den = 0;
    for (int f = 0; f < BF16_FRAMES; f++) {
        int32_t want[N_Q], got[N_Q];
        static float pcm_cpu[1920], pcm_emu[1920];
        CHECK_EQ(mimi_encoder_step(ce, clip + (size_t)f * 1920, want), MIMI_OK);
        emu_step(&enc, 1, &slot, clip + (size_t)f * 1920, got);
        for (int q = 0; q < N_Q; q++) equal += got[q] == want[q];
        CHECK_EQ(mimi_decoder_step(cd, want, pcm_cpu), MIMI_OK);
        emu_step(&dec, 1, &slot, want, pcm_emu);
        for (int i = 0; i < 1920; i++) {
            double dl = (double)pcm_emu[i] - pcm_cpu[i];
            num += dl * dl;
            den += (double)pcm_cpu[i] * pcm_cpu[i];
        }
    }
    const double rel = sqrt(num / (den > 0 ? den : 1));
    printf("  %s rings%s, one row: state %zu floats per slot (f32 %zu); vs CPU f32: codes equal %d/%d, "
           "pcm rel_l2 %.3e\n",
           int8 ? "int8" : "bf16", precision == MIMI_PRECISION_FAST_BF16_KV ? "" : " and bf16 products",
           enc.L.slot_elems, f32_slot_elems, equal, BF16_FRAMES * N_Q, rel);
    CHECK(equal >= BF16_FRAMES * N_Q * 9 / 10);
    CHECK(rel > 0 && rel <= 2e-2);
    mimi_encoder_destroy(ce);
    mimi_decoder_destroy(cd);
    emu_destroy(&enc);
    emu_destroy(&dec);
    gpu_weights_release(&w);
    mimi_model_destroy(m);
}

// The blocks of a plan's direct convs (op_conv and op_convtr_direct, as direct_launch grids
// them): the largest grid, and the direct convs counted.
static long direct_grid_max(const struct gpu_plan *p, int *n) {
    long most = 0;
    *n = 0;
    for (int i = 0; i < p->n_ops; i++) {
        const struct gpu_op *op = &p->ops[i];
        long blocks;
        if (op->kind == GOP_CONV && !op->u.conv.narrow) {
            const struct op_conv *c = &op->u.conv;
            blocks = gpu_direct_tiles(c->in.R * (c->in.T / c->in.S), c->c_out, 1) * c->split.splits;
        } else if (op->kind == GOP_CONVTR_DIRECT) {
            const struct op_convtr_direct *c = &op->u.convtr_direct;
            blocks = gpu_direct_tiles(c->tr.R * (c->tr.T + 1), c->tr.c_out, c->tr.S) * c->split.splits;
        } else {
            continue;
        }
        ++*n;
        if (blocks > most) most = blocks;
    }
    return most;
}

// One stream's direct convs fill the chip in one wave: none has more blocks than the layout's
// direct_blocks (two an SM of 132). On a smaller chip (16 SMs, 99 KB of shared memory a block)
// their reductions are split less, the 128-channel resblock runs as direct convs again (its step
// form's 136 KB do not fit), and the steps still agree with the CPU backend.
static void test_direct_waves(struct mimi_model *model, const struct gpu_weights *w, const float *clip) {
    for (int k = 0; k < 2; k++) {
        emu_direct_blocks = k ? GPU_DIRECT_PER_SM * 16 : 0;
        emu_smem_optin = k ? 99 * 1024 : 0;  // and less shared memory a block: the 128-channel
                                             // resblock step form does not fit there
        struct emu_batch enc, dec;
        emu_create(&enc, model, w, MIMI_DIRECTION_ENCODE, 1, MIMI_ATTENTION_RING, 1);
        emu_create(&dec, model, w, MIMI_DIRECTION_DECODE, 1, MIMI_ATTENTION_RING, 1);
        CHECK_EQ(enc.L.direct_blocks, k ? GPU_DIRECT_PER_SM * 16 : GPU_DIRECT_PER_SM * GPU_DIRECT_SMS);
        int ne, nd;
        const long me = direct_grid_max(&enc.plans[1], &ne), md = direct_grid_max(&dec.plans[1], &nd);
        printf("  direct convs of one row, %d blocks aimed at: encode %d (at most %ld blocks), decode %d (%ld)\n",
               enc.L.direct_blocks, ne, me, nd, md);
        CHECK(ne >= 7 && nd >= 8);  // (the encoder's first conv rides in its first resblock)
        CHECK_EQ(count_steps(&enc.plans[1]), k ? 1 : 2);
        CHECK_EQ(count_steps(&dec.plans[1]), k ? 1 : 2);
        if (!k) CHECK(me <= enc.L.direct_blocks && md <= dec.L.direct_blocks);
        if (k) {
            struct mimi_batch *cenc = NULL, *cdec = NULL;
            cpu_pair(model, 1, &cenc, &cdec);
            struct agreement agree = {0};
            const int slot = 0;
            for (int f = 0; f < FRAMES; f++) step_both(&enc, &dec, cenc, cdec, 1, &slot, clip + (size_t)f * 1920, &agree);
            agreement_check(&agree, "one row, direct convs for 16 SMs and 99 KB a block, vs CPU");
            mimi_batch_destroy(cenc);
            mimi_batch_destroy(cdec);
        }
        emu_destroy(&enc);
        emu_destroy(&dec);
    }
    emu_direct_blocks = 0;
    emu_smem_optin = 0;
}

// ---- the test ----

// Parts (the first argument; none: both), run by ctest as two tests of about equal length so
// that they run side by side: "small", the plans of 1 to CAP rows against the CPU and the one-row
// plans with bf16 rings; "large", the whole-signal plans and their scheduler, and the wide plans
// in every precision.
int main(int argc, char **argv) {
    test_init(argc, argv);
    const char *part = argc > 1 ? argv[1] : "";
    const int small = !*part || !strcmp(part, "small"), large = !*part || !strcmp(part, "large");
    if (!small && !large) {
        fprintf(stderr, "usage: %s [small|large]\n", argv[0]);
        return 2;
    }
    int rc;
    struct mimi_model *model = mimi_model_load(MIMI_TEST_MODELS "/native.safetensors", NULL, &rc);
    if (!model) SKIP("no synthetic model: %s", mimi_strerror(rc));
    struct st_file refs;
    char err[256];
    if (st_open(&refs, MIMI_TEST_DATA "/refs_seed0.safetensors", err, sizeof err)) return 1;
    const struct st_tensor *t = st_find(&refs, "dev_speech_en.pcm_in");
    float *clip = malloc(sizeof(float) * t->n_elements);
    if (st_to_f32(t, clip)) return 1;

    static struct gpu_weights w;
    CHECK_EQ(gpu_weights_bind(&w, model, map_host, NULL), MIMI_OK);
    struct emu_batch enc, dec;
    emu_create(&enc, model, &w, MIMI_DIRECTION_ENCODE, CAP, MIMI_ATTENTION_RING, 1);
    emu_create(&dec, model, &w, MIMI_DIRECTION_DECODE, CAP, MIMI_ATTENTION_RING, 1);
    if (large) {
        test_offline_plan(model, &w, clip);
        test_offline_schedule(model, &w, clip);
        test_wide_plan(model, &w, clip);
        test_bf16_convs(clip, test_fast_padding(clip));
    }
    if (small) {
        test_cpu_async(model, clip);
        test_direct_waves(model, &w, clip);
        test_bf16_rings(clip, enc.L.slot_elems, MIMI_PRECISION_FAST_BF16_KV);
        test_bf16_rings(clip, enc.L.slot_elems, MIMI_PRECISION_FAST_BF16);
        test_bf16_rings(clip, enc.L.slot_elems, MIMI_PRECISION_FAST_INT8_KV);
    }
    printf("  per-slot state %zu floats, scratch %zu floats; encode ops %d (one row) %d (%d rows), decode %d %d\n",
           enc.L.slot_elems, enc.L.scratch_elems, enc.plans[1].n_ops, enc.plans[CAP].n_ops, CAP,
           dec.plans[1].n_ops, dec.plans[CAP].n_ops);

    // the same steps through the CPU backend's batch
    struct mimi_batch *cenc = NULL, *cdec = NULL;
    if (small) cpu_pair(model, SLOTS, &cenc, &cdec);
    int done[SLOTS] = {0};
    struct agreement agree = {0};
    for (int step = 0; small && step < FRAMES + 2; step++) {
        // every slot, then subsets: slot 1 skips step 1, slot 0 skips steps 2 and 3
        int list[SLOTS], n = 0;
        static float in[SLOTS * 1920];
        for (int s = SLOTS - 1; s >= 0; s--) {
            if (done[s] == FRAMES || (s == 1 && step == 1) || (s == 0 && (step == 2 || step == 3))) continue;
            memcpy(in + n * 1920, clip + ((size_t)s * 7 + done[s]) * 1920, sizeof(float) * 1920);
            list[n++] = s;
        }
        if (n == 0) continue;
        step_both(&enc, &dec, cenc, cdec, n, list, in, &agree);
        for (int k = 0; k < n; k++) done[list[k]]++;
    }
    if (small) agreement_check(&agree, "plan vs CPU");
    mimi_batch_destroy(cenc);
    mimi_batch_destroy(cdec);
    emu_destroy(&enc);
    emu_destroy(&dec);
    gpu_weights_release(&w);
    free(clip);
    st_close(&refs);
    mimi_model_destroy(model);
    return test_summary();
}
