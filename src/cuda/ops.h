/*
 * ops.h - the CUDA backend's operations: one argument struct and one extern "C" entry per op.
 *
 * Layout conventions shared by every op:
 * - A step runs R "rows" (a power-of-two bucket of the listed slots). Row r belongs to the slot
 *   row_slot[r]; row_slot[r] = -1 marks padding, which is computed but never touches state.
 * - Activations are channel-major (C, R, T): channel c of row r at time t is x[(c*R + r)*T + t].
 *   Inside the transformer rows are time-major (R*steps, d), row index r*steps + s.
 * - Per-slot streaming state sits in one arena of 4-byte elements, one block per slot: a pointer
 *   names slot 0's copy and slot s's copy is at that pointer + s * slot_stride.
 * - Matrix products go through cuBLAS in column-major terms (struct op_gemm).
 *
 * Each entry launches its kernel(s) on ex->stream and returns MIMI_OK, or MIMI_EDEVICE with a
 * message in ex->errmsg; entries never synchronise. The CPU emulator in tests/test_gpu_plan.c
 * runs the same structs with plain loops: it is the definition of what each op computes.
 */
#ifndef MIMI_CUDA_OPS_H
#define MIMI_CUDA_OPS_H

#include <stddef.h>
#include <math.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

// Where and how ops run: the batch's stream and cuBLAS handle, and the precision mode.
struct gpu_exec {
    void *stream;   // cudaStream_t
    void *cublas;   // cublasHandle_t bound to `stream`
    int precision;  // enum mimi_precision: the cuBLAS products' compute type
    char *errmsg;   // receives the failure text
    size_t errlen;
    int pdl;        // 1: kernels launch as programmatic dependents of the one before (sm_90+)
    void *cublaslt;           // cublasLtHandle_t, for products with a tuned algorithm (or NULL)
    void *workspace;          // the cuBLAS workspace, workspace_bytes long
    size_t workspace_bytes;
};

// ---- direct convolutions (conv1d.cu, convtr1d.cu) ----

// The direct kernels compute GPU_DIRECT_CHANNELS output channels x 32 columns per block (a
// "tile"); the reduction is split
// into `splits` contiguous parts of `chunk` indices, a block each. With splits > 1 every part
// leaves its sums in `part` (splits * outputs floats) and the last block of a tile to finish adds
// them in part order, so the result does not depend on timing; `counters` (one per tile) are
// zero before and after.
#define GPU_DIRECT_CHANNELS 32
// Blocks of a direct kernel resident on one SM (its launch bounds; about 110 registers of 256
// threads and 32 KB of shared memory a block), and the SMs a plan assumes when it is built without
// a device (the plan tests): an H100's or H200's 132.
#define GPU_DIRECT_PER_SM 2
#define GPU_DIRECT_SMS 132
// The shared memory a block may opt in to on an H100 or H200 (227 KB): plans assume it until the
// batch reads its device's
#define GPU_SMEM_OPTIN (227 * 1024)
// A direct kernel's tiles over `cols` columns, c_out channels and `phases` phases; its grid is
// tiles x splits blocks.
static inline long gpu_direct_tiles(int cols, int c_out, int phases) {
    return (long)((cols + 31) / 32) * ((c_out + GPU_DIRECT_CHANNELS - 1) / GPU_DIRECT_CHANNELS) * phases;
}
#define GPU_CONV_PART_FLOATS (1 << 20)
#define GPU_CONV_COUNTERS 2048
struct gpu_split {
    int splits, chunk;
    float *part;
    uint32_t *counters;
};

// ---- conv1d.cu ----

// col (c_in*K + ones, R*T_out) from [history | f(x)] per row, f = ELU when `elu`:
// col[(i*K + k), r*T_out + t] = xin(i, r, t*S + k), xin = [hist (H) | f(x) (T)]; with `ones`, a
// last row of 1.0 multiplies the bias column appended to the weights (the bias is in the product).
// A padding row sees a zero history; a slot not yet started with `replicate` sees copies of
// its first column f(x[i, r, 0]) as history.
struct op_im2col {
    const float *x;          // (c_in, R, T)
    float *col;              // (c_in*K + ones, R*T/S): floats, or bfloat16 values with col_bf16
    const float *hist;       // slot 0's history (c_in, H); NULL when H = 0
    const int32_t *started;  // slot 0's started flag
    const int32_t *row_slot; // (R)
    size_t slot_stride;
    int c_in, K, S, H, T, R, elu, replicate;
    int ones;  // rows of ones after the c_in*K: the bias row, in fast mode padded (plan.c's reduction)
    int col_bf16;  // col holds bfloat16 (2 bytes each, rounded to nearest even; the ELU as
                   // common.cuh's elu_bf16): MIMI_PRECISION_FAST_BF16
    int fast_elu;  // MIMI_PRECISION_FAST_BF16: the narrow conv's and the resblock kernel's ELUs
                   // (the steady part: windows inside the step's input) are elu_bf16 too
    // im2col only: with `tail` set, its threads also stage the newest H columns of [hist | f(x)]
    // there as (c_in, R, H), in f32, for the step's GOP_TAILS (small steps), instead of a
    // GOP_CARRY after the product
    float *tail;
};
int mimi_cuda_im2col(const struct op_im2col *a, struct gpu_exec *ex);

// hist = the last H columns of [hist | f(x)] for every non-padding row (same fields as im2col;
// col, K and S unused).
int mimi_cuda_carry(const struct op_im2col *a, struct gpu_exec *ex);

// The whole conv in one kernel, for products too small to fill the chip through cuBLAS (one
// stream's SEANet): y[o, r, t] = g(bias[o] + sum_{i,k} w[o*ld + i*K + k] xin(i, r, t*S + k)),
// plus the old y[o, r, t] when `accumulate` (the resblock's residual), g = ELU when `post_elu`;
// with `elu_out` the stored value is then ELU'd (a small step's decoder conv, or resblock, whose
// output only feeds the ELU before a transposed conv: that pass, a launch of its own, is folded
// here).
// The input side (x, history, f, padding rows) is `in`'s, as for im2col; in.col and in.ones are
// unused. The history is not carried: with `tail` set, the kernel's blocks (not the narrow
// kernel's) also stage the newest H columns of [hist | f(x)] there as (c_in, R, H), and the
// step's GOP_TAILS stores them into the slots' histories once every conv has read them; else a
// GOP_CARRY follows when H > 0.
// See struct gpu_split for how the reduction is spread over blocks.
// With `narrow` (c_out = 1: the decoder's last conv, for many columns) the conv runs instead as
// one thread per output column over input windows staged once per block (conv1d.cu); `split`
// is then unused. It takes K <= GPU_NARROW_MAX_K and GPU_NARROW_CHANNELS * GPU_NARROW_WINDOW(K, S)
// floats of shared memory, at most 40 KB.
#define GPU_NARROW_COLS 256
#define GPU_NARROW_CHANNELS 16
#define GPU_NARROW_MAX_K 32
#define GPU_NARROW_WINDOW(K, S) ((GPU_NARROW_COLS - 1) * (S) + (K))
struct op_conv {
    struct op_im2col in;
    const float *w;  // (c_out, ld): the c_in*K weights of output o, then its bias when `bias`
    float *y;        // (c_out, R, T/S)
    int c_out, ld, bias, post_elu, accumulate;
    struct gpu_split split;
    int narrow;
    float *tail;  // (c_in, R, H) or NULL
    int elu_out;
};
int mimi_cuda_conv(const struct op_conv *a, struct gpu_exec *ex);

// The staged histories and transposed-conv tails of a small step, stored at its end in one
// launch instead of a carry after each conv (each such launch cost one stream's chain of
// dependent kernels a round trip): for each entry e and non-padding row r, the slot's state
// dst[slot * slot_stride + c * P + j] = src[(c * R + r) * P + j] for c < C, j < P.
#define GPU_MAX_TAILS 24
#define GPU_TAIL_ROWS 8  // steps of at most this many rows stage their tails
struct gpu_tail {
    const float *src;  // (C, R, P)
    float *dst;        // slot 0's (C, P)
    int C, P;
};
// End of a step: next_pos += steps and started = 1 for every non-padding row's slot.
struct op_finish {
    int32_t *next_pos, *started;  // slot 0's
    const int32_t *row_slot;
    size_t slot_stride;
    int R, steps;
};
int mimi_cuda_finish(const struct op_finish *a, struct gpu_exec *ex);

struct op_tails {
    struct gpu_tail e[GPU_MAX_TAILS];
    const int32_t *row_slot;  // (R)
    size_t slot_stride;
    int n, R;
    int with_finish;          // the step's op_finish in the same launch (one launch fewer)
    struct op_finish finish;
};
int mimi_cuda_tails(const struct op_tails *a, struct gpu_exec *ex);

// ---- resblock.cu ----

// A SEANet residual block over many columns in one kernel (stride 1, K = GPU_RESBLOCK_K):
// y[o, r, t] = x[o, r, t] + (b2[o] + sum_j W2[o, j] h[j, r, t]),
// h[j, r, t] = elu(b1[j] + sum_{i,k} W1[j, i*K + k] xin(i, r, t + k)), with xin `in`'s
// [history | elu(x)]. The weights come transposed, outputs contiguous: w1t (c*K + 1, hid) and
// w2t (hid + 1, c), each with the bias as its last row. y must not overlap x, and the history is
// not carried (a GOP_CARRY follows). For (c, hid) = (64, 32) only (GPU_RESBLOCK_FITS): the top
// level, where it beats im2col and two products; at 128 channels and 480 steps it did not.
//
// With `last` (the fast precisions, the decoder's top level) the decoder's last conv rides in the
// same kernel: out[r, t] = b + sum_{i,k} w[i*K + k] [last hist | e(y)](i, r, t + k), one output
// channel, K = GPU_RESBLOCK_K, e = the kernel's ELU; y is then never stored (it was 1 GB written
// and read again per 2048-stream step). A tile of GPU_RESBLOCK_TILE columns completes its
// outputs from its third column on and leaves e(y) of its first two and last two columns in
// `edges`; a second launch completes each tile's first two outputs from those and the tile
// before (or the history) and carries each row's last two columns into its slot's history. It
// takes T % 4 == 0 and a last tile of at least two columns (GPU_RESBLOCK_LAST_FITS).
//
// With `first` (the encoder's top level) the SEANet's first conv, one input channel, stride 1,
// K <= GPU_FIRST_MAX_K, rides in the kernel too: x = b + sum_k w[k] [first hist | pcm](r, t + k)
// is computed from the step's PCM wherever the block reads x (the window, the residual), in.x
// is unused, and x is never stored (it was 1 GB written and read again per 2048-stream step).
// in.hist still holds elu(x) of the columns before the step: a second launch computes the row's
// last two columns of x once more and carries them there. The PCM's own history is not carried
// (a GOP_CARRY over first.in follows). It takes T % 4 == 0 and 16-byte aligned PCM rows and y.
#define GPU_FIRST_MAX_K 8
#define GPU_RESBLOCK_K 3
#define GPU_RESBLOCK_TILE 128
#define GPU_RESBLOCK_FITS(c, hid) ((c) == 64 && (hid) == 32)
#define GPU_RESBLOCK_LAST_FITS(T) ((T) % 4 == 0 && (T) % GPU_RESBLOCK_TILE != 1)
#define GPU_RESBLOCK_EDGES(c, T) (4 * (size_t)(c) * (((T) + GPU_RESBLOCK_TILE - 1) / GPU_RESBLOCK_TILE))  // per row
struct gpu_last_conv {
    const float *w;  // (c*K + 1): the weights of the one output channel, then its bias
    float *out;      // (R, T)
    float *hist;     // slot 0's history (c, K - 1): e(y) of the columns before the step
    float *edges;    // (R, T / GPU_RESBLOCK_TILE tiles, 4, c)
};
// With `step.on` (a small step: one stream's top two levels, GPU_RESBLOCK_STEP_FITS) the block
// runs as resblock_step.cu's kernel instead: a block per tile of a few columns of one row, both
// convs' sums in the order of the f32 kernel above (the same bits), y = elu_f(y) where elu_out
// (the ELU before the next conv), and where `tail` is set the newest K - 1 columns of
// [history | elu(x)] staged there, (c, R, K - 1), for the step's GOP_TAILS (else a GOP_CARRY
// follows, as above). At 64 channels it takes `first` too (has_first, GPU_RESBLOCK_STEP_FIRST):
// x from the PCM as the f32 kernel above computes it (the same bits), with `tail` and
// `first_tail` both set: the PCM's newest first.in.H samples are staged at first_tail, (1, R, H).
#define GPU_RESBLOCK_STEP_FITS(c, hid) (((c) == 64 || (c) == 128) && (hid) * 2 == (c))
#define GPU_RESBLOCK_STEP_FIRST(c) ((c) == 64)
#define GPU_RESBLOCK_STEP_TC 8  // columns a block (resblock_step.cu)
// A block's shared memory: W1^T (c*K + 1, c/2), W2^T (c/2 + 1, c), the window (c, TC + K - 1), h
// (c/2, TC); 36 KB at 64 channels, 136 KB at 128 (more than some GPUs give a block: the plan
// checks the device's limit, gpu_layout.smem_optin)
#define GPU_RESBLOCK_STEP_SMEM(c)                                                                      \
    (sizeof(float) * ((size_t)((c) * GPU_RESBLOCK_K + 1) * ((c) / 2) + (size_t)((c) / 2 + 1) * (c) + \
                      (size_t)(c) * (GPU_RESBLOCK_STEP_TC + GPU_RESBLOCK_K - 1) + (size_t)((c) / 2) * GPU_RESBLOCK_STEP_TC))
struct gpu_resblock_step {
    int on, elu_out;
    float *tail, *first_tail;
};
struct gpu_first_conv {
    struct op_im2col in;  // the PCM (1, R, T) and its history: c_in = 1, S = 1, H = K - 1, elu = 0
    const float *w;       // (c, ld): output o's K taps, then its bias
    int ld;
};
struct op_resblock {
    struct op_im2col in;  // in.c_in = c, in.K = GPU_RESBLOCK_K, in.S = 1, in.elu = 1, not replicate
    const float *w1t, *w2t;
    float *y;  // (c, R, T); unused with `last`
    int hid;
    int has_last;
    struct gpu_last_conv last;
    int has_first;  // (not with has_last)
    struct gpu_first_conv first;
    struct gpu_resblock_step step;  // (not with has_last)
};
int mimi_cuda_resblock(const struct op_resblock *a, struct gpu_exec *ex);
int mimi_cuda_resblock_step(const struct op_resblock *a, struct gpu_exec *ex);  // (mimi_cuda_resblock's, step.on)

// ---- resblock_mma.cu ----

// The same block in bfloat16 on tensor cores (MIMI_PRECISION_FAST_BF16) for the SEANet levels
// below the top one, (c, hid) = (128, 64) over 480 steps and (256, 128) over 96 in Mimi:
// y[o, r, t] = x[o, r, t] + (b2[o] + sum_j W2[o, j] h[j, r, t]),
// h[j, r, t] = bf16(elu(b1[j] + sum_{i,k} W1[j, i*K + k] v(i, r, t + k))),
// v = bf16 of `in`'s [history | elu(x)]; W1 and W2 rounded to bf16, the sums in f32, the biases
// f32. w1 (hid, ld1) and w2 (c, ld2) are the packed f32 convs with their bias columns (c*K and
// hid); w1f and w2f the same weights in bf16 in mma fragment order (gpu_mma_fragment_index), W1's
// reduction tap-major (k*c + i). y must not overlap x; a GOP_CARRY follows. It takes
// T % GPU_RESBLOCK_MMA_TILE == 0.
#define GPU_RESBLOCK_MMA_TILE 96
#define GPU_RESBLOCK_MMA_FITS(c, hid, T) \
    (((c) == 128 || (c) == 256) && (hid) * 2 == (c) && (T) % GPU_RESBLOCK_MMA_TILE == 0)
struct op_resblock_mma {
    struct op_im2col in;  // in.c_in = c, in.K = GPU_RESBLOCK_K, in.S = 1, in.H = 2, in.elu = 1, not replicate
    const void *w1f, *w2f;
    const float *w1, *w2;
    int ld1, ld2, hid;
    float *y;  // (c, R, T)
};
int mimi_cuda_resblock_mma(const struct op_resblock_mma *a, struct gpu_exec *ex);

// Where a row-major (rows, cols) matrix's element (m, k) goes in mma fragment order (rows and
// cols multiples of 16): m16 x k16 tiles, tile (kt, mt) at (kt * rows/16 + mt) * 256 values, in
// it lane l = 4g + q's 8 values a0 (row g, cols 2q, 2q + 1), a1 (row g + 8), a2 (cols + 8), a3
// (both): one 16-byte load per lane and tile for mma.sync m16n8k16's A operand.
static inline size_t gpu_mma_fragment_index(int rows, int m, int k) {
    const int mt = m / 16, kt = k / 16, g = m % 8, hi_m = (m % 16) / 8, q = (k % 8) / 2, hi_k = (k % 16) / 8;
    return ((size_t)kt * (rows / 16) + mt) * 256 + (size_t)(4 * g + q) * 8 + (size_t)(2 * (hi_m + 2 * hi_k)) + k % 2;
}

// ---- conv_mma.cu ----

// A strided conv with K = 2S on bfloat16 tensor cores, its input read in place
// (MIMI_PRECISION_FAST_BF16's large steps: the encoder's first two downsamplings, 64 -> 128
// channels, S 4, over 1920 input steps a frame, and 128 -> 256, S 5, over 480):
// y[o, r, t] = b[o] + sum_{k,i} bf16(W[o, i, k]) v(i, r, t*S + k), v = bf16 of `in`'s
// [history | elu(x)] (as op_im2col's col_bf16 holds it), the sums and the bias in f32. wf holds
// W in mma fragment order as a (c_out, K*c_in) matrix, tap-major (column k*c_in + i: W[o, i, k]);
// w is the packed f32 conv (c_out, ld) with its bias at column c_in*K. The history is not carried
// (a GOP_CARRY follows). It takes T/S a multiple of the layer's tile.
#define GPU_CONV_MMA_TILE_S4 96
#define GPU_CONV_MMA_TILE_S5 48
#define GPU_CONV_MMA_FITS(c_in, c_out, K, S, T) \
    ((K) == 2 * (S) && (T) % (S) == 0 && \
     (((c_in) == 64 && (c_out) == 128 && (S) == 4 && (T) / (S) % GPU_CONV_MMA_TILE_S4 == 0) || \
      ((c_in) == 128 && (c_out) == 256 && (S) == 5 && (T) / (S) % GPU_CONV_MMA_TILE_S5 == 0)))
struct op_conv_mma {
    struct op_im2col in;  // in.elu = 1, in.H = K - S, not replicate; in.col unused
    const void *wf;
    const float *w;
    int ld, c_out;
    float *y;  // (c_out, R, T/S)
};
int mimi_cuda_conv_mma(const struct op_conv_mma *a, struct gpu_exec *ex);

// ---- convtr1d.cu ----

// ConvTranspose1d output: y[o, r, j] (j < S*T) = bias[o] + sum over t*S + k = j of tap(o, k, r, t)
// + tail[o, j] (j < P = K - S), tap = taps[(o*K + k), r*T + t] (dense) or w[o*K + k] * x[o, r, t]
// (depthwise, taps NULL). The tail step then stores, per row, the columns S*T .. S*T+P-1 of the
// full output without the bias. With `carry` (GPU_CONVTR_OUT_CARRIES) the output launch stores
// that tail itself, each column by the thread that read the old one, and the tail step is not
// launched: the plans take it for the depthwise upsampling (at 2048 bf16 streams on an H200 its
// two launches took 63 us, the one 53; for the dense layers, whose output kernels take four
// steps a thread, it was as fast or slower).
#define GPU_CONVTR_OUT_CARRIES(K, S, T) ((S) * (T) >= (K) - (S))
struct op_convtr {
    const float *taps;       // (c_out*K, R*T) or NULL
    const float *x;          // depthwise input (c_out, R, T)
    const float *w;          // depthwise weight (c_out, K)
    const float *bias;       // (c_out) or NULL
    float *y;                // (c_out, R, S*T)
    float *tail;             // slot 0's tail (c_out, P)
    const int32_t *row_slot; // (R)
    size_t slot_stride;
    int c_out, K, S, T, R;
    int carry;
    // Small steps, a dense layer with K = 2S: the output launch also stages the new tail here as
    // (c_out, R, P), the values the tail step would store, for the step's GOP_TAILS (one launch
    // fewer); NULL otherwise
    float *next;
};
int mimi_cuda_convtr_out(const struct op_convtr *a, struct gpu_exec *ex);
int mimi_cuda_convtr_tail(const struct op_convtr *a, struct gpu_exec *ex);

// ---- matmul.cu ----

// Products with at most this many columns on their small side run on the split-K "skinny"
// kernel, which streams the weights once; so do convs with that few output columns.
#define GPU_SKINNY_MAX 16

// Column-major C (m, n) = op(A) op(B) + beta C, op = transpose when trans*, f32 accumulation.
struct op_gemm {
    int transa, transb, m, n, k;
    const float *a;
    int lda;
    const float *b;
    int ldb;
    float *c;
    int ldc;
    float beta;
    int gelu;  // C = gelu(op(A) op(B)) (with beta = 0): the feed-forward's first product
    int elu;   // C = elu(op(A) op(B)) (with beta = 0; skinny products only): a conv before an ELU
    // With ln_w set (a transformer linear on the skinny kernel: transa, n <= GPU_SKINNY_MAX rows,
    // k * n floats within GPU_LN_MAX_FLOATS), B is not read: its row s is
    // LayerNorm(x_new) * ln_w + ln_b with x_new = ln_x[s] + ln_scale * ln_y[s] (ln_y NULL: ln_x[s]),
    // computed in the product's own launch (a warp per row, double accumulation as op_norm), and
    // x_new is stored to ln_out (when set) by one block. ln_x and ln_out must not overlap.
    const float *ln_x, *ln_y, *ln_scale, *ln_w, *ln_b;
    float *ln_out;
    float ln_eps;
    const void *algo;  // a cublasLtMatmulAlgo_t chosen by mimi_cuda_gemm_tune, or NULL: cuBLAS's default
    int ab_bf16;  // a and b point to bfloat16 values (2 bytes each; lda and ldb count them): cuBLAS
                  // on bf16 tensor cores with f32 accumulation (MIMI_PRECISION_FAST_BF16's convs)
    // With with_up (skinny products only: the decoder's projection of a small step, one frame a
    // row), C is the input of `up`, a depthwise transposed conv with T = 1 and `carry`: the
    // kernel that stores C[j, s] also emits up's outputs of channel j, row s and carries its
    // tail (mimi_cuda_convtr_out's values; the upsampling's launch of its own is not made)
    struct op_convtr up;
    int with_up;
};
#define GPU_LN_MAX_FLOATS 8192
int mimi_cuda_gemm(const struct op_gemm *a, struct gpu_exec *ex);
// 1 when g's product goes to cuBLAS (not to the skinny kernel).
int mimi_cuda_gemm_on_cublas(const struct op_gemm *g);

// ---- gemm_tune.cu: a product's cuBLASLt algorithm, chosen once per model and shape ----

struct gemm_tuning;  // a model's choices, by shape
struct gemm_tuning *mimi_cuda_tuning_new(void);
void mimi_cuda_tuning_free(struct gemm_tuning *t);
// Sets g->algo for a large strict product (on ex's stream, which must not be capturing) when a
// candidate with the default's exact arithmetic is faster; otherwise leaves it NULL.
void mimi_cuda_gemm_tune(struct op_gemm *g, const struct gpu_exec *ex, struct gemm_tuning *t);
// Runs g's product with its tuned algorithm.
int mimi_cuda_gemm_tuned(const struct op_gemm *g, struct gpu_exec *ex);

// ---- elementwise.cu ----

enum {
    EW_BIAS = 0,      // y[c, j] += bias[c]
    EW_BIAS_ELU = 1,  // y[c, j] = elu(y[c, j] + bias[c])
    EW_RESIDUAL = 2,  // x[c, j] += y[c, j] + bias[c]   (bias may be NULL)
    EW_ELU = 3,       // y = elu(y)
    EW_GELU = 4,      // y = gelu(y), exact erf form
    EW_ELU_ONES = 5,  // y = elu(y), and the `ones` rows after the last channel = 1.0
    EW_BF16 = 6,      // y (bfloat16 values, 2 bytes each) = x rounded to nearest even
    EW_ELU_BF16 = 7,  // y (bfloat16 values) = elu(x) rounded to nearest even (elu_bf16), and
                      // the `ones` rows after the last channel = 1.0
    EW_GELU_BF16 = 8, // y (bfloat16 values) = gelu(x) rounded to nearest even
};

// y, x: (channels, cols).
struct op_pointwise {
    float *y;
    float *x;
    const float *bias;  // (channels) or NULL
    int channels;
    size_t cols;
    int mode;
    int ones;  // EW_ELU_ONES, EW_ELU_BF16: rows of ones after the channels
};
int mimi_cuda_pointwise(const struct op_pointwise *a, struct gpu_exec *ex);

// out (cols, rows) = in (rows, cols) transposed.
struct op_transpose {
    const float *in;
    float *out;
    int rows, cols;
};
int mimi_cuda_transpose(const struct op_transpose *a, struct gpu_exec *ex);

// struct op_finish (the end of a step: next_pos and started) is declared with op_tails, which
// can take it into its launch; mimi_cuda_finish launches it alone.

// ---- convtr_mma.cu ----

// A dense ConvTranspose1d with K = 2S on bfloat16 tensor cores without per-tap products in
// memory (MIMI_PRECISION_FAST_BF16's large steps; the decoder's last two upsamplings: 128 -> 64
// channels, S 4, 480 input steps a frame, and 256 -> 128, S 5, 96 steps): with W[o, k] the packed
// weight's row o*K + k (c_in values) and v = bf16 of f(x) (f = elu_bf16 when `elu`),
// y[o, r, t*S + f] = b[o] + sum_i (bf16(W[o, f])[i] v(i, r, t) + bf16(W[o, f + S])[i] v(i, r, t - 1))
// (+ tail[o, f] at t = 0, where v(t - 1) is taken as 0), the sums and bias in f32; then the
// tail launch stores tail[o, f] = sum_i bf16(W[o, f + S])[i] v(i, r, T - 1) for every
// non-padding row. tr.w is the packed f32 weight, tr.taps unused; wf the weight in bf16 in mma
// fragment order as a (c_out*S, 2*c_in) matrix, row o*S + f, column s*c_in + i holding
// W[o, f + s*S][i].
#define GPU_CONVTR_MMA_FITS(c_in, c_out, K, S, T) \
    ((K) == 2 * (S) && (((c_in) == 128 && (c_out) == 64 && (S) == 4 && (T) % 48 == 0) || \
                        ((c_in) == 256 && (c_out) == 128 && (S) == 5 && (T) % 32 == 0)))
struct op_convtr_mma {
    struct op_convtr tr;
    const void *wf;
    int c_in, elu;
};
int mimi_cuda_convtr_mma(const struct op_convtr_mma *a, struct gpu_exec *ex);
int mimi_cuda_convtr_mma_tail(const struct op_convtr_mma *a, struct gpu_exec *ex);

// A dense ConvTranspose1d with K = 2S in one kernel, for small products (one stream's decoder):
// with W[o, k] the packed weight's row o*K + k (c_in values) and x(i, r, t) = 0 outside
// [0, T), y[o, r, t*S + f] = ((bias[o] + sum_i W[o, f][i] x(i, r, t) + W[o, f + S][i]
// x(i, r, t - 1)) + tail[o, t*S + f] (t = 0 only)), and next[o, r, f] = (bias[o] + sum_i
// W[o, f + S][i] x(i, r, T - 1)) - bias[o], the tail the full output leaves (convtr_tail's
// value). mimi_cuda_convtr_copy, or the step's GOP_TAILS, then stores `next` as the tail of every
// non-padding row.
struct op_convtr_direct {
    struct op_convtr tr;  // tr.w: the packed (c_out*K, c_in) weight; tr.taps unused
    int c_in;
    float *next;          // (c_out, R, S)
    struct gpu_split split;
};
int mimi_cuda_convtr_direct(const struct op_convtr_direct *a, struct gpu_exec *ex);
int mimi_cuda_convtr_copy(const struct op_convtr_direct *a, struct gpu_exec *ex);

// ---- norm.cu ----

enum {
    NORM_LN = 0,        // out = LN(x)
    NORM_RESID_LN = 1,  // x += scale * y; out = LN(x)
    NORM_RESID = 2,     // x += scale * y
};

// Rows of d values: x, y, out (rows, d); LayerNorm with biased variance accumulated in double.
struct op_norm {
    float *x;
    const float *y, *scale;  // residual branch and its layer scale (d)
    float *out;
    const float *w, *b;      // LayerNorm weight and bias (d)
    int rows, d, mode;
    float eps;
    int out_bf16;  // out holds bfloat16 values (rounded to nearest even): FAST_BF16's linears
};
int mimi_cuda_norm(const struct op_norm *a, struct gpu_exec *ex);

// ---- attention.cu ----

// One transformer layer's attention over the per-slot rings (spec 5.4). Query row r*steps + s of
// slot row_slot[r] has absolute position next_pos + s; it sees ring entry j when
// 0 <= pos - positions[j] < context (positions[j] = -1 marks an empty entry).
// The rings hold f32, or with kv_bf16 bfloat16 (rounded to nearest even when stored; only the
// one-pass and tiled kernels read them, so kv_bf16 needs head_dim GPU_ATT_ONEPASS_HD), or with
// kv_int8 (MIMI_PRECISION_FAST_INT8_KV's streaming steps) 8-bit integers: `ring` entries of d
// int8 values, then ring * n_heads f32 scales (entry j's head h at j * n_heads + h); a head's
// value is its int8 times its scale (gpu_kv_int8_*; the one-pass and short mma kernels read
// them). Either way a slot's ring starts slot * slot_stride 4-byte elements after slot 0's.
#define GPU_ATT_ONEPASS_HD 64
#ifdef __CUDACC__
#define GPU_HOST_DEVICE __host__ __device__
#else
#define GPU_HOST_DEVICE
#endif
// A head's int8 scale: its largest magnitude / 127; 0 for a head whose values are all below
// 1e-30 in magnitude (stored as zeros).
static inline GPU_HOST_DEVICE float gpu_kv_int8_scale(float absmax) {
    return absmax >= 1e-30f ? absmax / 127.0f : 0.0f;
}
// Value x of a head whose largest magnitude is absmax, as int8: x * 127 / absmax rounded to
// nearest even, in [-127, 127].
static inline GPU_HOST_DEVICE int gpu_kv_int8_code(float x, float absmax) {
    if (!(absmax >= 1e-30f)) return 0;
    const float q = rintf(x * (127.0f / absmax));
    return q > 127.0f ? 127 : q < -127.0f ? -127 : (int)q;
}
struct op_attention {
    float *qkv;                // (R*steps, 3d): q | k | v per row
    float *out;                // (R*steps, d)
    void *keys, *values;       // slot 0's ring of this layer (ring, d)
    int32_t *positions;        // slot 0's position ring (ring)
    int32_t *next_pos;         // slot 0's position counter
    const int32_t *row_slot;   // (R)
    const float *freq;         // (head_dim/2) rotary frequencies
    size_t slot_stride;
    int R, steps, d, n_heads, head_dim, ring, context;
    int rope;  // attention first does rope_kv's work (one launch where the kernel allows)
    int kv_bf16;
    int mma_bf16;  // MIMI_PRECISION_FAST_BF16: long steps' tiles, and short steps of many rows
                   // (GPU_ATT_MMA_SHORT), on bf16 tensor cores (attention_mma.cu)
    int kv_int8;   // int8 rings with per-head scales (above); kv_bf16 is then 0
};
// The short steps that mma_bf16 runs on tensor cores: a Mimi frame's one or two query steps a row
// (the kernel takes up to 16, one mma tile, but was checked on the device at 1 and 2 only), more
// rows than the skinny products take (fewer wait on latency, where the pipelined one-pass kernel
// is faster).
#define GPU_ATT_MMA_SHORT(R, steps) ((steps) <= 2 && (R) > GPU_SKINNY_MAX)
// Dynamic shared memory the attention of a row with `steps` query steps needs (0: none).
size_t mimi_cuda_attention_smem(int steps, int head_dim, int ring);
// Marks the step's positions in each slot's position ring (once per step, before layer 0).
int mimi_cuda_positions(const struct op_attention *a, struct gpu_exec *ex);
// out = softmax(q k^T / sqrt(head_dim)) v per head over the window; with `rope`, rope_kv first.
int mimi_cuda_attention(const struct op_attention *a, struct gpu_exec *ex);

// ---- transformer.cu ----

// Every layer of a transformer for a few rows (one stream's or a few streams' step) in one
// persistent launch: one block per SM, the stages of a layer (LayerNorm + qkv with the rotation
// and ring store; attention and out-projection, by (row, head, part of d); residual + LayerNorm
// + linear1 + GELU; linear2) separated by grid-wide barriers, each block loading its next
// stage's weights while it waits. It computes what the unfused ops compute (plan.c's plan_transformer
// for small steps: positions, the layers, the residual adds), in f32 in every precision mode:
// out (d, rows) = transformer(in (d, rows)), rows = R * steps.
// The launch is cooperative (all blocks resident together). `barrier` (GPU_TR_COUNTERS words):
// the grid barrier's 2 counters, zero before and after, and the count of launches so far, which
// the heads' parts carry as their version. All are zero when the batch is created (and every
// GPU_VERSION_PERIOD launches).
#define GPU_TR_MAX_ROWS 8
#define GPU_TR_MAX_STEPS 2
#define GPU_TR_MAX_FLOATS 16384  // rows * max(d, d_ff): the block's copy of a stage's input
#define GPU_TR_MAX_D 512         // a block stages its head's (d, head_dim) out-projection columns
#define GPU_TR_MAX_HEADS 8
#define GPU_TR_MAX_SPLIT_WO 16  // slices of a head's out-projection rows
#define GPU_TR_COUNTERS 3
struct op_tr_layer {
    const float *norm1_w, *norm1_b, *in_proj, *out_proj, *norm2_w, *norm2_b, *linear1, *linear2, *scale1, *scale2;
    void *keys, *values;  // slot 0's rings of this layer
};
struct op_transformer {
    const float *in;   // (d, rows)
    float *out;        // (d, rows)
    struct op_attention att;  // qkv, positions, sizes (keys, values and out unused)
    const struct op_tr_layer *layers;  // (n_layers), host memory owned by the plan
    int n_layers, d_ff;
    float *x[2], *ff;      // residual stream (rows, d) twice, (rows, d_ff)
    uint64_t *part;        // (n_heads, rows, d): the heads' parts of the out-projection, each a
                           // float's bits and, above them, the layer's version (transformer.cu)
    uint32_t *barrier;
    float eps;             // the LayerNorms'
};
#define GPU_TR_MAX_LAYERS 16
// Whether the persistent form covers a transformer of these sizes for `rows` = R * steps rows.
static inline int gpu_transformer_fits(int rows, int steps, int d, int d_ff, int head_dim, int n_layers) {
    const int wide = d > d_ff ? d : d_ff;
    return rows <= GPU_TR_MAX_ROWS && steps <= GPU_TR_MAX_STEPS && head_dim == GPU_ATT_ONEPASS_HD &&
           d % 128 == 0 && d <= GPU_TR_MAX_D && d / head_dim <= GPU_TR_MAX_HEADS && d_ff % 128 == 0 &&
           rows * wide <= GPU_TR_MAX_FLOATS && n_layers <= GPU_TR_MAX_LAYERS;
}
int mimi_cuda_transformer(const struct op_transformer *a, struct gpu_exec *ex);

// ---- rvq.cu ----

// codes[r * code_stride] = argmin_j norms[j] - 2 scores[r, j] (lowest index on ties); when
// `residual` is set, residual[r] -= book[code].
// With scores NULL (at most GPU_SKINNY_MAX rows) the scores are computed here from `query`
// (R, dim), in the same launch: blocks score slices of the codebook, each leaves its best
// candidates in `part` (2 * GPU_RVQ_BLOCKS * R floats), and the last block to finish picks the
// codes in a fixed block order and updates the residual. `counter` is zero before and after.
#define GPU_RVQ_BLOCKS 256
#define GPU_RVQ_MAX_DIM 512  // the fused form's largest codebook dimension
struct op_argmin {
    const float *scores;  // (R, bins) or NULL
    const float *norms;   // (bins)
    const float *book;    // (bins, dim)
    float *residual;      // (R, dim) or NULL
    int32_t *codes;
    int code_stride, R, bins, dim;
    const float *query;   // (R, dim) when scores is NULL
    float *part;
    uint32_t *counter;
};
int mimi_cuda_argmin(const struct op_argmin *a, struct gpu_exec *ex);

// The levels of an acoustic chain one after another in one persistent cooperative launch (small
// batches: R <= GPU_SKINNY_MAX rows, dim <= GPU_RVQ_MAX_DIM): level k is `first` with book +
// k * bins * dim, norms + k * bins and codes + k, each level the fused form's arithmetic (the
// same codes), the residual updated after each level. `part` holds 6 * GPU_RVQ_CHAIN_MAX_BLOCKS
// * R words (rvq.cu: the blocks' candidates with their level's version); `barrier` (3 words): the
// grid barrier's 2 counters, zero before and after, and the count of launches so far (the
// versions), all zero when the batch is created (and every GPU_VERSION_PERIOD launches).
// With `latent` set (R <= GPU_RVQ_PROJECT_ROWS, D <= GPU_RVQ_MAX_LATENT, D % 4 = 0) the launch also makes
// both queries, first.residual = in_rest . latent and sem_query = in_first . latent (a warp
// per output row: a lane's float4s of it, then the warp's butterfly), and picks the semantic
// level (`semantic`: book, norms, codes, code_stride; the fused form's arithmetic) alongside the
// first acoustic one: one launch where a small step had four (two products, an argmin, the chain).
#define GPU_RVQ_CHAIN_MAX_BLOCKS 256
#define GPU_RVQ_CHAIN_COUNTERS 3
#define GPU_RVQ_PROJECT_ROWS 4
#define GPU_RVQ_MAX_LATENT 512
struct op_rvq_chain {
    struct op_argmin first;  // its residual (R, dim) is the query; scores, query, part, counter unused
    int levels;
    uint64_t *part;
    uint32_t *barrier;
    const float *latent;             // (D, R), or NULL: the residual and no semantic level are given
    const float *in_first, *in_rest;  // (dim, D) each
    int D;
    float *sem_query;                // (R, dim)
    struct op_argmin semantic;       // book, norms, codes, code_stride (the rest unused)
};
int mimi_cuda_rvq_chain(const struct op_rvq_chain *c, struct gpu_exec *ex);

// Decode lookup: e0[r] = book_0[codes[r, 0]], sum[r] = sum_{q >= 1} book_q[codes[r, q]]. Latent
// row r belongs to step row r / frames; one holding a code outside [0, bins) makes that step row
// padding (row_slot = -1), gets zeros and sets *error.
struct op_gather {
    const int32_t *codes;  // (R, n_cb)
    const float *books;    // (n_q, bins, dim)
    float *e0, *sum;       // (R, dim) each, rows ld floats apart
    int32_t *row_slot;     // (R / frames), written for bad rows
    int32_t *error;        // set to 1 on a bad code
    int R, n_cb, bins, dim, ld, frames;
};
int mimi_cuda_gather(const struct op_gather *a, struct gpu_exec *ex);

// dst (R, n_cb) = src[offset + r*stride + q] for r < n, zeros for n <= r < R (codes that another
// component left in device memory).
int mimi_cuda_copy_codes(int32_t *dst, const int32_t *src, int64_t offset, int64_t stride, int n,
                         int R, int n_cb, struct gpu_exec *ex);

#ifdef __cplusplus
}
#endif

#endif
