/*
 * bench_gpu.c - the CUDA backend's speed: one stream's latency per frame, the number of
 * concurrent real-time streams (the largest batch whose encode + decode step stays under 80 ms
 * at p99), throughput in multiples of real time, each in strict (f32), fast (TF32), fast with
 * bfloat16 KV rings and fast with bfloat16 products, with ratios to the floors and to the
 * reference implementation's figures, a per-op profile, the fast modes' fidelity against strict,
 * and whole-signal throughput of one file and of many files in one call (the reference's offline
 * figure is 16 clips of 60 s). Not part of the library; bench_stream.c is the CPU's.
 *
 * usage: mimi-bench-gpu [--model PATH] [--quick] [--max-streams N] [--modes strict,fast,bf16kv,bf16,int8kv] [--threads N]
 *        mimi-bench-gpu [--model PATH] [--modes ...] --profile B [--frames F] [--warm N] [--ops]
 *                                            (only the per-op profile of B streams, or with
 *                                            --frames of a whole-signal lane of B slots stepping
 *                                            F frames; --ops lists every op of the step in plan
 *                                            order)
 *        mimi-bench-gpu [--model PATH] [--modes ...] --offline [--files N] [--trim]
 *                                            (only the whole-signal figures; --files: only N files of 60 s;
 *                                            --trim: mimi_model_trim after every call)
 *        mimi-bench-gpu [--model PATH] [--modes ...] [--threads N] --at B
 *                                            (only the capacity table's row for B streams)
 *        mimi-bench-gpu [--model PATH] [--modes ...] --fidelity
 *                                            (only the fast modes' fidelity against strict, at 64
 *                                            and 2048 streams)
 *        mimi-bench-gpu --write-model PATH   (writes the synthetic model and exits)
 * Without --model the synthetic model is written to /tmp first (tools/synth.h).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gpu.h"  // mimi_cuda_offline_create, for --frames: a whole-signal lane's profile
#include "mimi.h"
#include "synth.h"

#define FRAME_S 0.080
// Steps run before timing: past 10 s (125 frames) every attention ring is full, so the timed
// steps are the steady state of a long stream (earlier steps attend to fewer keys).
#define STEADY_WARM 130

// Floors and reference figures (the numbers): weight bytes per frame at batch 1 over
// the H200's ~4.3 TB/s, and the reference implementation measured on the same kind of GPU.
#define ENC_WEIGHT_BYTES 173.3e6
#define DEC_WEIGHT_BYTES 160.7e6
#define HBM_BYTES_PER_S 4.3e12
#define FLOP_PER_FRAME (2 * 221.2e6 + 2 * 219.7e6)  // encode + decode, spec 9 (n_q = 8)
#define REF_ENC_MS_LO 2.9
#define REF_ENC_MS_HI 4.3
#define REF_DEC_MS_LO 2.5
#define REF_DEC_MS_HI 2.8
#define REF_STREAMS 726
#define TARGET_STREAMS_STRICT 2500
#define TARGET_STREAMS_FAST 10000
#define REF_OFFLINE_ENC 3990.0
#define REF_OFFLINE_DEC 3700.0
// The H200's peak arithmetic (NVIDIA's figures, dense): f32 on the CUDA cores, TF32 and bf16 on
// the tensor cores; a mode's throughput is put against the peak of the arithmetic its largest
// products use.
#define PEAK_F32_TFLOPS 67.0
#define PEAK_TF32_TFLOPS 494.7
#define PEAK_BF16_TFLOPS 989.4
#define TARGET_OFFLINE_STRICT 6000.0
#define TARGET_OFFLINE_FAST 20000.0

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

// Nearest-rank percentile of n samples (sorted in place).
static double percentile(double *v, int n, double p) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    int k = (int)ceil(p * n) - 1;
    return v[k < 0 ? 0 : k >= n ? n - 1 : k];
}

// Deterministic audio for stream s: two tones and noise, different per stream.
static void fill_audio(float *pcm, int s, int frame_index, int frame) {
    uint64_t x = 0x9E3779B97F4A7C15ull * (uint64_t)(s + 1) + (uint64_t)frame_index;
    for (int i = 0; i < frame; i++) {
        double t = ((double)frame_index * frame + i) / 24000.0;
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        double noise = (double)(x >> 11) / 9007199254740992.0 - 0.5;
        pcm[i] = (float)(0.3 * sin(2 * M_PI * (180 + 13 * s) * t) + 0.1 * sin(2 * M_PI * 1230 * t) + 0.05 * noise);
    }
}

// Host threads per model (--threads): they check and copy a large step's PCM into and out of
// pinned memory (mimi_model_params.n_threads).
static int host_threads = 4;

static struct mimi_model *load(const char *path, int precision) {
    struct mimi_model_params mp;
    mimi_model_params_default(&mp);
    mp.backend = MIMI_BACKEND_CUDA;
    mp.precision = precision;
    mp.n_threads = host_threads;
    int rc;
    struct mimi_model *m = mimi_model_load(path, &mp, &rc);
    if (!m) fprintf(stderr, "cannot load %s on CUDA: %s\n", path, mimi_strerror(rc));
    return m;
}

// ---- one stream ----

struct latency {
    double enc_med, enc_p99, dec_med, dec_p99;
};

static struct latency one_stream(struct mimi_model *m, int frames) {
    struct latency L = {0};
    struct mimi_stream_params sp;
    mimi_stream_params_default(&sp);
    struct mimi_encoder *e = mimi_encoder_create(m, &sp, NULL);
    struct mimi_decoder *d = mimi_decoder_create(m, &sp, NULL);
    double *te = malloc(sizeof(double) * frames), *td = malloc(sizeof(double) * frames);
    float *pcm = malloc(sizeof(float) * 1920), *out = malloc(sizeof(float) * 1920);
    int32_t codes[32];
    if (!e || !d || !te || !td || !pcm || !out) return L;
    for (int f = -STEADY_WARM; f < frames; f++) {
        fill_audio(pcm, 0, f + STEADY_WARM, 1920);
        double t0 = now();
        int rc = mimi_encoder_step(e, pcm, codes);
        double t1 = now();
        rc |= mimi_decoder_step(d, codes, out);
        double t2 = now();
        if (rc) fprintf(stderr, "step failed: %s\n", mimi_encoder_errmsg(e));
        if (f >= 0) te[f] = 1e3 * (t1 - t0), td[f] = 1e3 * (t2 - t1);
    }
    L.enc_med = percentile(te, frames, 0.5);
    L.enc_p99 = percentile(te, frames, 0.99);
    L.dec_med = percentile(td, frames, 0.5);
    L.dec_p99 = percentile(td, frames, 0.99);
    mimi_encoder_destroy(e);
    mimi_decoder_destroy(d);
    free(te), free(td), free(pcm), free(out);
    return L;
}

// ---- many streams ----

struct batch_run {
    int ok;
    double enc_med, dec_med, step_p99;  // ms
    double enc_submit;  // ms, median: the encode submit, which stages the PCM in pinned memory
    double host_copy;   // ms, median: one host memcpy of the step's PCM (the size of each staging copy)
    double ovl_p99;     // ms: the step with encode and decode submitted together (see many_streams)
    double rows_p99;    // ms: encode then decode in the batches' own rows (see many_streams)
    double both_p99;    // ms: in their own rows and submitted together (see many_streams)
};

// An encode and a decode batch of B slots of `m` with slots 0 .. B-1 open in both, and the
// slot list 0 .. B-1 (malloc'd); 0, or -1 with nothing left allocated. With frames > 1 they are
// whole-signal lanes stepping that many frames, made as mimi_encode_offline_many makes them.
static int batch_pair(struct mimi_model *m, int B, int frames, struct mimi_batch **enc, struct mimi_batch **dec,
                      int **slots) {
    struct mimi_batch_params bp;
    mimi_batch_params_default(&bp);
    bp.capacity = B;
    int err = 0;
    if (frames > 1) bp.attention = MIMI_ATTENTION_WINDOW;
    *enc = frames > 1 ? mimi_cuda_offline_create(m, &bp, frames, &err) : mimi_batch_create(m, &bp, NULL);
    bp.direction = MIMI_DIRECTION_DECODE;
    *dec = !*enc ? NULL : frames > 1 ? mimi_cuda_offline_create(m, &bp, frames, &err) : mimi_batch_create(m, &bp, NULL);
    *slots = malloc(sizeof(int) * B);
    int ok = *enc && *dec && *slots;
    for (int s = 0; s < B && ok; s++) ok = ((*slots)[s] = mimi_batch_open(*enc)) == s && mimi_batch_open(*dec) == s;
    if (ok) return 0;
    mimi_batch_destroy(*enc), mimi_batch_destroy(*dec), free(*slots);
    *enc = *dec = NULL, *slots = NULL;
    return -1;
}

// The p99 of `steps` steps (ms; -1 on failure) with both batches submitted before either is
// collected: the batches have their own CUDA streams, so the GPU runs the two graphs side by
// side, and each direction's copies between host and device run while the other computes. The
// decoder takes the codes of the encoder's previous step. `in_place`: pcm and codes are the
// batches' own input rows and the results stay in their output rows, the codes handed over once
// both are collected.
static double overlapped(struct mimi_batch *enc, struct mimi_batch *dec, int B, const int *slots, const float *pcm,
                         int32_t *codes, float *out, int in_place, double *ts, int steps) {
    for (int k = -2; k < steps; k++) {
        double t0 = now();
        int rc = mimi_batch_submit_encode(enc, B, slots, pcm);
        rc = rc ? rc : mimi_batch_submit_decode(dec, B, slots, codes);
        rc = rc ? rc : mimi_batch_collect(enc, in_place ? NULL : codes);
        rc = rc ? rc : mimi_batch_collect(dec, in_place ? NULL : out);
        if (rc) {
            fprintf(stderr, "B=%d overlapped%s: %s %s\n", B, in_place ? ", in place" : "", mimi_batch_errmsg(enc),
                    mimi_batch_errmsg(dec));
            return -1.0;
        }
        if (in_place) memcpy(codes, mimi_batch_output_rows(enc), sizeof(int32_t) * 8 * (size_t)B);
        if (k >= 0) ts[k] = 1e3 * (now() - t0);
    }
    return percentile(ts, steps, 0.99);
}

// B streams in an encode and a decode batch; `steps` timed steps of encode then decode.
static struct batch_run many_streams(struct mimi_model *m, int B, int steps) {
    struct batch_run r = {0};
    struct mimi_batch *enc, *dec;
    int *slots;
    if (batch_pair(m, B, 1, &enc, &dec, &slots)) return r;
    float *pcm = malloc(sizeof(float) * 1920 * (size_t)B), *out = malloc(sizeof(float) * 1920 * (size_t)B);
    int32_t *codes = malloc(sizeof(int32_t) * 8 * (size_t)B);
    double *te = malloc(sizeof(double) * steps), *td = malloc(sizeof(double) * steps), *ts = malloc(sizeof(double) * steps),
           *tc = malloc(sizeof(double) * steps);
    if (!pcm || !out || !codes || !te || !td || !ts || !tc) goto done;
    for (int s = 0; s < B; s++) fill_audio(pcm + (size_t)s * 1920, s, 0, 1920);
    for (int k = -STEADY_WARM; k < steps; k++) {
        // encode and decode as the synchronous calls do them (submit, then collect), with the
        // encode submit timed apart: it is the host's share of the step (the PCM staging)
        double t0 = now();
        int rc = mimi_batch_submit_encode(enc, B, slots, pcm);
        double tm = now();
        rc = rc ? rc : mimi_batch_collect(enc, codes);
        double t1 = now();
        rc = rc ? rc : mimi_batch_decode(dec, B, slots, codes, out);
        double t2 = now();
        if (rc) {
            fprintf(stderr, "B=%d: %s %s\n", B, mimi_batch_errmsg(enc), mimi_batch_errmsg(dec));
            goto done;
        }
        if (k >= 0) te[k] = 1e3 * (t1 - t0), td[k] = 1e3 * (t2 - t1), ts[k] = 1e3 * (t2 - t0), tc[k] = 1e3 * (tm - t0);
    }
    r.ok = 1;
    r.enc_med = percentile(te, steps, 0.5);
    r.dec_med = percentile(td, steps, 0.5);
    r.step_p99 = percentile(ts, steps, 0.99);
    r.enc_submit = percentile(tc, steps, 0.5);
    for (int k = 0; k < steps; k++) {
        double t0 = now();
        memcpy(out, pcm, sizeof(float) * 1920 * (size_t)B);
        tc[k] = 1e3 * (now() - t0);
    }
    r.host_copy = percentile(tc, steps, 0.5);
    // Overlapped: both steps submitted before either is collected, as a server that encodes one
    // party's audio while it decodes the other's codes would run them.
    r.ovl_p99 = overlapped(enc, dec, B, slots, pcm, codes, out, 0, ts, steps);
    if (r.ovl_p99 < 0) {
        r.ok = 0;
        goto done;
    }
    // In place: the PCM written once into the encoder's own input rows (as a server would write
    // each frame it receives), codes and PCM collected into the batches' own output rows, the
    // codes handed to the decoder's input rows: no host copy of the PCM by the library.
    float *rows = mimi_batch_input_rows(enc);
    int32_t *code_rows = mimi_batch_input_rows(dec);
    if (!rows || !code_rows) goto done;
    memcpy(rows, pcm, sizeof(float) * 1920 * (size_t)B);
    for (int k = -2; k < steps; k++) {
        double t0 = now();
        int rc = mimi_batch_submit_encode(enc, B, slots, rows);
        rc = rc ? rc : mimi_batch_collect(enc, NULL);
        if (!rc) memcpy(code_rows, mimi_batch_output_rows(enc), sizeof(int32_t) * 8 * (size_t)B);
        rc = rc ? rc : mimi_batch_submit_decode(dec, B, slots, code_rows);
        rc = rc ? rc : mimi_batch_collect(dec, NULL);
        if (rc) {
            fprintf(stderr, "B=%d in place: %s %s\n", B, mimi_batch_errmsg(enc), mimi_batch_errmsg(dec));
            r.ok = 0;
            goto done;
        }
        if (k >= 0) ts[k] = 1e3 * (now() - t0);
    }
    r.rows_p99 = percentile(ts, steps, 0.99);
    // In place and overlapped: both, as a server that keeps its audio in the batches' rows and
    // runs the two directions side by side would.
    r.both_p99 = overlapped(enc, dec, B, slots, rows, code_rows, NULL, 1, ts, steps);
    if (r.both_p99 < 0) r.ok = 0;
done:
    mimi_batch_destroy(enc);
    mimi_batch_destroy(dec);
    free(slots), free(pcm), free(out), free(codes), free(te), free(td), free(ts), free(tc);
    return r;
}

// ---- one file, whole-signal ----

// --trim: mimi_model_trim after every whole-signal call, so that each call makes its lanes anew
// (the figure without the lanes a model keeps between calls)
static int trim_each;

// mimi_encode_offline / mimi_decode_offline of one `seconds`-long signal (many frames per step on
// the device); best of three, after one run that creates the plans' kernels.
static void whole_file(struct mimi_model *m, int seconds) {
    const int64_t frames = (int64_t)seconds * 25 / 2, n = frames * 1920;
    float *pcm = malloc(sizeof(float) * (size_t)n), *out = malloc(sizeof(float) * (size_t)n);
    int32_t *codes = malloc(sizeof(int32_t) * 8 * (size_t)frames);
    double best_e = 1e30, best_d = 1e30;
    for (int64_t f = 0; pcm && f < frames; f++) fill_audio(pcm + f * 1920, 0, (int)f, 1920);
    for (int k = 0; pcm && out && codes && k < 4; k++) {
        double t0 = 1e3 * now();
        if (mimi_encode_offline(m, NULL, pcm, n, codes, 8 * frames) != frames) break;
        if (trim_each) mimi_model_trim(m);
        double t1 = 1e3 * now();
        if (mimi_decode_offline(m, NULL, codes, frames, out, n) != n) break;
        if (trim_each) mimi_model_trim(m);
        double t2 = 1e3 * now();
        if (k && t1 - t0 < best_e) best_e = t1 - t0;
        if (k && t2 - t1 < best_d) best_d = t2 - t1;
    }
    if (best_e < 1e30)
        printf("  one %d s file, whole-signal: encode %.0f ms (%.0fx real time), decode %.0f ms (%.0fx)\n", seconds,
               best_e, seconds * 1e3 / best_e, best_d, seconds * 1e3 / best_d);
    else printf("  one %d s file, whole-signal: failed\n", seconds);
    free(pcm), free(out), free(codes);
}

// ---- many files, whole-signal ----

// mimi_encode_offline_many / mimi_decode_offline_many of `clips` signals of `seconds` each (the
// reference's offline figure is 16 clips of 60 s), or with seconds 0 of 2 + c % 11 seconds each
// (short utterances); the time of the whole call, batch creation included; best of three after
// a first call.
static void many_files(struct mimi_model *m, int clips, int seconds, double target, double peak) {
    const float **pcm = calloc((size_t)clips, sizeof *pcm);
    float **out = calloc((size_t)clips, sizeof *out);
    int32_t **codes = calloc((size_t)clips, sizeof *codes);
    int64_t *lens = calloc((size_t)clips, sizeof *lens), *nf = calloc((size_t)clips, sizeof *nf);
    int64_t *max_codes = calloc((size_t)clips, sizeof *max_codes);
    int ok = pcm && out && codes && lens && nf && max_codes;
    double audio_ms = 0, enc_flop = 0, dec_flop = 0;
    for (int c = 0; ok && c < clips; c++) {
        const int s = seconds ? seconds : 2 + c % 11;
        const int64_t frames = (int64_t)s * 25 / 2, n = frames * 1920;
        audio_ms += 1e3 * s, enc_flop += frames * 2 * 221.2e6, dec_flop += frames * 2 * 219.7e6;
        float *x = malloc(sizeof(float) * (size_t)n);
        out[c] = malloc(sizeof(float) * (size_t)n);
        codes[c] = malloc(sizeof(int32_t) * 8 * (size_t)frames);
        ok = x && out[c] && codes[c];
        for (int64_t f = 0; ok && f < frames; f++) fill_audio(x + f * 1920, c, (int)f, 1920);
        pcm[c] = x, lens[c] = n, nf[c] = frames, max_codes[c] = 8 * frames;
    }
    double best_e = 1e30, best_d = 1e30, first_e = 0, first_d = 0;
    for (int k = 0; ok && k < 4; k++) {
        double t0 = 1e3 * now();
        if (mimi_encode_offline_many(m, NULL, clips, pcm, lens, codes, max_codes) != MIMI_OK) break;
        if (trim_each) mimi_model_trim(m);
        double t1 = 1e3 * now();
        if (mimi_decode_offline_many(m, NULL, clips, (const int32_t *const *)codes, nf, out, lens) != MIMI_OK) break;
        if (trim_each) mimi_model_trim(m);
        double t2 = 1e3 * now();
        if (k && t1 - t0 < best_e) best_e = t1 - t0;
        if (k && t2 - t1 < best_d) best_d = t2 - t1;
        if (!k) first_e = t1 - t0, first_d = t2 - t1;
    }
    char what[32];
    if (seconds) snprintf(what, sizeof what, "%d s", seconds);
    else snprintf(what, sizeof what, "2 to 12 s");
    if (best_e < 1e30)
        printf("  %d files of %s in one call (offline many): encode %.0f ms (%.0fx real time; reference %.0fx: %.1fx; "
               "target %.0fx), decode %.0f ms (%.0fx; reference %.0fx: %.1fx); %.1f / %.1f TFLOP/s (%.0f%% / %.0f%% of "
               "the %.0f peak)\n", clips, what, best_e, audio_ms / best_e, REF_OFFLINE_ENC,
               audio_ms / best_e / REF_OFFLINE_ENC, target, best_d, audio_ms / best_d, REF_OFFLINE_DEC,
               audio_ms / best_d / REF_OFFLINE_DEC, enc_flop / (1e-3 * best_e) * 1e-12, dec_flop / (1e-3 * best_d) * 1e-12,
               100 * enc_flop / (1e-3 * best_e) * 1e-12 / peak, 100 * dec_flop / (1e-3 * best_d) * 1e-12 / peak, peak);
    if (best_e < 1e30)  // the first call also loads kernels and tunes the products of new shapes (gemm_tune.cu)
        printf("    first call: encode %.0f ms, decode %.0f ms\n", first_e, first_d);
    else printf("  %d files of %s in one call (offline many): failed\n", clips, what);
    for (int c = 0; c < clips && pcm; c++) free((void *)pcm[c]), free(out ? out[c] : NULL), free(codes ? codes[c] : NULL);
    free(pcm), free(out), free(codes), free(lens), free(nf), free(max_codes);
}

// ---- profile ----

#define MAX_KEYS 64
struct agg {
    const char *key[MAX_KEYS];
    double us[MAX_KEYS];
    int count[MAX_KEYS], n;
    double total;
};

static void agg_add(struct agg *a, const char *key, double us) {
    int i = 0;
    while (i < a->n && strcmp(a->key[i], key)) i++;
    if (i == a->n) {
        if (a->n == MAX_KEYS) return;
        a->key[a->n++] = key;
    }
    a->us[i] += us;
    a->count[i]++;
    a->total += us;
}

#define MAX_OPS 512
struct prof {
    struct agg by_op, by_stage, by_both;
    char names[MAX_KEYS][48];
    struct {  // every op of the step in plan order (--ops)
        const char *op, *stage;
        double us;
    } seq[MAX_OPS];
    int n_seq;
};

static void on_op(void *user, const char *op, const char *stage, double us) {
    struct prof *p = user;
    if (p->n_seq < MAX_OPS) {
        p->seq[p->n_seq].op = op, p->seq[p->n_seq].stage = stage, p->seq[p->n_seq].us = us;
        p->n_seq++;
    }
    agg_add(&p->by_op, op, us);
    agg_add(&p->by_stage, stage, us);
    // op within stage, e.g. "enc.seanet/im2col"
    char key[48];
    snprintf(key, sizeof key, "%s/%s", stage, op);
    int i = 0;
    while (i < p->by_both.n && strcmp(p->names[i], key)) i++;
    if (i == p->by_both.n && i < MAX_KEYS) strcpy(p->names[i], key);
    if (i < MAX_KEYS) agg_add(&p->by_both, p->names[i], us);
}

// Prints the `top` largest entries of a (a copy: entries are marked as they are printed).
static void agg_print(struct agg a, const char *title, int top) {
    printf("    %-10s", title);
    for (int done = 0; done < a.n && done < top; done++) {
        int best = -1;
        for (int i = 0; i < a.n; i++)
            if (a.count[i] >= 0 && (best < 0 || a.us[i] > a.us[best])) best = i;
        printf(" %s %.0f%% (%.0f us)", a.key[best], 100 * a.us[best] / a.total, a.us[best]);
        a.count[best] = -1;
    }
    printf("\n");
}

static int warm_steps = STEADY_WARM;  // --warm: steps before the profiled ones
static int print_ops;                  // --ops: every op of the profiled step, in plan order

static int lane_frames;  // --frames F: profile a whole-signal lane's step of F frames per slot

// One profiled encode and decode step of B streams (after --warm steps; default: rings full),
// or with --frames F of a whole-signal lane of B slots stepping F frames.
static void profile(struct mimi_model *m, int B) {
    struct mimi_batch *enc, *dec;
    int *slots;
    const int F = lane_frames > 0 ? lane_frames : 1;
    if (batch_pair(m, B, F, &enc, &dec, &slots)) {
        printf("  profile B=%d: the batches could not be made\n", B);
        return;
    }
    const size_t rows = (size_t)B * F;
    float *pcm = calloc(1920 * rows, sizeof(float)), *out = malloc(sizeof(float) * 1920 * rows);
    int32_t *codes = malloc(sizeof(int32_t) * 8 * rows);
    if (pcm && out && codes) {
        for (size_t s = 0; s < rows; s++) fill_audio(pcm + s * 1920, (int)(s / F), (int)(s % F), 1920);
        // steady state first: full attention rings
        const int warm = F > 1 && warm_steps > 4 ? 4 : warm_steps;  // a lane's rings fill in 2 steps of 64 frames
        for (int k = 0; k < warm; k++)
            if (mimi_batch_encode(enc, B, slots, pcm, codes) || mimi_batch_decode(dec, B, slots, codes, out)) break;
        char what[48];  // "B=2048", or a lane's "B=32 x frames 64"
        snprintf(what, sizeof what, F > 1 ? "B=%d x frames %d" : "B=%d", B, F);
        for (int dir = 0; dir < 2; dir++) {
            static struct prof p;
            for (int k = 0; k < 2; k++) {  // the second step is the one kept
                memset(&p, 0, sizeof p);
                int rc = dir == 0 ? mimi_batch_profile(enc, B, slots, pcm, codes, on_op, &p)
                                  : mimi_batch_profile(dec, B, slots, codes, out, on_op, &p);
                if (rc) printf("    profile failed: %s\n", mimi_strerror(rc));
            }
            printf("  profile %s %s, steady state: %.1f us in ops (eager launches: more than a graph step)\n", what,
                   dir ? "decode" : "encode", p.by_op.total);
            agg_print(p.by_op, "by op:", 10);
            agg_print(p.by_stage, "by stage:", 6);
            agg_print(p.by_both, "by both:", 16);
            for (int i = 0; print_ops && i < p.n_seq; i++)
                printf("      %3d %-18s %-14s %9.1f us\n", i, p.seq[i].stage, p.seq[i].op, p.seq[i].us);
        }
    }
    mimi_batch_destroy(enc);
    mimi_batch_destroy(dec);
    free(slots), free(pcm), free(out), free(codes);
}

// ---- fidelity of the fast modes ----

// Fidelity is measured at two widths: FID_SLOTS streams, whose SEANet products go through
// cuBLAS, and FID_WIDE, where FAST_BF16's large steps take the *_mma kernels (GPU_MMA_MIN_COLS).
#define FID_SLOTS 64
#define FID_WIDE 2048

// `frames` steps of B streams (stream s: fill_audio(s, f)) through encode and decode batches of
// `m`; the decoder takes `codes_in` when given (the strict codes), else its own.
static int fid_run(struct mimi_model *m, int B, int frames, int32_t *codes, const int32_t *codes_in, float *pcm) {
    struct mimi_batch *enc, *dec;
    int *slots, rc = batch_pair(m, B, 1, &enc, &dec, &slots);
    if (rc) return rc;
    float *in = malloc(sizeof(float) * B * 1920);
    rc = !in;
    for (int f = 0; f < frames && !rc; f++) {
        for (int s = 0; s < B; s++) fill_audio(in + (size_t)s * 1920, s, f, 1920);
        int32_t *c = codes + (size_t)f * B * 8;
        rc = mimi_batch_encode(enc, B, slots, in, c) ||
             mimi_batch_decode(dec, B, slots, codes_in ? codes_in + (size_t)f * B * 8 : c, pcm + (size_t)f * B * 1920);
    }
    mimi_batch_destroy(enc);
    mimi_batch_destroy(dec);
    free(slots), free(in);
    return rc;
}

// Codes of `fast` against `strict` and the PCM of decoding the strict codes, B streams.
static void fidelity(struct mimi_model *strict, struct mimi_model *fast, const char *mode, int B, int frames) {
    const size_t nc = (size_t)frames * B * 8, np = (size_t)frames * B * 1920;
    int32_t *cs = malloc(sizeof(int32_t) * nc), *cf = malloc(sizeof(int32_t) * nc);
    float *ps = malloc(sizeof(float) * np), *pf = malloc(sizeof(float) * np);
    if (cs && cf && ps && pf && !fid_run(strict, B, frames, cs, NULL, ps) && !fid_run(fast, B, frames, cf, cs, pf)) {
        size_t equal = 0, sem = 0;
        double num = 0, den = 0;
        for (size_t i = 0; i < nc; i++) equal += cs[i] == cf[i], sem += i % 8 == 0 && cs[i] == cf[i];
        for (size_t i = 0; i < np; i++) num += (ps[i] - pf[i]) * (double)(ps[i] - pf[i]), den += ps[i] * (double)ps[i];
        printf("  %s vs strict, %d streams x %d frames: codes equal %.2f%%, semantic %.2f%%, decoded pcm rel_l2 %.2e "
               "(%.1f dB)\n", mode, B, frames, 100.0 * equal / nc, 100.0 * sem / (nc / 8), sqrt(num / den),
               10 * log10(den / num));
    } else {
        printf("  %s vs strict, %d streams: could not run\n", mode, B);
    }
    free(cs), free(cf), free(ps), free(pf);
}

// ---- main ----

#define N_MODES 5  // enum mimi_precision
static const char *const MODE_NAMES[N_MODES] = {"strict (f32)", "fast (TF32)", "fast (TF32, bf16 KV)", "fast (bf16)",
                                                "fast (bf16, int8 KV)"};
static const char *const MODE_FLAGS[N_MODES] = {"strict", "fast", "bf16kv", "bf16", "int8kv"};
static const double MODE_PEAKS[N_MODES] = {PEAK_F32_TFLOPS, PEAK_TF32_TFLOPS, PEAK_TF32_TFLOPS, PEAK_BF16_TFLOPS,
                                           PEAK_BF16_TFLOPS};
static const char *const PEAK_NAMES[N_MODES] = {"f32", "TF32 tensor-core", "TF32 tensor-core", "bf16 tensor-core",
                                                "bf16 tensor-core"};

// --modes: a comma-separated list of MODE_FLAGS; returns the bit set (bit i: precision i), or -1.
static int parse_modes(const char *list) {
    int bits = 0;
    while (*list) {
        const size_t n = strcspn(list, ",");
        int i = 0;
        while (i < N_MODES && (strlen(MODE_FLAGS[i]) != n || strncmp(list, MODE_FLAGS[i], n))) i++;
        if (i == N_MODES) return -1;
        bits |= 1 << i;
        list += n + (list[n] == ',');
    }
    return bits;
}

// The capacity table's header, and its row for one run of B streams.
static void table_header(void) {
    printf("  %6s %10s %10s %12s %10s %10s %9s %7s %11s %8s %12s %13s %9s\n", "B", "enc ms", "dec ms", "step p99 ms",
           "enc x RT", "dec x RT", "TFLOP/s", "% peak", "enc submit", "memcpy", "overlap p99", "in place p99",
           "both p99");
}

static void table_row(int B, const struct batch_run *r, double peak) {
    const double ex = B * FRAME_S * 1e3 / r->enc_med, dx = B * FRAME_S * 1e3 / r->dec_med;
    const double tflops = B * FLOP_PER_FRAME / (1e-3 * (r->enc_med + r->dec_med)) * 1e-12;
    printf("  %6d %10.2f %10.2f %12.2f %10.0f %10.0f %9.1f %7.0f %11.2f %8.2f %12.2f %13.2f %9.2f%s\n", B, r->enc_med,
           r->dec_med, r->step_p99, ex, dx, tflops, 100 * tflops / peak, r->enc_submit, r->host_copy, r->ovl_p99,
           r->rows_p99, r->both_p99, r->step_p99 < 80.0 ? "" : "  (over 80 ms)");
}

static void run_mode(struct mimi_model *m, int precision, int quick, int max_streams) {
    const char *mode = MODE_NAMES[precision];
    const double peak = MODE_PEAKS[precision];
    printf("\n== %s ==\n", mode);
    struct latency L = one_stream(m, quick ? 100 : 500);
    double floor_enc = 1e3 * ENC_WEIGHT_BYTES / HBM_BYTES_PER_S, floor_dec = 1e3 * DEC_WEIGHT_BYTES / HBM_BYTES_PER_S;
    printf("  one stream, ms per frame: encode median %.3f p99 %.3f | decode median %.3f p99 %.3f\n", L.enc_med,
           L.enc_p99, L.dec_med, L.dec_p99);
    printf("    vs weight-read floor (%.3f / %.3f ms): %.1fx / %.1fx; vs reference (%.1f-%.1f / %.1f-%.1f ms): "
           "%.1f-%.1fx / %.1f-%.1fx faster\n",
           floor_enc, floor_dec, L.enc_med / floor_enc, L.dec_med / floor_dec, REF_ENC_MS_LO, REF_ENC_MS_HI,
           REF_DEC_MS_LO, REF_DEC_MS_HI, REF_ENC_MS_LO / L.enc_med, REF_ENC_MS_HI / L.enc_med,
           REF_DEC_MS_LO / L.dec_med, REF_DEC_MS_HI / L.dec_med);
    static const int sizes[] = {1, 64, 256, 1024, 2048, 2560, 3072, 3584, 4096, 4608, 5120, 6144, 7168, 8192, 10240};
    // [0]: encode then decode; [1]: overlapped; [2]: in place; [3]: in place and overlapped
    int best[4] = {0, 0, 0, 0}, over[4] = {0, 0, 0, 0};
    double best_enc_x = 0, best_dec_x = 0;
    printf("  (enc submit: the encode submit's median, the host staging the PCM; memcpy: one host copy of that PCM,\n"
           "   as large as the decode's output copy; both are inside enc ms and dec ms. overlap p99: the step with\n"
           "   encode and decode submitted together, each batch on its own CUDA stream; in place p99: encode then\n"
           "   decode with the input written in the batches' own rows and collected there, no library copy of the PCM;\n"
           "   both p99: in place and submitted together)\n");
    printf("  (TFLOP/s: of encode + decode; %% peak: of the %.0f TFLOP/s %s peak)\n", peak, PEAK_NAMES[precision]);
    table_header();
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0] && sizes[i] <= max_streams; i++) {
        int B = sizes[i];
        struct batch_run r = many_streams(m, B, quick ? 8 : 20);
        if (!r.ok) {
            printf("  %6d (batch could not be created or run: out of device memory?)\n", B);
            break;
        }
        const double ex = B * FRAME_S * 1e3 / r.enc_med, dx = B * FRAME_S * 1e3 / r.dec_med;
        table_row(B, &r, peak);
        if (ex > best_enc_x) best_enc_x = ex;
        if (dx > best_dec_x) best_dec_x = dx;
        const double p99[4] = {r.step_p99, r.ovl_p99, r.rows_p99, r.both_p99};
        for (int o = 0; o < 4; o++) {
            if (over[o]) continue;
            if (p99[o] >= 80.0) over[o] = B;
            else best[o] = B;
        }
        if (over[0] && over[1] && over[2] && over[3]) break;
    }
    // narrow each capacity down between the last B under 80 ms and the first over it
    static const char *const over_names[4] = {"  (over 80 ms)", "  (overlapped over 80 ms)", "  (in place over 80 ms)",
                                              "  (both over 80 ms)"};
    for (int o = 0; o < 4; o++)
        for (int k = 0; k < 3 && over[o] && over[o] - best[o] > 128; k++) {
            int B = (best[o] + over[o]) / 2 / 64 * 64;
            struct batch_run r = many_streams(m, B, quick ? 8 : 20);
            const double p99 = o == 3 ? r.both_p99 : o == 2 ? r.rows_p99 : o ? r.ovl_p99 : r.step_p99;
            printf("  %6d %10.2f %10.2f %12.2f %10s %10s %9s %7s %11s %8s %12.2f %13.2f %9.2f%s\n", B, r.enc_med,
                   r.dec_med, r.step_p99, "", "", "", "", "", "", r.ovl_p99, r.rows_p99, r.both_p99,
                   r.ok && p99 < 80.0 ? "" : over_names[o]);
            if (r.ok && p99 < 80.0) best[o] = B;
            else over[o] = B;
        }
    printf("  concurrent real-time streams (largest B tried with p99 step < 80 ms): %d (reference ~%d: %.1fx); "
           "overlapped: %d; in place: %d; in place and overlapped: %d\n",
           best[0], REF_STREAMS, (double)best[0] / REF_STREAMS, best[1], best[2], best[3]);
    // the target itself, when the search stopped on either side of it
    const int target = precision != MIMI_PRECISION_STRICT ? TARGET_STREAMS_FAST : TARGET_STREAMS_STRICT;
    if (best[1] < target && over[1] > target && target <= max_streams) {
        struct batch_run r = many_streams(m, target, quick ? 8 : 20);
        printf("  target %d streams: step p99 %.2f ms, overlapped p99 %.2f ms: %s\n", target, r.step_p99, r.ovl_p99,
               r.ok && r.ovl_p99 < 80.0 ? "met (overlapped)" : "not met");
    }
    printf("  throughput: encode %.0fx real time (reference %.0fx: %.1fx), decode %.0fx (reference %.0fx: %.1fx)\n",
           best_enc_x, REF_OFFLINE_ENC, best_enc_x / REF_OFFLINE_ENC, best_dec_x, REF_OFFLINE_DEC,
           best_dec_x / REF_OFFLINE_DEC);
    whole_file(m, 20);
    whole_file(m, 300);
    const double offline_target = precision != MIMI_PRECISION_STRICT ? TARGET_OFFLINE_FAST : TARGET_OFFLINE_STRICT;
    many_files(m, 16, 60, offline_target, peak);
    many_files(m, 64, 60, offline_target, peak);
    profile(m, 1);
    if (!quick) profile(m, 1024);
}

int main(int argc, char **argv) {
    const char *path = NULL;
    int quick = 0, max_streams = 1 << 20, profile_only = 0, offline_only = 0, offline_files = 0, fidelity_only = 0;
    int at = 0;  // --at B: only the capacity table's row for B streams
    int modes = 15;  // bit i: enum mimi_precision i
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--model") && i + 1 < argc) path = argv[++i];
        else if (!strcmp(argv[i], "--quick")) quick = 1;
        else if (!strcmp(argv[i], "--profile") && i + 1 < argc) profile_only = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--max-streams") && i + 1 < argc) max_streams = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--warm") && i + 1 < argc) warm_steps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--ops")) print_ops = 1;
        else if (!strcmp(argv[i], "--frames") && i + 1 < argc) lane_frames = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--offline")) offline_only = 1;
        else if (!strcmp(argv[i], "--fidelity")) fidelity_only = 1;
        else if (!strcmp(argv[i], "--files") && i + 1 < argc) offline_files = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--trim")) trim_each = 1;
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc) host_threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--at") && i + 1 < argc) at = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--modes") && i + 1 < argc) {
            modes = parse_modes(argv[++i]);
            if (modes <= 0) {
                fprintf(stderr, "--modes takes strict, fast, bf16kv, bf16 and int8kv, comma-separated\n");
                return 2;
            }
        }
        else if (!strcmp(argv[i], "--write-model") && i + 1 < argc) {
            char err[256];
            int rc = synth_write_model(argv[i + 1], 0, SYNTH_NAMING_KYUTAI, SYNTH_F32, err, sizeof err);
            if (rc) fprintf(stderr, "cannot write %s: %s\n", argv[i + 1], err);
            return rc ? 1 : 0;
        }
        else {
            fprintf(stderr, "usage: %s [--model PATH] [--quick] [--max-streams N] [--modes strict,fast,bf16kv,bf16,int8kv] [--threads N] "
                            "[--profile B [--frames F] [--warm N] [--ops]] [--offline [--files N] [--trim]] [--fidelity] [--at B] | --write-model PATH\n", argv[0]);
            return 2;
        }
    }
    if (!mimi_backend_available(MIMI_BACKEND_CUDA)) {
        printf("no CUDA device: nothing to measure\n");
        return 0;
    }
    if (!path) {
        char err[256];
        path = "/tmp/mimi-bench-gpu-model.safetensors";
        if (synth_write_model(path, 0, SYNTH_NAMING_KYUTAI, SYNTH_F32, err, sizeof err)) {
            fprintf(stderr, "cannot write the synthetic model: %s\n", err);
            return 1;
        }
    }
    printf("libmimi %s, CUDA backend, model %s, %d host thread%s per model\n", mimi_version_string(), path,
           host_threads, host_threads > 1 ? "s" : "");
    struct mimi_model *models[N_MODES] = {NULL};
    for (int i = 0; i < N_MODES; i++)
        if (modes & (1 << i) || i == MIMI_PRECISION_STRICT) {
            models[i] = load(path, i);
            if (!models[i]) return 1;
        }
    for (int i = 0; i < N_MODES; i++) {
        if (!(modes & (1 << i))) continue;
        if (profile_only > 0) {
            printf("\n== %s ==\n", MODE_NAMES[i]);
            profile(models[i], profile_only);
        } else if (at > 0) {
            printf("\n== %s ==\n", MODE_NAMES[i]);
            table_header();
            const struct batch_run r = many_streams(models[i], at, 8);
            if (r.ok) table_row(at, &r, MODE_PEAKS[i]);
            else printf("  %6d (batch could not be created or run: out of device memory?)\n", at);
        } else if (offline_only) {
            printf("\n== %s ==\n", MODE_NAMES[i]);
            const double target = i == MIMI_PRECISION_STRICT ? TARGET_OFFLINE_STRICT : TARGET_OFFLINE_FAST;
            const double peak = MODE_PEAKS[i];
            if (offline_files > 0) {
                many_files(models[i], offline_files, 60, target, peak);
                continue;
            }
            whole_file(models[i], 20);
            whole_file(models[i], 300);
            many_files(models[i], 16, 60, target, peak);
            many_files(models[i], 64, 60, target, peak);
            many_files(models[i], 256, 0, target, peak);
        } else if (i != MIMI_PRECISION_STRICT) {
            fidelity(models[MIMI_PRECISION_STRICT], models[i], MODE_NAMES[i], FID_SLOTS, quick ? 20 : 100);
            fidelity(models[MIMI_PRECISION_STRICT], models[i], MODE_NAMES[i], FID_WIDE, quick ? 8 : 20);
        }
    }
    for (int i = 0; i < N_MODES && !profile_only && !offline_only && !fidelity_only && !at; i++)
        if (modes & (1 << i)) run_mode(models[i], i, quick, max_streams);
    for (int i = 0; i < N_MODES; i++) mimi_model_destroy(models[i]);
    return 0;
}
