/*
 * model.c - binds a safetensors checkpoint to the model description of internal.h.
 *
 * The geometry is read from the file, not from constants: the SEANet stage count from the
 * highest layer index, channels and kernels from the weight shapes, strides from the kernels
 * (a strided conv has kernel 2 x stride), the transformer depth from its highest layer index,
 * the codebook count from the quantizer's layers. Every tensor the plan needs is then required
 * with its expected shape; a missing or misshapen one fails the load with a message naming it.
 * Tensors the codec does not use are ignored.
 *
 * Naming schemes: Kyutai's native names (spec 8.1) and Hugging Face transformers names (8.2),
 * whose per-head q/k rows are permuted for half-split rotary and are put back here.
 * Not here: the arithmetic (src/nn/), the file parsing (safetensors.c).
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/cpu.h"
#include "internal.h"
#include "gpu.h"

// Values not stored in any checkpoint: constants of every Mimi family.
#define MIMI_SAMPLE_RATE 24000
#define MIMI_N_HEADS 8
#define MIMI_CONTEXT 250
#define MIMI_MAX_PERIOD 10000.0f

// ---- naming schemes ----

struct naming {
    const char *name;
    const char *family;        // "mimi" or "pocket-tts"
    const char *seanet;        // (part) prefix of SEANet layer indices
    const char *conv;          // (part, index) a conv's weight/bias stem
    const char *convtr;        // (part, index)
    const char *block;         // (part, index, j) a resblock conv stem
    const char *tr_layers;     // (part) prefix of transformer layer indices
    const char *in_proj[3];    // fused q|k|v spellings after the layer prefix (NULL: split)
    const char *out_proj[2];
    const char *norm1, *norm2, *linear1, *linear2, *scale1, *scale2;
    const char *downsample, *upsample;
    const char *rvq_first, *rvq_rest;  // NULL: no quantizer, only `projection`
    const char *projection;
    const char *codebooks;     // (rvq prefix) prefix of codebook level indices
    const char *codebook;      // the codebook's own name after "<level>."
    const char *embedding_sum;
    const char *initialized;
};

static const struct naming NAMING_KYUTAI = {
    .name = "kyutai",
    .family = "mimi",
    .seanet = "%s.model.",
    .conv = "%s.model.%d.conv.conv",
    .convtr = "%s.model.%d.convtr.convtr",
    .block = "%s.model.%d.block.%d.conv.conv",
    .tr_layers = "%s_transformer.transformer.layers.",
    .in_proj = {"self_attn.in_proj_weight", "self_attn.in_projs.0.weight", "self_attn.in_proj.weight"},
    .out_proj = {"self_attn.out_proj.weight", "self_attn.out_projs.0.weight"},
    .norm1 = "norm1",
    .norm2 = "norm2",
    .linear1 = "linear1.weight",
    .linear2 = "linear2.weight",
    .scale1 = "layer_scale_1.scale",
    .scale2 = "layer_scale_2.scale",
    .downsample = "downsample.conv.conv.conv.weight",
    .upsample = "upsample.convtr.convtr.convtr.weight",
    .rvq_first = "quantizer.rvq_first",
    .rvq_rest = "quantizer.rvq_rest",
    .codebooks = "%s.vq.layers.",
    .codebook = "_codebook",
    .embedding_sum = "embedding_sum",
    .initialized = "_initialized",
};

static const struct naming NAMING_HF = {
    .name = "huggingface",
    .family = "mimi",
    .seanet = "%s.layers.",
    .conv = "%s.layers.%d.conv",
    .convtr = "%s.layers.%d.conv",
    .block = "%s.layers.%d.block.%d.conv",
    .tr_layers = "%s_transformer.layers.",
    .in_proj = {NULL, NULL, NULL},
    .out_proj = {"self_attn.o_proj.weight", NULL},
    .norm1 = "input_layernorm",
    .norm2 = "post_attention_layernorm",
    .linear1 = "mlp.fc1.weight",
    .linear2 = "mlp.fc2.weight",
    .scale1 = "self_attn_layer_scale.scale",
    .scale2 = "mlp_layer_scale.scale",
    .downsample = "downsample.conv.weight",
    .upsample = "upsample.conv.weight",
    .rvq_first = "quantizer.semantic_residual_vector_quantizer",
    .rvq_rest = "quantizer.acoustic_residual_vector_quantizer",
    .codebooks = "%s.layers.",
    .codebook = "codebook",
    .embedding_sum = "embed_sum",
    .initialized = "initialized",
};

// Pocket TTS's Mimi (spec 8.3): one conv level, `in_proj.weight`, a 1x1 projection instead of the
// quantizer; inside a TTS checkpoint every name carries the prefix "mimi.".
static const struct naming NAMING_POCKET = {
    .name = "pocket-tts",
    .family = "pocket-tts",
    .seanet = "%s.model.",
    .conv = "%s.model.%d.conv",
    .convtr = "%s.model.%d.convtr",
    .block = "%s.model.%d.block.%d.conv",
    .tr_layers = "%s_transformer.transformer.layers.",
    .in_proj = {"self_attn.in_proj.weight", "self_attn.in_proj_weight", "self_attn.in_projs.0.weight"},
    .out_proj = {"self_attn.out_proj.weight", "self_attn.out_projs.0.weight"},
    .norm1 = "norm1",
    .norm2 = "norm2",
    .linear1 = "linear1.weight",
    .linear2 = "linear2.weight",
    .scale1 = "layer_scale_1.scale",
    .scale2 = "layer_scale_2.scale",
    .downsample = "downsample.conv.conv.weight",
    .upsample = "upsample.convtr.convtr.weight",
    .projection = "quantizer.output_proj.weight",
};

// ---- loader state ----

struct loader {
    struct mimi_model *m;
    const struct naming *nm;
    const char *prefix;  // put before every name ("mimi." inside a Pocket TTS checkpoint)
    int failed;
};

void mimi_log(const struct mimi_model *model, int level, const char *fmt, ...) {
    if (!model || !model->log) return;
    char msg[MIMI_ERRMSG_LEN];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    model->log(model->log_user, level, msg);
}

// Records the first failure of a load (later ones are consequences and stay quiet).
static void fail(struct loader *L, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
static void fail(struct loader *L, const char *fmt, ...) {
    if (L->failed++) return;
    char msg[MIMI_ERRMSG_LEN];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    mimi_log(L->m, MIMI_LOG_ERROR, "%s", msg);
}

static void *own(struct loader *L, size_t bytes) {
    struct mimi_model *m = L->m;
    if (m->n_owned == m->cap_owned) {
        int cap = m->cap_owned ? 2 * m->cap_owned : 64;
        void **grown = realloc(m->owned, sizeof(void *) * cap);
        if (!grown) {
            fail(L, "out of memory");
            return NULL;
        }
        m->owned = grown;
        m->cap_owned = cap;
    }
    void *p = malloc(bytes ? bytes : 1);
    if (p) m->owned[m->n_owned++] = p;
    else fail(L, "out of memory (%zu bytes)", bytes);
    return p;
}

static void shape_str(char *buf, size_t len, int n, const int64_t *dims) {
    size_t at = (size_t)snprintf(buf, len, "[");
    for (int i = 0; i < n && at < len; i++)
        at += (size_t)(dims[i] < 0 ? snprintf(buf + at, len - at, "%s?", i ? ", " : "")
                                   : snprintf(buf + at, len - at, "%s%lld", i ? ", " : "",
                                              (long long)dims[i]));
    if (at < len) snprintf(buf + at, len - at, "]");
}

// Finds `name` and checks its shape against `dims` (-1 = any size). Returns its values as f32
// (pointing into the mapping when possible, else converted into owned memory), storing the
// found dims into `dims`, or NULL after recording why.
static const float *require(struct loader *L, const char *short_name, int n, int64_t *dims) {
    char want[96], got[96], name[ST_MAX_NAME + 16];
    if (L->failed) return NULL;
    snprintf(name, sizeof name, "%s%s", L->prefix, short_name);
    const struct st_tensor *t = st_find(&L->m->file, name);
    shape_str(want, sizeof want, n, dims);
    if (!t) {
        fail(L, "missing tensor '%s' (expected shape %s)", name, want);
        return NULL;
    }
    int ok = t->n_dims == n;
    for (int i = 0; ok && i < n; i++) ok = dims[i] < 0 || dims[i] == t->shape[i];
    if (!ok) {
        shape_str(got, sizeof got, t->n_dims, t->shape);
        fail(L, "tensor '%s': expected shape %s, found %s", name, want, got);
        return NULL;
    }
    for (int i = 0; i < n; i++) dims[i] = t->shape[i];
    L->m->n_params += t->n_elements;
    if (t->dtype == ST_F32 && ((uintptr_t)t->data & 3) == 0) return (const float *)t->data;
    float *out = own(L, sizeof(float) * (size_t)t->n_elements);
    if (out && st_to_f32(t, out) != 0) {
        fail(L, "tensor '%s': dtype %s is not a float type", name, st_dtype_name(t->dtype));
        return NULL;
    }
    return out;
}

// require() with a printf-formatted name.
static const float *requiref(struct loader *L, int n, int64_t *dims, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 4, 5)))
#endif
    ;
static const float *requiref(struct loader *L, int n, int64_t *dims, const char *fmt, ...) {
    char name[ST_MAX_NAME + 1];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    return require(L, name, n, dims);
}

// Whether the tensor `short_name` (without the file's prefix) exists.
static int has(const struct loader *L, const char *short_name) {
    char name[ST_MAX_NAME + 16];
    snprintf(name, sizeof name, "%s%s", L->prefix, short_name);
    return st_find(&L->m->file, name) != NULL;
}

// The highest integer that follows `short_prefix` in any tensor name, or -1.
static int max_index(const struct loader *L, const char *short_prefix) {
    const struct st_file *f = &L->m->file;
    char prefix[ST_MAX_NAME + 16];
    snprintf(prefix, sizeof prefix, "%s%s", L->prefix, short_prefix);
    size_t len = strlen(prefix);
    int best = -1;
    for (int i = 0; i < f->n_tensors; i++) {
        const char *name = f->tensors[i].name;
        if (strncmp(name, prefix, len) != 0) continue;
        char *end;
        long v = strtol(name + len, &end, 10);
        if (end != name + len && *end == '.' && v >= 0 && v < 1000 && v > best) best = (int)v;
    }
    return best;
}

// ---- convolutions ----

// Loads a conv ("<stem>.weight", "<stem>.bias") taking c_in input channels.
static void load_conv(struct loader *L, struct mimi_conv *c, int transposed, int c_in, int strided,
                      const char *stem) {
    int64_t w[3] = {transposed ? c_in : -1, transposed ? -1 : c_in, -1};
    memset(c, 0, sizeof *c);
    c->weight = requiref(L, 3, w, "%s.weight", stem);
    if (!c->weight) return;
    c->transposed = transposed;
    c->groups = 1;
    c->c_in = c_in;
    c->c_out = (int)(transposed ? w[1] : w[0]);
    c->kernel = (int)w[2];
    c->stride = strided ? c->kernel / 2 : 1;
    if (strided && (c->kernel < 2 || c->kernel % 2)) {
        fail(L, "tensor '%s.weight': a strided layer needs an even kernel, found %d", stem, c->kernel);
        return;
    }
    int64_t b[1] = {c->c_out};
    c->bias = requiref(L, 1, b, "%s.bias", stem);
}

// Packs a dense transposed conv's weight (c_in, c_out, K) as rows (c_out*K, c_in).
static void pack_convtr(struct loader *L, struct mimi_conv *c) {
    if (L->failed || c->groups != 1) return;
    float *t = own(L, sizeof(float) * (size_t)c->c_in * c->c_out * c->kernel);
    if (!t) return;
    for (int i = 0; i < c->c_in; i++)
        for (int o = 0; o < c->c_out; o++)
            for (int k = 0; k < c->kernel; k++)
                t[((size_t)o * c->kernel + k) * c->c_in + i] =
                    c->weight[((size_t)i * c->c_out + o) * c->kernel + k];
    c->weight_t = t;
}

// A residual block on `channels`: conv k (channels -> hidden), then conv 1x1 (hidden -> channels).
static void load_resblock(struct loader *L, struct seanet_layer *l, const char *part, int index,
                          int channels) {
    char stem[ST_MAX_NAME + 1];
    l->kind = SEANET_RESBLOCK;
    snprintf(stem, sizeof stem, L->nm->block, part, index, 1);
    load_conv(L, &l->conv, 0, channels, 0, stem);
    snprintf(stem, sizeof stem, L->nm->block, part, index, 3);
    load_conv(L, &l->conv2, 0, l->conv.c_out, 0, stem);
    if (!L->failed && l->conv2.c_out != channels)
        fail(L, "%s layer %d: residual branch returns %d channels, expected %d", part, index,
             l->conv2.c_out, channels);
    if (!L->failed && l->conv2.kernel != 1)
        fail(L, "%s layer %d: residual branch's second conv has kernel %d, expected 1", part, index,
             l->conv2.kernel);
    l->channels_out = channels;
}

// ---- SEANet ----

/* The stack for n stages (indices as in spec 8.1 / 8.3):
 *   encoder: 0 conv | per stage r: 1+3r resblock, 2+3r ELU, 3+3r strided conv | 3n+1 ELU, 3n+2 conv
 *   decoder: 0 conv | per stage r: 1+3r ELU, 2+3r strided convtr, 3+3r resblock | 3n+1 ELU, 3n+2 conv */
static void load_seanet(struct loader *L, struct seanet *s, const char *part, int c_in) {
    char prefix[64];
    snprintf(prefix, sizeof prefix, L->nm->seanet, part);
    int last = max_index(L, prefix);
    int decoder = strcmp(part, "decoder") == 0;
    if (last < 5 || (last - 2) % 3 != 0 || last >= MIMI_MAX_SEANET_LAYERS) {
        fail(L, "no SEANet %s found (tensors '%s<index>...': highest index %d)", part, prefix, last);
        return;
    }
    int channels = c_in, n = 0;
    char stem[ST_MAX_NAME + 1];
    s->hop = 1;
    for (int idx = 0; idx <= last && !L->failed; idx++) {
        struct seanet_layer *l = &s->layers[n++];
        int r = (idx - 1) % 3;  // position inside a stage
        if (idx == 0 || idx == last) {
            l->kind = SEANET_CONV;
            snprintf(stem, sizeof stem, L->nm->conv, part, idx);
            load_conv(L, &l->conv, 0, channels, 0, stem);
        } else if (idx == last - 1 || r == (decoder ? 0 : 1)) {
            l->kind = SEANET_ELU;
        } else if (r == (decoder ? 2 : 0)) {
            load_resblock(L, l, part, idx, channels);
        } else {
            l->kind = decoder ? SEANET_CONVTR : SEANET_CONV;
            snprintf(stem, sizeof stem, decoder ? L->nm->convtr : L->nm->conv, part, idx);
            load_conv(L, &l->conv, decoder, channels, 1, stem);
            s->hop *= l->conv.stride;
            if (decoder) pack_convtr(L, &l->conv);
        }
        if (l->kind == SEANET_CONV || l->kind == SEANET_CONVTR) channels = l->conv.c_out;
        l->channels_out = channels;
    }
    s->n_layers = n;
}

// ---- transformer ----

// Undoes HF's per-head rotary permutation of q or k rows: native 2i <- HF i, 2i+1 <- HF i+hd/2.
static void unpermute_rows(const float *hf, float *native, int d, int head_dim) {
    for (int h = 0; h < d / head_dim; h++)
        for (int j = 0; j < head_dim; j++) {
            int dst = j < head_dim / 2 ? 2 * j : 2 * (j - head_dim / 2) + 1;
            memcpy(native + (size_t)(h * head_dim + dst) * d, hf + (size_t)(h * head_dim + j) * d,
                   sizeof(float) * d);
        }
}

static const float *load_in_proj(struct loader *L, const char *layer, int d, int head_dim) {
    const struct naming *nm = L->nm;
    char name[ST_MAX_NAME + 1];
    int64_t dims[2] = {3 * d, d};
    if (nm->in_proj[0]) {
        // fused q|k|v under one of its spellings
        for (int i = 0; i < 3; i++) {
            snprintf(name, sizeof name, "%s%s", layer, nm->in_proj[i]);
            if (nm->in_proj[i] && has(L, name)) return require(L, name, 2, dims);
        }
        snprintf(name, sizeof name, "%s%s", layer, nm->in_proj[0]);
        return require(L, name, 2, dims);
    }
    // split q, k, v: fuse them, restoring interleaved rotary rows for q and k
    float *fused = own(L, sizeof(float) * 3 * (size_t)d * d);
    static const char *parts[3] = {"q_proj", "k_proj", "v_proj"};
    for (int p = 0; p < 3 && fused; p++) {
        int64_t pd[2] = {d, d};
        const float *w = requiref(L, 2, pd, "%sself_attn.%s.weight", layer, parts[p]);
        if (!w) return NULL;
        float *dst = fused + (size_t)p * d * d;
        if (p < 2) unpermute_rows(w, dst, d, head_dim);
        else memcpy(dst, w, sizeof(float) * (size_t)d * d);
    }
    return fused;
}

static void load_transformer(struct loader *L, struct transformer *t, const char *part, int d) {
    const struct naming *nm = L->nm;
    char prefix[96], layer[128];
    snprintf(prefix, sizeof prefix, nm->tr_layers, part);
    int n_layers = max_index(L, prefix) + 1;
    if (n_layers < 1 || n_layers > 16) {
        fail(L, "no %s transformer found (tensors '%s<layer>...': %d layers)", part, prefix, n_layers);
        return;
    }
    t->d_model = d;
    t->n_heads = MIMI_N_HEADS;
    t->head_dim = d / MIMI_N_HEADS;
    t->n_layers = n_layers;
    t->context = MIMI_CONTEXT;
    t->max_period = MIMI_MAX_PERIOD;
    for (int l = 0; l < n_layers && !L->failed; l++) {
        struct transformer_layer *w = &t->layers[l];
        int64_t vec[1] = {d}, ff[2] = {-1, d};
        snprintf(layer, sizeof layer, "%s%d.", prefix, l);
        w->norm1_w = requiref(L, 1, vec, "%s%s.weight", layer, nm->norm1);
        w->norm1_b = requiref(L, 1, vec, "%s%s.bias", layer, nm->norm1);
        w->in_proj = load_in_proj(L, layer, d, t->head_dim);
        int64_t od[2] = {d, d};
        char name[ST_MAX_NAME + 1];
        snprintf(name, sizeof name, "%s%s", layer, nm->out_proj[0]);
        if (nm->out_proj[1] && !has(L, name))
            snprintf(name, sizeof name, "%s%s", layer, nm->out_proj[1]);
        w->out_proj = require(L, name, 2, od);
        w->norm2_w = requiref(L, 1, vec, "%s%s.weight", layer, nm->norm2);
        w->norm2_b = requiref(L, 1, vec, "%s%s.bias", layer, nm->norm2);
        w->linear1 = requiref(L, 2, ff, "%s%s", layer, nm->linear1);
        t->d_ff = (int)ff[0];
        int64_t l2[2] = {d, t->d_ff};
        w->linear2 = requiref(L, 2, l2, "%s%s", layer, nm->linear2);
        w->scale1 = requiref(L, 1, vec, "%s%s", layer, nm->scale1);
        w->scale2 = requiref(L, 1, vec, "%s%s", layer, nm->scale2);
    }
}

// ---- quantizer ----

// Derives codebook `level` of rvq `prefix` into q->codebooks: embedding_sum / max(usage, 1e-5).
static void load_codebook(struct loader *L, struct quantizer *q, const char *prefix, int index,
                          int level) {
    char layers[128], stem[256];
    snprintf(layers, sizeof layers, L->nm->codebooks, prefix);
    snprintf(stem, sizeof stem, "%s%d.%s", layers, index, L->nm->codebook);
    int64_t sd[2] = {q->bins, q->dim}, ud[1] = {q->bins};
    const float *sum = requiref(L, 2, sd, "%s.%s", stem, L->nm->embedding_sum);
    const float *usage = requiref(L, 1, ud, "%s.cluster_usage", stem);
    if (!sum || !usage) return;
    // the optional "initialized" flag is only a sanity check: 1 once the codebook was trained
    char flag[ST_MAX_NAME + 1];
    snprintf(flag, sizeof flag, "%s.%s", stem, L->nm->initialized);
    if (has(L, flag)) {
        int64_t fd[1] = {1};
        const float *init = require(L, flag, 1, fd);
        if (init && init[0] != 1.0f)
            mimi_log(L->m, MIMI_LOG_WARN, "codebook '%s' is marked as not initialized", stem);
    }
    float *book = q->codebooks + (size_t)level * q->bins * q->dim;
    for (int j = 0; j < q->bins; j++) {
        float u = usage[j] > 1e-5f ? usage[j] : 1e-5f;
        double norm = 0.0;
        for (int i = 0; i < q->dim; i++) {
            float e = sum[(size_t)j * q->dim + i] / u;
            book[(size_t)j * q->dim + i] = e;
            norm += (double)e * e;
        }
        q->norms[(size_t)level * q->bins + j] = (float)norm;
    }
}

static void load_quantizer(struct loader *L, struct quantizer *q, int latent, int frame_dim) {
    const struct naming *nm = L->nm;
    char prefix[128];
    if (!nm->rvq_first) {
        // no quantizer: a 1x1 conv (latent, frame_dim, 1) maps continuous latents back
        int64_t pd[3] = {latent, frame_dim, 1};
        q->latent = latent;
        q->projection = require(L, nm->projection, 3, pd);
        return;
    }
    int64_t in[3] = {-1, latent, 1};
    q->latent = latent;
    q->in_first = requiref(L, 3, in, "%s.input_proj.weight", nm->rvq_first);
    q->dim = (int)in[0];
    int64_t out[3] = {latent, q->dim, 1}, in2[3] = {q->dim, latent, 1};
    q->out_first = requiref(L, 3, out, "%s.output_proj.weight", nm->rvq_first);
    q->in_rest = requiref(L, 3, in2, "%s.input_proj.weight", nm->rvq_rest);
    q->out_rest = requiref(L, 3, out, "%s.output_proj.weight", nm->rvq_rest);
    if (L->failed) return;
    // the entry count comes from the first codebook, the level count from the highest index
    char name[ST_MAX_NAME + 1];
    snprintf(prefix, sizeof prefix, nm->codebooks, nm->rvq_first);
    snprintf(name, sizeof name, "%s0.%s.%s", prefix, nm->codebook, nm->embedding_sum);
    char full[ST_MAX_NAME + 16];
    snprintf(full, sizeof full, "%s%s", L->prefix, name);
    const struct st_tensor *first = st_find(&L->m->file, full);
    q->bins = first && first->n_dims == 2 ? (int)first->shape[0] : 0;
    if (q->bins < 1) {
        int64_t sd[2] = {-1, q->dim};
        require(L, name, 2, sd);
        if (!L->failed) fail(L, "tensor '%s': no codebook entries", name);
        return;
    }
    snprintf(prefix, sizeof prefix, nm->codebooks, nm->rvq_rest);
    q->n_q = 1 + max_index(L, prefix) + 1;
    q->codebooks = own(L, sizeof(float) * (size_t)q->n_q * q->bins * q->dim);
    q->norms = own(L, sizeof(float) * (size_t)q->n_q * q->bins);
    if (L->failed) return;
    load_codebook(L, q, nm->rvq_first, 0, 0);
    for (int k = 1; k < q->n_q && !L->failed; k++) load_codebook(L, q, nm->rvq_rest, k - 1, k);
}

// ---- the whole model ----

static void load_resamplers(struct loader *L, struct mimi_model *m) {
    const int d = m->latent_dim;
    int64_t down[3] = {-1, d, -1}, up[3] = {d, 1, -1};
    struct mimi_conv *c = &m->downsample;
    c->weight = require(L, L->nm->downsample, 3, down);
    c->c_in = d;
    c->c_out = m->frame_dim = (int)down[0];
    c->kernel = (int)down[2];
    c->stride = c->kernel / 2;
    c->groups = 1;
    c->replicate_first = 1;
    c = &m->upsample;
    c->weight = require(L, L->nm->upsample, 3, up);
    c->c_in = c->c_out = c->groups = d;
    c->kernel = (int)up[2];
    c->stride = c->kernel / 2;
    c->transposed = 1;
    if (!L->failed && (m->downsample.stride < 1 || m->upsample.stride != m->downsample.stride ||
                       m->downsample.kernel % 2 || m->upsample.kernel % 2))
        fail(L, "resampling kernels %d (down) and %d (up) do not give one matching even stride",
             m->downsample.kernel, m->upsample.kernel);
}

// Checks that the pieces fit together (channels, rates) once every tensor is bound.
static void check_geometry(struct loader *L, struct mimi_model *m) {
    if (L->failed) return;
    const struct seanet *e = &m->encoder, *dcd = &m->decoder;
    int enc_out = e->layers[e->n_layers - 1].channels_out;
    if (enc_out != m->latent_dim || dcd->layers[0].conv.c_in != m->latent_dim)
        fail(L, "SEANet latent has %d channels but the transformer has %d", enc_out, m->latent_dim);
    else if (dcd->layers[dcd->n_layers - 1].channels_out != 1)
        fail(L, "the decoder produces %d channels, expected mono audio",
             dcd->layers[dcd->n_layers - 1].channels_out);
    else if (e->hop != dcd->hop)
        fail(L, "encoder hop %d differs from decoder hop %d", e->hop, dcd->hop);
    else if (m->quantizer.n_q && m->frame_dim != m->latent_dim)
        fail(L, "the downsample produces %d channels but the quantizer takes %d", m->frame_dim,
             m->latent_dim);
    else if (m->enc_tr.d_model % MIMI_N_HEADS || (m->enc_tr.head_dim % 2))
        fail(L, "model width %d does not split into %d rotary heads", m->enc_tr.d_model, MIMI_N_HEADS);
    if (L->failed) return;
    m->steps_per_frame = m->downsample.stride;
    m->frame_size = e->hop * m->steps_per_frame;
    m->sample_rate = MIMI_SAMPLE_RATE;
}

static int detect_naming(struct loader *L) {
    const struct st_file *f = &L->m->file;
    L->prefix = "";
    if (st_find(f, "encoder.model.0.conv.conv.weight")) L->nm = &NAMING_KYUTAI;
    else if (st_find(f, "encoder.layers.0.conv.weight")) L->nm = &NAMING_HF;
    else if (st_find(f, "encoder.model.0.conv.weight")) L->nm = &NAMING_POCKET;
    else if (st_find(f, "mimi.encoder.model.0.conv.weight")) {
        // a Pocket TTS checkpoint: the codec under "mimi.", the TTS model's tensors ignored
        L->nm = &NAMING_POCKET;
        L->prefix = "mimi.";
    } else {
        fail(L, "not a Mimi checkpoint: none of 'encoder.model.0.conv.conv.weight' (Kyutai naming), "
                "'encoder.layers.0.conv.weight' (Hugging Face naming) or "
                "'mimi.encoder.model.0.conv.weight' (Pocket TTS) is present (%d tensors)",
             f->n_tensors);
        return MIMI_EFORMAT;
    }
    L->m->naming = L->nm->name;
    L->m->family = L->nm->family;
    L->m->exact_window = L->nm->rvq_first == NULL;
    return 0;
}

void mimi_model_free(struct mimi_model *m) {
    if (!m) return;
    mimi_cuda_model_free(m);
    mimi_cpu_free(m);
    for (int i = 0; i < m->n_owned; i++) free(m->owned[i]);
    free(m->owned);
    st_close(&m->file);
    free(m);
}

// Binds every tensor of an opened file. Returns 0 or MIMI_EFORMAT / MIMI_ENOMEM.
int mimi_model_bind(struct mimi_model *m) {
    struct loader L = {.m = m};
    if (detect_naming(&L)) return MIMI_EFORMAT;
    load_seanet(&L, &m->encoder, "encoder", 1);
    m->latent_dim = L.failed ? 0 : m->encoder.layers[m->encoder.n_layers - 1].channels_out;
    load_transformer(&L, &m->enc_tr, "encoder", m->latent_dim);
    load_transformer(&L, &m->dec_tr, "decoder", m->latent_dim);
    load_resamplers(&L, m);
    load_quantizer(&L, &m->quantizer, m->latent_dim, m->frame_dim);
    load_seanet(&L, &m->decoder, "decoder", m->latent_dim);
    check_geometry(&L, m);
    return L.failed ? MIMI_EFORMAT : mimi_cpu_prepare(m);
}
