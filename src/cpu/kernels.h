/*
 * kernels.h - the fast CPU kernels: their argument structs and the per-ISA function table.
 *
 * Every kernel body is written once in kernels_impl.h and compiled per instruction set
 * (kernels_avx2.c, kernels_avx512.c, kernels_neon.c), giving one `struct mimi_kernels` table per
 * ISA; dispatch.c picks one at model load. The matrix kernels do a range of work items (blocks
 * of rows and columns or steps), which cpu.c hands out to the pool's threads; no kernel splits
 * a reduction, so the bits never depend on how the items were shared.
 *
 * The matrix kernels compute every output as ONE fused multiply-add chain,
 *     acc = bias[m];  for j = 0 .. J-1: acc = fma(w[m, j], x[j], acc)
 * in that order, whatever the blocking, the batch size, the kernel (gemm or conv) or the thread
 * split; that is what makes a batched slot equal a lone stream bit for bit. The scalar
 * reference (src/nn/ops_ref.c) sums differently and is the definition of correct; these agree
 * with it within the tolerances of tests/test_kernels.c.
 *
 * Weights live in panels of MR = 2 * SIMD_W rows: panel p holds rows p*MR .. p*MR+MR-1,
 * element (m, j) at panel[j * MR + m % MR], rows past the end zero (cpu.c packs them).
 */
#ifndef MIMI_KERNELS_H
#define MIMI_KERNELS_H

#include <stddef.h>
#include <stdint.h>

// What a matrix kernel does with an accumulated value before storing it at y.
enum mimi_epilogue {
    MIMI_EPI_NONE = 0,   // y = acc
    MIMI_EPI_ELU,        // y = elu(acc)
    MIMI_EPI_GELU,       // y = gelu(acc)
    MIMI_EPI_ADD,        // y = r + acc           (residual; r may be y)
    MIMI_EPI_SCALE_ADD,  // y = fma(scale[m], acc, r)   (layer-scaled residual)
};

// Where output (m, col) goes: y[(m / group) * gs + (m % group) * ms + col * cs]. A plain
// matrix has group >= M; a transposed conv's (channel, phase) rows use group = stride.
struct mimi_out {
    float *y;
    const float *r;  // residual, same addressing as y (EPI_ADD, EPI_SCALE_ADD)
    int group;
    ptrdiff_t gs, ms, cs;
};

// y (M, N) = epilogue(bias + W (M, K) . B^T), column n of B being b[n * ldb + j], j < K.
struct mimi_gemm_args {
    int M, N, K;
    const void *w;  // panels (ceil(M / MR), K, MR), f32 or bf16
    int w_bf16;
    const float *bias;  // (ceil(M / MR) * MR) or NULL
    const float *b;
    ptrdiff_t ldb;
    struct mimi_out out;  // cs = the column stride
    int epi;
    const float *scale;  // (M), EPI_SCALE_ADD
};

// A direct convolution over T output steps: y (M, T) = epilogue(bias + sum_j W[m, j] X_j),
// X_j[t] = x[off[j] + t]. Reads up to MIMI_CONV_SLACK floats past the last x[off[j] + T - 1].
struct mimi_conv_args {
    int M, J, T;
    const float *w;     // f32 panels (ceil(M / MR), J, MR)
    const float *bias;  // (ceil(M / MR) * MR) or NULL
    const int *off;     // (J)
    const float *x;
    struct mimi_out out;  // cs = the time stride
    int epi;
    int rows_outer;  // visit row blocks outside time blocks (weights larger than L2)
};

// Floats a conv kernel may read past the end of its input (one time block).
#define MIMI_CONV_SLACK 64

struct mimi_kernels {
    const char *name;  // "avx2", "avx512", "neon"
    int isa;           // enum mimi_isa
    int width;         // floats per vector
    int mr;            // rows per weight panel (2 * width)

    // matrix kernels over work items [begin, end): a gemm's items are (panel of mr rows, block
    // of gemm_cols columns), panel-major; a conv's are (panel of mr rows, block of conv_steps
    // steps), ordered as a->rows_outer says
    int gemm_cols, conv_steps;
    void (*gemm)(const struct mimi_gemm_args *a, long begin, long end);
    void (*conv)(const struct mimi_conv_args *a, long begin, long end);

    // y = elu(x) and y = gelu(x) over n floats (y may be x)
    void (*elu)(float *y, const float *x, size_t n);
    void (*gelu)(float *y, const float *x, size_t n);
    // y = exp(x) over n floats (y may be x)
    void (*exp)(float *y, const float *x, size_t n);

    // LayerNorm of `rows` rows of d: y = (x - mean) / sqrt(var + eps) * w + b
    void (*layer_norm)(const float *x, float *y, int rows, int d, const float *w, const float *b,
                       float eps);

    // One attention head of n_q queries (query s at q + s * ldq, hd floats) over the n cache
    // entries listed in idx (key i at keys[idx[i] * ld], value likewise), query s seeing entry i
    // when vis[s * n + i] != 0: out row s (at out + s * ldo) = softmax(q_s . k_i * scale) . v_i
    // over its visible entries, summed in list order; the same bits for a query whatever the
    // others (a head of 64 reads the keys and values once per query, from cache after the
    // first; other sizes once for all queries). scores: (n_q, n) scratch.
    void (*attend)(const float *q, ptrdiff_t ldq, int n_q, const float *keys, const float *values,
                   ptrdiff_t ld, const int *idx, const unsigned char *vis, int n, int hd,
                   float scale, float *scores, float *out, ptrdiff_t ldo);
};

extern const struct mimi_kernels mimi_kernels_avx2;
extern const struct mimi_kernels mimi_kernels_avx512;
extern const struct mimi_kernels mimi_kernels_neon;

#endif
