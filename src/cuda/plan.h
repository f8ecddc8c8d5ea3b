/*
 * plan.h - static per-frame plans for the GPU backend: the weights as the device sees them, the
 * layout of per-slot state and per-batch scratch, and the ordered op list of one step.
 *
 * Plain C with no CUDA dependency: the CUDA backend builds plans over device memory and captures
 * them as graphs; tests/test_gpu_plan.c builds the same plans over host memory and runs them with
 * a CPU emulator of each op (ops.h). Every size comes from the model description (internal.h).
 */
#ifndef MIMI_CUDA_PLAN_H
#define MIMI_CUDA_PLAN_H

#include "internal.h"
#include "ops.h"

#define GPU_MAX_LAYERS 16
#define GPU_MAX_HEAD_DIM 256

// ---- weights ----

// Row stride of a conv weight with its bias column: k = c_in*K + 1 rounded up to 4 floats.
int gpu_conv_ld(int k);

// MIMI_PRECISION_FAST_BF16 runs a conv's product on bfloat16 operands when it reduces over at
// least this many values (c_in*K): below, as in the first conv (7 taps of one channel), the
// product is bound by its f32 output and bf16 would only round the signal.
#define GPU_BF16_MIN_REDUCTION 64
// The row stride of a bf16 conv weight with its bias column, and so the rows of its im2col: a
// multiple of 8 values, for cuBLAS's 16-byte aligned bf16 kernels.
int gpu_conv_ld_bf16(int k);

// The geometry the plans cover: MIMI_OK, or MIMI_EUNSUPPORTED with the first thing they do not
// cover logged on the model.
int gpu_check_model(const struct mimi_model *m);

// One SEANet layer's weights: a conv with its bias as an extra column (c_out, gpu_conv_ld(c_in*K + 1)), a
// dense transposed conv packed (c_out*K, c_in) with its bias `b`, or a depthwise one (c, K);
// `w2` is a resblock's 1x1 conv with its bias column (c, hidden + 1); `w1t` and `w2t` are a
// resblock's two convs transposed for op_resblock, (c_in*K + 1, c_out) with the bias as last row.
// With MIMI_PRECISION_FAST_BF16, `w_bf16` and `w2_bf16` are `w` and `w2` (dense ones) in
// bfloat16, rounded to nearest even, with the same layout and row stride in 2-byte values;
// `wf` and `w2f` a resblock's two convs (or a dense transposed conv's weight as op_convtr_mma
// takes it) in bf16 in mma fragment order, for the FAST_BF16 *_mma ops.
struct gpu_conv_w {
    const float *w, *b, *w2, *w1t, *w2t;
    const float *w_bf16, *w2_bf16;
    const float *wf, *w2f;
};

struct gpu_layer_w {
    const float *norm1_w, *norm1_b, *in_proj, *out_proj;
    const float *norm2_w, *norm2_b, *linear1, *linear2, *scale1, *scale2;
    // MIMI_PRECISION_FAST_BF16: in_proj, linear1 and linear2 in bfloat16, for steps whose
    // linears run on cuBLAS (more rows than the skinny kernel takes)
    const float *in_proj16, *linear1_16, *linear2_16;
};

// Every tensor a plan reads, as pointers in the executing memory (device, or host for the
// emulator). Filled by gpu_weights_bind through a mapping callback.
struct gpu_weights {
    struct gpu_conv_w enc[MIMI_MAX_SEANET_LAYERS], dec[MIMI_MAX_SEANET_LAYERS];
    struct gpu_layer_w enc_tr[GPU_MAX_LAYERS], dec_tr[GPU_MAX_LAYERS];
    const float *enc_freq, *dec_freq;  // (head_dim/2) rotary frequencies
    const float *down, *up;            // (frame_dim, d*K) and depthwise (d, K)
    const float *down_bf16;            // `down` in bfloat16 (MIMI_PRECISION_FAST_BF16)
    const float *in_first, *in_rest;   // quantizer input projections (dim, latent)
    const float *out_both;             // (latent, 2 dim): each row out_first's, then out_rest's
    const float *codebooks, *norms;    // (n_q, bins, dim), (n_q, bins)
    const float *projection;           // (d, frame_dim) when the model has no quantizer
    float freq_host[2][GPU_MAX_HEAD_DIM / 2];  // the rotary tables before mapping
    // host copies made for mapping: per SEANet layer at most 8 (a resblock's two packed convs,
    // their bf16 copies, and their transposes or fragments), in two SEANets, the bf16
    // downsampling weight, three bf16 linears per transformer layer, and out_both
    float *owned[16 * MIMI_MAX_SEANET_LAYERS + 2 + 6 * GPU_MAX_LAYERS];
    int n_owned;
};

// Returns where `n` floats at `host` live for the executor (or NULL on failure).
typedef const float *(*gpu_map_fn)(void *ctx, const float *host, size_t n);

// Maps every tensor of `m` through `map`; `w` must be zeroed or bound before. Returns MIMI_OK or MIMI_EUNSUPPORTED (a geometry the
// plans do not cover; the reason goes to the model's log) or MIMI_ENOMEM (map failed).
int gpu_weights_bind(struct gpu_weights *w, const struct mimi_model *m, gpu_map_fn map, void *ctx);

// Frees the host copies bind made (after an uploading map, or when an identity map is done).
void gpu_weights_release(struct gpu_weights *w);

// Whether the precision mode runs the large products on bfloat16 tensor cores
// (MIMI_PRECISION_FAST_BF16, and FAST_INT8_KV, which is FAST_BF16 with int8 rings).
static inline int gpu_bf16_products(int precision) {
    return precision == MIMI_PRECISION_FAST_BF16 || precision == MIMI_PRECISION_FAST_INT8_KV;
}

// ---- layout ----

// Offsets are in 4-byte elements. State offsets are inside one slot's block; scratch offsets are
// inside the batch's scratch, sized for `capacity` rows.
struct gpu_layout {
    int direction, capacity, n_codebooks, attention;
    int frames;  // frames of one row per step: 1, or more for a whole-signal (offline) batch
    int ring, steps, frame, d, frame_dim, in_per_row, out_per_row;
    int kv_bf16;  // attention rings in bfloat16 (MIMI_PRECISION_FAST_BF16_KV and _FAST_BF16)
    int kv_int8;  // attention rings in int8 with per-head scales (_FAST_INT8_KV, one frame a step)
    int conv_bf16;  // large conv products on bfloat16 operands, sc_col in 2-byte values (_FAST_BF16)
    // FAST_BF16's *_mma SEANet kernels take a layer of at least this many columns (R*T of its
    // input): GPU_MMA_MIN_COLS, which tests lower to plan them at small capacities
    long mma_min_cols;
    // The blocks a direct conv aims for: one wave, GPU_DIRECT_PER_SM on each of the device's SMs
    // (set by the batch from its device; GPU_DIRECT_SMS's otherwise)
    int direct_blocks;
    // The shared memory a block may opt in to, bytes (set by the batch from its device; an
    // H100's otherwise): whether op_resblock's step form fits (GPU_RESBLOCK_STEP_SMEM)
    size_t smem_optin;
    size_t slot_elems;
    size_t st_next_pos, st_started, st_positions, st_resample;
    size_t st_conv[MIMI_MAX_SEANET_LAYERS], st_keys[GPU_MAX_LAYERS], st_values[GPU_MAX_LAYERS];
    size_t scratch_elems;
    size_t sc_stage, sc_out, sc_act[2], sc_res[2], sc_col, sc_taps;
    size_t sc_x, sc_x2, sc_h, sc_y, sc_qkv, sc_att, sc_ff, sc_tr_in, sc_tr_out, sc_latent;
    size_t sc_r, sc_scores, sc_part, sc_counter, sc_e0, sc_conv_part, sc_conv_counters;
    size_t sc_tr_part, sc_tr_barrier;  // the persistent transformer's (small steps)
    size_t sc_rvq_part, sc_rvq_barrier;  // the persistent quantizer levels' (small steps)
    size_t sc_tails, tails_elems;  // staged conv histories and tails (steps of <= GPU_TAIL_ROWS rows)
    size_t sc_edges, edges_per_row;  // the edges of a resblock with the last conv (op_resblock.last)
};

// The smallest layer at which the *_mma kernels were measured faster than im2col and cuBLAS:
// the 256-channel resblock of 2048 streams (96 steps each). At 64 and 256 streams a step that
// took them at every size was slower.
#define GPU_MMA_MIN_COLS (2048L * 96)

// Sizes state and scratch for a batch whose step advances each row by `frames` frames (steps,
// frame, in_per_row and out_per_row are per row and step). Returns MIMI_OK or MIMI_EUNSUPPORTED.
int gpu_layout_init(struct gpu_layout *L, const struct mimi_model *m, int direction, int capacity,
                    int n_codebooks, int attention, int frames);

// Where the input rows sit in the stage of a batch of `capacity` rows, after row_slot and an
// error flag (a step of R <= capacity rows uses row_slot[0 .. R - 1] and the flag at [R]); the
// same on the host and the device, so that a small step's list and inputs are one copy.
size_t gpu_stage_input_offset(int capacity);

// ---- plans ----

enum gpu_op_kind {
    GOP_IM2COL, GOP_CARRY, GOP_CONV, GOP_GEMM, GOP_POINTWISE, GOP_TRANSPOSE, GOP_FINISH, GOP_CONVTR_OUT,
    GOP_CONVTR_TAIL, GOP_CONVTR_DIRECT, GOP_CONVTR_COPY, GOP_NORM, GOP_POSITIONS, GOP_ATTENTION, GOP_ARGMIN, GOP_GATHER,
    GOP_RESBLOCK, GOP_TRANSFORMER, GOP_RVQ_CHAIN, GOP_TAILS, GOP_RESBLOCK_MMA, GOP_CONVTR_MMA,
    GOP_CONVTR_MMA_TAIL, GOP_CONV_MMA,
};

struct gpu_op {
    int kind;
    const char *name;   // the op ("im2col", "sgemm", ...)
    const char *stage;  // the part of the codec ("enc.seanet", "dec.transformer", ...)
    union {
        struct op_im2col im2col;
        struct op_conv conv;
        struct op_gemm gemm;
        struct op_pointwise pointwise;
        struct op_transpose transpose;
        struct op_finish finish;
        struct op_convtr convtr;
        struct op_convtr_direct convtr_direct;
        struct op_norm norm;
        struct op_attention attention;
        struct op_argmin argmin;
        struct op_gather gather;
        struct op_resblock resblock;
        struct op_resblock_mma resblock_mma;
        struct op_convtr_mma convtr_mma;
        struct op_conv_mma conv_mma;
        struct op_transformer transformer;
        struct op_rvq_chain rvq_chain;
        struct op_tails tails;
    } u;
};

#define GPU_N_TAPS 3

// One direction's step for R rows over fixed buffers.
struct gpu_plan {
    struct gpu_op *ops;
    int n_ops, cap_ops, R;
    int32_t *stage;        // row_slot (R), error flag at stage[R], input at the capacity's stage input offset
    void *input;           // (R, in_per_row): pcm floats, codes int32 or latent floats
    void *output;          // (R, out_per_row): codes int32, latent floats or pcm floats
    const float *taps[GPU_N_TAPS];  // (channels, R * steps) each
    const char *tap_names[GPU_N_TAPS];
    int tap_channels[GPU_N_TAPS], tap_steps[GPU_N_TAPS];
    struct op_tr_layer *tr_layers;  // the layers a GOP_TRANSFORMER op reads (owned)
};

// Builds the step for R rows (R <= capacity) over `state` (capacity slot blocks) and `scratch`.
// Returns MIMI_OK, MIMI_ENOMEM or MIMI_EUNSUPPORTED.
int gpu_plan_build(struct gpu_plan *p, const struct gpu_layout *L, const struct mimi_model *m,
                   const struct gpu_weights *w, float *state, float *scratch, int R);
void gpu_plan_free(struct gpu_plan *p);

// Row buckets: the smallest power of two >= n, capped at the capacity.
int gpu_bucket(int n, int capacity);

#endif
