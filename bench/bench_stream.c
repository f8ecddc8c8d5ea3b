/*
 * bench_stream.c - the `mimi-bench` program: how fast the codec runs on this machine, next to
 * what the machine can do (llm.c's habit: report physics, not only time).
 *
 * Modes (one per run):
 * - streaming (default): one encoder and one decoder, frame by frame; per-frame latency median
 *   and p99 over --frames frames after --warmup frames (the warm-up fills the 10 s attention
 *   window, so the measured frames are in steady state), real-time factor, weight bandwidth
 *   (bytes of weights read per frame / time), GFLOP/s, and both against this run's floors: a
 *   streaming memory-read probe and an FMA peak probe at the same thread count;
 * - --batch B: B concurrent streams, each step = one encode batch step + one decode batch step
 *   of B slots; per-step p99 against the 80 ms frame; --batch-max searches the largest B whose
 *   p99 stays within the frame;
 * - --offline: whole-signal encode and decode of --seconds of audio, in x real time;
 * - --profile: where a step's time goes (mimi_batch_profile), by kernel and codec stage, over
 *   --frames steps of --batch slots (default 1) after the warm-up.
 * --json prints one record (git revision, host, compiler, date, command, numbers) instead.
 * The model is --model PATH, else $MIMI_MODEL, else the synthetic full-size model written once
 * to /tmp (tools/synth.h). Not part of the library; it reads its internals only to derive the
 * cost per frame (bench_util.c).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench_util.h"
#include "mimi.h"
#include "synth.h"

#define FRAME_MS 80.0

struct options {
    const char *model, *isa_name, *weights_name;
    int isa, weights, threads, batch, batch_max, offline, json, frames, warmup, n_q, no_floors, profile;
    double seconds;
};

// ---- helpers ----

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

struct stats {
    double median, p99, mean, max;
};

// Statistics of n times in ms (sorts the array).
static struct stats stats_of(double *ms, int n) {
    struct stats s = {0};
    qsort(ms, (size_t)n, sizeof *ms, cmp_double);
    for (int i = 0; i < n; i++) s.mean += ms[i] / n;
    s.median = n % 2 ? ms[n / 2] : 0.5 * (ms[n / 2 - 1] + ms[n / 2]);
    int k = (int)ceil(0.99 * n) - 1;
    s.p99 = ms[k < 0 ? 0 : k];
    s.max = ms[n - 1];
    return s;
}

// A deterministic test signal: a slow chirp plus noise, in [-0.5, 0.5].
static void make_audio(float *pcm, size_t n) {
    uint32_t r = 12345;
    for (size_t i = 0; i < n; i++) {
        r = r * 1664525u + 1013904223u;
        double t = (double)i / 24000.0;
        pcm[i] = (float)(0.3 * sin(2 * M_PI * (100 + 40 * fmod(t, 10)) * t) +
                         0.2 * ((double)(r >> 8) / 16777216.0 - 0.5));
    }
}

static const char *default_model(char *buf, size_t len) {
    const char *env = getenv("MIMI_MODEL");
    if (env && *env) return env;
    snprintf(buf, len, "/tmp/mimi-bench-synth-seed0.safetensors");
    if (access(buf, R_OK) == 0) return buf;
    char err[256];
    fprintf(stderr, "writing the synthetic model to %s\n", buf);
    if (synth_write_model(buf, 0, SYNTH_NAMING_KYUTAI, SYNTH_F32, err, sizeof err)) {
        fprintf(stderr, "cannot write %s: %s\n", buf, err);
        return NULL;
    }
    return buf;
}

// ---- streaming ----

struct direction {
    struct stats ms;
    struct frame_cost cost;
};

// Encodes then decodes warmup + frames frames, timing each step.
static int run_streaming(struct mimi_model *model, const struct options *o, struct direction *enc,
                         struct direction *dec) {
    const int F = mimi_model_frame_size(model), total = o->warmup + o->frames;
    struct mimi_stream_params sp;
    mimi_stream_params_default(&sp);
    sp.n_codebooks = o->n_q;
    int rc;
    struct mimi_encoder *e = mimi_encoder_create(model, &sp, &rc);
    struct mimi_decoder *d = e ? mimi_decoder_create(model, &sp, &rc) : NULL;
    // a frame is n_q codes, or latent_size floats for a model with continuous latents
    const int latent = mimi_model_latent_size(model), per = latent > 0 ? latent : o->n_q;
    float *pcm = malloc(sizeof(float) * (size_t)F * total), *out = malloc(sizeof(float) * F);
    int32_t *codes = malloc(sizeof(int32_t) * (size_t)per * total);
    float *latents = malloc(sizeof(float) * (size_t)per * total);
    double *te = malloc(sizeof(double) * total), *td = malloc(sizeof(double) * total);
    if (!d || !pcm || !out || !codes || !latents || !te || !td) {
        fprintf(stderr, "setup failed: %s\n", mimi_strerror(rc));
        return 1;
    }
    make_audio(pcm, (size_t)F * total);
    for (int f = 0; f < total && rc == MIMI_OK; f++) {
        double t0 = bench_now();
        rc = latent > 0 ? mimi_encoder_step_latent(e, pcm + (size_t)f * F, latents + (size_t)f * per)
                        : mimi_encoder_step(e, pcm + (size_t)f * F, codes + (size_t)f * per);
        te[f] = 1e3 * (bench_now() - t0);
    }
    for (int f = 0; f < total && rc == MIMI_OK; f++) {
        double t0 = bench_now();
        rc = latent > 0 ? mimi_decoder_step_latent(d, latents + (size_t)f * per, out)
                        : mimi_decoder_step(d, codes + (size_t)f * per, out);
        td[f] = 1e3 * (bench_now() - t0);
    }
    if (rc != MIMI_OK) fprintf(stderr, "step failed: %s\n", mimi_strerror(rc));
    enc->ms = stats_of(te + o->warmup, o->frames);
    dec->ms = stats_of(td + o->warmup, o->frames);
    mimi_decoder_destroy(d);
    mimi_encoder_destroy(e);
    free(pcm), free(out), free(codes), free(latents), free(te), free(td);
    return rc != MIMI_OK;
}

// ---- profile ----

#define PROF_ROWS 64
struct prof_table {
    const char *stage[PROF_ROWS], *op[PROF_ROWS];
    double us[PROF_ROWS], total;
    long calls[PROF_ROWS];
    int n;
};

static void on_op(void *user, const char *op, const char *stage, double us) {
    struct prof_table *t = user;
    int i = 0;
    while (i < t->n && (strcmp(t->stage[i], stage) || strcmp(t->op[i], op))) i++;
    if (i == t->n && t->n < PROF_ROWS) t->stage[t->n] = stage, t->op[t->n] = op, t->us[t->n] = 0.0, t->calls[t->n++] = 0;
    if (i < PROF_ROWS) t->us[i] += us, t->calls[i]++;
    t->total += us;
}

static int cmp_row(const void *a, const void *b) {
    const double *x = *(const double *const *)a, *y = *(const double *const *)b;
    return *x < *y ? 1 : *x > *y ? -1 : 0;
}

static void print_profile(const char *name, const struct prof_table *t, int steps) {
    const double *rows[PROF_ROWS];
    for (int i = 0; i < t->n; i++) rows[i] = &t->us[i];
    qsort(rows, (size_t)t->n, sizeof rows[0], cmp_row);
    printf("%s: %.2f ms per step\n", name, t->total / steps / 1e3);
    for (int k = 0; k < t->n; k++) {
        const int i = (int)(rows[k] - t->us);
        printf("  %-18s %-14s %8.3f ms  %5.1f%%  %4ld calls\n", t->stage[i], t->op[i], t->us[i] / steps / 1e3,
               100.0 * t->us[i] / t->total, t->calls[i] / steps);
    }
}

// --frames profiled steps of B slots after --warmup ordinary ones, encode then decode.
static int run_profile(struct mimi_model *model, const struct options *o) {
    const int F = mimi_model_frame_size(model), B = o->batch ? o->batch : 1;
    if (mimi_model_latent_size(model) > 0) {
        fprintf(stderr, "--profile takes a model with a quantizer\n");
        return 1;
    }
    struct mimi_batch_params bp;
    mimi_batch_params_default(&bp);
    bp.capacity = B;
    bp.n_codebooks = o->n_q;
    struct mimi_batch *enc = mimi_batch_create(model, &bp, NULL);
    bp.direction = MIMI_DIRECTION_DECODE;
    struct mimi_batch *dec = mimi_batch_create(model, &bp, NULL);
    int *slots = malloc(sizeof(int) * B), rc = enc && dec && slots ? MIMI_OK : MIMI_ENOMEM;
    float *pcm = malloc(sizeof(float) * (size_t)F * B), *out = malloc(sizeof(float) * (size_t)F * B);
    int32_t *codes = malloc(sizeof(int32_t) * (size_t)o->n_q * B);
    static struct prof_table pe, pd;
    if (!pcm || !out || !codes) rc = MIMI_ENOMEM;
    for (int s = 0; s < B && rc == MIMI_OK; s++)
        if ((slots[s] = mimi_batch_open(enc)) < 0 || mimi_batch_open(dec) < 0) rc = MIMI_EFULL;
    for (int f = 0; f < o->warmup + o->frames && rc == MIMI_OK; f++) {
        make_audio(pcm, (size_t)F * B);
        const int timed = f >= o->warmup;
        rc = timed ? mimi_batch_profile(enc, B, slots, pcm, codes, on_op, &pe) : mimi_batch_encode(enc, B, slots, pcm, codes);
        if (rc == MIMI_OK)
            rc = timed ? mimi_batch_profile(dec, B, slots, codes, out, on_op, &pd) : mimi_batch_decode(dec, B, slots, codes, out);
    }
    if (rc == MIMI_OK) {
        printf("# profile: %d slot(s), %d steps after %d\n", B, o->frames, o->warmup);
        print_profile("encode", &pe, o->frames);
        print_profile("decode", &pd, o->frames);
    } else {
        fprintf(stderr, "profile failed: %s\n", mimi_strerror(rc));
    }
    mimi_batch_destroy(enc);
    mimi_batch_destroy(dec);
    free(slots), free(pcm), free(out), free(codes);
    return rc != MIMI_OK;
}

// ---- batch ----

// p99 (and the rest) of B-stream steps: B encodes then B decodes per step.
static int run_batch(struct mimi_model *model, const struct options *o, int B, struct stats *st) {
    const int F = mimi_model_frame_size(model), total = o->warmup + o->frames;
    struct mimi_batch_params bp;
    mimi_batch_params_default(&bp);
    bp.capacity = B;
    bp.n_codebooks = o->n_q;
    int rc;
    struct mimi_batch *enc = mimi_batch_create(model, &bp, &rc);
    bp.direction = MIMI_DIRECTION_DECODE;
    struct mimi_batch *dec = enc ? mimi_batch_create(model, &bp, &rc) : NULL;
    int *slots = malloc(sizeof(int) * B);
    float *pcm = malloc(sizeof(float) * (size_t)F * B * 4),
          *out = malloc(sizeof(float) * (size_t)F * B);
    int32_t *codes = malloc(sizeof(int32_t) * (size_t)o->n_q * B);
    double *ms = malloc(sizeof(double) * total);
    if (!dec || !slots || !pcm || !out || !codes || !ms) {
        fprintf(stderr, "batch of %d: setup failed: %s\n", B, mimi_strerror(rc));
        return 1;
    }
    for (int s = 0; s < B; s++) {
        slots[s] = mimi_batch_open(enc);
        if (mimi_batch_open(dec) != slots[s]) return 1;
    }
    // four distinct frames per stream, cycled
    make_audio(pcm, (size_t)F * B * 4);
    for (int step = 0; step < total && rc == MIMI_OK; step++) {
        const float *in = pcm + (size_t)(step % 4) * F * B;
        double t0 = bench_now();
        rc = mimi_batch_encode(enc, B, slots, in, codes);
        if (rc == MIMI_OK) rc = mimi_batch_decode(dec, B, slots, codes, out);
        ms[step] = 1e3 * (bench_now() - t0);
    }
    *st = stats_of(ms + o->warmup, o->frames);
    mimi_batch_destroy(enc);
    mimi_batch_destroy(dec);
    free(slots), free(pcm), free(out), free(codes), free(ms);
    return rc != MIMI_OK;
}

// ---- offline ----

static int run_offline(struct mimi_model *model, const struct options *o, double *enc_x,
                       double *dec_x) {
    const int F = mimi_model_frame_size(model);
    const int64_t frames = (int64_t)(o->seconds * 12.5), n = frames * F;
    struct mimi_stream_params sp;
    mimi_stream_params_default(&sp);
    sp.n_codebooks = o->n_q;
    float *pcm = malloc(sizeof(float) * (size_t)n), *out = malloc(sizeof(float) * (size_t)n);
    int32_t *codes = malloc(sizeof(int32_t) * (size_t)frames * o->n_q);
    if (!pcm || !out || !codes) return 1;
    make_audio(pcm, (size_t)n);
    double t0 = bench_now();
    int64_t got = mimi_encode_offline(model, &sp, pcm, n, codes, frames * o->n_q);
    double t1 = bench_now();
    int64_t got2 = mimi_decode_offline(model, &sp, codes, frames, out, n);
    double t2 = bench_now();
    *enc_x = o->seconds / (t1 - t0);
    *dec_x = o->seconds / (t2 - t1);
    free(pcm), free(out), free(codes);
    return got != frames || got2 != n;
}

// ---- options ----

static void usage(void) {
    fprintf(stderr,
            "usage: mimi-bench [options]\n"
            "  --model PATH        checkpoint (default $MIMI_MODEL, else the synthetic model)\n"
            "  --threads N         threads per step (default 1)\n"
            "  --isa NAME          auto | reference | avx2 | avx512 | neon (default auto)\n"
            "  --weights W         f32 | bf16 (default f32)\n"
            "  --codebooks N       codebooks per frame (default 8)\n"
            "  --frames N          measured frames or steps (default 200)\n"
            "  --warmup N          frames before measuring (default 130: full attention window)\n"
            "  --batch B           B concurrent streams, encode + decode per step\n"
            "  --batch-max B       the largest batch up to B whose p99 step fits in 80 ms\n"
            "  --offline           whole-signal encode and decode throughput\n"
            "  --profile           where a step's time goes, by kernel and stage (--batch slots)\n"
            "  --seconds S         audio length for --offline (default 60)\n"
            "  --json              one JSON record instead of the table\n"
            "  --no-floors         skip the memory and FMA probes (for profiling)\n");
}

static int parse(int argc, char **argv, struct options *o) {
    *o = (struct options){.isa_name = "auto",
                          .weights_name = "f32",
                          .threads = 1,
                          .frames = 200,
                          .warmup = 130,
                          .n_q = 8,
                          .seconds = 60};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int takes = 1;
        if (!strcmp(a, "--model") && v) o->model = v;
        else if (!strcmp(a, "--threads") && v) o->threads = atoi(v);
        else if (!strcmp(a, "--isa") && v) o->isa_name = v;
        else if (!strcmp(a, "--weights") && v) o->weights_name = v;
        else if (!strcmp(a, "--codebooks") && v) o->n_q = atoi(v);
        else if (!strcmp(a, "--frames") && v) o->frames = atoi(v);
        else if (!strcmp(a, "--warmup") && v) o->warmup = atoi(v);
        else if (!strcmp(a, "--batch") && v) o->batch = atoi(v);
        else if (!strcmp(a, "--batch-max") && v) o->batch_max = atoi(v);
        else if (!strcmp(a, "--seconds") && v) o->seconds = atof(v);
        else {
            takes = 0;
            if (!strcmp(a, "--offline")) o->offline = 1;
            else if (!strcmp(a, "--json")) o->json = 1;
            else if (!strcmp(a, "--no-floors")) o->no_floors = 1;
            else if (!strcmp(a, "--profile")) o->profile = 1;
            else return 1;
        }
        i += takes;
    }
    static const char *isas[] = {"auto", "reference", "avx2", "avx512", "neon"};
    o->isa = -1;
    for (int i = 0; i < 5; i++)
        if (!strcmp(o->isa_name, isas[i])) o->isa = i;  // enum mimi_isa order
    o->weights = !strcmp(o->weights_name, "bf16")  ? MIMI_WEIGHTS_BF16
                 : !strcmp(o->weights_name, "f32") ? MIMI_WEIGHTS_F32
                                                   : -1;
    return o->isa < 0 || o->weights < 0 || o->threads < 1 || o->frames < 1 || o->warmup < 0 ||
           o->n_q < 1 || o->batch < 0 || o->batch_max < 0 || o->seconds <= 0;
}

// ---- report ----

static void print_direction(FILE *f, int json, const char *name, const struct direction *d,
                            double bw, double peak, double f32_bytes) {
    const double s = d->ms.median * 1e-3;
    const double gbs = d->cost.weight_bytes / s / 1e9, gflops = 2 * d->cost.macs / s / 1e9;
    const double floor_ms = d->cost.weight_bytes / bw * 1e3, half_ms = f32_bytes / 2 / bw * 1e3;
    if (json) {
        fprintf(f,
                "  \"%s\": {\"ms_median\": %.3f, \"ms_p99\": %.3f, \"ms_mean\": %.3f, \"ms_max\": "
                "%.3f, "
                "\"rtf\": %.4f, \"x_real_time\": %.2f, \"weight_bytes\": %.0f, "
                "\"f32_weight_bytes\": %.0f, "
                "\"gflop\": %.4f, \"weight_gbs\": %.2f, \"gflops\": %.2f, \"bandwidth_floor_ms\": "
                "%.3f, "
                "\"ratio_to_bandwidth_floor\": %.3f, \"ratio_to_half_f32_floor\": %.3f, "
                "\"fraction_of_fma_peak\": %.4f},\n",
                name, d->ms.median, d->ms.p99, d->ms.mean, d->ms.max, d->ms.median / FRAME_MS,
                FRAME_MS / d->ms.median, d->cost.weight_bytes, f32_bytes, 2 * d->cost.macs / 1e9,
                gbs, gflops, floor_ms, d->ms.median / floor_ms, d->ms.median / half_ms,
                gflops * 1e9 / peak);
        return;
    }
    fprintf(f, "%-7s %8.2f %8.2f %7.3f %8.1f %7.2f %8.1f %7.2f %8.2f %6.2f %7.1f%%\n", name,
            d->ms.median, d->ms.p99, d->ms.median / FRAME_MS, d->cost.weight_bytes / 1e6, gbs,
            2 * d->cost.macs / 1e6, gflops, floor_ms, d->ms.median / floor_ms,
            100 * gflops * 1e9 / peak);
}

int main(int argc, char **argv) {
    struct options o;
    char path_buf[512];
    if (parse(argc, argv, &o)) {
        usage();
        return 2;
    }
    const char *path = o.model ? o.model : default_model(path_buf, sizeof path_buf);
    if (!path) return 1;
    struct mimi_model_params mp;
    mimi_model_params_default(&mp);
    mp.isa = o.isa;
    mp.n_threads = o.threads;
    mp.weights = o.weights;
    int rc;
    struct mimi_model *model = mimi_model_load(path, &mp, &rc);
    if (!model) {
        fprintf(stderr, "cannot load %s: %s\n", path, mimi_strerror(rc));
        return 1;
    }
    if (o.n_q > mimi_model_max_codebooks(model)) o.n_q = mimi_model_max_codebooks(model);
    const char *kernels = bench_kernel_name(model);
    // this run's floors, at the same thread count
    const double bw = o.no_floors ? NAN : bench_read_bandwidth(o.threads, (size_t)1 << 29, 1);
    const double bw_small_pages =
        o.no_floors ? NAN : bench_read_bandwidth(o.threads, (size_t)1 << 29, 0);
    const double peak = o.no_floors ? NAN : bench_fma_peak(o.threads, kernels);
    struct direction enc = {.cost = bench_encode_cost(model, o.n_q)};
    struct direction dec = {.cost = bench_decode_cost(model, o.n_q)};
    // the same costs with f32 weights: the bf16 target is half the f32 floor
    const double enc_f32 = 4 * enc.cost.params, dec_f32 = 4 * dec.cost.params;
    struct stats batch_st = {0};
    int batch_ok = 0, best_batch = 0;
    double off_enc = 0, off_dec = 0;
    int fail = 0;
    if (o.profile) {
        const int failed = run_profile(model, &o);
        mimi_model_destroy(model);
        return failed;
    }
    if (o.batch_max) {
        // double while real time, then bisect between the last good and the first bad size
        int good = 0, bad = o.batch_max + 1;
        for (int B = 1; B <= o.batch_max && !fail;
             B = good * 2 > o.batch_max && good < o.batch_max ? o.batch_max : good * 2) {
            struct stats st;
            fail = run_batch(model, &o, B, &st);
            if (!o.json) fprintf(stderr, "batch %3d: step p99 %.1f ms\n", B, st.p99);
            if (st.p99 <= FRAME_MS) good = B, batch_st = st;
            else {
                bad = B;
                break;
            }
            if (B == o.batch_max) break;
        }
        while (!fail && bad - good > 1) {
            int B = (good + bad) / 2;
            struct stats st;
            fail = run_batch(model, &o, B, &st);
            if (!o.json) fprintf(stderr, "batch %3d: step p99 %.1f ms\n", B, st.p99);
            if (st.p99 <= FRAME_MS) good = B, batch_st = st;
            else bad = B;
        }
        best_batch = good;
    } else if (o.batch) {
        fail = run_batch(model, &o, o.batch, &batch_st);
        batch_ok = batch_st.p99 <= FRAME_MS;
    } else if (o.offline) {
        fail = run_offline(model, &o, &off_enc, &off_dec);
    } else {
        fail = run_streaming(model, &o, &enc, &dec);
    }
    char cpu[256], date[64], sha[64];
    bench_host_cpu(cpu, sizeof cpu);
    bench_date(date, sizeof date);
    bench_git_sha(sha, sizeof sha);
    FILE *f = stdout;
    if (o.json) {
        fprintf(f,
                "{\n  \"git_sha\": \"%s\", \"date\": \"%s\", \"host_cpu\": \"%s\", \"compiler\": "
                "\"%s\",\n",
                sha, date, cpu, bench_compiler());
        fprintf(f, "  \"command\": \"");
        for (int i = 0; i < argc; i++) fprintf(f, "%s%s", i ? " " : "", argv[i]);
        fprintf(
            f,
            "\",\n  \"model\": \"%s\", \"kernels\": \"%s\", \"weights\": \"%s\", \"threads\": %d, "
            "\"codebooks\": %d,\n",
            path, kernels, o.weights_name, o.threads, o.n_q);
        fprintf(
            f,
            "  \"floors\": {\"read_bandwidth_gbs\": %.2f, \"read_bandwidth_4k_pages_gbs\": %.2f, "
            "\"fma_peak_gflops\": %.1f},\n",
            bw / 1e9, bw_small_pages / 1e9, peak / 1e9);
        if (o.batch_max)
            fprintf(f,
                    "  \"batch_max\": {\"searched_up_to\": %d, \"largest_real_time\": %d, "
                    "\"step_ms_p99\": %.2f, \"step_ms_median\": %.2f},\n",
                    o.batch_max, best_batch, batch_st.p99, batch_st.median);
        else if (o.batch)
            fprintf(
                f,
                "  \"batch\": {\"streams\": %d, \"step_ms_median\": %.2f, \"step_ms_p99\": %.2f, "
                "\"step_ms_max\": %.2f, \"real_time\": %s},\n",
                o.batch, batch_st.median, batch_st.p99, batch_st.max, batch_ok ? "true" : "false");
        else if (o.offline)
            fprintf(f,
                    "  \"offline\": {\"seconds\": %.1f, \"encode_x_real_time\": %.2f, "
                    "\"decode_x_real_time\": %.2f},\n",
                    o.seconds, off_enc, off_dec);
        else {
            print_direction(f, 1, "encode", &enc, bw, peak, enc_f32);
            print_direction(f, 1, "decode", &dec, bw, peak, dec_f32);
        }
        fprintf(f, "  \"ok\": %s\n}\n", fail ? "false" : "true");
    } else {
        fprintf(
            f,
            "# %s | %s | %s\n# model %s | kernels %s | weights %s | %d thread(s) | %d codebooks\n",
            sha, cpu, date, path, kernels, o.weights_name, o.threads, o.n_q);
        fprintf(f,
                "# floors: memory read %.2f GB/s (huge pages; %.2f with 4 KB pages), FMA peak %.1f "
                "GFLOP/s\n",
                bw / 1e9, bw_small_pages / 1e9, peak / 1e9);
        if (o.batch_max)
            fprintf(f,
                    "largest real-time batch (p99 step <= 80 ms): %d streams (p99 %.1f ms, median "
                    "%.1f ms)\n",
                    best_batch, batch_st.p99, batch_st.median);
        else if (o.batch)
            fprintf(
                f,
                "batch %d: step (encode + decode) median %.2f ms, p99 %.2f ms, max %.2f ms: %s\n",
                o.batch, batch_st.median, batch_st.p99, batch_st.max,
                batch_ok ? "real time" : "NOT real time");
        else if (o.offline)
            fprintf(f, "offline %.0f s: encode %.1fx real time, decode %.1fx real time\n",
                    o.seconds, off_enc, off_dec);
        else {
            fprintf(f, "%-7s %8s %8s %7s %8s %7s %8s %7s %8s %6s %8s\n", "", "ms/frm", "p99", "RTF",
                    "MB/frm", "GB/s", "MFLOP", "GFLOP/s", "floor", "ratio", "of peak");
            print_direction(f, 0, "encode", &enc, bw, peak, enc_f32);
            print_direction(f, 0, "decode", &dec, bw, peak, dec_f32);
            if (o.weights == MIMI_WEIGHTS_BF16)
                fprintf(f, "# bf16: halved f32 floors %.2f / %.2f ms, ratios %.2f / %.2f\n",
                        enc_f32 / 2 / bw * 1e3, dec_f32 / 2 / bw * 1e3,
                        enc.ms.median / (enc_f32 / 2 / bw * 1e3),
                        dec.ms.median / (dec_f32 / 2 / bw * 1e3));
        }
    }
    mimi_model_destroy(model);
    return fail;
}
