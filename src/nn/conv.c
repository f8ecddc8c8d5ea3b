/*
 * conv.c - streaming Conv1d and ConvTranspose1d (the reference's StreamingConv1d and
 * StreamingConvTranspose1d, spec section 5.1 and 5.2).
 *
 * A Conv1d keeps the last (kernel - stride) input columns between calls and runs a valid
 * convolution over [history | x]; the first call sees zeros, or copies of its first column for a
 * replicate-padded conv. A ConvTranspose1d computes its full output, adds the tail carried from
 * the previous call, emits stride * T columns and carries the rest without the bias.
 * The arithmetic is one matmul per call (ops.h) over an im2col copy of the input.
 */
#include <string.h>

#include "nn.h"
#include "ops.h"

// ---- memory ----

static int conv_mem_cols(const struct mimi_conv *c) { return c->kernel - c->stride; }

void conv_mem_layout(struct arena *a, const struct mimi_conv *c, struct conv_mem *m) {
    int rows = c->transposed ? c->c_out : c->c_in;
    m->buf = arena_floats(a, (size_t)rows * conv_mem_cols(c));
    m->first = 1;
}

void conv_mem_reset(const struct mimi_conv *c, struct conv_mem *m) {
    int rows = c->transposed ? c->c_out : c->c_in;
    memset(m->buf, 0, sizeof(float) * (size_t)rows * conv_mem_cols(c));
    m->first = 1;
}

size_t conv_work_floats(const struct mimi_conv *c, int T) {
    size_t H = (size_t)conv_mem_cols(c);
    if (!c->transposed) {
        // [history | x] plus the im2col matrix (T/S, c_in*K)
        return (size_t)c->c_in * (H + T) + (size_t)(T / c->stride) * c->c_in * c->kernel;
    }
    // the full output (c_out, S*T + K - S), plus x transposed (T, c_in) and the per-tap
    // products (c_out*K, T) of the dense case
    return (size_t)c->c_out * ((size_t)c->stride * T + H) + (size_t)T * c->c_in +
           (size_t)c->c_out * c->kernel * T;
}

// ---- Conv1d ----

void conv1d_stream(const struct mimi_conv *c, struct conv_mem *m, const float *x, int T, float *y,
                   float *work) {
    const int H = conv_mem_cols(c), L = H + T, K = c->kernel, S = c->stride;
    const int T_out = T / S, row = c->c_in * K;
    float *xin = work;                          // (c_in, L)
    float *col = work + (size_t)c->c_in * L;    // (T_out, c_in*K)
    // replicate padding: the first call's history is its first input column
    if (c->replicate_first && m->first)
        for (int i = 0; i < c->c_in; i++)
            for (int h = 0; h < H; h++) m->buf[(size_t)i * H + h] = x[(size_t)i * T];
    m->first = 0;
    // xin = [history | x]
    for (int i = 0; i < c->c_in; i++) {
        if (H > 0) memcpy(xin + (size_t)i * L, m->buf + (size_t)i * H, sizeof(float) * H);
        memcpy(xin + (size_t)i * L + H, x + (size_t)i * T, sizeof(float) * T);
    }
    // im2col: col[t][i*K + k] = xin[i][t*S + k]
    for (int t = 0; t < T_out; t++)
        for (int i = 0; i < c->c_in; i++)
            memcpy(col + (size_t)t * row + (size_t)i * K, xin + (size_t)i * L + (size_t)t * S,
                   sizeof(float) * K);
    // y (c_out, T_out) = W (c_out, c_in*K) . col^T + bias
    mimi_matmul_nt(c->c_out, T_out, row, c->weight, row, col, row, c->bias, y, T_out, 1);
    // the new history is the last H columns of [history | x]
    for (int i = 0; H > 0 && i < c->c_in; i++)
        memcpy(m->buf + (size_t)i * H, xin + (size_t)i * L + T, sizeof(float) * H);
}

// ---- ConvTranspose1d ----

void convtr_stream(const struct mimi_conv *c, struct conv_mem *m, const float *x, int T, float *y,
                   float *work) {
    const int K = c->kernel, S = c->stride, P = K - S, Lf = S * T + P;
    float *full = work;  // (c_out, Lf)
    // start from the bias at every output position
    for (int o = 0; o < c->c_out; o++)
        for (int j = 0; j < Lf; j++) full[(size_t)o * Lf + j] = c->bias ? c->bias[o] : 0.0f;
    if (c->groups == c->c_in && c->groups == c->c_out) {
        // depthwise: full[ch, t*S + k] += W[ch, 0, k] * x[ch, t]
        for (int ch = 0; ch < c->c_out; ch++)
            for (int t = 0; t < T; t++)
                for (int k = 0; k < K; k++)
                    full[(size_t)ch * Lf + t * S + k] += c->weight[(size_t)ch * K + k] * x[(size_t)ch * T + t];
    } else {
        float *xt = full + (size_t)c->c_out * Lf;  // (T, c_in)
        float *taps = xt + (size_t)T * c->c_in;     // (c_out*K, T)
        for (int i = 0; i < c->c_in; i++)
            for (int t = 0; t < T; t++) xt[(size_t)t * c->c_in + i] = x[(size_t)i * T + t];
        // taps[(o*K + k), t] = sum_i W[i, o, k] x[i, t]
        mimi_matmul_nt(c->c_out * K, T, c->c_in, c->weight_t, c->c_in, xt, c->c_in, NULL, taps, T, 1);
        // scatter: full[o, t*S + k] += taps[o*K + k, t]
        for (int o = 0; o < c->c_out; o++)
            for (int t = 0; t < T; t++)
                for (int k = 0; k < K; k++)
                    full[(size_t)o * Lf + t * S + k] += taps[((size_t)o * K + k) * T + t];
    }
    for (int o = 0; o < c->c_out; o++) {
        float *fo = full + (size_t)o * Lf;
        float b = c->bias ? c->bias[o] : 0.0f;
        float *tail = m->buf + (size_t)o * P;
        // complete the previous call's tail, emit S*T columns, carry the rest without bias
        for (int j = 0; j < P; j++) fo[j] += tail[j];
        memcpy(y + (size_t)o * S * T, fo, sizeof(float) * S * T);
        for (int j = 0; j < P; j++) tail[j] = fo[S * T + j] - b;
    }
    m->first = 0;
}
