/*
 * synth.c - the synthetic deterministic Mimi weights of the reference vectors.
 *
 * Three parts:
 * - the weight rule: every value is a pure function of (seed, native tensor name, element index),
 *   reproduced bit for bit from the reference generator (testweights.py, whose docstring is the
 *   specification). This file must be compiled with -ffp-contract=off; the product a*v is also
 *   forced through a volatile so that no compiler can fuse it with the following add.
 * - the native tensor table: the 318 tensors of a native Kyutai checkpoint, in checkpoint order,
 *   generated from the architecture (SEANet stages, transformer layers, codebooks).
 * - the writer: the whole model in Kyutai or Hugging Face naming, as f32, f16 or bf16. The HF
 *   spelling follows the official conversion: ordered substring rewrites, then each fused attention
 *   in_proj_weight split into q/k/v with the q and k rows permuted per head for half-split rotary.
 *
 * Values are always generated from the native name; HF tensors are renamed and reordered copies.
 */
#include "synth.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mimi.h"
#include "safetensors.h"

// ---- geometry of the default Mimi ----

#define N_FILTERS 64        // SEANet channels after the first conv
#define N_STAGES 4          // SEANet down/up-sampling stages
#define LATENT_DIM 512      // SEANet output / transformer width
#define FIRST_KERNEL 7
#define LAST_KERNEL 3
#define RES_KERNEL 3        // residual conv; followed by a 1x1 conv
#define COMPRESS 2          // residual hidden width = dim / COMPRESS
#define N_LAYERS 8          // per transformer
#define FFN_DIM 2048
#define HEAD_DIM 64
#define RESAMPLE_KERNEL 4   // 25 Hz <-> 12.5 Hz conv and transposed conv
#define N_CODEBOOKS 32      // 1 semantic (rvq_first) + 31 acoustic (rvq_rest)
#define CODEBOOK_SIZE 2048
#define CODEBOOK_DIM 256
#define N_NATIVE 318

// Decoder order; the encoder walks them reversed.
static const int k_ratios[N_STAGES] = {8, 6, 5, 4};

// ---- small helpers ----

static void set_err(char *errbuf, size_t errlen, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

static void set_err(char *errbuf, size_t errlen, const char *fmt, ...) {
    if (!errbuf || errlen == 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(errbuf, errlen, fmt, ap);
    va_end(ap);
}

static int64_t n_elements(const int64_t *shape, int n_dims) {
    int64_t n = 1;
    for (int d = 0; d < n_dims; d++)
        n *= shape[d];
    return n;
}

static int ends_with(const char *s, const char *suffix) {
    size_t ls = strlen(s), lx = strlen(suffix);
    return ls >= lx && memcmp(s + ls - lx, suffix, lx) == 0;
}

// Python's str.replace: every non-overlapping occurrence of `from`, left to right, becomes `to`.
// Returns 0, or -1 when the result (with its terminator) does not fit in `cap` bytes.
static int replace_all(const char *in, const char *from, const char *to, char *out, size_t cap) {
    size_t lf = strlen(from), lt = strlen(to), n = 0;
    while (*in) {
        const char *hit = strstr(in, from);
        size_t keep = hit ? (size_t)(hit - in) : strlen(in);
        size_t add = keep + (hit ? lt : 0);
        if (n + add >= cap)
            return -1;
        memcpy(out + n, in, keep);
        if (hit)
            memcpy(out + n + keep, to, lt);
        n += add;
        in += keep + (hit ? lf : 0);
    }
    if (n >= cap)
        return -1;
    out[n] = '\0';
    return 0;
}

// ---- the weight rule ----

static uint64_t fnv1a64(const char *s) {
    uint64_t h = 0xCBF29CE484222325ull;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        h ^= *p;
        h *= 0x100000001B3ull;
    }
    return h;
}

static uint64_t mix64(uint64_t z) {
    z ^= z >> 30;
    z *= 0xBF58476D1CE4E5B9ull;
    z ^= z >> 27;
    z *= 0x94D049BB133111EBull;
    z ^= z >> 31;
    return z;
}

// Scale a and offset b of a tensor by its role; the first matching rule wins.
static void role(const char *name, const int64_t *shape, int n_dims, float *a, float *b) {
    *b = 0.0f;
    if (ends_with(name, "_initialized")) {
        *a = 0.0f, *b = 1.0f;
    } else if (ends_with(name, "cluster_usage")) {
        *a = 0.75f, *b = 1.25f;
    } else if (ends_with(name, "embedding_sum")) {
        *a = 1.0f;
    } else if (strstr(name, "layer_scale")) {
        *a = 0.1f, *b = 0.2f;
    } else if (strstr(name, "norm") && ends_with(name, ".weight")) {
        *a = 0.1f, *b = 1.0f;
    } else if (ends_with(name, ".bias")) {
        *a = 0.05f;
    } else {
        int64_t fan;
        if (strstr(name, "convtr")) {
            // Transposed conv [in, out/groups, k]: a depthwise one (out/groups == 1) counts 1.
            fan = 2 * (n_dims > 1 && shape[1] == 1 ? 1 : shape[0]);
        } else {
            fan = n_dims > 1 ? n_elements(shape + 1, n_dims - 1) : (n_dims == 1 ? shape[0] : 1);
        }
        *a = (float)sqrt(3.0 / (double)fan);  // in double, then rounded once to float
    }
}

void synth_fill(const char *name, const int64_t *shape, int n_dims, uint64_t seed, float *out) {
    const uint64_t key = fnv1a64(name) ^ (seed * 0x9E3779B97F4A7C15ull);
    const int64_t n = n_elements(shape, n_dims);
    float a, b;
    role(name, shape, n_dims, &a, &b);
    for (int64_t i = 0; i < n; i++) {
        uint64_t h = mix64(key + (uint64_t)(i + 1) * 0xD1B54A32D192ED03ull);
        float v = (float)(h >> 40) * 0x1p-24f * 2.0f - 1.0f;  // exact, in [-1, 1)
        volatile float scaled = a * v;  // rounded to float on its own: never fused into an FMA
        out[i] = scaled + b;
    }
}

// ---- the native tensor table ----

// A tensor table, built once per family.
struct table {
    struct synth_tensor_info info[N_NATIVE];
    char names[N_NATIVE][SYNTH_MAX_NAME];
    int count;  // 0 until built
};

static struct table g_native, g_pocket;

static void add_tensor(struct table *tab, const char *name, int n_dims, int64_t d0, int64_t d1,
                       int64_t d2) {
    if (tab->count >= N_NATIVE)
        return;  // cannot happen with the fixed geometries; the tests check the counts
    int i = tab->count++;
    snprintf(tab->names[i], SYNTH_MAX_NAME, "%s", name);
    tab->info[i].name = tab->names[i];
    tab->info[i].n_dims = n_dims;
    tab->info[i].shape[0] = d0;
    tab->info[i].shape[1] = d1;
    tab->info[i].shape[2] = d2;
}

// "<prefix>.weight" [d0, d1, k] and "<prefix>.bias" [bias_len].
static void add_conv(struct table *tab, const char *prefix, int64_t d0, int64_t d1, int64_t k, int64_t bias_len) {
    char name[SYNTH_MAX_NAME];
    snprintf(name, sizeof name, "%s.weight", prefix);
    add_tensor(tab, name, 3, d0, d1, k);
    snprintf(name, sizeof name, "%s.bias", prefix);
    add_tensor(tab, name, 1, bias_len, 0, 0);
}

// A SEANet residual block at `<model>.<idx>`: block.1 conv k3 dim -> dim/2, block.3 1x1 back.
static void add_resblock(struct table *tab, const char *model, int idx, int64_t dim) {
    char prefix[SYNTH_MAX_NAME];
    snprintf(prefix, sizeof prefix, "%s.%d.block.1.conv.conv", model, idx);
    add_conv(tab, prefix, dim / COMPRESS, dim, RES_KERNEL, dim / COMPRESS);
    snprintf(prefix, sizeof prefix, "%s.%d.block.3.conv.conv", model, idx);
    add_conv(tab, prefix, dim, dim / COMPRESS, 1, dim);
}

// encoder.model: conv, then per stage (ratios reversed) resblock, ELU, strided conv; ELU, conv.
static void add_seanet_encoder(struct table *tab) {
    char prefix[SYNTH_MAX_NAME];
    int64_t dim = N_FILTERS;
    add_conv(tab, "encoder.model.0.conv.conv", dim, 1, FIRST_KERNEL, dim);
    for (int s = 0; s < N_STAGES; s++) {
        int ratio = k_ratios[N_STAGES - 1 - s];
        add_resblock(tab, "encoder.model", 1 + 3 * s, dim);
        snprintf(prefix, sizeof prefix, "encoder.model.%d.conv.conv", 3 + 3 * s);
        add_conv(tab, prefix, 2 * dim, dim, 2 * ratio, 2 * dim);
        dim *= 2;
    }
    snprintf(prefix, sizeof prefix, "encoder.model.%d.conv.conv", 3 * N_STAGES + 2);
    add_conv(tab, prefix, LATENT_DIM, dim, LAST_KERNEL, LATENT_DIM);
}

// decoder.model: conv, then per stage ELU, transposed conv, resblock; ELU, conv.
static void add_seanet_decoder(struct table *tab) {
    char prefix[SYNTH_MAX_NAME];
    int64_t dim = (int64_t)N_FILTERS << N_STAGES;
    add_conv(tab, "decoder.model.0.conv.conv", dim, LATENT_DIM, FIRST_KERNEL, dim);
    for (int s = 0; s < N_STAGES; s++) {
        snprintf(prefix, sizeof prefix, "decoder.model.%d.convtr.convtr", 2 + 3 * s);
        add_conv(tab, prefix, dim, dim / 2, 2 * k_ratios[s], dim / 2);  // [in, out, k], bias [out]
        dim /= 2;
        add_resblock(tab, "decoder.model", 3 + 3 * s, dim);
    }
    snprintf(prefix, sizeof prefix, "decoder.model.%d.conv.conv", 3 * N_STAGES + 2);
    add_conv(tab, prefix, 1, dim, LAST_KERNEL, 1);
}

// One transformer layer, in checkpoint order.
static void add_transformer_layer(struct table *tab, const char *which, int l) {
    static const struct {
        const char *suffix;
        int n_dims;
        int64_t d0, d1;
    } k_parts[] = {
        {"self_attn.out_proj.weight", 2, LATENT_DIM, LATENT_DIM},
        {"self_attn.in_proj_weight", 2, 3 * LATENT_DIM, LATENT_DIM},
        {"norm1.weight", 1, LATENT_DIM, 0},
        {"norm1.bias", 1, LATENT_DIM, 0},
        {"norm2.weight", 1, LATENT_DIM, 0},
        {"norm2.bias", 1, LATENT_DIM, 0},
        {"linear1.weight", 2, FFN_DIM, LATENT_DIM},
        {"linear2.weight", 2, LATENT_DIM, FFN_DIM},
        {"layer_scale_1.scale", 1, LATENT_DIM, 0},
        {"layer_scale_2.scale", 1, LATENT_DIM, 0},
    };
    char name[SYNTH_MAX_NAME];
    for (size_t p = 0; p < sizeof k_parts / sizeof k_parts[0]; p++) {
        snprintf(name, sizeof name, "%s_transformer.transformer.layers.%d.%s", which, l,
                 k_parts[p].suffix);
        add_tensor(tab, name, k_parts[p].n_dims, k_parts[p].d0, k_parts[p].d1, 0);
    }
}

// quantizer.<rvq>: projections, then the codebook buffers of each of its n_q levels.
static void add_rvq(struct table *tab, const char *rvq, int n_q) {
    char name[SYNTH_MAX_NAME];
    snprintf(name, sizeof name, "quantizer.%s.input_proj.weight", rvq);
    add_tensor(tab, name, 3, CODEBOOK_DIM, LATENT_DIM, 1);
    snprintf(name, sizeof name, "quantizer.%s.output_proj.weight", rvq);
    add_tensor(tab, name, 3, LATENT_DIM, CODEBOOK_DIM, 1);
    for (int j = 0; j < n_q; j++) {
        snprintf(name, sizeof name, "quantizer.%s.vq.layers.%d._codebook._initialized", rvq, j);
        add_tensor(tab, name, 1, 1, 0, 0);
        snprintf(name, sizeof name, "quantizer.%s.vq.layers.%d._codebook.cluster_usage", rvq, j);
        add_tensor(tab, name, 1, CODEBOOK_SIZE, 0, 0);
        snprintf(name, sizeof name, "quantizer.%s.vq.layers.%d._codebook.embedding_sum", rvq, j);
        add_tensor(tab, name, 2, CODEBOOK_SIZE, CODEBOOK_DIM, 0);
    }
}

static void build_native_table(struct table *tab) {
    add_seanet_encoder(tab);
    add_seanet_decoder(tab);
    for (int l = 0; l < N_LAYERS; l++)
        add_transformer_layer(tab, "encoder", l);
    for (int l = 0; l < N_LAYERS; l++)
        add_transformer_layer(tab, "decoder", l);
    add_rvq(tab, "rvq_first", 1);
    add_rvq(tab, "rvq_rest", N_CODEBOOKS - 1);
    add_tensor(tab, "downsample.conv.conv.conv.weight", 3, LATENT_DIM, LATENT_DIM, RESAMPLE_KERNEL);
    // Depthwise (groups = 512): [in, out/groups = 1, k].
    add_tensor(tab, "upsample.convtr.convtr.convtr.weight", 3, LATENT_DIM, 1, RESAMPLE_KERNEL);
}

const struct synth_tensor_info *synth_native_tensors(int *n) {
    if (g_native.count == 0)
        build_native_table(&g_native);
    if (n)
        *n = g_native.count;
    return g_native.info;
}

// ---- the Pocket TTS variant (spec 8.3) ----

// Its geometry: ratios 6-5-4, 2-layer transformers, a dense 512->32 downsample (k32, s16), a
// depthwise upsample (k32, s16) and a 1x1 conv 32->512 instead of the quantizer.
static const int k_pocket_ratios[3] = {6, 5, 4};
#define POCKET_STAGES 3
#define POCKET_LAYERS 2
#define POCKET_LATENT 32
#define POCKET_RESAMPLE_KERNEL 32

// A Pocket residual block: block.1 conv k3 dim -> dim/2, block.3 1x1 back (one conv level).
static void add_pocket_resblock(struct table *tab, const char *model, int idx, int64_t dim) {
    char prefix[SYNTH_MAX_NAME];
    snprintf(prefix, sizeof prefix, "%s.%d.block.1.conv", model, idx);
    add_conv(tab, prefix, dim / COMPRESS, dim, RES_KERNEL, dim / COMPRESS);
    snprintf(prefix, sizeof prefix, "%s.%d.block.3.conv", model, idx);
    add_conv(tab, prefix, dim, dim / COMPRESS, 1, dim);
}

// The codec's 87 tensors under "mimi.", in the order of the shipped file, then a few tensors of
// the TTS model itself that a codec loader must ignore.
static void build_pocket_table(struct table *tab) {
    char name[SYNTH_MAX_NAME];
    int64_t dim = N_FILTERS;
    add_conv(tab, "mimi.encoder.model.0.conv", dim, 1, FIRST_KERNEL, dim);
    for (int s = 0; s < POCKET_STAGES; s++) {
        add_pocket_resblock(tab, "mimi.encoder.model", 1 + 3 * s, dim);
        snprintf(name, sizeof name, "mimi.encoder.model.%d.conv", 3 + 3 * s);
        add_conv(tab, name, 2 * dim, dim, 2 * k_pocket_ratios[POCKET_STAGES - 1 - s], 2 * dim);
        dim *= 2;
    }
    snprintf(name, sizeof name, "mimi.encoder.model.%d.conv", 3 * POCKET_STAGES + 2);
    add_conv(tab, name, LATENT_DIM, dim, LAST_KERNEL, LATENT_DIM);
    add_conv(tab, "mimi.decoder.model.0.conv", dim, LATENT_DIM, FIRST_KERNEL, dim);
    for (int s = 0; s < POCKET_STAGES; s++) {
        snprintf(name, sizeof name, "mimi.decoder.model.%d.convtr", 2 + 3 * s);
        add_conv(tab, name, dim, dim / 2, 2 * k_pocket_ratios[s], dim / 2);
        dim /= 2;
        add_pocket_resblock(tab, "mimi.decoder.model", 3 + 3 * s, dim);
    }
    snprintf(name, sizeof name, "mimi.decoder.model.%d.conv", 3 * POCKET_STAGES + 2);
    add_conv(tab, name, 1, dim, LAST_KERNEL, 1);
    static const char *const parts[] = {"self_attn.in_proj.weight", "self_attn.out_proj.weight",
                                        "norm1.weight", "norm1.bias", "norm2.weight", "norm2.bias",
                                        "linear1.weight", "linear2.weight",
                                        "layer_scale_1.scale", "layer_scale_2.scale"};
    static const int64_t shapes[][2] = {{3 * LATENT_DIM, LATENT_DIM}, {LATENT_DIM, LATENT_DIM},
                                        {LATENT_DIM, 0}, {LATENT_DIM, 0}, {LATENT_DIM, 0},
                                        {LATENT_DIM, 0}, {FFN_DIM, LATENT_DIM},
                                        {LATENT_DIM, FFN_DIM}, {LATENT_DIM, 0}, {LATENT_DIM, 0}};
    for (int t = 0; t < 2; t++)
        for (int l = 0; l < POCKET_LAYERS; l++)
            for (int p = 0; p < 10; p++) {
                snprintf(name, sizeof name, "mimi.%s_transformer.transformer.layers.%d.%s",
                         t ? "decoder" : "encoder", l, parts[p]);
                add_tensor(tab, name, shapes[p][1] ? 2 : 1, shapes[p][0], shapes[p][1], 0);
            }
    add_tensor(tab, "mimi.quantizer.output_proj.weight", 3, LATENT_DIM, POCKET_LATENT, 1);
    add_tensor(tab, "mimi.downsample.conv.conv.weight", 3, POCKET_LATENT, LATENT_DIM,
               POCKET_RESAMPLE_KERNEL);
    add_tensor(tab, "mimi.upsample.convtr.convtr.weight", 3, LATENT_DIM, 1, POCKET_RESAMPLE_KERNEL);
    // the TTS model's own tensors (ignored by the codec)
    add_tensor(tab, "flow_lm.emb_mean", 1, POCKET_LATENT, 0, 0);
    add_tensor(tab, "flow_lm.emb_std", 1, POCKET_LATENT, 0, 0);
    add_tensor(tab, "flow_lm.input_linear.weight", 2, 1024, POCKET_LATENT, 0);
}

const struct synth_tensor_info *synth_pocket_tensors(int *n) {
    if (g_pocket.count == 0)
        build_pocket_table(&g_pocket);
    if (n)
        *n = g_pocket.count;
    return g_pocket.info;
}

// ---- Hugging Face naming ----

// The official conversion's rewrites, applied in this order, each to every occurrence.
static const char *const k_hf_rewrites[][2] = {
    {"conv.conv.conv", "conv"},
    {"convtr.convtr.convtr", "conv"},
    {"conv.conv", "conv"},
    {"convtr.convtr", "conv"},
    {"quantizer.rvq_first.vq", "quantizer.semantic_residual_vector_quantizer"},
    {"quantizer.rvq_first", "quantizer.semantic_residual_vector_quantizer"},
    {"quantizer.rvq_rest.vq", "quantizer.acoustic_residual_vector_quantizer"},
    {"quantizer.rvq_rest", "quantizer.acoustic_residual_vector_quantizer"},
    {"_codebook", "codebook"},
    {"_initialized", "initialized"},
    {"embedding_sum", "embed_sum"},
    {"encoder.model", "encoder.layers"},
    {"decoder.model", "decoder.layers"},
    {"encoder_transformer.transformer", "encoder_transformer"},
    {"decoder_transformer.transformer", "decoder_transformer"},
    {"linear1", "mlp.fc1"},
    {"linear2", "mlp.fc2"},
    {"self_attn.out_proj", "self_attn.o_proj"},
    {"norm1", "input_layernorm"},
    {"norm2", "post_attention_layernorm"},
    {"layer_scale_1", "self_attn_layer_scale"},
    {"layer_scale_2", "mlp_layer_scale"},
};

int synth_hf_name(const char *native_name, char *out, size_t out_len) {
    char tmp[2][SYNTH_MAX_NAME];
    int cur = 0;
    if (!native_name || !out || snprintf(tmp[0], SYNTH_MAX_NAME, "%s", native_name) >= SYNTH_MAX_NAME)
        return MIMI_EINVAL;
    for (size_t r = 0; r < sizeof k_hf_rewrites / sizeof k_hf_rewrites[0]; r++) {
        if (!strstr(tmp[cur], k_hf_rewrites[r][0]))
            continue;
        if (replace_all(tmp[cur], k_hf_rewrites[r][0], k_hf_rewrites[r][1], tmp[!cur],
                        SYNTH_MAX_NAME) != 0)
            return MIMI_EINVAL;
        cur = !cur;
    }
    if (strlen(tmp[cur]) >= out_len)
        return MIMI_EINVAL;
    memcpy(out, tmp[cur], strlen(tmp[cur]) + 1);
    return 0;
}

// Half-split rotary layout: inside each head of HEAD_DIM rows, HF row j is native row 2j for
// j < HEAD_DIM/2 and native row 2(j - HEAD_DIM/2) + 1 after that (all even dims, then all odd).
static void permute_rotary_rows(const float *src, float *dst, int64_t rows, int64_t cols) {
    const int64_t half = HEAD_DIM / 2;
    for (int64_t h = 0; h < rows / HEAD_DIM; h++) {
        for (int64_t j = 0; j < HEAD_DIM; j++) {
            int64_t from = j < half ? 2 * j : 2 * (j - half) + 1;
            memcpy(dst + (h * HEAD_DIM + j) * cols, src + (h * HEAD_DIM + from) * cols,
                   (size_t)cols * sizeof(float));
        }
    }
}

// Splits a fused [3R, C] in_proj_weight into q (permuted), k (permuted) and v [R, C] each.
static int split_in_proj(const struct synth_tensor_info *t, const char *hf_name,
                         const float *values, float *hf_values, struct synth_hf_tensor out[3]) {
    static const char *const k_names[3] = {"q_proj.weight", "k_proj.weight", "v_proj.weight"};
    if (t->n_dims != 2 || t->shape[0] % 3 != 0 || (t->shape[0] / 3) % HEAD_DIM != 0)
        return MIMI_EINVAL;
    const int64_t rows = t->shape[0] / 3, cols = t->shape[1], part = rows * cols;
    permute_rotary_rows(values, hf_values, rows, cols);
    permute_rotary_rows(values + part, hf_values + part, rows, cols);
    memcpy(hf_values + 2 * part, values + 2 * part, (size_t)part * sizeof(float));
    for (int p = 0; p < 3; p++) {
        if (replace_all(hf_name, "in_proj_weight", k_names[p], out[p].name, SYNTH_MAX_NAME) != 0)
            return MIMI_EINVAL;
        out[p].n_dims = 2;
        out[p].shape[0] = rows;
        out[p].shape[1] = cols;
        out[p].shape[2] = 0;
        out[p].data = hf_values + p * part;
    }
    return 3;
}

int synth_hf_convert(const struct synth_tensor_info *t, const float *values, float *hf_values,
                     struct synth_hf_tensor out[3]) {
    char hf_name[SYNTH_MAX_NAME];
    if (!t || !values || !hf_values || !out || t->n_dims < 0 || t->n_dims > 3)
        return MIMI_EINVAL;
    if (synth_hf_name(t->name, hf_name, sizeof hf_name) != 0)
        return MIMI_EINVAL;
    if (strstr(hf_name, "in_proj_weight"))
        return split_in_proj(t, hf_name, values, hf_values, out);
    memcpy(hf_values, values, (size_t)n_elements(t->shape, t->n_dims) * sizeof(float));
    memcpy(out[0].name, hf_name, strlen(hf_name) + 1);
    out[0].n_dims = t->n_dims;
    for (int d = 0; d < 3; d++)
        out[0].shape[d] = d < t->n_dims ? t->shape[d] : 0;
    out[0].data = hf_values;
    return 1;
}

// ---- half-precision encodings ----

uint16_t synth_f32_to_f16(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    const uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    const uint32_t ax = u & 0x7FFFFFFFu;
    if (ax > 0x7F800000u)
        return (uint16_t)(sign | 0x7E00u | ((ax >> 13) & 0x3FFu));  // NaN, kept quiet
    if (ax >= 0x477FF000u)
        return (uint16_t)(sign | 0x7C00u);  // infinity, or at least 65520: rounds to infinity
    if (ax >= 0x38800000u) {
        // Normal: rebias the exponent (127 -> 15) and round the 13 dropped mantissa bits to
        // nearest even; a carry out of the mantissa correctly bumps the exponent.
        uint32_t r = ax + 0xFFFu + ((ax >> 13) & 1u);
        return (uint16_t)(sign | ((r - 0x38000000u) >> 13));
    }
    // Below 2^-14: a subnormal f16, round(|x| * 2^24) with ties to even (may reach 0x400).
    const int shift = 126 - (int)(ax >> 23);  // >= 14 here
    if (shift > 24)
        return sign;  // below 2^-25: rounds to zero (also f32 zeros and subnormals)
    const uint32_t m = (ax & 0x7FFFFFu) | 0x800000u;
    uint32_t q = m >> shift;
    const uint32_t rem = m & ((1u << shift) - 1u), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (q & 1u)))
        q++;
    return (uint16_t)(sign | q);
}

uint16_t synth_f32_to_bf16(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u)
        return (uint16_t)((u >> 16) | 0x40u);  // NaN, kept quiet
    return (uint16_t)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

// ---- the writer ----

// Everything st_write needs, owned here and released by image_free.
struct image {
    struct st_write_tensor *tensors;
    char (*names)[SYNTH_MAX_NAME];
    void **buffers;  // one per native tensor
    int n_tensors, n_buffers;
    float *scratch;  // native values before the HF reordering
};

static void image_free(struct image *img) {
    for (int i = 0; i < img->n_buffers; i++)
        free(img->buffers[i]);
    free(img->buffers);
    free(img->names);
    free(img->tensors);
    free(img->scratch);
    memset(img, 0, sizeof *img);
}

static enum st_dtype st_dtype_of(enum synth_dtype dtype) {
    return dtype == SYNTH_F16 ? ST_F16 : dtype == SYNTH_BF16 ? ST_BF16 : ST_F32;
}

// Replaces the f32 buffer *data of n values by its f16/bf16 encoding (no-op for f32).
static int encode_buffer(void **data, int64_t n, enum synth_dtype dtype) {
    if (dtype == SYNTH_F32)
        return 0;
    uint16_t *enc = malloc((size_t)n * sizeof(uint16_t));
    if (!enc)
        return MIMI_ENOMEM;
    const float *src = *data;
    for (int64_t i = 0; i < n; i++)
        enc[i] = dtype == SYNTH_F16 ? synth_f32_to_f16(src[i]) : synth_f32_to_bf16(src[i]);
    free(*data);
    *data = enc;
    return 0;
}

// Appends one file tensor whose data starts `offset` elements into the last buffer.
static void image_add(struct image *img, const char *name, int n_dims, const int64_t *shape,
                      enum synth_dtype dtype, int64_t offset) {
    struct st_write_tensor *w = &img->tensors[img->n_tensors];
    memcpy(img->names[img->n_tensors], name, strlen(name) + 1);
    memset(w, 0, sizeof *w);
    w->name = img->names[img->n_tensors];
    w->dtype = st_dtype_of(dtype);
    w->n_dims = n_dims;
    for (int d = 0; d < n_dims; d++)
        w->shape[d] = shape[d];
    w->data = (const uint8_t *)img->buffers[img->n_buffers - 1] +
              (size_t)offset * st_dtype_size(w->dtype);
    img->n_tensors++;
}

// Generates native tensor t and appends it (or its HF pieces) to the image.
static int image_add_native(struct image *img, const struct synth_tensor_info *t, uint64_t seed,
                            enum synth_naming naming, enum synth_dtype dtype) {
    const int64_t n = n_elements(t->shape, t->n_dims);
    float *values = malloc((size_t)n * sizeof(float));
    if (!values)
        return MIMI_ENOMEM;
    img->buffers[img->n_buffers++] = values;
    if (naming != SYNTH_NAMING_HF) {
        synth_fill(t->name, t->shape, t->n_dims, seed, values);
        int rc = encode_buffer(&img->buffers[img->n_buffers - 1], n, dtype);
        if (rc == 0)
            image_add(img, t->name, t->n_dims, t->shape, dtype, 0);
        return rc;
    }
    struct synth_hf_tensor parts[3];
    int64_t offsets[3];
    synth_fill(t->name, t->shape, t->n_dims, seed, img->scratch);
    int n_parts = synth_hf_convert(t, img->scratch, values, parts);
    if (n_parts < 0)
        return n_parts;
    for (int p = 0; p < n_parts; p++)
        offsets[p] = parts[p].data - values;  // taken before the encoding frees `values`
    int rc = encode_buffer(&img->buffers[img->n_buffers - 1], n, dtype);
    for (int p = 0; rc == 0 && p < n_parts; p++)
        image_add(img, parts[p].name, parts[p].n_dims, parts[p].shape, dtype, offsets[p]);
    return rc;
}

static int image_alloc(struct image *img, const struct synth_tensor_info *tab, int n) {
    int64_t largest = 0;
    for (int i = 0; i < n; i++) {
        int64_t e = n_elements(tab[i].shape, tab[i].n_dims);
        largest = e > largest ? e : largest;
    }
    // The table never holds more than N_NATIVE tensors; each gives at most three file tensors.
    img->tensors = calloc(3 * N_NATIVE, sizeof *img->tensors);
    img->names = calloc(3 * N_NATIVE, sizeof *img->names);
    img->buffers = calloc(N_NATIVE, sizeof *img->buffers);
    img->scratch = malloc((size_t)largest * sizeof(float));
    return img->tensors && img->names && img->buffers && img->scratch ? 0 : MIMI_ENOMEM;
}

int synth_write_model(const char *path, uint64_t seed, enum synth_naming naming,
                      enum synth_dtype dtype, char *errbuf, size_t errlen) {
    struct image img = {0};
    char metadata[96];
    int n, rc;
    set_err(errbuf, errlen, "%s", "");
    if (!path ||
        (naming != SYNTH_NAMING_KYUTAI && naming != SYNTH_NAMING_HF && naming != SYNTH_NAMING_POCKET) ||
        (dtype != SYNTH_F32 && dtype != SYNTH_F16 && dtype != SYNTH_BF16)) {
        set_err(errbuf, errlen, "synth: invalid argument (path, naming or dtype)");
        return MIMI_EINVAL;
    }
    const struct synth_tensor_info *tab =
        naming == SYNTH_NAMING_POCKET ? synth_pocket_tensors(&n) : synth_native_tensors(&n);
    rc = image_alloc(&img, tab, n);
    if (rc != 0)
        set_err(errbuf, errlen, "synth: out of memory");
    for (int i = 0; rc == 0 && i < n; i++) {
        rc = image_add_native(&img, &tab[i], seed, naming, dtype);
        if (rc != 0)
            set_err(errbuf, errlen, "synth: cannot generate %s: %s", tab[i].name,
                    rc == MIMI_ENOMEM ? "out of memory" : "bad tensor shape");
    }
    if (rc == 0) {
        snprintf(metadata, sizeof metadata, "{\"seed\":\"%llu\",\"naming\":\"%s\"}",
                 (unsigned long long)seed,
                 naming == SYNTH_NAMING_HF ? "hf" : naming == SYNTH_NAMING_POCKET ? "pocket" : "kyutai");
        rc = st_write(path, img.tensors, img.n_tensors, metadata, errbuf, errlen);
    }
    image_free(&img);
    return rc;
}
