/*
 * internal.h - private structures shared across src/: the model as loaded (geometry plus weight
 * pointers), the per-stream state arena, and small helpers. Never installed.
 *
 * Geometry is data: every size below is read from the checkpoint at load time (model.c), so the
 * same code runs any Mimi whose layers follow the SEANet + transformer + resample plan.
 */
#ifndef MIMI_INTERNAL_H
#define MIMI_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "mimi.h"
#include "safetensors.h"

#define MIMI_MAX_SEANET_LAYERS 32
#define MIMI_ERRMSG_LEN 512

struct mimi_cpu;     // the fast CPU path of a model (src/cpu/cpu.h); NULL on the reference path
struct mimi_packed;  // one weight matrix packed for the fast kernels (src/cpu/cpu.h)
struct mimi_linear;  // a weight matrix with its packed copy (below)

// ---- model description ----

// A Conv1d or a ConvTranspose1d, with its weights.
struct mimi_conv {
    int c_in, c_out, kernel, stride, groups;
    int transposed;       // ConvTranspose1d
    int replicate_first;  // on the first call, left history = copies of the first input column
    const float *weight;  // conv: (c_out, c_in/groups, kernel); convtr: (c_in, c_out/groups, kernel)
    const float *bias;    // (c_out) or NULL
    const float *weight_t;  // dense convtr only: (c_out * kernel, c_in), row (o*K + k) = W[:, o, k]
    const struct mimi_packed *packed;  // fast path: the packed weights; NULL: reference arithmetic
};

enum seanet_kind { SEANET_CONV, SEANET_CONVTR, SEANET_RESBLOCK, SEANET_ELU };

// One entry of a SEANet stack. A resblock is x + conv1x1(elu(conv_k3(elu(x)))).
struct seanet_layer {
    enum seanet_kind kind;
    struct mimi_conv conv;      // SEANET_CONV / SEANET_CONVTR; the k3 conv of a resblock
    struct mimi_conv conv2;     // the 1x1 conv of a resblock
    int channels_out;           // channels after this layer
};

// A SEANet encoder (audio -> latent) or decoder (latent -> audio).
struct seanet {
    int n_layers;
    struct seanet_layer layers[MIMI_MAX_SEANET_LAYERS];
    int hop;  // samples per latent step (product of the strides)
    const struct mimi_cpu *cpu;  // fast path, or NULL
};

// One pre-norm transformer layer (attention without biases, GELU MLP, layer scales).
struct transformer_layer {
    const float *norm1_w, *norm1_b;  // (d)
    const float *in_proj;            // (3d, d): rows q | k | v, head h owns rows h*hd .. h*hd+hd-1
    const float *out_proj;           // (d, d)
    const float *norm2_w, *norm2_b;  // (d)
    const float *linear1;            // (ff, d)
    const float *linear2;            // (d, ff)
    const float *scale1, *scale2;    // (d) layer scales
    // fast path: in_proj, out_proj, linear1, linear2 packed (NULL on the reference path)
    const struct mimi_packed *p_in_proj, *p_out_proj, *p_linear1, *p_linear2;
};

struct transformer {
    int d_model, n_heads, head_dim, d_ff, n_layers;
    int context;        // attention window in steps (250)
    float max_period;   // RoPE base (10000)
    struct transformer_layer layers[16];
    const struct mimi_cpu *cpu;  // fast path, or NULL
};

// The split residual vector quantizer: codebook 0 semantic, 1.. acoustic. Models without one
// (Pocket TTS's Mimi) have n_q = 0 and only `projection`.
struct quantizer {
    int n_q;        // codebooks in the file (0: continuous latents)
    int bins;       // entries per codebook
    int dim;        // codebook dimension
    int latent;     // latent dimension (512)
    const float *projection;            // (latent, frame_dim): continuous latent -> model latent
    const float *in_first, *in_rest;    // (dim, latent)
    const float *out_first, *out_rest;  // (latent, dim)
    float *codebooks;                   // (n_q, bins, dim), embedding_sum / max(usage, 1e-5)
    float *norms;                       // (n_q, bins), squared norm of each entry
    // The maps above as linear maps for mimi_linear_apply (fast or reference path), filled at
    // load by src/cpu/pack.c. lin_books[k] is codebook k as a (bins, dim) map (its scores).
    struct mimi_linear *lin_in_first, *lin_in_rest, *lin_out_first, *lin_out_rest;
    struct mimi_linear *lin_books;      // (n_q)
    struct mimi_linear *lin_projection; // continuous-latent models
};

struct mimi_cuda_model;  // a model's weights on a CUDA device (src/cuda/runtime.h)

struct mimi_model {
    struct st_file file;
    const char *naming;   // "kyutai", "huggingface" or "pocket-tts"
    const char *family;   // "mimi" (quantized) or "pocket-tts" (continuous latents)
    int sample_rate;
    int frame_size;       // samples per frame
    int steps_per_frame;  // transformer steps per frame (frame_size / hop)
    int latent_dim;       // transformer width (512)
    int frame_dim;        // values per frame out of the downsample (512; 32 for Pocket TTS)
    int exact_window;     // 1: streaming attention always sees exactly `context` steps (no ring)
    struct seanet encoder, decoder;
    struct transformer enc_tr, dec_tr;
    struct mimi_conv downsample;  // latent rate -> frame rate, replicate-first
    struct mimi_conv upsample;    // frame rate -> latent rate, depthwise transposed
    struct quantizer quantizer;
    int64_t n_params;
    // owned memory: converted or derived tensors, freed with the model
    void **owned;
    int n_owned, cap_owned;
    mimi_log_fn log;
    void *log_user;
    int isa;
    int n_threads;
    int backend;                   // enum mimi_backend in use: MIMI_BACKEND_CPU or MIMI_BACKEND_CUDA
    int device, precision;         // CUDA device index, enum mimi_precision
    struct mimi_cuda_model *cuda;  // the weights on the device (src/cuda), NULL on the CPU
    int weights;            // enum mimi_weights
    struct mimi_cpu *cpu;   // the fast CPU path (src/cpu/cpu.c), or NULL for the reference path
};

// A weight matrix applied as a linear map y = W x: the reference layout and, on the fast CPU
// path, the packed copy the kernels read.
struct mimi_linear {
    int rows, cols;
    const float *weight;               // (rows, cols)
    const struct mimi_packed *packed;  // NULL: the reference matmul (ops.h)
};

// y[m * y_ms + n * y_ns] = sum_k W[m, k] x[n * ldx + k] for m < rows, n < N: mimi_matmul_nt
// without a bias, through the fast kernels when the model has them (src/cpu/cpu.c).
void mimi_linear_apply(const struct mimi_linear *l, int N, const float *x, int ldx, float *y,
                       int y_ms, int y_ns);

// ---- loading (model.c) ----

// Binds every tensor of m->file into the description. Returns 0 or MIMI_EFORMAT / MIMI_ENOMEM;
// the reason went to the log.
int mimi_model_bind(struct mimi_model *m);

// Frees everything the model owns, including the mapping. NULL is allowed.
void mimi_model_free(struct mimi_model *m);

// ---- helpers ----

// The bfloat16 nearest to x (round to nearest even, NaN kept a quiet NaN), as its bits: the
// rounding of __float2bfloat16_rn on the GPU, used for the CPU's packed bf16 weights and the
// GPU's bf16 weights (src/cuda/weights.c). Defined in src/cpu/pack.c.
uint16_t mimi_to_bf16(float x);

// Formats a message and sends it to the model's log callback (no-op when none is set).
void mimi_log(const struct mimi_model *model, int level, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

// Bump allocator used twice: first with base == NULL to measure, then to lay out a block.
struct arena {
    char *base;
    size_t used;
};

static inline void *arena_take(struct arena *a, size_t bytes) {
    size_t off = (a->used + 63) & ~(size_t)63;
    a->used = off + bytes;
    return a->base ? a->base + off : NULL;
}

static inline float *arena_floats(struct arena *a, size_t n) {
    return (float *)arena_take(a, n * sizeof(float));
}

#endif
