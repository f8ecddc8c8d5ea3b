/*
 * test_synth.c - the synthetic weights: the native tensor table, the value rule bit for bit, the
 * Hugging Face conversion, the half-precision encodings and the model writer.
 *
 * The reference is the manifest of the reference vectors (tensor names, shapes and the float64
 * sums of every seed-0 tensor, in both namings), read from tests/data/manifest_{native,hf}.tsv
 * (made by tests/data/make_manifest_tsv.py), and individual values computed with the reference
 * generator testweights.py (the constants below, with the Python that produced them).
 */
#include <unistd.h>

#include "mimi.h"
#include "safetensors.h"
#include "synth.h"
#include "test.h"

#define N_NATIVE 318
#define N_HF 350
#define N_VALUES 96151393ll

// Sums must agree to these fractions of the tensor's sum of |values|. Both sides add exactly the
// same float32 values in float64 (here in element order, the reference pairwise), so they differ
// only by float64 rounding: measured ~1e-18 of the abs-sum for the signed sums and up to ~1e-14
// for the abs-sums of the 8M-element tensors (their running sums grow to ~1e5). SUM_TOL still
// notices a one-ulp change of a single value in any tensor of up to ~10^5 elements; bit exactness
// of every value is checked separately by the whole-model checksum.
#define SUM_TOL 1e-13
#define ABSSUM_TOL 1e-12

// ---- the manifest tables ----

struct manifest_row {
    char name[SYNTH_MAX_NAME];
    int n_dims;
    int64_t shape[3];
    double sum, abssum;  // abssum is NAN where the manifest has none (HF tensors)
    int seen;
};

// Parses "1536x512" into shape; returns the number of dims or -1.
static int parse_shape(const char *s, int64_t shape[3]) {
    int n = 0;
    while (*s) {
        char *end;
        long long d = strtoll(s, &end, 10);
        if (end == s || n == 3 || d < 0)
            return -1;
        shape[n++] = d;
        s = *end == 'x' ? end + 1 : end;
        if (*end && *end != 'x')
            return -1;
    }
    return n;
}

// Reads tests/data/<file>: name, shape, sum, abssum per line. Returns the row count or -1.
static int load_manifest(const char *file, struct manifest_row *rows, int cap) {
    char path[1024], line[512];
    snprintf(path, sizeof path, "%s/%s", MIMI_TEST_DATA, file);
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "cannot open %s\n", path);
        return -1;
    }
    int n = 0;
    while (fgets(line, sizeof line, f)) {
        if (line[0] == '#' || line[0] == '\n')
            continue;
        char *fields[4], *save = NULL;
        int k = 0;
        for (char *t = strtok_r(line, "\t\n", &save); t && k < 4; t = strtok_r(NULL, "\t\n", &save))
            fields[k++] = t;
        if (k != 4 || n == cap || strlen(fields[0]) >= SYNTH_MAX_NAME) {
            n = -1;
            break;
        }
        struct manifest_row *r = &rows[n++];
        memset(r, 0, sizeof *r);
        memcpy(r->name, fields[0], strlen(fields[0]) + 1);
        r->n_dims = parse_shape(fields[1], r->shape);
        r->sum = strtod(fields[2], NULL);
        r->abssum = strcmp(fields[3], "-") == 0 ? NAN : strtod(fields[3], NULL);
    }
    fclose(f);
    return n;
}

// Index of the row called `name`, or -1.
static int find_row(const struct manifest_row *rows, int n, const char *name) {
    for (int i = 0; i < n; i++)
        if (strcmp(rows[i].name, name) == 0)
            return i;
    return -1;
}

// ---- helpers ----

static int64_t numel(const int64_t *shape, int n_dims) {
    int64_t n = 1;
    for (int d = 0; d < n_dims; d++)
        n *= shape[d];
    return n;
}

static int same_shape(const int64_t *a, int na, const int64_t *b, int nb) {
    if (na != nb)
        return 0;
    for (int d = 0; d < na; d++)
        if (a[d] != b[d])
            return 0;
    return 1;
}

static uint32_t f32_bits(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

static float f32_from_bits(uint32_t u) {
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

// Float64 sum and abs-sum in element order.
static void sums(const float *v, int64_t n, double *sum, double *abssum) {
    double s = 0, a = 0;
    for (int64_t i = 0; i < n; i++) {
        s += (double)v[i];
        a += fabs((double)v[i]);
    }
    *sum = s;
    *abssum = a;
}

// Largest deviations seen, for the summary line.
struct sum_stats {
    double dsum;     // |sum - ref| / abssum
    double dabssum;  // |abssum - ref| / abssum
    double rel;      // |sum - ref| / |ref|
};

// Compares a tensor's sums with a manifest row; returns 1 when they agree.
static int check_sums(const char *name, const float *v, int64_t n, const struct manifest_row *r,
                      struct sum_stats *st) {
    double s, a;
    sums(v, n, &s, &a);
    double scale = a > 0 ? a : 1;
    double dsum = fabs(s - r->sum) / scale;
    double dabs = isnan(r->abssum) ? 0 : fabs(a - r->abssum) / scale;
    st->dsum = dsum > st->dsum ? dsum : st->dsum;
    st->dabssum = dabs > st->dabssum ? dabs : st->dabssum;
    if (r->sum != 0 && fabs(s - r->sum) / fabs(r->sum) > st->rel)
        st->rel = fabs(s - r->sum) / fabs(r->sum);
    test_checks++;
    if (dsum <= SUM_TOL && dabs <= ABSSUM_TOL)
        return 1;
    test_fail_banner(__FILE__, __LINE__);
    fprintf(stderr, "  %s: sum %.17g vs %.17g, abssum %.17g vs %.17g\n", name, s, r->sum, a,
            r->abssum);
    return 0;
}

// ---- reference values from testweights.py ----

// One value: tensor name (native, or HF for the converted seed-0 model), seed, flat element
// index and the float32 bit pattern. Made with testweights.tensor(name, shape, seed); the HF q/k
// rows with the conversion's own permute, w.reshape(8, 32, 2, 512).transpose(0, 2, 1, 3).
struct spot {
    const char *name;
    uint64_t seed;
    int64_t index;
    uint32_t bits;
};

// One per role of the rule (first-match order, both convtr fan cases), and other seeds.
static const struct spot k_native_spots[] = {
    {"quantizer.rvq_first.vq.layers.0._codebook._initialized", 0ull, 0, 0x3F800000u},
    {"quantizer.rvq_rest.vq.layers.30._codebook.cluster_usage", 0ull, 2047, 0x3FAAE354u},
    {"quantizer.rvq_rest.vq.layers.7._codebook.embedding_sum", 0ull, 123456, 0x3EAD5330u},
    {"decoder_transformer.transformer.layers.3.layer_scale_2.scale", 0ull, 17, 0x3E6E3000u},
    {"encoder_transformer.transformer.layers.0.norm1.weight", 0ull, 0, 0x3F851D73u},
    {"encoder_transformer.transformer.layers.0.norm1.bias", 0ull, 511, 0x3D0C4730u},
    {"decoder.model.2.convtr.convtr.weight", 0ull, 8388607, 0x3CD8D480u},
    {"decoder.model.2.convtr.convtr.bias", 0ull, 3, 0xBC497CADu},
    {"upsample.convtr.convtr.convtr.weight", 0ull, 2047, 0x3F3C3F6Bu},
    {"downsample.conv.conv.conv.weight", 0ull, 1000, 0x3AE2DF65u},
    {"encoder.model.0.conv.conv.weight", 0ull, 0, 0xBF267A87u},
    {"decoder.model.14.conv.conv.bias", 0ull, 0, 0xBC9CB81Du},
    {"encoder_transformer.transformer.layers.5.self_attn.in_proj_weight", 0ull, 786431, 0xBC2F5C11u},
    {"encoder.model.12.conv.conv.weight", 1ull, 4242424, 0xBC13EF69u},
    {"decoder_transformer.transformer.layers.7.linear2.weight", 42ull, 77777, 0xBBD6FF4Fu},
    {"quantizer.rvq_rest.vq.layers.0._codebook.cluster_usage", 12345678901234567ull, 5, 0x3FED59F6u},
    {"encoder_transformer.transformer.layers.2.norm2.weight", 18446744073709551615ull, 300, 0x3F8AA8B1u},
    {"decoder.model.5.convtr.convtr.weight", 7ull, 99, 0xBB378B4Au},
};

// Seed 0 after the conversion: q/k rows on both sides of the half-head boundary and across heads.
static const struct spot k_hf_spots[] = {
    {"encoder_transformer.layers.0.self_attn.q_proj.weight", 0ull, 517, 0x3D904A50u},     // [1][5]
    {"encoder_transformer.layers.0.self_attn.q_proj.weight", 0ull, 16384, 0xBCD10DA9u},   // [32][0]
    {"encoder_transformer.layers.0.self_attn.q_proj.weight", 0ull, 16903, 0x3CC55113u},   // [33][7]
    {"encoder_transformer.layers.0.self_attn.q_proj.weight", 0ull, 262143, 0x3D13DB8Eu},  // [511][511]
    {"encoder_transformer.layers.0.self_attn.k_proj.weight", 0ull, 16383, 0xBD82E3CDu},   // [31][511]
    {"encoder_transformer.layers.0.self_attn.k_proj.weight", 0ull, 32769, 0xBCBF960Au},   // [64][1]
    {"encoder_transformer.layers.0.self_attn.k_proj.weight", 0ull, 51400, 0x3D45EDD0u},   // [100][200]
    {"encoder_transformer.layers.0.self_attn.v_proj.weight", 0ull, 16903, 0xBD907234u},   // [33][7]
    {"decoder_transformer.layers.6.self_attn.q_proj.weight", 0ull, 32356, 0x3D4E478Cu},   // [63][100]
    {"decoder_transformer.layers.6.self_attn.k_proj.weight", 0ull, 51400, 0x3CA52D73u},   // [100][200]
    {"decoder_transformer.layers.6.self_attn.v_proj.weight", 0ull, 262143, 0xBD9944B9u},  // [511][511]
    {"quantizer.acoustic_residual_vector_quantizer.layers.3.codebook.embed_sum", 0ull, 1000,
     0xBE11C510u},
    {"decoder.layers.11.conv.weight", 0ull, 1000, 0xBDD226C8u},
};

// Checksum of the whole seed-0 model, all 96,151,393 values in native table order: the sum of
// bits(value_g) * (2g + 1) mod 2^64 over the global element index g. Any single changed bit
// changes it. From testweights.py with numpy:
//   for t in manifest["native"]: b = tensor(name, shape, 0).ravel().view(uint32).astype(uint64)
//       total += (b * (arange(g, g + b.size, dtype=uint64) * 2 + 1)).sum(dtype=uint64)
#define SEED0_CHECKSUM 0x719ce5576cc8a7b1ull

static uint64_t checksum_add(uint64_t acc, const float *v, int64_t n, int64_t *g) {
    for (int64_t i = 0; i < n; i++, (*g)++)
        acc += (uint64_t)f32_bits(v[i]) * (2 * (uint64_t)*g + 1);
    return acc;
}

// ---- native table ----

static void test_native_table(const struct manifest_row *rows, int n_rows) {
    int n;
    const struct synth_tensor_info *tab = synth_native_tensors(&n);
    CHECK_EQ(n, N_NATIVE);
    CHECK_EQ(n_rows, N_NATIVE);
    CHECK(synth_native_tensors(NULL) == tab);  // built once, static
    int bad = 0;
    int64_t total = 0;
    for (int i = 0; i < n && i < n_rows; i++) {
        total += numel(tab[i].shape, tab[i].n_dims);
        if (strcmp(tab[i].name, rows[i].name) != 0 ||
            !same_shape(tab[i].shape, tab[i].n_dims, rows[i].shape, rows[i].n_dims)) {
            if (bad++ < 5)
                fprintf(stderr, "  table[%d] %s differs from manifest %s\n", i, tab[i].name,
                        rows[i].name);
        }
    }
    CHECK_EQ(bad, 0);
    CHECK_EQ(total, N_VALUES);
}

static void test_native_spots(void) {
    int n;
    const struct synth_tensor_info *tab = synth_native_tensors(&n);
    for (size_t s = 0; s < sizeof k_native_spots / sizeof k_native_spots[0]; s++) {
        const struct spot *sp = &k_native_spots[s];
        const struct synth_tensor_info *t = NULL;
        for (int i = 0; i < n; i++)
            if (strcmp(tab[i].name, sp->name) == 0)
                t = &tab[i];
        CHECK(t != NULL);
        if (!t)
            continue;
        float *v = malloc((size_t)numel(t->shape, t->n_dims) * sizeof(float));
        synth_fill(t->name, t->shape, t->n_dims, sp->seed, v);
        if (f32_bits(v[sp->index]) != sp->bits) {
            test_fail_banner(__FILE__, __LINE__);
            fprintf(stderr, "  %s seed %llu [%lld]: %08x (%.9g), expected %08x (%.9g)\n", sp->name,
                    (unsigned long long)sp->seed, (long long)sp->index, f32_bits(v[sp->index]),
                    v[sp->index], sp->bits, f32_from_bits(sp->bits));
        }
        test_checks++;
        free(v);
    }
}

// ---- every tensor of seed 0: native sums, HF conversion and sums, the checksum ----

// Checks the reference values that fall in `part`; returns how many there were.
static int check_hf_spots(const struct synth_hf_tensor *part) {
    int n = 0;
    for (size_t s = 0; s < sizeof k_hf_spots / sizeof k_hf_spots[0]; s++) {
        if (strcmp(k_hf_spots[s].name, part->name) != 0)
            continue;
        uint32_t got = f32_bits(part->data[k_hf_spots[s].index]);
        if (got != k_hf_spots[s].bits) {
            test_fail_banner(__FILE__, __LINE__);
            fprintf(stderr, "  %s [%lld]: %08x, expected %08x\n", part->name,
                    (long long)k_hf_spots[s].index, got, k_hf_spots[s].bits);
        }
        test_checks++;
        n++;
    }
    return n;
}

static void test_seed0_model(const struct manifest_row *native, int n_native,
                             struct manifest_row *hf, int n_hf) {
    int n;
    const struct synth_tensor_info *tab = synth_native_tensors(&n);
    struct sum_stats st_native = {0, 0, 0}, st_hf = {0, 0, 0};
    int n_native_ok = 0, n_hf_ok = 0, n_parts_total = 0, n_spots = 0;
    uint64_t checksum = 0;
    int64_t g = 0;
    int64_t largest = 0;
    for (int i = 0; i < n; i++)
        largest = numel(tab[i].shape, tab[i].n_dims) > largest ? numel(tab[i].shape, tab[i].n_dims)
                                                                : largest;
    float *v = malloc((size_t)largest * sizeof(float)), *w = malloc((size_t)largest * sizeof(float));
    for (int i = 0; i < n && i < n_native; i++) {
        const struct synth_tensor_info *t = &tab[i];
        int64_t ne = numel(t->shape, t->n_dims);
        synth_fill(t->name, t->shape, t->n_dims, 0, v);
        checksum = checksum_add(checksum, v, ne, &g);
        n_native_ok += check_sums(t->name, v, ne, &native[i], &st_native);

        struct synth_hf_tensor parts[3];
        int np = synth_hf_convert(t, v, w, parts);
        CHECK(np == (strstr(t->name, "in_proj_weight") ? 3 : 1));
        for (int p = 0; p < np; p++, n_parts_total++) {
            int k = find_row(hf, n_hf, parts[p].name);
            if (k < 0) {
                test_fail_banner(__FILE__, __LINE__);
                fprintf(stderr, "  %s -> %s: not an HF name\n", t->name, parts[p].name);
                continue;
            }
            struct manifest_row *r = &hf[k];
            r->seen++;
            int f0 = test_failures;
            CHECK(same_shape(parts[p].shape, parts[p].n_dims, r->shape, r->n_dims));
            int64_t np_el = numel(parts[p].shape, parts[p].n_dims);
            check_sums(parts[p].name, parts[p].data, np_el, r, &st_hf);
            n_spots += check_hf_spots(&parts[p]);
            n_hf_ok += test_failures == f0;
        }
    }
    free(v);
    free(w);
    int unseen = 0;
    for (int j = 0; j < n_hf; j++)
        unseen += hf[j].seen != 1;
    CHECK_EQ(n_parts_total, N_HF);
    CHECK_EQ(unseen, 0);
    CHECK_EQ(n_spots, (int)(sizeof k_hf_spots / sizeof k_hf_spots[0]));
    CHECK_EQ(g, N_VALUES);
    CHECK(checksum == SEED0_CHECKSUM);
    printf("  native: %d/%d tensors match the manifest sums; max |dsum|/|sum| "
           "%.2e, |dsum|/abssum %.2e, |dabssum|/abssum %.2e\n", n_native_ok, n_native, st_native.rel,
           st_native.dsum, st_native.dabssum);
    printf("  hf:     %d/%d tensors match the manifest names, shapes and sums; max |dsum|/|sum| "
           "%.2e, |dsum|/abssum %.2e\n", n_hf_ok, n_hf, st_hf.rel, st_hf.dsum);
    printf("  seed-0 checksum of all %lld values: %016llx (%s)\n", (long long)g,
           (unsigned long long)checksum, checksum == SEED0_CHECKSUM ? "bit exact" : "DIFFERS");
}

// ---- HF naming details ----

static void test_hf_names(void) {
    char out[SYNTH_MAX_NAME];
    CHECK_EQ(synth_hf_name("downsample.conv.conv.conv.weight", out, sizeof out), 0);
    CHECK(strcmp(out, "downsample.conv.weight") == 0);
    CHECK_EQ(synth_hf_name("decoder.model.2.convtr.convtr.bias", out, sizeof out), 0);
    CHECK(strcmp(out, "decoder.layers.2.conv.bias") == 0);
    CHECK_EQ(synth_hf_name("quantizer.rvq_rest.vq.layers.30._codebook._initialized", out,
                           sizeof out), 0);
    CHECK(strcmp(out, "quantizer.acoustic_residual_vector_quantizer.layers.30.codebook.initialized")
          == 0);
    CHECK_EQ(synth_hf_name("decoder_transformer.transformer.layers.7.self_attn.in_proj_weight", out,
                           sizeof out), 0);
    CHECK(strcmp(out, "decoder_transformer.layers.7.self_attn.in_proj_weight") == 0);
    // Too small an output buffer is an error, never a truncated name.
    CHECK_EQ(synth_hf_name("encoder.model.0.conv.conv.weight", out, 10), MIMI_EINVAL);
    CHECK_EQ(synth_hf_name(NULL, out, sizeof out), MIMI_EINVAL);
    // A fused projection whose rows are not 3 x whole heads cannot be split.
    struct synth_tensor_info odd = {"encoder_transformer.transformer.layers.0.self_attn.in_proj_weight",
                                    2, {96, 4, 0}};
    float vals[96 * 4] = {0}, hfv[96 * 4];
    struct synth_hf_tensor parts[3];
    CHECK_EQ(synth_hf_convert(&odd, vals, hfv, parts), MIMI_EINVAL);
}

// ---- half precision ----

// Magnitude of f16 bits 0 .. 0x7C00 (0x7C00 as 2^16, the value the next binade would start at).
static double f16_mag(uint32_t h) {
    uint32_t e = h >> 10, m = h & 0x3FFu;
    return e == 0 ? ldexp((double)m, -24) : ldexp((double)(m | 0x400u), (int)e - 25);
}

// For every pair of adjacent f16 magnitudes: the exact midpoint goes to the even one, one f32
// ulp either side to the nearer one; both signs. Then zeros, infinities and NaN.
static void test_f16(void) {
    int bad = 0;
    for (uint32_t h = 0; h < 0x7C00u; h++) {
        float mid = (float)((f16_mag(h) + f16_mag(h + 1)) / 2);  // exact in float
        uint32_t even = (h & 1u) ? h + 1 : h;
        for (int sgn = 0; sgn < 2; sgn++) {
            float s = sgn ? -1.0f : 1.0f;
            uint32_t sb = sgn ? 0x8000u : 0;
            bad += synth_f32_to_f16(s * mid) != (sb | even);
            bad += synth_f32_to_f16(s * nextafterf(mid, 0.0f)) != (sb | h);
            bad += synth_f32_to_f16(s * nextafterf(mid, INFINITY)) != (sb | (h + 1));
            bad += synth_f32_to_f16(s * (float)f16_mag(h)) != (sb | h);
        }
    }
    CHECK_EQ(bad, 0);
    CHECK_EQ(synth_f32_to_f16(0.0f), 0x0000);
    CHECK_EQ(synth_f32_to_f16(-0.0f), 0x8000);
    CHECK_EQ(synth_f32_to_f16(1.0f), 0x3C00);
    CHECK_EQ(synth_f32_to_f16(65504.0f), 0x7BFF);
    CHECK_EQ(synth_f32_to_f16(65519.996f), 0x7BFF);
    CHECK_EQ(synth_f32_to_f16(65520.0f), 0x7C00);
    CHECK_EQ(synth_f32_to_f16(1e30f), 0x7C00);
    CHECK_EQ(synth_f32_to_f16(-INFINITY), 0xFC00);
    CHECK_EQ(synth_f32_to_f16(1e-30f), 0x0000);
    CHECK_EQ(synth_f32_to_f16(f32_from_bits(0x00000001u)), 0x0000);  // f32 subnormal
    uint16_t nan = synth_f32_to_f16(NAN), snan = synth_f32_to_f16(f32_from_bits(0x7F800001u));
    CHECK((nan & 0x7C00u) == 0x7C00u && (nan & 0x200u));
    CHECK((snan & 0x7C00u) == 0x7C00u && (snan & 0x200u));  // a signalling NaN becomes quiet
}

static void test_bf16(void) {
    int bad = 0;
    for (uint32_t h = 0; h < 0x7F80u; h++) {
        float mid = f32_from_bits((h << 16) + 0x8000u);  // halfway to h + 1
        uint32_t even = (h & 1u) ? h + 1 : h;
        for (int sgn = 0; sgn < 2; sgn++) {
            float s = sgn ? -1.0f : 1.0f;
            uint32_t sb = sgn ? 0x8000u : 0;
            bad += synth_f32_to_bf16(s * mid) != (sb | even);
            bad += synth_f32_to_bf16(s * nextafterf(mid, 0.0f)) != (sb | h);
            bad += synth_f32_to_bf16(s * nextafterf(mid, INFINITY)) != (sb | (h + 1));
        }
    }
    CHECK_EQ(bad, 0);
    CHECK_EQ(synth_f32_to_bf16(1.0f), 0x3F80);
    CHECK_EQ(synth_f32_to_bf16(-INFINITY), 0xFF80);
    CHECK_EQ(synth_f32_to_bf16(3.4028235e38f), 0x7F80);  // FLT_MAX rounds to infinity
    uint16_t nan = synth_f32_to_bf16(f32_from_bits(0x7F800001u));
    CHECK((nan & 0x7F80u) == 0x7F80u && (nan & 0x40u));
}

// ---- the writer, end to end ----

// Checks one tensor of the written file against the conversion of a fresh synth_fill, as f16.
static void check_written(const struct st_file *f, const char *native_name, const char *hf_name,
                          uint64_t seed) {
    int n;
    const struct synth_tensor_info *tab = synth_native_tensors(&n), *t = NULL;
    for (int i = 0; i < n; i++)
        if (strcmp(tab[i].name, native_name) == 0)
            t = &tab[i];
    const struct st_tensor *st = st_find(f, hf_name);
    CHECK(t != NULL && st != NULL);
    if (!t || !st)
        return;
    int64_t ne = numel(t->shape, t->n_dims);
    float *v = malloc((size_t)ne * sizeof(float)), *w = malloc((size_t)ne * sizeof(float));
    struct synth_hf_tensor parts[3];
    synth_fill(t->name, t->shape, t->n_dims, seed, v);
    int np = synth_hf_convert(t, v, w, parts), p = 0;
    while (p < np && strcmp(parts[p].name, hf_name) != 0)
        p++;
    CHECK(p < np);
    if (p < np) {
        CHECK(st->dtype == ST_F16);
        CHECK(same_shape(st->shape, st->n_dims, parts[p].shape, parts[p].n_dims));
        int64_t m = numel(parts[p].shape, parts[p].n_dims), bad = 0;
        float *back = malloc((size_t)st->n_elements * sizeof(float));
        CHECK(st->n_elements == m && st_to_f32(st, back) == 0);
        for (int64_t i = 0; st->n_elements == m && i < m; i++) {
            uint16_t h;
            memcpy(&h, st->data + 2 * i, 2);
            float want = parts[p].data[i];
            // The stored half is the rounding of the value, and reads back within half an ulp.
            bad += h != synth_f32_to_f16(want);
            bad += fabsf(back[i] - want) > fabsf(want) * 0x1p-11f + 0x1p-25f;
        }
        CHECK_EQ(bad, 0);
        free(back);
    }
    free(v);
    free(w);
}

static void test_write_model(const struct manifest_row *hf, int n_hf) {
    char path[512], err[256];
    const char *tmp = getenv("TMPDIR");
    snprintf(path, sizeof path, "%s/test_synth_%ld.safetensors", tmp && *tmp ? tmp : "/tmp",
             (long)getpid());
    int rc = synth_write_model(path, 7, SYNTH_NAMING_HF, SYNTH_F16, err, sizeof err);
    CHECK_EQ(rc, 0);
    if (rc != 0) {
        fprintf(stderr, "  synth_write_model: %s\n", err);
        return;
    }
    struct st_file f;
    memset(&f, 0, sizeof f);
    rc = st_open(&f, path, err, sizeof err);
    CHECK_EQ(rc, 0);
    if (rc == 0) {
        CHECK_EQ(f.n_tensors, N_HF);
        int unknown = 0;
        for (int i = 0; i < f.n_tensors; i++) {
            int k = find_row(hf, n_hf, f.tensors[i].name);
            unknown += k < 0 || !same_shape(hf[k].shape, hf[k].n_dims, f.tensors[i].shape,
                                            f.tensors[i].n_dims);
        }
        CHECK_EQ(unknown, 0);
        CHECK(f.metadata_json && strstr(f.metadata_json, "\"seed\":\"7\"") &&
              strstr(f.metadata_json, "\"naming\":\"hf\""));
        check_written(&f, "encoder_transformer.transformer.layers.0.self_attn.in_proj_weight",
                      "encoder_transformer.layers.0.self_attn.k_proj.weight", 7);
        check_written(&f, "decoder.model.2.convtr.convtr.weight", "decoder.layers.2.conv.weight", 7);
        check_written(&f, "upsample.convtr.convtr.convtr.weight", "upsample.conv.weight", 7);
        check_written(&f, "quantizer.rvq_first.vq.layers.0._codebook._initialized",
                      "quantizer.semantic_residual_vector_quantizer.layers.0.codebook.initialized",
                      7);
        st_close(&f);
    } else {
        fprintf(stderr, "  st_open: %s\n", err);
    }
    remove(path);

    // Failures come back as codes with a reason, and leave nothing behind.
    err[0] = '\0';
    CHECK(synth_write_model("/nonexistent-dir/x/model.safetensors", 0, SYNTH_NAMING_KYUTAI,
                            SYNTH_F32, err, sizeof err) < 0);
    CHECK(err[0] != '\0');
    CHECK_EQ(synth_write_model(path, 0, SYNTH_NAMING_KYUTAI, (enum synth_dtype)9, err, sizeof err),
             MIMI_EINVAL);
    CHECK_EQ(synth_write_model(NULL, 0, SYNTH_NAMING_HF, SYNTH_F32, NULL, 0), MIMI_EINVAL);
    CHECK(access(path, F_OK) != 0);
}

int main(int argc, char **argv) {
    test_init(argc, argv);
    static struct manifest_row native[N_NATIVE + 1], hf[N_HF + 1];
    int n_native = load_manifest("manifest_native.tsv", native, N_NATIVE + 1);
    int n_hf = load_manifest("manifest_hf.tsv", hf, N_HF + 1);
    CHECK_EQ(n_native, N_NATIVE);
    CHECK_EQ(n_hf, N_HF);
    if (n_native != N_NATIVE || n_hf != N_HF)
        return test_summary();

    test_native_table(native, n_native);
    test_native_spots();
    test_hf_names();
    test_seed0_model(native, n_native, hf, n_hf);
    test_f16();
    test_bf16();
    test_write_model(hf, n_hf);
    return test_summary();
}
