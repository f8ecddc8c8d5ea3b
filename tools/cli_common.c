/*
 * cli_common.c - messages, the model, frames (codes or latents), output planning, worker
 * threads, the progress bar and the JSON summary of the `mimi` command (see cli.h).
 */
#include "cli.h"

#include <errno.h>
#include <libgen.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "codes_file.h"
#include "fdio.h"

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;  // stderr lines and the bar
static int g_quiet;

// ---- messages ----

static void bar_clear_locked(void);

static void print_line(const char *text) {
    pthread_mutex_lock(&g_lock);
    bar_clear_locked();
    fprintf(stderr, "mimi: %s\n", text);
    pthread_mutex_unlock(&g_lock);
}

// "file: msg", or msg alone when it already starts with "file:".
static void with_file(char *out, size_t len, const char *file, const char *msg) {
    size_t n = strlen(file);
    if (strncmp(msg, file, n) == 0 && msg[n] == ':') snprintf(out, len, "%s", msg);
    else snprintf(out, len, "%s: %s", file, msg);
}

void cli_fail(const char *file, const char *fmt, ...) {
    char msg[1024], line[1400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    with_file(line, sizeof line, file, msg);
    print_line(line);
}

void item_fail(struct item *it, const char *file, const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    it->ok = 0;
    size_t k = strlen(it->output);  // a message about the output names it already
    if ((k && strncmp(msg, it->output, k) == 0 && msg[k] == ':') || strncmp(msg, "stdout:", 7) == 0)
        snprintf(it->error, sizeof it->error, "%s", msg);
    else
        with_file(it->error, sizeof it->error, file, msg);
    print_line(it->error);
}

void cli_set_quiet(int quiet) { g_quiet = quiet; }

void cli_note(const char *fmt, ...) {
    if (g_quiet) return;
    char msg[1400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    print_line(msg);
}

int cli_err(char *err, size_t errlen, int code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    return code;
}

int cli_usage_error(const char *cmd, const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fprintf(stderr, "mimi %s: %s (see `mimi %s --help`)\n", cmd, msg, cmd);
    return 2;
}

double cli_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

const char *cli_channels_name(int channels, char *buf, size_t len) {
    if (channels == 1) return "mono";
    if (channels == 2) return "stereo";
    snprintf(buf, len, "%d channels", channels);
    return buf;
}

// ---- the model ----

const char *cli_model_path(const struct opts *o) {
    if (o->model) return o->model;
    const char *env = getenv("MIMI_MODEL");
    if (env && *env) return env;
    fprintf(stderr, "mimi: no model given: use --model FILE or set MIMI_MODEL (try `mimi synth -o "
                    "synthetic.safetensors` for a test model)\n");
    return NULL;
}

// While a model loads, the library's first error is held back so that a failed load is reported
// on one line with its cause; otherwise warnings and errors are printed as they come.
static struct {
    int holding;
    char first_error[512];
} g_log;

static void log_to_stderr(void *user, int level, const char *msg) {
    (void)user;
    if (level == MIMI_LOG_ERROR && g_log.holding) {
        if (!g_log.first_error[0]) snprintf(g_log.first_error, sizeof g_log.first_error, "%s", msg);
    } else if (level <= MIMI_LOG_WARN) {
        print_line(msg);
    }
}

// The threads a step uses when --threads is not given: the CPUs online, at most 8.
static int default_threads(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : n > 8 ? 8 : (int)n;
}

struct mimi_model *cli_load_model(const char *path, const struct opts *o) {
    struct stat st;
    if (stat(path, &st) != 0) {
        cli_fail(path, "cannot open the model (%s)", strerror(errno));
        return NULL;
    }
    if (S_ISDIR(st.st_mode)) {
        cli_fail(path, "is a directory, not a model file");
        return NULL;
    }
    if (o && o->backend == MIMI_BACKEND_CUDA && !mimi_backend_available(MIMI_BACKEND_CUDA)) {
        cli_fail(path, "--backend cuda: no CUDA backend here (built without CUDA, or no NVIDIA GPU "
                       "is visible)");
        return NULL;
    }
    struct mimi_model_params mp;
    mimi_model_params_default(&mp);
    mp.n_threads = o && o->threads > 0 ? o->threads : default_threads();
    if (o) {
        mp.backend = o->backend;
        mp.isa = o->isa;
        mp.weights = o->weights;
        mp.precision = o->precision;
    }
    mp.log = log_to_stderr;
    int err = MIMI_OK;
    g_log.holding = 1;
    g_log.first_error[0] = '\0';
    struct mimi_model *model = mimi_model_load(path, &mp, &err);
    g_log.holding = 0;
    const char *why = g_log.first_error;
    size_t len = strlen(path);
    if (strncmp(why, path, len) == 0 && why[len] == ':') why += len + 1 + (why[len + 1] == ' ');
    if (model && *why) cli_fail(path, "%s", why);
    if (!model && *why) cli_fail(path, "not a usable Mimi model: %s (%s)", why, mimi_strerror(err));
    if (!model && !*why) cli_fail(path, "cannot load the model: %s", mimi_strerror(err));
    return model;
}

const char *cli_model_hash(const char *path) {
    static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
    static char hex[17];
    static int state;  // 0 not yet, 1 done, -1 failed
    pthread_mutex_lock(&lock);
    if (state == 0) {
        char err[1024];
        state = file_xxh64(path, hex, err, sizeof err) ? -1 : 1;
        if (state < 0) cli_fail(path, "%s", err);
    }
    pthread_mutex_unlock(&lock);
    return state > 0 ? hex : NULL;
}

// ---- frames ----

int cli_frame_type(const struct opts *o, const struct mimi_model *model, const char *path,
                   enum frame_type *type) {
    int latent = mimi_model_latent_size(model);
    *type = latent > 0 ? FRAME_LATENTS : FRAME_CODES;
    if (latent > 0 && o->codebooks)
        return cli_usage_error(o->cmd, "--codebooks does not apply to %s: a %s model has no "
                               "codebooks, its frames are %d continuous floats", path,
                               mimi_model_family(model), latent);
    return 0;
}

void cli_latents_desc(const struct mimi_model *model, char *buf, size_t len) {
    snprintf(buf, len, "continuous latents, %d floats x %g Hz", mimi_model_latent_size(model),
             (double)mimi_model_sample_rate(model) / mimi_model_frame_size(model));
}

int cli_encoder_step(struct mimi_encoder *enc, enum frame_type type, const float *pcm,
                     void *frame) {
    return type == FRAME_LATENTS ? mimi_encoder_step_latent(enc, pcm, frame)
                                 : mimi_encoder_step(enc, pcm, frame);
}

int cli_encoder_push(struct mimi_encoder *enc, enum frame_type type, const float *pcm,
                     size_t n_samples, void *frames, int max_frames) {
    return type == FRAME_LATENTS ? mimi_encoder_push_latent(enc, pcm, n_samples, frames, max_frames)
                                 : mimi_encoder_push(enc, pcm, n_samples, frames, max_frames);
}

int cli_encoder_flush(struct mimi_encoder *enc, enum frame_type type, void *frames,
                      int max_frames) {
    return type == FRAME_LATENTS ? mimi_encoder_flush_latent(enc, frames, max_frames)
                                 : mimi_encoder_flush(enc, frames, max_frames);
}

int cli_decoder_step(struct mimi_decoder *dec, enum frame_type type, const void *frame,
                     float *pcm) {
    return type == FRAME_LATENTS ? mimi_decoder_step_latent(dec, frame, pcm)
                                 : mimi_decoder_step(dec, frame, pcm);
}

int64_t cli_encode_offline(const struct mimi_model *model, const struct mimi_stream_params *sp,
                           enum frame_type type, const float *pcm, int64_t n_samples,
                           void *frames, int64_t max_values) {
    return type == FRAME_LATENTS
               ? mimi_encode_offline_latent(model, sp, pcm, n_samples, frames, max_values)
               : mimi_encode_offline(model, sp, pcm, n_samples, frames, max_values);
}

int64_t cli_decode_offline(const struct mimi_model *model, const struct mimi_stream_params *sp,
                           enum frame_type type, const void *frames, int64_t n_frames,
                           float *pcm, int64_t max_samples) {
    return type == FRAME_LATENTS
               ? mimi_decode_offline_latent(model, sp, frames, n_frames, pcm, max_samples)
               : mimi_decode_offline(model, sp, frames, n_frames, pcm, max_samples);
}

int cli_frame_check(enum frame_type type, const void *frame, int n, int card, int64_t f,
                    char *err, size_t errlen) {
    for (int q = 0; q < n; q++) {
        if (type == FRAME_LATENTS) {
            float v = ((const float *)frame)[q];
            if (!isfinite(v))
                return cli_err(err, errlen, MIMI_EINVAL, "frame %lld: latent value %d is not a "
                               "finite number (%s)", (long long)f, q, isnan(v) ? "nan" : "inf");
        } else {
            int32_t v = ((const int32_t *)frame)[q];
            if (v < 0 || v >= card)
                return cli_err(err, errlen, MIMI_EINVAL, "frame %lld: code %ld at codebook %d is "
                               "out of range [0, %d)", (long long)f, (long)v, q, card);
        }
    }
    return 0;
}

// ---- outputs ----

int same_file(const char *a, const char *b) {
    struct stat sa, sb;
    return a && b && strcmp(a, "-") && strcmp(b, "-") && stat(a, &sa) == 0 && stat(b, &sb) == 0 &&
           sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

int is_dir_path(const char *path) {
    struct stat st;
    size_t n = strlen(path);
    return (n > 0 && path[n - 1] == '/') || (stat(path, &st) == 0 && S_ISDIR(st.st_mode));
}

// The name of `path` without directory and last extension, in out.
static void stem(const char *path, char *out, size_t len) {
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    snprintf(out, len, "%s", base);
    char *dot = strrchr(out, '.');
    if (dot && dot != out) *dot = '\0';
}

// Checks that the directory that will hold `out` exists. Returns 0 or 1 (message printed).
static int check_parent(const char *out) {
    char *copy = strdup(out);
    const char *dir = copy ? dirname(copy) : ".";
    struct stat st;
    int missing = stat(dir, &st) != 0 || !S_ISDIR(st.st_mode);
    if (missing) cli_fail(out, "directory %s does not exist", dir);
    free(copy);
    return missing;
}

int plan_outputs(const struct opts *o, struct item *items, const char *ext, const char *model) {
    int n = o->n_inputs;
    const char *out = o->output;
    int to_dir = strcmp(out, "-") != 0 && is_dir_path(out);
    if (n > 1 && !to_dir)
        return cli_usage_error(o->cmd, "with several inputs, -o names a directory (end it with "
                                       "'/' to create it)");
    if (to_dir) {
        struct stat st;
        char dir[4096];
        snprintf(dir, sizeof dir, "%s", out);
        size_t k = strlen(dir);
        while (k > 1 && dir[k - 1] == '/') dir[--k] = '\0';
        if (stat(dir, &st) != 0) {
            if (check_parent(dir)) return 1;
            if (mkdir(dir, 0777) != 0 && errno != EEXIST) {
                cli_fail(dir, "cannot create the directory (%s)", strerror(errno));
                return 1;
            }
        } else if (!S_ISDIR(st.st_mode)) {
            cli_fail(dir, "is not a directory");
            return 1;
        }
        for (int i = 0; i < n; i++) {
            char name[1024];
            stem(strcmp(items[i].input, "-") ? items[i].input : "stdin", name, sizeof name);
            if ((size_t)snprintf(items[i].output, sizeof items[i].output, "%s/%s%s", dir, name, ext) >=
                sizeof items[i].output)
                item_fail(&items[i], items[i].input, "output path too long");
        }
    } else {
        struct stat st;
        if (strcmp(out, "-") && stat(out, &st) == 0 && S_ISDIR(st.st_mode)) {
            cli_fail(out, "is a directory");
            return 1;
        }
        if (strcmp(out, "-") && check_parent(out)) return 1;
        snprintf(items[0].output, sizeof items[0].output, "%s", out);
    }
    for (int i = 0; i < n; i++) {
        struct item *it = &items[i];
        if (!it->ok) continue;
        for (int j = 0; j < n && it->ok; j++) {
            if (same_file(it->output, items[j].input))
                item_fail(it, it->output, "is the same file as the input %s; refusing to "
                          "overwrite it", items[j].input);
            else if (j < i && items[j].ok && strcmp(it->output, items[j].output) == 0)
                item_fail(it, it->input, "has the same output name as %s (%s); skipped",
                          items[j].input, it->output);
        }
        if (it->ok && same_file(it->output, model))
            item_fail(it, it->output, "is the model file; refusing to overwrite it");
    }
    return 0;
}

// ---- worker threads ----

struct pool {
    void (*fn)(void *, int);
    void *ctx;
    int n, slot_next;
    atomic_int next;
};

static _Thread_local int t_slot;

int progress_slot(void) { return t_slot; }

static void *worker(void *arg) {
    struct pool *p = arg;
    pthread_mutex_lock(&g_lock);
    t_slot = p->slot_next++;
    pthread_mutex_unlock(&g_lock);
    for (int i; (i = atomic_fetch_add(&p->next, 1)) < p->n;) p->fn(p->ctx, i);
    return NULL;
}

void run_jobs(int n, int jobs, void (*fn)(void *ctx, int i), void *ctx) {
    struct pool p = {.fn = fn, .ctx = ctx, .n = n};
    atomic_init(&p.next, 0);
    if (jobs > n) jobs = n;
    pthread_t tid[256];
    int started = 0;
    for (int t = 1; t < jobs && t < 256; t++)
        if (pthread_create(&tid[started], NULL, worker, &p) == 0) started++;
    worker(&p);  // the main thread works too
    for (int t = 0; t < started; t++) pthread_join(tid[t], NULL);
}

// ---- progress bar ----

#define MAX_SLOTS 256

static struct {
    int on, drawn, n_items, done;
    const char *verb;
    double start, last, slot_fraction[MAX_SLOTS];
} g_bar;

static void bar_clear_locked(void) {
    if (g_bar.drawn) fputs("\r\033[K", stderr);
    g_bar.drawn = 0;
}

void progress_begin(const char *verb, int n_items, int jobs, int quiet) {
    const char *env = getenv("MIMI_PROGRESS");
    int always = env && strcmp(env, "always") == 0, never = env && strcmp(env, "never") == 0;
    memset(&g_bar, 0, sizeof g_bar);
    g_bar.on = !quiet && !never && (always || isatty(2)) && jobs <= MAX_SLOTS;
    g_bar.verb = verb;
    g_bar.n_items = n_items;
    g_bar.start = cli_now();
    g_bar.last = always ? -1.0 : 0.0;
}

static void bar_draw_locked(int force) {
    double now = cli_now(), elapsed = now - g_bar.start;
    double f = g_bar.done;
    for (int i = 0; i < MAX_SLOTS; i++) f += g_bar.slot_fraction[i];
    f = g_bar.n_items ? f / g_bar.n_items : 0;
    if (f > 1) f = 1;
    int always = g_bar.last < 0;
    if (!force && !always && now - g_bar.last < 0.1) return;
    // Shown once the work has run half a second and looks like taking more than two in all.
    if (!always && !g_bar.drawn && (elapsed < 0.5 || f <= 0 || elapsed / f < 2.0)) return;
    if (!always) g_bar.last = now;
    char bar[31];
    int fill = (int)(f * 30 + 0.5);
    for (int i = 0; i < 30; i++) bar[i] = i < fill ? '#' : '-';
    bar[30] = '\0';
    char eta[32] = "";
    if (f > 0.01 && f < 1) {
        int s = (int)(elapsed * (1 - f) / f + 0.5);
        snprintf(eta, sizeof eta, "  ETA %d:%02d", s / 60, s % 60);
    }
    char files[48] = "";
    if (g_bar.n_items > 1) snprintf(files, sizeof files, "  %d/%d files", g_bar.done, g_bar.n_items);
    fprintf(stderr, "\r\033[Kmimi %s [%s] %3d%%%s%s", g_bar.verb, bar, (int)(f * 100), files, eta);
    fflush(stderr);
    g_bar.drawn = 1;
}

void progress_set(int slot, double fraction) {
    if (!g_bar.on || slot < 0 || slot >= MAX_SLOTS) return;
    pthread_mutex_lock(&g_lock);
    g_bar.slot_fraction[slot] = fraction;
    bar_draw_locked(0);
    pthread_mutex_unlock(&g_lock);
}

void progress_item_done(int slot) {
    if (!g_bar.on || slot < 0 || slot >= MAX_SLOTS) return;
    pthread_mutex_lock(&g_lock);
    g_bar.slot_fraction[slot] = 0;
    g_bar.done++;
    bar_draw_locked(1);
    pthread_mutex_unlock(&g_lock);
}

void progress_end(void) {
    pthread_mutex_lock(&g_lock);
    bar_clear_locked();  // the summary lines stay; the bar goes
    g_bar.on = 0;
    pthread_mutex_unlock(&g_lock);
}

// ---- --json ----

void json_string(const char *s) {
    putchar('"');
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') printf("\\%c", c);
        else if (c < 0x20) printf("\\u%04x", c);
        else putchar(c);
    }
    putchar('"');
}

static void json_num(double v) {
    if (isfinite(v)) printf("%.6g", v);
    else printf("null");
}

void items_abandon(struct item *items, int n) {
    for (int i = 0; i < n; i++) {
        if (!items[i].ok) continue;
        items[i].ok = 0;
        snprintf(items[i].error, sizeof items[i].error, "%s: not processed (see the error above)",
                 items[i].input);
    }
}

int item_interrupted(struct item *it) {
    if (!fd_interrupted) return 0;
    if (it->ok) snprintf(it->error, sizeof it->error, "%s: interrupted", it->input);
    it->ok = 0;
    return 1;
}

int items_status(const struct item *items, int n) {
    for (int i = 0; i < n; i++)
        if (!items[i].ok) return 1;
    return 0;
}

void json_summary(const struct opts *o, const struct item *items, int n, double wall_s) {
    int ok = 0;
    for (int i = 0; i < n; i++) ok += items[i].ok;
    printf("{\"command\": ");
    json_string(o->cmd);
    printf(", \"ok\": %s, \"succeeded\": %d, \"failed\": %d, \"wall_seconds\": ",
           ok == n ? "true" : "false", ok, n - ok);
    json_num(wall_s);
    printf(", \"files\": [");
    for (int i = 0; i < n; i++) {
        const struct item *it = &items[i];
        printf("%s\n  {\"input\": ", i ? "," : "");
        json_string(it->input);
        printf(", \"output\": ");
        if (it->output[0]) json_string(it->output);
        else printf("null");
        printf(", \"ok\": %s", it->ok ? "true" : "false");
        if (!it->ok) {
            printf(", \"error\": ");
            json_string(it->error);
        } else {
            printf(", \"frames\": %lld, \"%s\": %d, \"samples\": %lld, \"audio_seconds\": ",
                   (long long)it->frames, it->latent_size ? "latent_size" : "codebooks",
                   it->latent_size ? it->latent_size : it->n_codebooks, (long long)it->samples);
            json_num(it->audio_s);
            printf(", \"wall_seconds\": ");
            json_num(it->wall_s);
            if (it->in_rate) {
                printf(", \"input_rate\": %d, \"input_channels\": %d, \"input_format\": ",
                       it->in_rate, it->in_channels);
                json_string(it->in_format);
            }
            if (strcmp(o->cmd, "roundtrip") == 0) {
                printf(", \"bitrate\": ");
                json_num(it->bitrate);
                printf(", \"real_time_factor\": ");
                json_num(it->audio_s > 0 ? it->wall_s / it->audio_s : NAN);
                printf(", \"snr_db\": ");
                json_num(it->snr_db);
            }
            if (it->clipped) printf(", \"clipped_samples\": %lld", (long long)it->clipped);
        }
        putchar('}');
    }
    printf("\n]}\n");
    fflush(stdout);
}

int run_items(const struct opts *o, struct item *items, int setup_rc, const char *verb,
              const char *past, int quiet, void (*fn)(void *ctx, int i), void *ctx) {
    if (setup_rc) {
        if (o->json && setup_rc == 1) {
            items_abandon(items, o->n_inputs);
            json_summary(o, items, o->n_inputs, 0);
        }
        return setup_rc;
    }
    const int jobs = o->jobs > 0 ? o->jobs : 1;
    double t0 = cli_now();
    progress_begin(verb, o->n_inputs, jobs, quiet);
    const int per = o->group > 1 ? o->group : 1;
    run_jobs((o->n_inputs + per - 1) / per, jobs, fn, ctx);
    progress_end();
    double wall = cli_now() - t0;
    int rc = items_status(items, o->n_inputs);
    if (o->n_inputs > 1) {
        int ok = 0;
        for (int i = 0; i < o->n_inputs; i++) ok += items[i].ok;
        cli_note("%s %d of %d files in %.2f s%s", past, ok, o->n_inputs, wall,
                 ok < o->n_inputs ? " (see the errors above)" : "");
    }
    if (o->json) json_summary(o, items, o->n_inputs, wall);
    return rc;
}

int group_span(const struct opts *o, int g, int *first) {
    *first = g * o->group;
    const int rest = o->n_inputs - *first;
    return rest < o->group ? rest : o->group;
}
