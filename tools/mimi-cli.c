/*
 * mimi-cli.c - the `mimi` command: audio -> codes, codes -> audio, and the synthetic test model.
 *
 * Codes files are int32 .npy arrays of shape [codebooks, frames] (the reference's layout).
 * Streaming (the default) feeds the codec one frame at a time as a live stream would; --offline
 * runs the whole-signal path. Every failure prints one line "mimi: <file>: <problem>" and exits
 * with 1 (2 for a usage error). Outputs are written atomically, so a failure never leaves a
 * partial file, and an output that is the same file as an input is refused.
 */
#include <errno.h>
#include <libgen.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>

#include "audio.h"
#include "mimi.h"
#include "npy.h"
#include "synth.h"

// ---- usage texts ----

static const char USAGE_MAIN[] =
    "usage: mimi <command> [options]\n"
    "\n"
    "Kyutai's Mimi neural audio codec: 24 kHz mono audio <-> 12.5 Hz frames of integer codes\n"
    "(1920 samples per frame).\n"
    "\n"
    "commands:\n"
    "  encode    audio file -> codes (.npy, int32, shape [codebooks, frames])\n"
    "  decode    codes (.npy) -> audio (.wav, or float32 samples in .npy)\n"
    "  synth     write the synthetic test model (untrained weights)\n"
    "  version   print the version\n"
    "\n"
    "`mimi <command> --help` shows the options of a command. The model, a Mimi .safetensors\n"
    "checkpoint, is given with --model FILE or the MIMI_MODEL environment variable.\n"
    "\n"
    "example:\n"
    "  mimi synth -o synthetic.safetensors\n"
    "  export MIMI_MODEL=synthetic.safetensors\n"
    "  mimi encode speech.wav -o codes.npy && mimi decode codes.npy -o decoded.wav\n";

static const char USAGE_ENCODE[] =
    "usage: mimi encode [options] INPUT -o CODES.npy\n"
    "\n"
    "Encodes an audio file (any format libsndfile reads, at 24000 Hz; channels are averaged) into\n"
    "an int32 .npy array of shape [codebooks, frames], frames = ceil(samples / 1920); the last\n"
    "partial frame is zero-padded.\n"
    "\n"
    "options:\n"
    "  -o, --output FILE   the .npy file to write (required)\n"
    "  --model FILE        Mimi checkpoint (.safetensors); default: $MIMI_MODEL\n"
    "  --codebooks N       codebooks per frame, 1 .. the model's count (default 8)\n"
    "  --offline           encode the whole signal at once (the reference's offline path);\n"
    "                      default: streaming, one frame at a time. Same codes up to 10 s.\n"
    "  --threads N         worker threads (default 1)\n"
    "  -q, --quiet         no summary line\n"
    "  -h, --help          this text\n"
    "\n"
    "example:\n"
    "  mimi encode --model mimi.safetensors --codebooks 32 speech.wav -o codes.npy\n";

static const char USAGE_DECODE[] =
    "usage: mimi decode [options] CODES.npy -o OUTPUT.wav|OUTPUT.npy\n"
    "\n"
    "Decodes an int32 (or int16/int64) .npy array of shape [codebooks, frames] into 24 kHz mono\n"
    "audio, 1920 samples per frame. The output format follows the extension: .wav is 16-bit PCM\n"
    "(samples clipped to [-1, 1]) or 32-bit float with --float; .npy is a float32 array.\n"
    "\n"
    "options:\n"
    "  -o, --output FILE   the .wav or .npy file to write (required)\n"
    "  --model FILE        Mimi checkpoint (.safetensors); default: $MIMI_MODEL\n"
    "  --codebooks N       use the first N codebooks of the file (default: all of them)\n"
    "  --offline           decode the whole signal at once (the reference's offline path);\n"
    "                      default: streaming, one frame at a time\n"
    "  --float             write a 32-bit float WAV (values not clipped)\n"
    "  --threads N         worker threads (default 1)\n"
    "  -q, --quiet         no summary line\n"
    "  -h, --help          this text\n"
    "\n"
    "example:\n"
    "  mimi decode --model mimi.safetensors codes.npy -o decoded.wav\n";

static const char USAGE_SYNTH[] =
    "usage: mimi synth [options] -o MODEL.safetensors\n"
    "\n"
    "Writes the synthetic Mimi model: the full geometry of the released checkpoint, with\n"
    "deterministic untrained weights made from the seed. It runs exactly like a real model, for\n"
    "tests and benchmarks, but does not produce meaningful audio.\n"
    "\n"
    "options:\n"
    "  -o, --output FILE        the .safetensors file to write (required)\n"
    "  --seed S                 weight seed, a non-negative integer (default 0)\n"
    "  --naming kyutai|hf       tensor names of Kyutai's checkpoint or of Hugging Face\n"
    "                           transformers (default kyutai)\n"
    "  --dtype f32|f16|bf16     tensor type (default f32)\n"
    "  -q, --quiet              no summary line\n"
    "  -h, --help               this text\n"
    "\n"
    "example:\n"
    "  mimi synth --seed 0 --dtype bf16 -o synthetic.safetensors\n";

// ---- messages ----

// Prints "mimi: <file>: <message>". Messages from the tool helpers already start with the path;
// they are printed as they are.
static void fail_msg(const char *file, const char *msg) {
    size_t len = strlen(file);
    if (strncmp(msg, file, len) == 0 && msg[len] == ':')
        fprintf(stderr, "mimi: %s\n", msg);
    else
        fprintf(stderr, "mimi: %s: %s\n", file, msg);
}

#define FORMAT_ARGS(buf, fmt)                                                                      \
    do {                                                                                           \
        va_list ap;                                                                                \
        va_start(ap, fmt);                                                                         \
        vsnprintf(buf, sizeof buf, fmt, ap);                                                       \
        va_end(ap);                                                                                \
    } while (0)

static void failf(const char *file, const char *fmt, ...) {
    char msg[1024];
    FORMAT_ARGS(msg, fmt);
    fail_msg(file, msg);
}

// Prints a usage error for `cmd` and returns 2, the exit status of usage errors.
static int usage_error(const char *cmd, const char *fmt, ...) {
    char msg[1024];
    FORMAT_ARGS(msg, fmt);
    fprintf(stderr, "mimi %s: %s (see `mimi %s --help`)\n", cmd, msg, cmd);
    return 2;
}

// The model's log callback. While a model loads, the first error is held back so that a failed
// load is reported on one line with its cause (see load_model); otherwise warnings and errors are
// printed as they come.
static struct {
    int holding;
    char first_error[512];
} g_log;

static void log_to_stderr(void *user, int level, const char *msg) {
    (void)user;
    if (level == MIMI_LOG_ERROR && g_log.holding) {
        if (!g_log.first_error[0]) snprintf(g_log.first_error, sizeof g_log.first_error, "%s", msg);
    } else if (level <= MIMI_LOG_WARN) {
        fprintf(stderr, "mimi: %s\n", msg);
    }
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

// ---- options ----

enum { CMD_ENCODE = 1, CMD_DECODE = 2, CMD_SYNTH = 4 };
enum { OPT_OUTPUT, OPT_MODEL, OPT_CODEBOOKS, OPT_OFFLINE, OPT_THREADS, OPT_FLOAT, OPT_SEED,
       OPT_NAMING, OPT_DTYPE, OPT_QUIET };

static const struct option_def {
    const char *name;
    char short_name;
    int has_value;
    int cmds;  // CMD_* mask of the commands that accept it
} OPTIONS[] = {
    [OPT_OUTPUT] = {"output", 'o', 1, CMD_ENCODE | CMD_DECODE | CMD_SYNTH},
    [OPT_MODEL] = {"model", 0, 1, CMD_ENCODE | CMD_DECODE},
    [OPT_CODEBOOKS] = {"codebooks", 0, 1, CMD_ENCODE | CMD_DECODE},
    [OPT_OFFLINE] = {"offline", 0, 0, CMD_ENCODE | CMD_DECODE},
    [OPT_THREADS] = {"threads", 0, 1, CMD_ENCODE | CMD_DECODE},
    [OPT_FLOAT] = {"float", 0, 0, CMD_DECODE},
    [OPT_SEED] = {"seed", 0, 1, CMD_SYNTH},
    [OPT_NAMING] = {"naming", 0, 1, CMD_SYNTH},
    [OPT_DTYPE] = {"dtype", 0, 1, CMD_SYNTH},
    [OPT_QUIET] = {"quiet", 'q', 0, CMD_ENCODE | CMD_DECODE | CMD_SYNTH},
};
#define N_OPTIONS ((int)(sizeof OPTIONS / sizeof OPTIONS[0]))

struct opts {
    const char *cmd;
    const char *input, *output, *model;
    int codebooks;  // 0: the command's default
    int threads, offline, float_wav, quiet;
    unsigned long long seed;
    enum synth_naming naming;
    enum synth_dtype dtype;
};

static const char *const NAMINGS[] = {[SYNTH_NAMING_KYUTAI] = "kyutai", [SYNTH_NAMING_HF] = "hf"};
static const char *const DTYPES[] = {[SYNTH_F32] = "f32", [SYNTH_F16] = "f16",
                                     [SYNTH_BF16] = "bf16"};

// The index of `v` in names[0 .. n), or -1.
static int pick(const char *v, const char *const *names, int n) {
    for (int i = 0; i < n; i++)
        if (strcmp(v, names[i]) == 0) return i;
    return -1;
}

static int parse_int(const char *s, long lo, long hi, int *out) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) return -1;
    *out = (int)v;
    return 0;
}

// Stores the value of option `id`. Returns 0 or the usage-error status.
static int set_option(struct opts *o, int id, const char *v) {
    const char *cmd = o->cmd;
    int k;
    switch (id) {
    case OPT_OUTPUT: o->output = v; break;
    case OPT_MODEL: o->model = v; break;
    case OPT_CODEBOOKS:
        if (parse_int(v, 1, 1024, &o->codebooks))
            return usage_error(cmd, "--codebooks wants a positive integer, got '%s'", v);
        break;
    case OPT_THREADS:
        if (parse_int(v, 1, 256, &o->threads))
            return usage_error(cmd, "--threads wants an integer in 1 .. 256, got '%s'", v);
        break;
    case OPT_OFFLINE: o->offline = 1; break;
    case OPT_FLOAT: o->float_wav = 1; break;
    case OPT_QUIET: o->quiet = 1; break;
    case OPT_SEED: {
        char *end;
        errno = 0;
        o->seed = strtoull(v, &end, 10);
        if (errno || end == v || *end || v[0] == '-' || v[0] == '+')
            return usage_error(cmd, "--seed wants a non-negative integer, got '%s'", v);
        break;
    }
    case OPT_NAMING:
        if ((k = pick(v, NAMINGS, 2)) < 0)
            return usage_error(cmd, "--naming is kyutai or hf, not '%s'", v);
        o->naming = (enum synth_naming)k;
        break;
    case OPT_DTYPE:
        if ((k = pick(v, DTYPES, 3)) < 0)
            return usage_error(cmd, "--dtype is f32, f16 or bf16, not '%s'", v);
        o->dtype = (enum synth_dtype)k;
        break;
    }
    return 0;
}

// Parses argv[2..] for command `mask`: options anywhere, "--opt value" or "--opt=value", at most
// one positional argument (the input), "--" ends the options. Returns 0 or 2.
static int parse_args(struct opts *o, int mask, int argc, char **argv) {
    int only_positional = 0;
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        if (only_positional || a[0] != '-' || a[1] == '\0') {
            if (mask == CMD_SYNTH) return usage_error(o->cmd, "unexpected argument '%s'", a);
            if (o->input) return usage_error(o->cmd, "unexpected second input '%s'", a);
            o->input = a;
            continue;
        }
        if (strcmp(a, "--") == 0) {
            only_positional = 1;
            continue;
        }
        const char *name = a + (a[1] == '-' ? 2 : 1), *eq = strchr(name, '=');
        size_t len = eq ? (size_t)(eq - name) : strlen(name);
        int id = -1;
        for (int k = 0; k < N_OPTIONS && id < 0; k++) {
            const struct option_def *d = &OPTIONS[k];
            if (a[1] == '-' ? strlen(d->name) == len && strncmp(d->name, name, len) == 0
                            : d->short_name && len == 1 && name[0] == d->short_name)
                id = (d->cmds & mask) ? k : -2;
        }
        if (id < 0) return usage_error(o->cmd, "unknown option '%s'", a);
        const char *value = "";
        if (OPTIONS[id].has_value) {
            if (eq) value = eq + 1;
            else if (i + 1 < argc) value = argv[++i];
            else return usage_error(o->cmd, "option '%s' needs a value", a);
        } else if (eq) {
            return usage_error(o->cmd, "option '%.*s' takes no value", (int)(eq - a), a);
        }
        int rc = set_option(o, id, value);
        if (rc) return rc;
    }
    if (mask != CMD_SYNTH && !o->input) return usage_error(o->cmd, "missing the input file");
    if (!o->output) return usage_error(o->cmd, "missing the output file (-o FILE)");
    return 0;
}

static const char *model_path(const struct opts *o) {
    if (o->model) return o->model;
    const char *env = getenv("MIMI_MODEL");
    if (env && *env) return env;
    fprintf(stderr, "mimi: no model given: use --model FILE or set MIMI_MODEL (try `mimi synth -o "
                    "synthetic.safetensors` for a test model)\n");
    return NULL;
}

// ---- files ----

static int same_file(const char *a, const char *b) {
    struct stat sa, sb;
    return a && b && stat(a, &sa) == 0 && stat(b, &sb) == 0 && sa.st_dev == sb.st_dev &&
           sa.st_ino == sb.st_ino;
}

// Checks before any work that `out` can be written: its directory exists, it is not a directory,
// and it is none of the inputs (a NULL-terminated list). Returns 0 or 1 (message printed).
static int check_output(const char *out, const char *const *inputs) {
    for (; *inputs; inputs++) {
        if (same_file(out, *inputs)) {
            failf(out, "is the same file as the input %s; refusing to overwrite it", *inputs);
            return 1;
        }
    }
    struct stat st;
    if (stat(out, &st) == 0 && S_ISDIR(st.st_mode)) {
        failf(out, "is a directory");
        return 1;
    }
    char *copy = strdup(out);
    const char *dir = copy ? dirname(copy) : ".";
    int missing = stat(dir, &st) != 0 || !S_ISDIR(st.st_mode);
    if (missing) failf(out, "directory %s does not exist", dir);
    free(copy);
    return missing;
}

static int has_ext(const char *path, const char *ext) {
    size_t n = strlen(path), e = strlen(ext);
    return n > e && strcasecmp(path + n - e, ext) == 0;
}

static struct mimi_model *load_model(const char *path, int threads) {
    struct mimi_model_params mp;
    mimi_model_params_default(&mp);
    if (threads > 0) mp.n_threads = threads;
    mp.log = log_to_stderr;
    int err = MIMI_OK;
    g_log.holding = 1;
    g_log.first_error[0] = '\0';
    struct mimi_model *model = mimi_model_load(path, &mp, &err);
    g_log.holding = 0;
    const char *why = g_log.first_error;
    size_t len = strlen(path);
    if (strncmp(why, path, len) == 0 && why[len] == ':') why += len + 1 + (why[len + 1] == ' ');
    if (model && *why) fprintf(stderr, "mimi: %s: %s\n", path, why);
    if (!model && *why) failf(path, "%s (%s)", why, mimi_strerror(err));
    if (!model && !*why) failf(path, "cannot load the model: %s", mimi_strerror(err));
    return model;
}

static void summary(const struct opts *o, const char *verb, int64_t frames, double audio_s,
                    double wall_s) {
    if (o->quiet) return;
    fprintf(stderr,
            "mimi: %s %lld frames (%.2f s of audio, %s) in %.2f s: %.1f ms per frame, %.2fx real "
            "time\n",
            verb, (long long)frames, audio_s, o->offline ? "offline" : "streaming", wall_s,
            frames ? 1000.0 * wall_s / (double)frames : 0.0, wall_s > 0 ? audio_s / wall_s : 0.0);
}

// ---- encode ----

// Streams pcm through an encoder one frame at a time, then flushes the zero-padded tail.
// Writes frame-major codes; returns the number of frames or -1 (message printed).
static int64_t encode_stream(const struct mimi_model *model, const struct mimi_stream_params *sp,
                             const float *pcm, int64_t n, int32_t *codes, int64_t max_frames,
                             const char *input) {
    int err = MIMI_OK;
    struct mimi_encoder *enc = mimi_encoder_create(model, sp, &err);
    if (!enc) {
        failf(input, "cannot create an encoder: %s", mimi_strerror(err));
        return -1;
    }
    int64_t fs = mimi_model_frame_size(model), frames = 0;
    int r = 0;
    for (int64_t done = 0; done < n && r >= 0; done += fs) {
        size_t k = (size_t)(n - done < fs ? n - done : fs);
        r = mimi_encoder_push(enc, pcm + done, k, codes + frames * sp->n_codebooks,
                              (int)(max_frames - frames));
        if (r > 0) frames += r;
    }
    if (r >= 0) {
        r = mimi_encoder_flush(enc, codes + frames * sp->n_codebooks, (int)(max_frames - frames));
        if (r > 0) frames += r;
    }
    if (r < 0) {
        const char *m = mimi_encoder_errmsg(enc);
        failf(input, "encoding failed: %s", *m ? m : mimi_strerror(r));
        frames = -1;
    }
    mimi_encoder_destroy(enc);
    return frames;
}

static int cmd_encode(const struct opts *o) {
    const char *mpath = model_path(o);
    if (!mpath) return 2;
    const char *inputs[] = {o->input, mpath, NULL};
    if (check_output(o->output, inputs)) return 1;

    char err[1024];
    float *pcm = NULL;
    int64_t n = 0;
    int rate = 0, rc = 1;
    int32_t *codes = NULL, *out = NULL;
    struct mimi_model *model = NULL;
    if (audio_read_mono(o->input, &pcm, &n, &rate, NULL, err, sizeof err)) {
        fail_msg(o->input, err);
        return 1;
    }
    if (!(model = load_model(mpath, o->threads))) goto done;
    if (rate != mimi_model_sample_rate(model)) {
        failf(o->input, "sample rate %d Hz, the model needs %d Hz (resampling comes in a later "
                        "version)", rate, mimi_model_sample_rate(model));
        goto done;
    }
    struct mimi_stream_params sp;
    mimi_stream_params_default(&sp);
    int nq = sp.n_codebooks = o->codebooks ? o->codebooks : 8;
    if (nq > mimi_model_max_codebooks(model)) {
        failf(mpath, "has %d codebooks, --codebooks %d asks for more",
              mimi_model_max_codebooks(model), nq);
        goto done;
    }
    int64_t frames = mimi_frames_for_samples(model, n);
    if (frames <= 0 || frames > INT_MAX / nq) {
        failf(o->input, "too long (%lld samples)", (long long)n);
        goto done;
    }
    codes = malloc((size_t)frames * (size_t)nq * sizeof *codes);
    out = malloc((size_t)frames * (size_t)nq * sizeof *out);
    if (!codes || !out) {
        failf(o->input, "out of memory");
        goto done;
    }
    double t0 = now_s();
    int64_t got;
    if (o->offline) {
        got = mimi_encode_offline(model, &sp, pcm, n, out, frames * nq);  // codebook-major
        if (got < 0) failf(o->input, "encoding failed: %s", mimi_strerror((int)got));
    } else {
        got = encode_stream(model, &sp, pcm, n, codes, frames, o->input);  // frame-major
        for (int64_t f = 0; f < got; f++)
            for (int q = 0; q < nq; q++) out[q * frames + f] = codes[f * nq + q];
    }
    double wall = now_s() - t0;
    if (got < 0) goto done;
    if (got != frames) {
        failf(o->input, "the codec produced %lld frames, expected %lld", (long long)got,
              (long long)frames);
        goto done;
    }
    if (npy_write_i32_2d(o->output, out, nq, frames, err, sizeof err)) {
        fail_msg(o->output, err);
        goto done;
    }
    summary(o, "encoded", frames, (double)n / rate, wall);
    rc = 0;
done:
    free(out);
    free(codes);
    free(pcm);
    mimi_model_destroy(model);
    return rc;
}

// ---- decode ----

// Decodes codebook-major codes [n_rows][frames] one frame at a time with the first
// sp->n_codebooks rows. Returns 0 or -1 (message printed).
static int decode_stream(const struct mimi_model *model, const struct mimi_stream_params *sp,
                         const int32_t *codes, int64_t frames, float *pcm, const char *input) {
    int err = MIMI_OK, nq = sp->n_codebooks, fs = mimi_model_frame_size(model);
    struct mimi_decoder *dec = mimi_decoder_create(model, sp, &err);
    int32_t *frame = malloc((size_t)nq * sizeof *frame);
    if (!dec || !frame) {
        failf(input, "cannot create a decoder: %s", mimi_strerror(dec ? MIMI_ENOMEM : err));
        mimi_decoder_destroy(dec);
        free(frame);
        return -1;
    }
    int r = 0;
    for (int64_t f = 0; f < frames && r >= 0; f++) {
        for (int q = 0; q < nq; q++) frame[q] = codes[q * frames + f];
        r = mimi_decoder_push(dec, frame, 1, pcm + f * fs, (size_t)fs);
        if (r >= 0 && r != fs) r = MIMI_ESTATE;
    }
    if (r < 0) {
        const char *m = mimi_decoder_errmsg(dec);
        failf(input, "decoding failed: %s", *m ? m : mimi_strerror(r));
    }
    mimi_decoder_destroy(dec);
    free(frame);
    return r < 0 ? -1 : 0;
}

static int cmd_decode(const struct opts *o) {
    int to_npy = has_ext(o->output, ".npy");
    if (!to_npy && !has_ext(o->output, ".wav"))
        return usage_error(o->cmd, "cannot tell the output format of '%s': name it .wav or .npy",
                           o->output);
    const char *mpath = model_path(o);
    if (!mpath) return 2;
    const char *inputs[] = {o->input, mpath, NULL};
    if (check_output(o->output, inputs)) return 1;

    char err[1024];
    int32_t *codes = NULL;
    int64_t shape[2];
    float *pcm = NULL;
    struct mimi_model *model = NULL;
    int rc = 1;
    if (npy_read_i32_2d(o->input, &codes, shape, err, sizeof err)) {
        fail_msg(o->input, err);
        return 1;
    }
    int64_t rows = shape[0], frames = shape[1];
    if (rows == 0 || frames == 0) {
        failf(o->input, "no codes (shape (%lld, %lld))", (long long)rows, (long long)frames);
        goto done;
    }
    if (!(model = load_model(mpath, o->threads))) goto done;
    int max_q = mimi_model_max_codebooks(model), card = mimi_model_codebook_size(model);
    int fs = mimi_model_frame_size(model);
    if (rows > max_q) {
        failf(o->input, "has %lld codebooks, the model has at most %d (is the array [codebooks, "
                        "frames]?)", (long long)rows, max_q);
        goto done;
    }
    for (int64_t i = 0; i < rows * frames; i++) {
        if (codes[i] < 0 || codes[i] >= card) {
            failf(o->input, "code %ld at codebook %lld, frame %lld is out of range [0, %d)",
                  (long)codes[i], (long long)(i / frames), (long long)(i % frames), card);
            goto done;
        }
    }
    struct mimi_stream_params sp;
    mimi_stream_params_default(&sp);
    sp.n_codebooks = o->codebooks ? o->codebooks : (int)rows;
    if (sp.n_codebooks > rows) {
        failf(o->input, "has %lld codebooks, --codebooks %d asks for more", (long long)rows,
              sp.n_codebooks);
        goto done;
    }
    if (frames > INT64_MAX / fs || (uint64_t)(frames * fs) > SIZE_MAX / sizeof *pcm ||
        !(pcm = malloc((size_t)(frames * fs) * sizeof *pcm))) {
        failf(o->input, "out of memory for %lld frames", (long long)frames);
        goto done;
    }
    int64_t n = frames * fs;
    double t0 = now_s();
    if (o->offline) {
        int64_t got = mimi_decode_offline(model, &sp, codes, frames, pcm, n);
        if (got != n) {
            failf(o->input, "decoding failed: %s",
                  mimi_strerror(got < 0 ? (int)got : MIMI_ESTATE));
            goto done;
        }
    } else if (decode_stream(model, &sp, codes, frames, pcm, o->input)) {
        goto done;
    }
    double wall = now_s() - t0;
    int64_t clipped = 0;
    int rate = mimi_model_sample_rate(model);
    int wr = to_npy ? npy_write_f32(o->output, pcm, 1, &n, err, sizeof err)
                    : audio_write_wav(o->output, pcm, n, rate,
                                      o->float_wav ? AUDIO_FLOAT : AUDIO_PCM16, &clipped, err,
                                      sizeof err);
    if (wr) {
        fail_msg(o->output, err);
        goto done;
    }
    summary(o, "decoded", frames, (double)n / rate, wall);
    if (clipped && !o->quiet)
        fprintf(stderr, "mimi: %s: note: %lld of %lld samples were outside [-1, 1] and were "
                        "clipped (--float keeps them)\n", o->output, (long long)clipped,
                (long long)n);
    rc = 0;
done:
    free(pcm);
    free(codes);
    mimi_model_destroy(model);
    return rc;
}

// ---- synth ----

static int cmd_synth(const struct opts *o) {
    const char *inputs[] = {NULL};
    if (check_output(o->output, inputs)) return 1;
    fprintf(stderr, "mimi: note: synthetic weights are not trained and do not produce meaningful "
                    "audio; use them for tests and benchmarks\n");
    char err[1024] = "";
    double t0 = now_s();
    int rc = synth_write_model(o->output, (uint64_t)o->seed, o->naming, o->dtype, err, sizeof err);
    if (rc) {
        fail_msg(o->output, *err ? err : mimi_strerror(rc));
        return 1;
    }
    if (!o->quiet)
        fprintf(stderr, "mimi: wrote %s (seed %llu, %s naming, %s) in %.2f s\n", o->output,
                o->seed, NAMINGS[o->naming], DTYPES[o->dtype], now_s() - t0);
    return 0;
}

// ---- main ----

static const struct command {
    const char *name;
    int mask;
    const char *usage;
    int (*run)(const struct opts *);
} COMMANDS[] = {
    {"encode", CMD_ENCODE, USAGE_ENCODE, cmd_encode},
    {"decode", CMD_DECODE, USAGE_DECODE, cmd_decode},
    {"synth", CMD_SYNTH, USAGE_SYNTH, cmd_synth},
};

static const struct command *find_command(const char *name) {
    for (size_t i = 0; i < sizeof COMMANDS / sizeof COMMANDS[0]; i++)
        if (strcmp(COMMANDS[i].name, name) == 0) return &COMMANDS[i];
    return NULL;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fputs(USAGE_MAIN, stderr);
        return 2;
    }
    const char *name = argv[1];
    if (strcmp(name, "--help") == 0 || strcmp(name, "-h") == 0 || strcmp(name, "help") == 0) {
        const struct command *c = argc > 2 ? find_command(argv[2]) : NULL;
        fputs(c ? c->usage : USAGE_MAIN, stdout);
        return 0;
    }
    if (strcmp(name, "version") == 0 || strcmp(name, "--version") == 0) {
        printf("mimi %s\n", mimi_version_string());
        return 0;
    }
    const struct command *c = find_command(name);
    if (!c) {
        fprintf(stderr, "mimi: unknown command '%s' (commands: encode, decode, synth, version; "
                        "see `mimi --help`)\n", name);
        return 2;
    }
    for (int i = 2; i < argc && strcmp(argv[i], "--") != 0; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            fputs(c->usage, stdout);
            return 0;
        }
    }
    struct opts o;
    memset(&o, 0, sizeof o);
    o.cmd = c->name;
    int rc = parse_args(&o, c->mask, argc, argv);
    return rc ? rc : c->run(&o);
}
