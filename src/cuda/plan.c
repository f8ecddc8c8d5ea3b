/*
 * plan.c - builds the GPU backend's static per-frame plans from the model description (the
 * weights they read are bound in weights.c).
 *
 * A plan is the ordered op list of one step of one direction for R rows, with every pointer and
 * size fixed: the CUDA backend captures it once per row bucket as a graph, the emulator in
 * tests/test_gpu_plan.c interprets it on the CPU. Geometry comes from the layer tables
 * (internal.h); nothing here assumes Mimi's particular sizes. The op semantics are in ops.h,
 * the CPU reference of the layers in src/nn/.
 */
#include <stdlib.h>
#include <string.h>

#include "plan.h"

#define ALIGN_ELEMS 32  // 128-byte alignment of every buffer

static size_t take(size_t *used, size_t n) {
    size_t off = (*used + ALIGN_ELEMS - 1) / ALIGN_ELEMS * ALIGN_ELEMS;
    *used = off + n;
    return off;
}

static size_t maxz(size_t a, size_t b) { return a > b ? a : b; }

int gpu_bucket(int n, int capacity) {
    int r = 1;
    while (r < n) r *= 2;
    return r < capacity ? r : capacity;
}

size_t gpu_stage_input_offset(int R) { return ((size_t)R + 1 + ALIGN_ELEMS - 1) / ALIGN_ELEMS * ALIGN_ELEMS; }

// ---- layout ----

// The im2col scratch the convs need: per row of a step, f32 columns and bf16 ones (2-byte
// values; MIMI_PRECISION_FAST_BF16's products, see plan_conv), and per step the f32 columns of
// products too narrow for cuBLAS, which stay f32 in every mode.
struct col_need {
    size_t f32, bf16, narrow;
};

// A conv product over ck values (plus the bias row when `bias`) and T columns per row.
static void need_col(struct col_need *n, int conv_bf16, int ck, int bias, int T) {
    if (conv_bf16 && ck >= GPU_BF16_MIN_REDUCTION) {
        n->bf16 = maxz(n->bf16, (size_t)gpu_conv_ld_bf16(ck + bias) * T);
        n->narrow = maxz(n->narrow, (size_t)gpu_conv_ld(ck + bias) * GPU_SKINNY_MAX);
    } else {
        n->f32 = maxz(n->f32, (size_t)gpu_conv_ld(ck + bias) * T);
    }
}

int gpu_layout_init(struct gpu_layout *L, const struct mimi_model *m, int direction, int capacity,
                    int n_codebooks, int attention, int frames) {
    memset(L, 0, sizeof *L);
    if (gpu_check_model(m)) return MIMI_EUNSUPPORTED;
    const int encode = direction == MIMI_DIRECTION_ENCODE, codes = m->quantizer.n_q > 0;
    const struct seanet *sn = encode ? &m->encoder : &m->decoder;
    const struct transformer *tr = encode ? &m->enc_tr : &m->dec_tr;
    const struct quantizer *q = &m->quantizer;
    const size_t C = (size_t)capacity, CF = C * frames;  // CF: latent frames of a full step
    L->direction = direction;
    L->capacity = capacity;
    L->n_codebooks = n_codebooks;
    L->attention = attention;
    L->frames = frames;
    L->steps = m->steps_per_frame * frames;
    L->frame = m->frame_size * frames;
    L->d = m->latent_dim;
    L->frame_dim = m->frame_dim;
    L->ring = attention == MIMI_ATTENTION_RING && !m->exact_window ? tr->context : tr->context + L->steps;
    L->in_per_row = encode ? L->frame : (codes ? n_codebooks : L->frame_dim) * frames;
    L->out_per_row = encode ? (codes ? n_codebooks : L->frame_dim) * frames : L->frame;

    // per-slot state: counters, position ring, conv histories and tails, KV rings
    size_t u = 0;
    L->st_next_pos = take(&u, 1);
    L->st_started = take(&u, 1);
    L->st_positions = take(&u, (size_t)L->ring);
    size_t act = 0, res0 = 0, res1 = 0, taps = 0;
    struct col_need col = {0, 0, 0};
    L->conv_bf16 = gpu_bf16_products(m->precision);
    L->mma_min_cols = GPU_MMA_MIN_COLS;
    L->direct_blocks = GPU_DIRECT_PER_SM * GPU_DIRECT_SMS;
    L->smem_optin = GPU_SMEM_OPTIN;
    const size_t conv_state = take(&u, 0);  // a slot's conv histories and tails start here
    int T = encode ? L->frame : L->steps;
    for (int i = 0; i < sn->n_layers; i++) {
        const struct seanet_layer *l = &sn->layers[i];
        const struct mimi_conv *c = &l->conv;
        const int K = c->kernel, S = c->stride;
        if (l->kind == SEANET_CONV) {
            if (K > S) L->st_conv[i] = take(&u, (size_t)c->c_in * (K - S));
            T /= S;
            need_col(&col, L->conv_bf16, c->c_in * K, 1, T);
            act = maxz(act, (size_t)c->c_out * T);
        } else if (l->kind == SEANET_CONVTR) {
            if (K > S) L->st_conv[i] = take(&u, (size_t)c->c_out * (K - S));
            if (c->groups == 1) taps = maxz(taps, (size_t)c->c_out * K * T);
            if (c->groups == 1 && L->conv_bf16) col.bf16 = maxz(col.bf16, (size_t)c->c_in * T);  // plan_convtr's input
            T *= S;
            act = maxz(act, (size_t)c->c_out * T);
        } else if (l->kind == SEANET_RESBLOCK) {
            if (K > S) L->st_conv[i] = take(&u, (size_t)c->c_in * (K - S));
            need_col(&col, L->conv_bf16, c->c_in * K, 1, T);
            res1 = maxz(res1, (size_t)gpu_conv_ld(c->c_out + 1) * T);
            res0 = maxz(res0, (size_t)c->c_in * T);
            if (!encode && m->precision != MIMI_PRECISION_STRICT && GPU_RESBLOCK_FITS(c->c_in, c->c_out))
                L->edges_per_row = maxz(L->edges_per_row, GPU_RESBLOCK_EDGES(c->c_in, T));  // (the last conv's)
        }
    }
    if (T != (encode ? L->steps : L->frame)) {
        mimi_log(m, MIMI_LOG_ERROR, "cuda: SEANet %s gives %d steps per frame", encode ? "encoder" : "decoder", T);
        return MIMI_EUNSUPPORTED;
    }
    const struct mimi_conv *rs = encode ? &m->downsample : &m->upsample;
    const int P = rs->kernel - rs->stride;
    if (P > 0) L->st_resample = take(&u, (size_t)(encode ? rs->c_in : rs->c_out) * P);
    const size_t hist = take(&u, 0) - conv_state;  // their span, the most a step stages per row
    if (encode) need_col(&col, L->conv_bf16, rs->c_in * rs->kernel, 0, L->steps / rs->stride);
    // KV rings: f32, or two bfloat16 values per element, or (streaming steps of FAST_INT8_KV)
    // four int8 values per element and a scale per entry and head (ops.h); whole-signal passes,
    // whose rings live for one call, keep bfloat16
    const int p = m->precision, hd64 = tr->head_dim == GPU_ATT_ONEPASS_HD;
    L->kv_int8 = p == MIMI_PRECISION_FAST_INT8_KV && frames == 1 && hd64 && L->d % 16 == 0;
    L->kv_bf16 = !L->kv_int8 && hd64 &&
                 (p == MIMI_PRECISION_FAST_BF16_KV || p == MIMI_PRECISION_FAST_BF16 || p == MIMI_PRECISION_FAST_INT8_KV);
    const size_t ring_elems = L->kv_int8 ? (size_t)L->ring * (L->d / 4 + tr->n_heads)
                                         : (size_t)L->ring * L->d / (L->kv_bf16 ? 2 : 1);
    for (int l = 0; l < tr->n_layers; l++) {
        L->st_keys[l] = take(&u, ring_elems);
        L->st_values[l] = take(&u, ring_elems);
    }
    L->slot_elems = take(&u, 0);

    // scratch for `capacity` rows
    const size_t rows = C * L->steps, d = (size_t)L->d;
    size_t s = 0;
    L->sc_stage = take(&s, gpu_stage_input_offset(capacity) + C * L->in_per_row);
    L->sc_out = take(&s, C * L->out_per_row);
    L->sc_act[0] = take(&s, act * C);
    L->sc_act[1] = take(&s, act * C);
    L->sc_res[0] = take(&s, res0 * C);
    L->sc_res[1] = take(&s, res1 * C);
    L->sc_col = take(&s, maxz(maxz(col.f32 * C, (col.bf16 * C + 1) / 2), col.narrow));  // bf16: two values a float
    L->sc_taps = take(&s, taps * C);
    L->sc_x = take(&s, rows * d);
    L->sc_x2 = take(&s, rows * d);
    L->sc_h = take(&s, rows * d);
    L->sc_y = take(&s, rows * d);
    L->sc_qkv = take(&s, rows * 3 * d);
    L->sc_att = take(&s, rows * d);
    L->sc_ff = take(&s, rows * tr->d_ff);
    L->sc_tr_in = take(&s, rows * d);
    L->sc_tr_out = take(&s, rows * d);
    L->sc_latent = take(&s, maxz(d, (size_t)L->frame_dim) * CF);
    L->sc_conv_part = take(&s, GPU_CONV_PART_FLOATS);
    L->sc_conv_counters = take(&s, GPU_CONV_COUNTERS);
    L->tails_elems = hist * (C < GPU_TAIL_ROWS ? C : GPU_TAIL_ROWS);
    L->sc_tails = take(&s, L->tails_elems);
    L->sc_edges = take(&s, L->edges_per_row * C);
    const int tr_rows = capacity < GPU_TR_MAX_ROWS / L->steps ? capacity : GPU_TR_MAX_ROWS / L->steps;
    if (gpu_transformer_fits(L->steps, L->steps, L->d, tr->d_ff, tr->head_dim, tr->n_layers)) {
        L->sc_tr_part = take(&s, 2 * (size_t)tr->n_heads * tr_rows * L->steps * L->d);  // 64-bit words
        L->sc_tr_barrier = take(&s, GPU_TR_COUNTERS);
    }
    if (codes) {
        L->sc_r = take(&s, CF * 2 * q->dim);  // the residual, and a small step's semantic query
        L->sc_scores = take(&s, CF * q->bins);
        L->sc_part = take(&s, 2 * GPU_RVQ_BLOCKS * GPU_SKINNY_MAX);
        L->sc_counter = take(&s, 1);
        L->sc_rvq_part = take(&s, 2 * 6 * (size_t)GPU_RVQ_CHAIN_MAX_BLOCKS * GPU_SKINNY_MAX);  // 64-bit words
        L->sc_rvq_barrier = take(&s, GPU_RVQ_CHAIN_COUNTERS);
        L->sc_e0 = take(&s, CF * 2 * q->dim);
    }
    L->scratch_elems = take(&s, 0);
    return MIMI_OK;
}

// ---- builder ----

struct builder {
    struct gpu_plan *p;
    const struct gpu_layout *L;
    const struct mimi_model *m;
    float *state, *scratch;
    const int32_t *row_slot;
    int32_t *started, *next_pos;
    const char *stage;
    int R, rc;
    struct op_tails tails;  // the step's staged histories and tails (stage_tail)
    size_t tails_used;
    struct gpu_op sink;     // absorbs ops once building failed
};

static struct gpu_op *emit(struct builder *B, int kind, const char *name) {
    struct gpu_plan *p = B->p;
    if (!B->rc && p->n_ops == p->cap_ops) {
        int cap = p->cap_ops ? 2 * p->cap_ops : 128;
        struct gpu_op *ops = realloc(p->ops, sizeof *ops * (size_t)cap);
        if (!ops) B->rc = MIMI_ENOMEM;
        else {
            p->ops = ops;
            p->cap_ops = cap;
        }
    }
    struct gpu_op *op = B->rc ? &B->sink : &p->ops[p->n_ops++];
    memset(op, 0, sizeof *op);
    op->kind = kind;
    op->name = name;
    op->stage = B->stage;
    return op;
}

static float *scratch(struct builder *B, size_t off) { return B->scratch + off; }
static float *state(struct builder *B, size_t off) { return B->state + off; }

// Row-major Y = W X products and the transformer's linears are all this one column-major call.
static struct op_gemm *gemm(struct builder *B, int ta, int tb, int m, int n, int k, const float *a, int lda,
                            const float *b, int ldb, float *c, int ldc, float beta) {
    struct op_gemm *g = &emit(B, GOP_GEMM, "sgemm")->u.gemm;
    *g = (struct op_gemm){.transa = ta, .transb = tb, .m = m, .n = n, .k = k, .a = a, .lda = lda, .b = b, .ldb = ldb,
                          .c = c, .ldc = ldc, .beta = beta};
    return g;
}

static void pointwise(struct builder *B, int mode, float *y, float *x, const float *bias, int channels,
                      size_t cols, int ones) {
    static const char *names[] = {"bias", "bias_elu", "residual", "elu", "gelu", "elu", "to_bf16", "elu_bf16",
                                  "gelu_bf16"};
    struct op_pointwise *a = &emit(B, GOP_POINTWISE, names[mode])->u.pointwise;
    *a = (struct op_pointwise){y, x, bias, channels, cols, mode, ones};
}

static void transpose(struct builder *B, const float *in, float *out, int rows, int cols) {
    struct op_transpose *t = &emit(B, GOP_TRANSPOSE, "transpose")->u.transpose;
    *t = (struct op_transpose){in, out, rows, cols};
}

// ---- convolutions ----

// Where a small step's direct conv or transposed conv stages the (C, R, P) history or tail that
// the slots keep at dst (slot 0's (C, P)): a share of the tails scratch, listed for the step's
// GOP_TAILS. NULL (carry it separately) past GPU_TAIL_ROWS rows or GPU_MAX_TAILS entries.
static int tails_room(const struct builder *B, int entries, size_t n) {
    return B->R <= GPU_TAIL_ROWS && B->tails.n + entries <= GPU_MAX_TAILS && B->tails_used + n <= B->L->tails_elems;
}

static float *stage_tail(struct builder *B, float *dst, int C, int P) {
    const size_t n = (size_t)C * B->R * P;
    if (!tails_room(B, 1, n)) return NULL;
    float *src = scratch(B, B->L->sc_tails + B->tails_used);
    B->tails_used += n;
    B->tails.e[B->tails.n++] = (struct gpu_tail){src, dst, C, P};
    return src;
}

// Products of at most this many multiply-adds run as one direct conv kernel: there cuBLAS
// cannot fill the chip and im2col and the activations cost a launch each (one stream's SEANet).
// Larger ones go to im2col + cuBLAS, whose products run near the chip's f32 rate; the direct
// kernel (CUDA cores, staged through shared memory) does not.
#define DIRECT_CONV_MAX_MACS (1 << 26)
// The reduction indices one block of a direct conv takes at most (two staged slices of the
// kernel, direct.cuh).
#define DIRECT_CONV_CHUNK 256

// Below DIRECT_CONV_MIN_COLS columns most lanes of a direct block would idle: im2col and the
// skinny kernel, which streams the weights, are faster there (measured at 2 and 16 columns).
#define DIRECT_CONV_MIN_COLS 5
static int direct_conv(int cols, double macs) { return cols >= DIRECT_CONV_MIN_COLS && macs <= DIRECT_CONV_MAX_MACS; }

// Splits a direct kernel's reduction of KK indices over `cols` columns, c_out channels and
// `phases` phases so that its blocks fill the chip in one wave (L->direct_blocks) and each stages
// a bounded slice, within the scratch for the parts' sums and the tile counters. Aiming at two
// waves (528 blocks on 132 SMs) left the encoder's strided convs 6.5-9 us each of blocks
// waiting for the first wave to end, and one stream's step 5-19 us slower (H100, 2026-12-05).
static struct gpu_split direct_split(struct builder *B, int KK, int cols, int c_out, int phases) {
    const long tiles = gpu_direct_tiles(cols, c_out, phases);
    const long outputs = (long)cols * c_out * phases;
    long s = B->L->direct_blocks / tiles;
    if (s < (KK + DIRECT_CONV_CHUNK - 1) / DIRECT_CONV_CHUNK) s = (KK + DIRECT_CONV_CHUNK - 1) / DIRECT_CONV_CHUNK;
    if (s > KK / 64) s = KK / 64;  // at least 8 indices per warp
    while (s > 1 && (s * outputs > GPU_CONV_PART_FLOATS || tiles > GPU_CONV_COUNTERS)) s--;
    if (s < 1) s = 1;
    struct gpu_split sp = {1, (int)(((KK + s - 1) / s + 3) & ~3L), scratch(B, B->L->sc_conv_part),
                           (uint32_t *)scratch(B, B->L->sc_conv_counters)};
    sp.splits = (KK + sp.chunk - 1) / sp.chunk;
    return sp;
}

// The reduction of a product over k rows whose last is a row of ones (the bias): in fast mode
// padded with more rows of ones to gpu_conv_ld(k), a multiple of 4, against the zero weights
// that pad each packed weight row. cuBLAS's sm_90 TF32 kernels need that alignment (with an odd
// reduction it falls back to sm_80 kernels of 4-byte loads); strict mode takes the bias row
// alone (its f32 products ran 0.5% faster so).
static int reduction(const struct builder *B, int k) {
    return B->m->precision == MIMI_PRECISION_STRICT ? k : gpu_conv_ld(k);
}

// The input side of a conv: [history | f(x)] of c's input, f = ELU when `elu`.
static struct op_im2col conv_input(struct builder *B, const struct mimi_conv *c, const float *x, int T, int elu,
                                   float *hist, int ones) {
    const int K = c->kernel, S = c->stride, H = K - S;
    return (struct op_im2col){x, scratch(B, B->L->sc_col), H > 0 ? hist : NULL, B->started,
                              B->row_slot, B->L->slot_elems, c->c_in, K, S, H, T, B->R, elu,
                              c->replicate_first, ones, 0, B->L->conv_bf16, NULL};
}

// Whether a product over N columns and ck values runs on bf16 operands (MIMI_PRECISION_FAST_BF16,
// enough values, and wide enough for cuBLAS: narrower ones go to the f32 skinny kernel).
static int bf16_product(const struct builder *B, int N, int ck) {
    return B->L->conv_bf16 && ck >= GPU_BF16_MIN_REDUCTION && N > GPU_SKINNY_MAX;
}

// y (c_out, R, T/S) = g(conv(f(x))) over [history | f(x)], f = ELU when `elu`, g = ELU when
// `post_elu`, added to y when `accumulate`; then the newest history columns are carried. With
// `with_bias`, W carries the bias as its column c_in*K (c_out, gpu_conv_ld(c_in*K + 1), zeros
// after the bias). Large products run as im2col (with rows of ones for the bias and the zero
// weights after it: reduction) and one matrix product, which takes post_elu = 0 and
// accumulate = 0 only; in bfloat16 (bf16_product) with W16, W in bf16 with rows of
// gpu_conv_ld_bf16(c_in*K + 1) values (c_in*K without bias). With `elu_out` (y only feeds an ELU
// next) the conv's own kernel applies that ELU to y where it can (one conv kernel, or a product
// on the skinny kernel); returns whether it does.
static int plan_conv(struct builder *B, const struct mimi_conv *c, const float *W, const float *W16, int with_bias,
                     const float *x, float *y, int T, int elu, float *hist, int post_elu, int accumulate, int elu_out) {
    const int N = B->R * (T / c->stride), ck = c->c_in * c->kernel + with_bias;
    const int ld = with_bias ? gpu_conv_ld(ck) : ck;
    const int direct = direct_conv(N, (double)N * c->c_out * ck);
    // one output channel over many columns: im2col would write K copies of the input for a
    // product that reads them once
    const int narrow = !direct && c->c_out == 1 && N >= GPU_NARROW_COLS && c->kernel <= GPU_NARROW_MAX_K &&
                       sizeof(float) * GPU_NARROW_CHANNELS * GPU_NARROW_WINDOW(c->kernel, c->stride) <= 40 * 1024;
    if (direct || narrow) {
        struct op_conv *d = &emit(B, GOP_CONV, "conv")->u.conv;
        *d = (struct op_conv){conv_input(B, c, x, T, elu, hist, 0), W, y, c->c_out, ld, with_bias, post_elu, accumulate,
                              direct_split(B, ck - with_bias, N, c->c_out, 1), narrow, NULL, 0};
        if (d->in.H > 0 && !narrow && T % c->stride == 0) d->tail = stage_tail(B, hist, c->c_in, d->in.H);
        d->elu_out = elu_out;
        if (d->in.H > 0 && !d->tail) emit(B, GOP_CARRY, "carry")->u.im2col = d->in;
        return elu_out;
    }
    if (post_elu || accumulate) B->rc = MIMI_EUNSUPPORTED;
    // im2col (kk, N) from [hist | f(x)], then carry the newest H columns into hist
    const int bf16 = bf16_product(B, N, ck - with_bias);
    if (bf16 && !W16) B->rc = MIMI_EUNSUPPORTED;
    const int kk = !with_bias ? ck : bf16 ? gpu_conv_ld_bf16(ck) : reduction(B, ck);
    struct op_im2col a = conv_input(B, c, x, T, elu, hist, kk - (ck - with_bias));
    a.col_bf16 = bf16;
    if (a.H > 0) a.tail = stage_tail(B, hist, c->c_in, a.H);  // small steps: for the step's tails op
    emit(B, GOP_IM2COL, "im2col")->u.im2col = a;
    if (a.H > 0 && !a.tail) emit(B, GOP_CARRY, "carry")->u.im2col = a;
    struct op_gemm *g = gemm(B, 0, 0, N, c->c_out, kk, a.col, N, bf16 ? W16 : W, bf16 ? kk : ld, y, N, 0.0f);
    g->ab_bf16 = bf16;
    g->elu = elu_out && !bf16 && N <= GPU_SKINNY_MAX;  // (the skinny kernel's)
    return g->elu;
}

// Whether op_conv_mma runs conv c (Wf: its weights in fragment order, or NULL) over T steps per
// row: FAST_BF16, an ELU before it, a history, more columns than a direct kernel takes and at
// least mma_min_cols.
static int conv_mma_takes(const struct builder *B, const struct mimi_conv *c, const float *Wf, int T, int elu,
                          const float *hist) {
    const int N = B->R * (T / c->stride);
    return Wf && elu && hist && GPU_CONV_MMA_FITS(c->c_in, c->c_out, c->kernel, c->stride, T) &&
           !direct_conv(N, (double)N * c->c_out * (c->c_in * c->kernel + 1)) && N >= B->L->mma_min_cols;
}

// How plan_convtr runs a transposed conv over T steps per row (Wf: its op_convtr_mma weights or
// NULL): one direct kernel, one op_convtr_mma, or a product (of bf16 operands, its input
// converted first) and the overlap-add.
enum convtr_form { CONVTR_DIRECT, CONVTR_MMA, CONVTR_PRODUCT, CONVTR_PRODUCT_BF16 };
static enum convtr_form convtr_form(const struct builder *B, const struct mimi_conv *c, const float *Wf, int T) {
    const int K = c->kernel, S = c->stride, N = B->R * T, dense = c->groups == 1;
    if (dense && K == 2 * S && direct_conv(B->R * (T + 1), (double)B->R * (T + 1) * c->c_out * S * 2 * c->c_in))
        return CONVTR_DIRECT;
    if (Wf && GPU_CONVTR_MMA_FITS(c->c_in, c->c_out, K, S, T) && N >= B->L->mma_min_cols) return CONVTR_MMA;
    return dense && bf16_product(B, N, c->c_in) ? CONVTR_PRODUCT_BF16 : CONVTR_PRODUCT;
}

// Whether the ELU before that transposed conv costs a pass of its own (CONVTR_MMA and the bf16
// conversion apply it as they read).
static int convtr_elu_pass(const struct builder *B, const struct mimi_conv *c, const float *Wf, int T) {
    const enum convtr_form f = convtr_form(B, c, Wf, T);
    return f == CONVTR_DIRECT || f == CONVTR_PRODUCT;
}

// y (c_out, R, S*T) = convtr(f(x (c_in, R, T))), f = ELU when `elu`, carrying each slot's tail;
// a dense one's product in bfloat16 (bf16_product) with W16, W in bf16, and f(x) converted to
// bf16 first (one pass), else f applied to x in place; or, with Wf (W in op_convtr_mma's
// fragments) where it fits, op_convtr_mma.
static void plan_convtr(struct builder *B, const struct mimi_conv *c, const float *W, const float *W16,
                        const float *Wf, const float *bias, float *x, float *y, int T, float *tail, int elu) {
    const int K = c->kernel, S = c->stride, N = B->R * T, dense = c->groups == 1;
    const enum convtr_form form = convtr_form(B, c, Wf, T);
    const int direct = form == CONVTR_DIRECT;
    if (form == CONVTR_MMA) {
        // FAST_BF16's large steps: one kernel on bf16 tensor cores (the ELU in it), then the tails
        struct op_convtr_mma a = {{NULL, x, W, bias, y, tail, B->row_slot, B->L->slot_elems, c->c_out, K, S, T, B->R, 0,
                                   NULL},
                                  Wf, c->c_in, elu};
        emit(B, GOP_CONVTR_MMA, "convtr_mma")->u.convtr_mma = a;
        emit(B, GOP_CONVTR_MMA_TAIL, "convtr_mma_tail")->u.convtr_mma = a;
        return;
    }
    const int bf16 = form == CONVTR_PRODUCT_BF16;
    if (elu && !bf16) pointwise(B, EW_ELU, x, NULL, NULL, 1, (size_t)c->c_in * N, 0);
    struct op_convtr a = {dense ? scratch(B, B->L->sc_taps) : NULL, x, dense ? NULL : W, bias, y, tail,
                          B->row_slot, B->L->slot_elems, c->c_out, K, S, T, B->R, 0, NULL};
    if (direct) {
        // one kernel, its next tail staged (for the step's GOP_TAILS, or else in the unused taps
        // buffer, then stored)
        a.taps = NULL;
        a.w = W;
        float *next = stage_tail(B, tail, c->c_out, S);
        struct op_convtr_direct d = {a, c->c_in, next ? next : scratch(B, B->L->sc_taps),
                                     direct_split(B, 2 * c->c_in, B->R * (T + 1), c->c_out, S)};
        emit(B, GOP_CONVTR_DIRECT, "convtr_direct")->u.convtr_direct = d;
        if (!next) emit(B, GOP_CONVTR_COPY, "convtr_copy")->u.convtr_direct = d;
        return;
    }
    // taps (c_out*K, N) = W_packed (c_out*K, c_in) . x (c_in, N)
    if (dense) {
        if (bf16 && !W16) B->rc = MIMI_EUNSUPPORTED;
        const float *xin = x;
        if (bf16) {  // f(x) in bf16 in the im2col scratch, which no conv uses meanwhile
            float *x16 = scratch(B, B->L->sc_col);
            pointwise(B, elu ? EW_ELU_BF16 : EW_BF16, x16, x, NULL, 1, (size_t)c->c_in * N, 0);
            xin = x16;
        }
        gemm(B, 0, 0, N, c->c_out * K, c->c_in, xin, N, bf16 ? W16 : W, c->c_in, (float *)a.taps, N, 0.0f)->ab_bf16 =
            bf16;
    }
    a.carry = !dense && K > S && GPU_CONVTR_OUT_CARRIES(K, S, T);
    if (dense && K == 2 * S) a.next = stage_tail(B, tail, c->c_out, S);  // small steps
    emit(B, GOP_CONVTR_OUT, "convtr_out")->u.convtr = a;
    if (K > S && !a.carry && !a.next) emit(B, GOP_CONVTR_TAIL, "convtr_tail")->u.convtr = a;
}

// Whether the conv `c` after a resblock over c_in channels and T steps (and an ELU) can ride in
// the resblock's kernel (struct op_resblock's `last`): one output channel, K = GPU_RESBLOCK_K,
// stride 1, in a fast precision, with room for the edges.
static int last_fits(const struct builder *B, const struct mimi_conv *c, int c_in, int T) {
    return B->m->precision != MIMI_PRECISION_STRICT && c->c_out == 1 && c->c_in == c_in && c->kernel == GPU_RESBLOCK_K &&
           c->stride == 1 && c->groups == 1 && !c->replicate_first && GPU_RESBLOCK_LAST_FITS(T) &&
           GPU_RESBLOCK_EDGES(c_in, T) <= B->L->edges_per_row;
}

// How plan_resblock runs a block over T steps per row: small steps one op_resblock in its step
// form (the top two levels) or two direct kernels; large ones one op_resblock_mma (FAST_BF16,
// below the top level), one op_resblock, or im2col and two products.
enum resblock_form { RESBLOCK_STEP, RESBLOCK_DIRECT, RESBLOCK_MMA, RESBLOCK_KERNEL, RESBLOCK_PRODUCTS };
static enum resblock_form resblock_form(const struct builder *B, const struct seanet_layer *l,
                                        const struct gpu_conv_w *w, int T, int with_last) {
    const int c = l->conv.c_in, hid = l->conv.c_out, N = B->R * T;
    const int k3 = w->w1t && l->conv.kernel == GPU_RESBLOCK_K && l->conv.stride == 1 && l->conv.groups == 1 &&
                   !l->conv.replicate_first;
    if (direct_conv(N, (double)N * hid * (c * l->conv.kernel + 1)))
        return k3 && GPU_RESBLOCK_STEP_FITS(c, hid) && GPU_RESBLOCK_STEP_SMEM(c) <= B->L->smem_optin ? RESBLOCK_STEP
                                                                                                  : RESBLOCK_DIRECT;
    if (w->wf && !with_last && GPU_RESBLOCK_MMA_FITS(c, hid, T) && N >= B->L->mma_min_cols) return RESBLOCK_MMA;
    if (k3 && GPU_RESBLOCK_FITS(c, hid)) return RESBLOCK_KERNEL;
    return RESBLOCK_PRODUCTS;
}

// x (c, R, T) + conv1x1(elu(conv_k(elu(x)))): returns where the result is, x itself or `out`.
// Small steps run one op_resblock in its step form into `out` (the top two levels) or two direct
// kernels; large ones one op_resblock (or, in FAST_BF16, op_resblock_mma) kernel into `out` where
// its geometry fits, else im2col and two products, the second accumulating into x (beta = 1) with
// its bias riding on a row of ones written after the hidden activations. With `last` (fitting
// last_fits) the op_resblock kernel also runs that conv (weights last_w, history last_hist) and
// `out` is its (R, T) output; *fused says whether it did. With `elu_out` (the block's output only
// feeds an ELU) small steps apply that ELU in their last kernel; *elu_done says whether they did.
// With `first` (first_fits: the block is an op_resblock) x is not there: the kernel computes it
// from first's PCM, whose history the block's ops carry (or, in the step form, stage).
static float *plan_resblock(struct builder *B, const struct seanet_layer *l, const struct gpu_conv_w *w,
                            float *x, float *out, int T, float *hist, const float *last_w, float *last_hist,
                            int *fused, int elu_out, int *elu_done, const struct gpu_first_conv *first) {
    const int c = l->conv.c_in, hid = l->conv.c_out, N = B->R * T;
    const enum resblock_form form = resblock_form(B, l, w, T, last_w != NULL);
    float *mid = scratch(B, B->L->sc_res[1]);  // (gpu_conv_ld(hid + 1), N)
    *fused = *elu_done = 0;
    if (first && form != RESBLOCK_KERNEL && form != RESBLOCK_STEP) B->rc = MIMI_EUNSUPPORTED;
    if (form == RESBLOCK_STEP) {
        // one kernel into `out`, the ELU after it applied there; the history staged for the tails
        // (with `first`, the PCM's too: first_fits checked the room)
        struct op_resblock *rb = &emit(B, GOP_RESBLOCK, "resblock_step")->u.resblock;
        *rb = (struct op_resblock){conv_input(B, &l->conv, x, T, 1, hist, 0), w->w1t, w->w2t, out, hid, 0,
                                   {NULL, NULL, NULL, NULL}, 0, {{0}, NULL, 0}, {1, elu_out, NULL, NULL}};
        rb->step.tail = stage_tail(B, hist, c, rb->in.H);
        if (first) {
            rb->has_first = 1;
            rb->first = *first;
            rb->step.first_tail = stage_tail(B, (float *)first->in.hist, 1, first->in.H);  // (the layer's state)
            if (!rb->step.tail || !rb->step.first_tail) B->rc = MIMI_EUNSUPPORTED;
        } else if (!rb->step.tail) {
            emit(B, GOP_CARRY, "carry")->u.im2col = rb->in;  // after: the kernel reads the old history
        }
        *elu_done = elu_out;
        return out;
    }
    if (form == RESBLOCK_DIRECT) {
        // mid = elu(conv_k(elu(x))); x += conv1x1(mid): two kernels, no ones row
        plan_conv(B, &l->conv, w->w, NULL, 1, x, mid, T, 1, hist, 1, 0, 0);
        *elu_done = plan_conv(B, &l->conv2, w->w2, NULL, 1, mid, x, T, 0, NULL, 0, 1, elu_out);
        return x;
    }
    if (form == RESBLOCK_MMA) {
        // FAST_BF16 below the top level: the block on bf16 tensor cores, out of place
        struct op_resblock_mma *rb = &emit(B, GOP_RESBLOCK_MMA, "resblock_mma")->u.resblock_mma;
        *rb = (struct op_resblock_mma){conv_input(B, &l->conv, x, T, 1, hist, 0), w->wf, w->w2f, w->w, w->w2,
                                       gpu_conv_ld(c * l->conv.kernel + 1), gpu_conv_ld(hid + 1), hid, out};
        emit(B, GOP_CARRY, "carry")->u.im2col = rb->in;  // after: the kernel reads the old history
        return out;
    }
    if (form == RESBLOCK_KERNEL) {
        struct op_resblock *rb = &emit(B, GOP_RESBLOCK, "resblock")->u.resblock;
        *rb = (struct op_resblock){conv_input(B, &l->conv, x, T, 1, hist, 0), w->w1t, w->w2t, out, hid, 0,
                                  {NULL, NULL, NULL, NULL}, 0, {{0}, NULL, 0}, {0, 0, NULL, NULL}};
        if (first) {  // its second launch carries the history; then the PCM's is carried
            rb->has_first = 1;
            rb->first = *first;
            emit(B, GOP_CARRY, "carry")->u.im2col = first->in;
            return out;
        }
        if (last_w) {
            rb->has_last = *fused = 1;
            rb->y = NULL;
            rb->last = (struct gpu_last_conv){last_w, out, last_hist, scratch(B, B->L->sc_edges)};
        }
        emit(B, GOP_CARRY, "carry")->u.im2col = rb->in;  // after: the kernel reads the old history
        return out;
    }
    plan_conv(B, &l->conv, w->w, w->w_bf16, 1, x, mid, T, 1, hist, 0, 0, 0);
    if (bf16_product(B, N, hid)) {
        // elu(mid) and the ones rows in bf16 in the im2col scratch, which the first product has
        // consumed (its bf16 columns, gpu_conv_ld_bf16(c*K + 1) rows, outnumber these)
        if (!w->w2_bf16) B->rc = MIMI_EUNSUPPORTED;
        const int k16 = gpu_conv_ld_bf16(hid + 1);
        float *mid16 = scratch(B, B->L->sc_col);
        pointwise(B, EW_ELU_BF16, mid16, mid, NULL, hid, (size_t)N, k16 - hid);
        gemm(B, 0, 0, N, c, k16, mid16, N, w->w2_bf16, k16, x, N, 1.0f)->ab_bf16 = 1;
        return x;
    }
    const int k2 = reduction(B, hid + 1);
    pointwise(B, EW_ELU_ONES, mid, NULL, NULL, hid, (size_t)N, k2 - hid);
    gemm(B, 0, 0, N, c, k2, mid, N, w->w2, gpu_conv_ld(hid + 1), x, N, 1.0f);
    return x;
}

// Whether layer i, a conv over the stack's input x, can ride in the op_resblock of the block
// after it (op_resblock.first, writing y to `out`): one input channel, stride 1, K <=
// GPU_FIRST_MAX_K, with a history, as many outputs as the block's channels; in the large steps'
// kernel with 16-byte rows, in the small steps' (its step form) with room for both staged
// histories.
static int first_fits(const struct builder *B, const struct seanet *s, const struct gpu_conv_w *w, int i,
                      const float *x, const float *out, int T) {
    const struct mimi_conv *c = &s->layers[i].conv;
    if (i + 1 >= s->n_layers || s->layers[i + 1].kind != SEANET_RESBLOCK || !B->L->st_conv[i] || !B->L->st_conv[i + 1])
        return 0;
    const struct seanet_layer *rb = &s->layers[i + 1];
    const int ch = rb->conv.c_in;
    if (!(c->c_in == 1 && c->stride == 1 && c->groups == 1 && c->kernel > 1 && c->kernel <= GPU_FIRST_MAX_K &&
          c->c_out == ch))
        return 0;
    const enum resblock_form form = resblock_form(B, rb, &w[i + 1], T, 0);
    if (form == RESBLOCK_STEP)
        return GPU_RESBLOCK_STEP_FIRST(ch) &&
               tails_room(B, 2, (size_t)B->R * (ch * (rb->conv.kernel - 1) + c->kernel - 1));
    return form == RESBLOCK_KERNEL && GPU_RESBLOCK_FITS(ch, rb->conv.c_out) && T % 4 == 0 &&
           (uintptr_t)x % 16 == 0 && (uintptr_t)out % 16 == 0;
}

// Whether the ELU after resblock j, before a conv or a transposed conv that takes it that way, may
// ride in the block's kernel (the step form's elu_out): the encoder's downsamplings, whose blocks
// would each apply it again (once per channel tile and tap), and the decoder's upsamplings.
static int elu_after_resblock(const struct builder *B, const struct seanet *s, const struct gpu_conv_w *w, int j,
                              int T) {
    const struct seanet_layer *nx = j + 2 < s->n_layers ? &s->layers[j + 2] : NULL;
    return nx && s->layers[j + 1].kind == SEANET_ELU &&
           (nx->kind == SEANET_CONV ||
            (nx->kind == SEANET_CONVTR && convtr_elu_pass(B, &nx->conv, w[j + 2].wf, T)));
}

// Runs a SEANet stack over x (c_in, R, T); returns its output (c_out, R, T_out).
static float *plan_seanet(struct builder *B, const struct seanet *s, const struct gpu_conv_w *w,
                          const float *x, int T) {
    float *act[2] = {scratch(B, B->L->sc_act[0]), scratch(B, B->L->sc_act[1])};
    float *in = NULL;  // the current activation once a layer wrote one (x itself is read-only)
    int cur = 0, pending_elu = 0;
    for (int i = 0; i < s->n_layers; i++) {
        const struct seanet_layer *l = &s->layers[i];
        const struct mimi_conv *c = &l->conv;
        const float *src = in ? in : x;
        float *mem = B->L->st_conv[i] ? state(B, B->L->st_conv[i]) : NULL;
        switch (l->kind) {
        case SEANET_ELU:
            // folded into the next conv's im2col or transposed conv when there is one, else
            // applied in place
            if (i + 1 < s->n_layers && (s->layers[i + 1].kind == SEANET_CONV || s->layers[i + 1].kind == SEANET_CONVTR))
                pending_elu = 1;
            else if (in) pointwise(B, EW_ELU, in, NULL, NULL, 1, (size_t)l->channels_out * B->R * T, 0);
            else B->rc = MIMI_EUNSUPPORTED;
            break;
        case SEANET_CONV: {
            if (!in && !pending_elu && first_fits(B, s, w, i, x, act[cur], T)) {
                // the first conv and the resblock after it in one op_resblock (which carries or
                // stages the PCM's history too)
                const struct gpu_first_conv first = {conv_input(B, c, x, T, 0, mem, 0), w[i].w,
                                                     gpu_conv_ld(c->kernel + 1)};
                int fused, elu_done;
                in = plan_resblock(B, &s->layers[i + 1], &w[i + 1], NULL, act[cur], T, state(B, B->L->st_conv[i + 1]),
                                   NULL, NULL, &fused, elu_after_resblock(B, s, w, i + 1, T), &elu_done, &first);
                cur ^= 1;
                i += 1 + elu_done;
                break;
            }
            // an ELU then a transposed conv or a conv next (the encoder's last downsampling,
            // whose output the next conv's im2col or blocks would activate once per tap or
            // block): the ELU may ride in this conv's kernel
            const int elu_next = i + 2 < s->n_layers && s->layers[i + 1].kind == SEANET_ELU &&
                                 ((s->layers[i + 2].kind == SEANET_CONVTR &&
                                   convtr_elu_pass(B, &s->layers[i + 2].conv, w[i + 2].wf, T / c->stride)) ||
                                  s->layers[i + 2].kind == SEANET_CONV);
            if (conv_mma_takes(B, c, w[i].wf, T, pending_elu, mem)) {
                // FAST_BF16's first downsamplings: the conv reads elu(x) in place, no im2col
                struct op_conv_mma *cm = &emit(B, GOP_CONV_MMA, "conv_mma")->u.conv_mma;
                *cm = (struct op_conv_mma){conv_input(B, c, src, T, 1, mem, 0), w[i].wf, w[i].w,
                                           gpu_conv_ld(c->c_in * c->kernel + 1), c->c_out, act[cur]};
                emit(B, GOP_CARRY, "carry")->u.im2col = cm->in;  // after: the kernel reads the old history
            } else if (plan_conv(B, c, w[i].w, w[i].w_bf16, 1, src, act[cur], T, pending_elu, mem, 0, 0, elu_next)) {
                i++;
            }
            pending_elu = 0;
            in = act[cur];
            cur ^= 1;
            T /= c->stride;
            break;
        }
        case SEANET_CONVTR:
            if (!in) B->rc = MIMI_EUNSUPPORTED;  // x itself is read-only (check_model: a conv first)
            plan_convtr(B, c, w[i].w, w[i].w_bf16, w[i].wf, w[i].b, in, act[cur], T, mem, pending_elu);
            pending_elu = 0;
            in = act[cur];
            cur ^= 1;
            T *= c->stride;
            break;
        case SEANET_RESBLOCK:
            if (in) {
                // an ELU and a one-channel conv after it may ride in its kernel
                const struct seanet_layer *nx = i + 2 < s->n_layers ? &s->layers[i + 2] : NULL;
                const int last = nx && s->layers[i + 1].kind == SEANET_ELU && nx->kind == SEANET_CONV &&
                                 B->L->st_conv[i + 2] && last_fits(B, &nx->conv, c->c_in, T);
                // so may the ELU before a transposed conv (applied in place to the block's output)
                // or a conv (the encoder's downsamplings: there every block of the conv that
                // stages an input would apply it again, once per channel tile and tap)
                const int elu_next = !last && elu_after_resblock(B, s, w, i, T);
                int fused, elu_done;
                float *res = plan_resblock(B, l, &w[i], in, act[cur], T, mem, last ? w[i + 2].w : NULL,
                                           last ? state(B, B->L->st_conv[i + 2]) : NULL, &fused, elu_next, &elu_done,
                                           NULL);
                if (res != in) in = res, cur ^= 1;
                if (fused) i += 2;
                if (elu_done) i += 1;
            } else {
                B->rc = MIMI_EUNSUPPORTED;
            }
            break;
        }
    }
    return in;
}

// ---- transformer ----

// The residual add and LayerNorm before a linear, inside the linear's launch (op_gemm.ln_*):
// x_new = x + scale * y (y NULL: x), the product's input rows LN(x_new) * w + b, and x_new stored
// to x_out (NULL: not stored).
static void ln_into(struct op_gemm *g, const float *x, const float *y, const float *scale, const float *w,
                    const float *b, float *x_out) {
    g->ln_x = x, g->ln_y = y, g->ln_scale = scale, g->ln_w = w, g->ln_b = b, g->ln_out = x_out;
    g->ln_eps = 1e-5f;
}

// Small steps: the whole transformer as one persistent op (transformer.cu); `base` carries the
// attention's buffers and sizes.
static void plan_transformer_persistent(struct builder *B, const struct transformer *t, const struct gpu_layer_w *lw,
                                        const struct op_attention *base, const float *in, float *out) {
    const struct gpu_layout *L = B->L;
    struct gpu_plan *p = B->p;
    if (!B->rc && !p->tr_layers) {
        p->tr_layers = calloc((size_t)t->n_layers, sizeof *p->tr_layers);
        if (!p->tr_layers) B->rc = MIMI_ENOMEM;
    }
    if (B->rc) return;
    for (int l = 0; l < t->n_layers; l++) {
        const struct gpu_layer_w *w = &lw[l];
        p->tr_layers[l] = (struct op_tr_layer){w->norm1_w, w->norm1_b, w->in_proj, w->out_proj, w->norm2_w, w->norm2_b,
                                               w->linear1, w->linear2, w->scale1, w->scale2,
                                               state(B, L->st_keys[l]), state(B, L->st_values[l])};
    }
    struct op_transformer *o = &emit(B, GOP_TRANSFORMER, "transformer")->u.transformer;
    *o = (struct op_transformer){in, out, *base, p->tr_layers, t->n_layers, t->d_ff,
                                 {scratch(B, L->sc_x), scratch(B, L->sc_x2)}, scratch(B, L->sc_ff),
                                 (uint64_t *)scratch(B, L->sc_tr_part), (uint32_t *)scratch(B, L->sc_tr_barrier),
                                 1e-5f};
}

// in (d, R*steps) -> out (d, R*steps) through every layer, with the slots' KV rings. Small steps
// (the linears on the skinny kernel) fold each residual add and LayerNorm into the next linear;
// the residual stream then alternates between two buffers, since the linear's blocks all read it
// while one of them writes its update. In MIMI_PRECISION_FAST_BF16 the larger steps' qkv and
// feed-forward products take bf16 operands: the LayerNorms write h in bf16, and GELU's pass
// writes its output in bf16 into the qkv buffer (consumed by then); the out-projection, whose
// input the attention writes in f32, stays on TF32.
static void plan_transformer(struct builder *B, const struct transformer *t, const struct gpu_layer_w *lw,
                             const float *freq, const float *in, float *out) {
    const struct gpu_layout *L = B->L;
    const int d = t->d_model, rows = B->R * L->steps, ff = t->d_ff;
    const int fold = rows <= GPU_SKINNY_MAX && (long)rows * d <= GPU_LN_MAX_FLOATS;
    const int bf16 = B->L->conv_bf16 && !fold && lw[0].in_proj16 && ff <= 6 * d && d % 8 == 0 && ff % 8 == 0;
    float *xs[2] = {scratch(B, L->sc_x), scratch(B, L->sc_x2)}, *h = scratch(B, L->sc_h), *y = scratch(B, L->sc_y);
    float *qkv = scratch(B, L->sc_qkv), *att = scratch(B, L->sc_att), *f = scratch(B, L->sc_ff);
    struct op_attention base = {qkv, att, NULL, NULL, (int32_t *)state(B, L->st_positions), B->next_pos,
                                B->row_slot, freq, L->slot_elems, B->R, L->steps, d, t->n_heads,
                                t->head_dim, L->ring, t->context, 1, L->kv_bf16,
                                (L->kv_bf16 || L->kv_int8) && L->conv_bf16, L->kv_int8};
    if (L->sc_tr_barrier && gpu_transformer_fits(rows, L->steps, d, ff, t->head_dim, t->n_layers)) {
        plan_transformer_persistent(B, t, lw, &base, in, out);
        return;
    }
    emit(B, GOP_POSITIONS, "positions")->u.attention = base;
    int cur = 0;  // xs[cur] holds the residual stream
    transpose(B, in, xs[cur], d, rows);
    struct op_norm n = {xs[cur], NULL, NULL, h, lw[0].norm1_w, lw[0].norm1_b, rows, d, NORM_LN, 1e-5f, bf16};
    if (!fold) emit(B, GOP_NORM, "layernorm")->u.norm = n;
    for (int l = 0; l < t->n_layers; l++) {
        const struct gpu_layer_w *w = &lw[l];
        // qkv (rows, 3d) = h . in_proj^T, h = LN1(x) (folded: x += scale2 * y of the layer before)
        struct op_gemm *g = gemm(B, 1, 0, 3 * d, rows, d, bf16 ? w->in_proj16 : w->in_proj, d, h, d, qkv, 3 * d, 0.0f);
        g->ab_bf16 = bf16;
        if (fold && l == 0) ln_into(g, xs[cur], NULL, NULL, w->norm1_w, w->norm1_b, NULL);
        if (fold && l > 0) {
            ln_into(g, xs[cur], y, lw[l - 1].scale2, w->norm1_w, w->norm1_b, xs[cur ^ 1]);
            cur ^= 1;
        }
        // rotate, store k and v, attend (base.rope)
        struct op_attention a = base;
        a.keys = state(B, L->st_keys[l]);
        a.values = state(B, L->st_values[l]);
        emit(B, GOP_ATTENTION, "attention")->u.attention = a;
        // x += scale1 * (att . out_proj^T); h = LN2(x)
        gemm(B, 1, 0, d, rows, d, w->out_proj, d, att, d, y, d, 0.0f);
        n = (struct op_norm){xs[cur], y, w->scale1, h, w->norm2_w, w->norm2_b, rows, d, NORM_RESID_LN, 1e-5f, bf16};
        if (!fold) emit(B, GOP_NORM, "residual_layernorm")->u.norm = n;
        // x += scale2 * (gelu(h . linear1^T) . linear2^T) (folded: added by the next layer's qkv)
        g = gemm(B, 1, 0, ff, rows, d, bf16 ? w->linear1_16 : w->linear1, d, h, d, f, ff, 0.0f);
        g->gelu = !bf16, g->ab_bf16 = bf16;
        if (fold) {
            ln_into(g, xs[cur], y, w->scale1, w->norm2_w, w->norm2_b, xs[cur ^ 1]);
            cur ^= 1;
        }
        if (bf16) pointwise(B, EW_GELU_BF16, qkv, f, NULL, 1, (size_t)rows * ff, 0);
        gemm(B, 1, 0, d, rows, ff, bf16 ? w->linear2_16 : w->linear2, ff, bf16 ? qkv : f, ff, y, d, 0.0f)->ab_bf16 = bf16;
        int last = l + 1 == t->n_layers;
        if (fold && !last) continue;
        n = (struct op_norm){xs[cur], y, w->scale2, h, last ? NULL : lw[l + 1].norm1_w,
                             last ? NULL : lw[l + 1].norm1_b, rows, d, last ? NORM_RESID : NORM_RESID_LN, 1e-5f, bf16};
        emit(B, GOP_NORM, last ? "residual" : "residual_layernorm")->u.norm = n;
    }
    transpose(B, xs[cur], out, rows, d);
}

// ---- quantizer ----

// latent (d, R) -> codes (R, n_cb) at `codes`.
static void plan_rvq_encode(struct builder *B, const struct quantizer *q, const struct gpu_weights *w,
                            const float *latent, int32_t *codes) {
    const struct gpu_layout *L = B->L;
    const int R = B->R * L->frames, D = q->latent, dim = q->dim, bins = q->bins, n_cb = L->n_codebooks;
    float *r = scratch(B, L->sc_r), *scores = scratch(B, L->sc_scores);
    // small batches compute the scores (R, bins) in the argmin's own launch
    const int fused = R <= GPU_SKINNY_MAX && dim <= GPU_RVQ_MAX_DIM;
    if (fused && n_cb > 2 && R <= GPU_RVQ_PROJECT_ROWS && D <= GPU_RVQ_MAX_LATENT && D % 4 == 0) {
        // the smallest steps: projections, the semantic level and the acoustic chain in one launch
        struct op_rvq_chain *c = &emit(B, GOP_RVQ_CHAIN, "rvq_chain")->u.rvq_chain;
        *c = (struct op_rvq_chain){{NULL, w->norms + bins, w->codebooks + (size_t)bins * dim, r, codes + 1, n_cb, R,
                                    bins, dim, r, NULL, NULL},
                                   n_cb - 1, (uint64_t *)scratch(B, L->sc_rvq_part),
                                   (uint32_t *)scratch(B, L->sc_rvq_barrier),
                                   latent, w->in_first, w->in_rest, D, r + (size_t)R * dim,
                                   {NULL, w->norms, w->codebooks, NULL, codes, n_cb, R, bins, dim, NULL, NULL, NULL}};
        return;
    }
    for (int k = 0; k < n_cb; k++) {
        // r (R, dim) = latent^T . in^T: the semantic level and the first acoustic level project
        if (k < 2) gemm(B, 1, 1, dim, R, D, k ? w->in_rest : w->in_first, D, latent, R, r, dim, 0.0f);
        const float *book = w->codebooks + (size_t)k * bins * dim;
        if (fused && k == 1 && n_cb > 2) {  // the acoustic levels in one persistent launch
            struct op_rvq_chain *c = &emit(B, GOP_RVQ_CHAIN, "rvq_chain")->u.rvq_chain;
            *c = (struct op_rvq_chain){.first = {NULL, w->norms + (size_t)k * bins, book, r, codes + k, n_cb, R, bins,
                                                 dim, r, NULL, NULL},
                                       .levels = n_cb - 1,
                                       .part = (uint64_t *)scratch(B, L->sc_rvq_part),
                                       .barrier = (uint32_t *)scratch(B, L->sc_rvq_barrier)};
            break;
        }
        // scores (R, bins) = r . book^T; nearest entry; the acoustic levels subtract it
        if (!fused) gemm(B, 1, 0, bins, R, dim, book, dim, r, dim, scores, bins, 0.0f);
        struct op_argmin *a = &emit(B, GOP_ARGMIN, "argmin")->u.argmin;
        *a = (struct op_argmin){fused ? NULL : scores, w->norms + (size_t)k * bins, book, k ? r : NULL, codes + k,
                                n_cb, R, bins, dim, r, scratch(B, L->sc_part),
                                (uint32_t *)scratch(B, L->sc_counter)};
    }
}

// codes (R, n_cb) in the stage -> latent (d, R).
static struct op_gemm *plan_rvq_decode(struct builder *B, const struct quantizer *q, const struct gpu_weights *w,
                                       const int32_t *codes, float *latent) {
    const struct gpu_layout *L = B->L;
    const int R = B->R * L->frames, dim = q->dim, n_cb = L->n_codebooks;
    // (R, 2 dim): each row's semantic entry, then the sum of its acoustic entries
    float *e0 = scratch(B, L->sc_e0);
    struct op_gather *g = &emit(B, GOP_GATHER, "gather")->u.gather;
    *g = (struct op_gather){codes, w->codebooks, e0, e0 + dim, B->p->stage, B->p->stage + B->R, R, n_cb, q->bins, dim,
                            2 * dim, L->frames};
    // latent (d, R) = out_first . e0^T + out_rest . sum^T, as one product over both
    return gemm(B, 1, 0, R, q->latent, 2 * dim, e0, 2 * dim, w->out_both, 2 * dim, latent, R, 0.0f);
}

// ---- whole steps ----

static void set_tap(struct gpu_plan *p, int i, const char *name, const float *buf, int channels, int steps) {
    p->tap_names[i] = name;
    p->taps[i] = buf;
    p->tap_channels[i] = channels;
    p->tap_steps[i] = steps;
}

static void plan_encode(struct builder *B, const struct gpu_weights *w) {
    const struct mimi_model *m = B->m;
    const struct gpu_layout *L = B->L;
    struct gpu_plan *p = B->p;
    B->stage = "enc.seanet";
    const float *sea = plan_seanet(B, &m->encoder, w->enc, p->input, L->frame);
    if (!sea) B->rc = MIMI_EUNSUPPORTED;
    B->stage = "enc.transformer";
    float *tr = scratch(B, L->sc_tr_out), *latent = scratch(B, L->sc_latent);
    if (sea) plan_transformer(B, &m->enc_tr, w->enc_tr, w->enc_freq, sea, tr);
    B->stage = "enc.downsample";
    plan_conv(B, &m->downsample, w->down, w->down_bf16, 0, tr, latent, L->steps, 0, state(B, L->st_resample), 0, 0, 0);
    B->stage = "enc.quantizer";
    if (m->quantizer.n_q > 0) plan_rvq_encode(B, &m->quantizer, w, latent, p->output);
    else transpose(B, latent, p->output, L->frame_dim, B->R * L->frames);
    set_tap(p, 0, "enc_seanet", sea, L->d, L->steps);
    set_tap(p, 1, "enc_transformer", tr, L->d, L->steps);
    set_tap(p, 2, "latent", latent, L->frame_dim, L->frames);
}

static void plan_decode(struct builder *B, const struct gpu_weights *w) {
    const struct mimi_model *m = B->m;
    const struct gpu_layout *L = B->L;
    struct gpu_plan *p = B->p;
    float *latent = scratch(B, L->sc_latent), *up = scratch(B, L->sc_tr_in);
    float *tr = scratch(B, L->sc_tr_out);
    B->stage = "dec.quantizer";
    struct op_gemm *proj =
        m->quantizer.n_q > 0
            ? plan_rvq_decode(B, &m->quantizer, w, p->input, latent)
            : gemm(B, 1, 0, B->R * L->frames, L->d, L->frame_dim, p->input, L->frame_dim, w->projection, L->frame_dim,
                   latent, B->R * L->frames, 0.0f);
    B->stage = "dec.upsample";
    const struct mimi_conv *uc = &m->upsample;
    if (L->frames == 1 && B->R <= GPU_SKINNY_MAX && uc->groups == uc->c_out && uc->c_in == uc->c_out &&
        uc->kernel > uc->stride && GPU_CONVTR_OUT_CARRIES(uc->kernel, uc->stride, 1)) {
        // small steps: the projection's kernel emits the depthwise upsampling of each latent value
        // it stores, and carries its tail (a launch fewer in the step's chain)
        proj->up = (struct op_convtr){NULL, latent, w->up, NULL, up, state(B, L->st_resample), B->row_slot,
                                      L->slot_elems, uc->c_out, uc->kernel, uc->stride, 1, B->R, 1, NULL};
        proj->with_up = 1;
    } else {
        plan_convtr(B, uc, w->up, NULL, NULL, NULL, latent, up, L->frames, state(B, L->st_resample), 0);
    }
    B->stage = "dec.transformer";
    plan_transformer(B, &m->dec_tr, w->dec_tr, w->dec_freq, up, tr);
    B->stage = "dec.seanet";
    p->output = plan_seanet(B, &m->decoder, w->dec, tr, L->steps);
    set_tap(p, 0, "dec_latent", latent, L->d, L->frames);
    set_tap(p, 1, "dec_upsample", up, L->d, L->steps);
    set_tap(p, 2, "dec_transformer", tr, L->d, L->steps);
}

int gpu_plan_build(struct gpu_plan *p, const struct gpu_layout *L, const struct mimi_model *m,
                   const struct gpu_weights *w, float *state_base, float *scratch_base, int R) {
    memset(p, 0, sizeof *p);
    struct builder B = {.p = p, .L = L, .m = m, .state = state_base, .scratch = scratch_base, .R = R};
    p->R = R;
    p->stage = (int32_t *)(scratch_base + L->sc_stage);
    p->input = scratch_base + L->sc_stage + gpu_stage_input_offset(L->capacity);  // as the host stage
    p->output = scratch_base + L->sc_out;
    B.row_slot = p->stage;
    B.next_pos = (int32_t *)(state_base + L->st_next_pos);
    B.started = (int32_t *)(state_base + L->st_started);
    if (L->direction == MIMI_DIRECTION_ENCODE) plan_encode(&B, w);
    else plan_decode(&B, w);
    B.stage = "step";
    const struct op_finish fin = {B.next_pos, B.started, B.row_slot, L->slot_elems, R, L->steps};
    if (B.tails.n > 0) {  // the tails and the finish in one launch
        struct op_tails *t = &emit(&B, GOP_TAILS, "tails")->u.tails;
        *t = B.tails;
        t->row_slot = B.row_slot;
        t->slot_stride = L->slot_elems;
        t->R = R;
        t->with_finish = 1;
        t->finish = fin;
    } else {
        emit(&B, GOP_FINISH, "finish")->u.finish = fin;
    }
    if (!B.rc && !p->output) B.rc = MIMI_EUNSUPPORTED;
    if (B.rc) gpu_plan_free(p);
    return B.rc;
}

void gpu_plan_free(struct gpu_plan *p) {
    if (!p) return;
    free(p->ops);
    free(p->tr_layers);
    memset(p, 0, sizeof *p);
}
