/*
 * mimi-cli.c - the `mimi` command: main, the option parser and `synth`.
 *
 * Commands: encode (cli_encode.c), decode (cli_decode.c), roundtrip (cli_roundtrip.c), info
 * (cli_info.c), synth and version (here). Every failure prints one line "mimi: <file>: <problem>"
 * and the exit status is 1 (2 for a usage error). Outputs are written atomically (temporary file,
 * then rename), so a failure never leaves a partial file, and an output that is the same file as
 * an input or the model is refused. SIGPIPE is ignored: a closed pipe is an ordinary write error,
 * reported on one line.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "fdio.h"

// ---- options ----

enum { CMD_ENCODE = 1, CMD_DECODE = 2, CMD_SYNTH = 4, CMD_ROUNDTRIP = 8, CMD_INFO = 16 };
#define CMD_CODEC (CMD_ENCODE | CMD_DECODE | CMD_ROUNDTRIP)

enum { OPT_OUTPUT, OPT_MODEL, OPT_CODEBOOKS, OPT_OFFLINE, OPT_THREADS, OPT_JOBS, OPT_FLOAT,
       OPT_RATE, OPT_CHANNELS, OPT_RAW, OPT_TEXT, OPT_FORMAT, OPT_ANY_MODEL, OPT_JSON, OPT_SEED,
       OPT_NAMING, OPT_DTYPE, OPT_QUIET, OPT_BACKEND, OPT_ISA, OPT_WEIGHTS, OPT_PRECISION, OPT_GROUP };

static const struct option_def {
    const char *name;
    char short_name;
    int has_value;
    int cmds;  // CMD_* mask of the commands that accept it
} OPTIONS[] = {
    [OPT_OUTPUT] = {"output", 'o', 1, CMD_CODEC | CMD_SYNTH},
    [OPT_MODEL] = {"model", 0, 1, CMD_CODEC},
    [OPT_CODEBOOKS] = {"codebooks", 0, 1, CMD_CODEC},
    [OPT_OFFLINE] = {"offline", 0, 0, CMD_ENCODE | CMD_DECODE},
    [OPT_THREADS] = {"threads", 0, 1, CMD_CODEC},
    [OPT_JOBS] = {"jobs", 'j', 1, CMD_ENCODE | CMD_DECODE},
    [OPT_FLOAT] = {"float", 0, 0, CMD_DECODE | CMD_ROUNDTRIP},
    [OPT_RATE] = {"rate", 0, 1, CMD_CODEC},
    [OPT_CHANNELS] = {"channels", 0, 1, CMD_ENCODE | CMD_ROUNDTRIP},
    [OPT_RAW] = {"raw", 0, 1, CMD_CODEC},
    [OPT_TEXT] = {"text", 0, 0, CMD_ENCODE | CMD_DECODE},
    [OPT_FORMAT] = {"format", 0, 1, CMD_ENCODE | CMD_DECODE},
    [OPT_ANY_MODEL] = {"any-model", 0, 0, CMD_DECODE},
    [OPT_JSON] = {"json", 0, 0, CMD_CODEC | CMD_INFO},
    [OPT_SEED] = {"seed", 0, 1, CMD_SYNTH},
    [OPT_NAMING] = {"naming", 0, 1, CMD_SYNTH},
    [OPT_DTYPE] = {"dtype", 0, 1, CMD_SYNTH},
    [OPT_QUIET] = {"quiet", 'q', 0, CMD_CODEC | CMD_SYNTH | CMD_INFO},
    [OPT_BACKEND] = {"backend", 0, 1, CMD_CODEC},
    [OPT_ISA] = {"isa", 0, 1, CMD_CODEC},
    [OPT_WEIGHTS] = {"weights", 0, 1, CMD_CODEC},
    [OPT_PRECISION] = {"precision", 0, 1, CMD_CODEC},
    [OPT_GROUP] = {"group", 0, 1, CMD_ENCODE | CMD_DECODE},
};
#define N_OPTIONS ((int)(sizeof OPTIONS / sizeof OPTIONS[0]))

static const char *const NAMINGS[] = {[SYNTH_NAMING_KYUTAI] = "kyutai", [SYNTH_NAMING_HF] = "hf",
                                      [SYNTH_NAMING_POCKET] = "pocket"};
static const char *const BACKENDS[] = {[MIMI_BACKEND_AUTO] = "auto", [MIMI_BACKEND_CPU] = "cpu",
                                       [MIMI_BACKEND_CUDA] = "cuda"};
static const char *const ISAS[] = {[MIMI_ISA_AUTO] = "auto", [MIMI_ISA_REFERENCE] = "reference",
                                   [MIMI_ISA_AVX2] = "avx2", [MIMI_ISA_AVX512] = "avx512",
                                   [MIMI_ISA_NEON] = "neon"};
static const char *const WEIGHTS[] = {[MIMI_WEIGHTS_F32] = "f32", [MIMI_WEIGHTS_BF16] = "bf16"};
static const char *const PRECISIONS[] = {[MIMI_PRECISION_STRICT] = "strict", [MIMI_PRECISION_FAST] = "fast",
                                         [MIMI_PRECISION_FAST_BF16_KV] = "bf16kv", [MIMI_PRECISION_FAST_BF16] = "bf16",
                                         [MIMI_PRECISION_FAST_INT8_KV] = "int8kv"};
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
            return cli_usage_error(cmd, "--codebooks wants a positive integer, got '%s'", v);
        break;
    case OPT_THREADS:
        if (parse_int(v, 1, 256, &o->threads))
            return cli_usage_error(cmd, "--threads wants an integer in 1 .. 256, got '%s'", v);
        break;
    case OPT_JOBS:
        if (parse_int(v, 1, 256, &o->jobs))
            return cli_usage_error(cmd, "--jobs wants an integer in 1 .. 256, got '%s'", v);
        break;
    case OPT_GROUP:
        if (parse_int(v, 1, 1024, &o->group))
            return cli_usage_error(cmd, "--group wants an integer in 1 .. 1024, got '%s'", v);
        break;
    case OPT_RATE:
        if (parse_int(v, 1000, 384000, &o->rate))
            return cli_usage_error(cmd, "--rate wants a sample rate in 1000 .. 384000 Hz, got '%s'",
                                   v);
        break;
    case OPT_CHANNELS:
        if (parse_int(v, 1, 64, &o->channels))
            return cli_usage_error(cmd, "--channels wants an integer in 1 .. 64, got '%s'", v);
        break;
    case OPT_RAW:
        if ((o->raw = audio_raw_parse(v)) == AUDIO_RAW_NONE)
            return cli_usage_error(cmd, "--raw is s16le or f32le, not '%s'", v);
        break;
    case OPT_FORMAT: o->format = v; break;
    case OPT_OFFLINE: o->offline = 1; break;
    case OPT_FLOAT: o->float_wav = 1; break;
    case OPT_TEXT: o->text = 1; break;
    case OPT_ANY_MODEL: o->any_model = 1; break;
    case OPT_JSON: o->json = 1; break;
    case OPT_QUIET: o->quiet = 1; break;
    case OPT_SEED: {
        char *end;
        errno = 0;
        o->seed = strtoull(v, &end, 10);
        if (errno || end == v || *end || v[0] == '-' || v[0] == '+')
            return cli_usage_error(cmd, "--seed wants a non-negative integer, got '%s'", v);
        break;
    }
    case OPT_NAMING:
        if ((k = pick(v, NAMINGS, 3)) < 0)
            return cli_usage_error(cmd, "--naming is kyutai, hf or pocket, not '%s'", v);
        o->naming = (enum synth_naming)k;
        break;
    case OPT_BACKEND:
        if ((k = pick(v, BACKENDS, 3)) < 0)
            return cli_usage_error(cmd, "--backend is auto, cpu or cuda, not '%s'", v);
        o->backend = k;
        break;
    case OPT_ISA:
        if ((k = pick(v, ISAS, 5)) < 0)
            return cli_usage_error(cmd, "--isa is auto, reference, avx2, avx512 or neon, not '%s'", v);
        o->isa = k;
        break;
    case OPT_WEIGHTS:
        if ((k = pick(v, WEIGHTS, 2)) < 0)
            return cli_usage_error(cmd, "--weights is f32 or bf16, not '%s'", v);
        o->weights = k;
        break;
    case OPT_PRECISION:
        if ((k = pick(v, PRECISIONS, 5)) < 0)
            return cli_usage_error(cmd, "--precision is strict, fast, bf16kv, bf16 or int8kv, not '%s'", v);
        o->precision = k;
        break;
    case OPT_DTYPE:
        if ((k = pick(v, DTYPES, 3)) < 0)
            return cli_usage_error(cmd, "--dtype is f32, f16 or bf16, not '%s'", v);
        o->dtype = (enum synth_dtype)k;
        break;
    }
    return 0;
}

// Parses argv[2..] for command `mask`: options anywhere, "--opt value" or "--opt=value",
// positional arguments collected as inputs ("-" is one), "--" ends the options. Returns 0 or 2.
static int parse_args(struct opts *o, int mask, int argc, char **argv) {
    int only_positional = 0;
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        if (only_positional || a[0] != '-' || a[1] == '\0') {
            if (mask == CMD_SYNTH) return cli_usage_error(o->cmd, "unexpected argument '%s'", a);
            if (mask == CMD_ROUNDTRIP && o->n_inputs)
                return cli_usage_error(o->cmd, "unexpected second input '%s'", a);
            o->inputs[o->n_inputs++] = a;
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
        if (id < 0) return cli_usage_error(o->cmd, "unknown option '%s'", a);
        const char *value = "";
        if (OPTIONS[id].has_value) {
            if (eq) value = eq + 1;
            else if (i + 1 < argc) value = argv[++i];
            else return cli_usage_error(o->cmd, "option '%s' needs a value", a);
        } else if (eq) {
            return cli_usage_error(o->cmd, "option '%.*s' takes no value", (int)(eq - a), a);
        }
        int rc = set_option(o, id, value);
        if (rc) return rc;
    }
    if (mask != CMD_SYNTH && !o->n_inputs) return cli_usage_error(o->cmd, "missing the input file");
    if (mask == CMD_SYNTH && !o->output)
        return cli_usage_error(o->cmd, "missing the output file (-o FILE)");
    if ((o->rate || o->channels) && !o->raw && (mask & (CMD_ENCODE)))
        return cli_usage_error(o->cmd, "--rate and --channels describe --raw input; files say "
                               "their own rate and channels");
    if (o->channels && !o->raw && mask == CMD_ROUNDTRIP)
        return cli_usage_error(o->cmd, "--channels describes --raw input");
    if (o->precision != MIMI_PRECISION_STRICT && o->backend != MIMI_BACKEND_CUDA)
        return cli_usage_error(o->cmd, "--precision %s is the GPU's arithmetic: it needs --backend cuda "
                               "(the CPU computes in f32 always)", PRECISIONS[o->precision]);
    return 0;
}

// ---- synth ----

static int cmd_synth(const struct opts *o) {
    struct item it = {.input = "", .ok = 1};
    if (is_dir_path(o->output)) {
        cli_fail(o->output, "is a directory");
        return 1;
    }
    struct opts po = *o;
    po.n_inputs = 1;
    if (plan_outputs(&po, &it, ".safetensors", NULL) || !it.ok) return 1;
    if (!o->quiet)
        fprintf(stderr, "mimi: note: synthetic weights are not trained and do not produce "
                        "meaningful audio; use them for tests and benchmarks\n");
    char err[1024] = "";
    double t0 = cli_now();
    int rc = synth_write_model(it.output, (uint64_t)o->seed, o->naming, o->dtype, err, sizeof err);
    if (rc) {
        cli_fail(it.output, "%s", *err ? err : mimi_strerror(rc));
        return 1;
    }
    if (!o->quiet)
        fprintf(stderr, "mimi: wrote %s (seed %llu, %s naming, %s) in %.2f s\n", it.output,
                o->seed, NAMINGS[o->naming], DTYPES[o->dtype], cli_now() - t0);
    return 0;
}

// ---- main ----

// SIGINT, SIGTERM, SIGHUP: the work stops at the next frame, temporary files are removed and
// the exit status is 130. The handler is reset, so a second signal ends the program at once.
static void on_signal(int sig) {
    (void)sig;
    fd_interrupted = 1;
}

static void catch_signals(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sa.sa_flags = (int)SA_RESETHAND;  // no SA_RESTART: blocked reads return EINTR
    sigemptyset(&sa.sa_mask);
    const int sigs[] = {SIGINT, SIGTERM, SIGHUP};
    for (int i = 0; i < 3; i++) {
        struct sigaction old;
        // a signal ignored by whoever started us (nohup, a background job) stays ignored
        if (sigaction(sigs[i], NULL, &old) == 0 && old.sa_handler == SIG_IGN) continue;
        sigaction(sigs[i], &sa, NULL);
    }
}

static const struct command {
    const char *name;
    int mask;
    const char *usage;
    int (*run)(const struct opts *);
} COMMANDS[] = {
    {"encode", CMD_ENCODE, USAGE_ENCODE, cmd_encode},
    {"decode", CMD_DECODE, USAGE_DECODE, cmd_decode},
    {"roundtrip", CMD_ROUNDTRIP, USAGE_ROUNDTRIP, cmd_roundtrip},
    {"info", CMD_INFO, USAGE_INFO, cmd_info},
    {"synth", CMD_SYNTH, USAGE_SYNTH, cmd_synth},
};

static const struct command *find_command(const char *name) {
    for (size_t i = 0; i < sizeof COMMANDS / sizeof COMMANDS[0]; i++)
        if (strcmp(COMMANDS[i].name, name) == 0) return &COMMANDS[i];
    return NULL;
}

int main(int argc, char **argv) {
    signal(SIGPIPE, SIG_IGN);  // a closed pipe becomes EPIPE, reported like any write error
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
        fprintf(stderr, "mimi: unknown command '%s' (commands: encode, decode, roundtrip, info, "
                        "synth, version; see `mimi --help`)\n", name);
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
    o.inputs = calloc((size_t)argc, sizeof *o.inputs);
    if (!o.inputs) return 1;
    int rc = parse_args(&o, c->mask, argc, argv);
    cli_set_quiet(o.quiet);
    catch_signals();
    if (!rc) rc = c->run(&o);
    free(o.inputs);
    return fd_interrupted ? 130 : rc;
}
