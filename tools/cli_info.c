/*
 * cli_info.c - `mimi info FILE...`: what a file is and what it holds.
 *
 * A model (.safetensors without a "codes" or "latents" tensor): naming scheme, family, tensor
 * dtypes, geometry, parameter count, file size and XXH64. A codes file (.npy, or .safetensors with
 * "codes"): shape, dtype, duration, bitrate, code range and metadata. A latents file (float .npy,
 * or .safetensors with "latents"): shape, dtype, duration, value range and metadata. Anything
 * else libsndfile reads: format, rate, channels, length. Human-readable on stdout, or one JSON
 * array with --json.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"
#include "codes_file.h"
#include "safetensors.h"

// ---- output helpers: each field printed as "  key: value" or as a JSON member ----

struct out {
    int json, n_fields;
};

// A field whose JSON value is a string.
static void field_s(struct out *w, const char *key, const char *value) {
    if (w->json) {
        printf(", ");
        json_string(key);
        printf(": ");
        json_string(value);
    } else {
        printf("  %-13s %s\n", key, value);
    }
    w->n_fields++;
}

// A field whose JSON value is a number (json_value) and whose text is `text`.
static void field_n(struct out *w, const char *key, const char *json_value, const char *text) {
    if (w->json) {
        printf(", ");
        json_string(key);
        printf(": %s", json_value);
    } else {
        printf("  %-13s %s\n", key, text);
    }
    w->n_fields++;
}

static void begin(struct out *w, const char *path, const char *kind, int first) {
    if (w->json) {
        printf("%s\n  {\"file\": ", first ? "" : ",");
        json_string(path);
        printf(", \"kind\": ");
        json_string(kind);
    } else {
        printf("%s: %s\n", path, kind);
    }
}

static void end(struct out *w) {
    if (w->json) putchar('}');
}

// ---- models ----

static int info_model(struct out *w, const char *path, struct st_file *f, int first) {
    struct mimi_model *model = cli_load_model(path, NULL);
    if (!model) return 1;
    char v[256], t[256];
    begin(w, path, "model", first);
    field_s(w, "naming", mimi_model_naming(model));
    field_s(w, "family", mimi_model_family(model));
    if (mimi_model_latent_size(model) > 0) {
        snprintf(v, sizeof v, "%d", mimi_model_latent_size(model));
        snprintf(t, sizeof t, "%d floats per frame (continuous, no codes)", mimi_model_latent_size(model));
        field_n(w, "latent_size", v, t);
    }
    int count[16] = {0};
    for (int i = 0; i < f->n_tensors; i++) count[f->tensors[i].dtype & 15]++;
    v[0] = '\0';
    for (int d = 0; d < 16; d++) {
        if (!count[d]) continue;
        size_t k = strlen(v);
        snprintf(v + k, sizeof v - k, "%s%s (%d tensors)", k ? ", " : "",
                 st_dtype_name((enum st_dtype)d), count[d]);
    }
    field_s(w, "dtypes", v);
    int rate = mimi_model_sample_rate(model), fs = mimi_model_frame_size(model);
    int nq = mimi_model_max_codebooks(model), card = mimi_model_codebook_size(model);
    snprintf(v, sizeof v, "%d", rate);
    snprintf(t, sizeof t, "%d Hz", rate);
    field_n(w, "sample_rate", v, t);
    snprintf(v, sizeof v, "%d", fs);
    snprintf(t, sizeof t, "%d samples (%g ms, %g frames/s)", fs, 1000.0 * fs / rate,
             (double)rate / fs);
    field_n(w, "frame_size", v, t);
    if (mimi_model_latent_size(model) == 0) {
        snprintf(v, sizeof v, "%d", nq);
        field_n(w, "codebooks", v, v);
        snprintf(v, sizeof v, "%d", card);
        snprintf(t, sizeof t, "%d entries (%g bits)", card, log2((double)card));
        field_n(w, "codebook_size", v, t);
    }
    snprintf(v, sizeof v, "%lld", (long long)mimi_model_parameter_count(model));
    field_n(w, "parameters", v, v);
    snprintf(v, sizeof v, "%d", f->n_tensors);
    field_n(w, "tensors", v, v);
    snprintf(v, sizeof v, "%zu", f->size);
    snprintf(t, sizeof t, "%zu bytes", f->size);
    field_n(w, "file_size", v, t);
    const char *hash = cli_model_hash(path);
    field_s(w, "xxh64", hash ? hash : "?");
    if (f->metadata_json) {
        if (w->json) printf(", \"metadata\": %s", f->metadata_json);
        else field_s(w, "metadata", f->metadata_json);
    }
    end(w);
    mimi_model_destroy(model);
    return 0;
}

// ---- codes and latents ----

static int info_codes(struct out *w, const char *path, int first) {
    struct codes c;
    char err[1400], v[256], t[256];
    if (codes_read(path, &c, err, sizeof err)) {
        cli_fail(path, "%s", err);
        return 1;
    }
    int latents = c.type == FRAME_LATENTS;
    snprintf(v, sizeof v, "%s (%s)", frame_type_name(c.type),
             c.kind == CODES_NPY ? ".npy" : ".safetensors");
    begin(w, path, v, first);
    snprintf(v, sizeof v, "[%d, %lld]", c.rows, (long long)c.n_frames);
    snprintf(t, sizeof t, "[%d, %lld] (%s, frames)", c.rows, (long long)c.n_frames,
             latents ? "latent size" : "codebooks");
    field_n(w, "shape", v, t);
    field_s(w, "dtype", c.dtype);
    const char *fr = codes_meta_get(&c.meta, "frame_rate");
    double rate = fr ? atof(fr) : 12.5;
    double card = codes_meta_get(&c.meta, "codebook_size") ? atof(codes_meta_get(&c.meta, "codebook_size")) : 2048;
    const char *ns = codes_meta_get(&c.meta, "n_samples"), *sr = codes_meta_get(&c.meta, "sample_rate");
    if (rate > 0 && (latents || card > 1)) {
        double d = ns && sr && atof(sr) > 0 ? atof(ns) / atof(sr) : (double)c.n_frames / rate;
        snprintf(v, sizeof v, "%.3f", d);
        snprintf(t, sizeof t, "%.2f s (%lld frames at %g frames/s%s)", d, (long long)c.n_frames,
                 rate, fr ? "" : ", assumed");
        field_n(w, "duration", v, t);
        if (!latents) {
            double bits = log2(card) * c.rows * rate;
            snprintf(v, sizeof v, "%.0f", bits);
            snprintf(t, sizeof t, "%.0f bit/s", bits);
            field_n(w, "bitrate", v, t);
        }
    }
    int64_t count = (int64_t)c.rows * c.n_frames;
    if (latents) {  // the range of the finite values, and how many are not
        const float *d = codes_f32(&c);
        double lo = 0, hi = 0;
        int64_t bad = 0, seen = 0;
        for (int64_t i = 0; i < count; i++) {
            if (!isfinite(d[i])) {
                bad++;
                continue;
            }
            if (seen == 0 || d[i] < lo) lo = d[i];
            if (seen++ == 0 || d[i] > hi) hi = d[i];
        }
        snprintf(v, sizeof v, "[%.6g, %.6g]", lo, hi);
        field_n(w, "value_range", v, v);
        if (bad) {
            snprintf(v, sizeof v, "%lld", (long long)bad);
            snprintf(t, sizeof t, "%lld (NaN or infinite; `mimi decode` refuses them)",
                     (long long)bad);
            field_n(w, "non_finite", v, t);
        }
    } else {
        const int32_t *d = codes_i32(&c);
        int32_t lo = 0, hi = 0;
        for (int64_t i = 0; i < count; i++) {
            if (i == 0 || d[i] < lo) lo = d[i];
            if (i == 0 || d[i] > hi) hi = d[i];
        }
        snprintf(v, sizeof v, "[%ld, %ld]", (long)lo, (long)hi);
        field_n(w, "code_range", v, v);
    }
    if (w->json && c.meta.n) {
        printf(", \"metadata\": {");
        for (int i = 0; i < c.meta.n; i++) {
            printf("%s", i ? ", " : "");
            json_string(c.meta.key[i]);
            printf(": ");
            json_string(c.meta.value[i]);
        }
        putchar('}');
    } else if (c.meta.n) {
        printf("  metadata:\n");
        for (int i = 0; i < c.meta.n; i++) printf("    %-15s %s\n", c.meta.key[i], c.meta.value[i]);
    }
    end(w);
    codes_free(&c);
    return 0;
}

// ---- audio ----

static int info_audio(struct out *w, const char *path, int first) {
    struct audio_src *src;
    char err[1400], v[256], t[256], ch[32];
    if (audio_src_open(&src, path, 0, AUDIO_RAW_NONE, 0, 0, err, sizeof err)) {
        if (strstr(err, "not a readable audio file"))
            cli_fail(path, "not a Mimi model, a codes file or audio");
        else
            cli_fail(path, "%s", err);
        return 1;
    }
    const struct audio_src_info *in = audio_src_info(src);
    begin(w, path, "audio", first);
    field_s(w, "format", in->format);
    snprintf(v, sizeof v, "%d", in->rate);
    snprintf(t, sizeof t, "%d Hz", in->rate);
    field_n(w, "sample_rate", v, t);
    snprintf(v, sizeof v, "%d", in->channels);
    snprintf(t, sizeof t, "%d (%s)", in->channels, cli_channels_name(in->channels, ch, sizeof ch));
    field_n(w, "channels", v, t);
    snprintf(v, sizeof v, "%lld", (long long)in->frames);
    snprintf(t, sizeof t, "%lld (%.2f s)", (long long)in->frames, (double)in->frames / in->rate);
    field_n(w, "samples", v, t);
    end(w);
    audio_src_close(src);
    return 0;
}

// ---- the command ----

static int info_one(struct out *w, const char *path, int first) {
    struct stat st;
    if (stat(path, &st) != 0) {
        cli_fail(path, "cannot open (%s)", strerror(errno));
        return 1;
    }
    if (S_ISDIR(st.st_mode)) {
        cli_fail(path, "is a directory");
        return 1;
    }
    unsigned char head[16] = {0};
    FILE *fp = fopen(path, "rb");
    size_t got = fp ? fread(head, 1, sizeof head, fp) : 0;
    if (fp) fclose(fp);
    if (got >= 6 && memcmp(head, "\x93NUMPY", 6) == 0) return info_codes(w, path, first);
    if (got >= 9 && head[8] == '{') {  // safetensors
        struct st_file f;
        memset(&f, 0, sizeof f);
        char err[1024];
        if (st_open(&f, path, err, sizeof err)) {
            cli_fail(path, "a broken safetensors file: %s", err);
            return 1;
        }
        int rc = st_find(&f, "codes") || st_find(&f, "latents") ? info_codes(w, path, first)
                                                                : info_model(w, path, &f, first);
        st_close(&f);
        return rc;
    }
    return info_audio(w, path, first);
}

int cmd_info(const struct opts *o) {
    if (o->n_inputs < 1) return cli_usage_error(o->cmd, "missing the file to describe");
    struct out w = {.json = o->json};
    int failed = 0, shown = 0;
    if (w.json) printf("[");
    for (int i = 0; i < o->n_inputs; i++) {
        if (!w.json && shown) putchar('\n');
        int rc = info_one(&w, o->inputs[i], shown == 0);
        failed += rc != 0;
        shown += rc == 0;
    }
    if (w.json) printf("\n]\n");
    fflush(stdout);
    return failed ? 1 : 0;
}
