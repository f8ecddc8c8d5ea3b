/*
 * conv.c - streaming Conv1d and ConvTranspose1d (the reference's StreamingConv1d and
 * StreamingConvTranspose1d, spec section 5.1 and 5.2).
 *
 * A Conv1d keeps the last (kernel - stride) input columns between calls and runs a valid
 * convolution over [history | x]; the first call sees zeros, or copies of its first column for a
 * replicate-padded conv. A ConvTranspose1d computes its full output, adds the tail carried from
 * the previous call, emits stride * T columns and carries the rest without the bias.
 * The arithmetic is one matmul per call (ops.h) over an im2col copy of the input.
 * This is the reference path; a conv with packed weights runs src/cpu/conv_fast.c instead.
 */
#include <string.h>

#include "cpu/cpu.h"
#include "nn.h"
#include "ops.h"

// ---- memory ----

static int conv_mem_cols(const struct mimi_conv *c) { return c->kernel - c->stride; }

// (fast transposed convs keep input columns instead of the tail: see conv_fast.c)
void conv_mem_layout(struct arena *a, const struct mimi_conv *c, struct conv_mem *m) {
    m->buf = arena_floats(a, mimi_cpu_conv_mem_floats(c));
    m->first = 1;
}

void conv_mem_reset(const struct mimi_conv *c, struct conv_mem *m) {
    memset(m->buf, 0, sizeof(float) * mimi_cpu_conv_mem_floats(c));
    m->first = 1;
}

size_t conv_work_floats(const struct mimi_conv *c, int n, int T) {
    if (c->packed) return mimi_cpu_conv_work_floats(c, n, T);
    size_t H = (size_t)conv_mem_cols(c), N = (size_t)n;
    if (!c->transposed) {
        // one slot's [history | x], plus the im2col matrix (n * T/S, c_in*K)
        return (size_t)c->c_in * (H + T) + N * (T / c->stride) * c->c_in * c->kernel;
    }
    // one slot's full output (c_out, S*T + K - S), plus x transposed (n*T, c_in) and the per-tap
    // products (c_out*K, n*T) of the dense case
    return (size_t)c->c_out * ((size_t)c->stride * T + H) + N * T * c->c_in +
           (size_t)c->c_out * c->kernel * N * T;
}

// ---- Conv1d ----

void conv1d_stream(const struct mimi_conv *c, struct conv_mem **mems, int n, const float *x, int T,
                   float *y, float *work) {
    if (c->packed) {
        mimi_cpu_conv_stream(c, mems, n, x, T, y, work, NULL);
        return;
    }
    const int H = conv_mem_cols(c), L = H + T, K = c->kernel, S = c->stride;
    const int T_out = T / S, row = c->c_in * K, NT = n * T;
    float *xin = work;                          // (c_in, L) for one slot at a time
    float *col = work + (size_t)c->c_in * L;    // (n * T_out, c_in*K)
    for (int s = 0; s < n; s++) {
        struct conv_mem *m = mems[s];
        const float *xs = x + (size_t)s * T;  // row i of this slot: xs + i * NT
        // replicate padding: the first call's history is its first input column
        if (c->replicate_first && m->first)
            for (int i = 0; i < c->c_in; i++)
                for (int h = 0; h < H; h++) m->buf[(size_t)i * H + h] = xs[(size_t)i * NT];
        m->first = 0;
        // xin = [history | x]
        for (int i = 0; i < c->c_in; i++) {
            if (H > 0) memcpy(xin + (size_t)i * L, m->buf + (size_t)i * H, sizeof(float) * H);
            memcpy(xin + (size_t)i * L + H, xs + (size_t)i * NT, sizeof(float) * T);
        }
        // im2col: col[s*T_out + t][i*K + k] = xin[i][t*S + k]
        for (int t = 0; t < T_out; t++)
            for (int i = 0; i < c->c_in; i++)
                memcpy(col + ((size_t)s * T_out + t) * row + (size_t)i * K,
                       xin + (size_t)i * L + (size_t)t * S, sizeof(float) * K);
        // the new history is the last H columns of [history | x]
        for (int i = 0; H > 0 && i < c->c_in; i++)
            memcpy(m->buf + (size_t)i * H, xin + (size_t)i * L + T, sizeof(float) * H);
    }
    // y (c_out, n*T_out) = W (c_out, c_in*K) . col^T + bias: each weight read once for all slots
    mimi_matmul_nt(c->c_out, n * T_out, row, c->weight, row, col, row, c->bias, y, n * T_out, 1);
}

// ---- ConvTranspose1d ----

void convtr_stream(const struct mimi_conv *c, struct conv_mem **mems, int n, const float *x, int T,
                   float *y, float *work) {
    if (c->packed) {
        mimi_cpu_conv_stream(c, mems, n, x, T, y, work, NULL);
        return;
    }
    const int K = c->kernel, S = c->stride, P = K - S, Lf = S * T + P, NT = n * T;
    const int depthwise = c->groups == c->c_in && c->groups == c->c_out;
    float *full = work;                            // (c_out, Lf) for one slot at a time
    float *xt = full + (size_t)c->c_out * Lf;      // (n*T, c_in)
    float *taps = xt + (size_t)NT * c->c_in;       // (c_out*K, n*T)
    if (!depthwise) {
        // taps[(o*K + k), s*T + t] = sum_i W[i, o, k] x[i, s, t], for all slots in one matmul
        for (int i = 0; i < c->c_in; i++)
            for (int j = 0; j < NT; j++) xt[(size_t)j * c->c_in + i] = x[(size_t)i * NT + j];
        mimi_matmul_nt(c->c_out * K, NT, c->c_in, c->weight_t, c->c_in, xt, c->c_in, NULL, taps, NT, 1);
    }
    for (int s = 0; s < n; s++) {
        // start from the bias at every output position
        for (int o = 0; o < c->c_out; o++)
            for (int j = 0; j < Lf; j++) full[(size_t)o * Lf + j] = c->bias ? c->bias[o] : 0.0f;
        if (depthwise) {
            // full[ch, t*S + k] += W[ch, 0, k] * x[ch, s, t]
            for (int ch = 0; ch < c->c_out; ch++)
                for (int t = 0; t < T; t++)
                    for (int k = 0; k < K; k++)
                        full[(size_t)ch * Lf + t * S + k] +=
                            c->weight[(size_t)ch * K + k] * x[(size_t)ch * NT + (size_t)s * T + t];
        } else {
            // scatter: full[o, t*S + k] += taps[o*K + k, s*T + t]
            for (int o = 0; o < c->c_out; o++)
                for (int t = 0; t < T; t++)
                    for (int k = 0; k < K; k++)
                        full[(size_t)o * Lf + t * S + k] += taps[((size_t)o * K + k) * NT + (size_t)s * T + t];
        }
        struct conv_mem *m = mems[s];
        for (int o = 0; o < c->c_out; o++) {
            float *fo = full + (size_t)o * Lf;
            float b = c->bias ? c->bias[o] : 0.0f;
            float *tail = m->buf + (size_t)o * P;
            // complete the previous call's tail, emit S*T columns, carry the rest without bias
            for (int j = 0; j < P; j++) fo[j] += tail[j];
            memcpy(y + (size_t)o * S * NT + (size_t)s * S * T, fo, sizeof(float) * S * T);
            for (int j = 0; j < P; j++) tail[j] = fo[S * T + j] - b;
        }
        m->first = 0;
    }
}
