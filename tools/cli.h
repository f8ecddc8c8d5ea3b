/*
 * cli.h - what the files of the `mimi` command share: parsed options, messages, the model, the
 * list of files to work on, worker threads, the progress bar and the JSON summary.
 *
 * The command is split by topic: mimi-cli.c (main, options), cli_help.c (help texts),
 * cli_common.c (everything declared here), cli_encode.c, cli_decode.c, cli_roundtrip.c,
 * cli_info.c; file formats live in audio.c, codes_file.c and npy.c.
 *
 * Messages: every problem is one line "mimi: <file>: <problem>" on stderr; notes ("in.mp3: 44100
 * Hz stereo -> 24000 Hz mono") and summaries go to stderr too, and are silenced by --quiet.
 * Standard output carries only data: codes or audio streams, `info` reports, --json summaries.
 */
#ifndef MIMI_CLI_H
#define MIMI_CLI_H

#include <stddef.h>
#include <stdint.h>

#include "audio.h"
#include "codes_file.h"
#include "mimi.h"
#include "synth.h"

// ---- options ----

struct opts {
    const char *cmd;            // "encode", ...
    const char **inputs;        // positional arguments ("-": standard input)
    int n_inputs;
    const char *output, *model;
    int codebooks;              // 0: the command's default
    int threads, jobs;          // model threads per step (0: the CPUs online, up to 8); files at once (0: 1)
    int group;                  // --offline: files per library call (0: the default)
    int backend, isa, weights;  // --backend, --isa, --weights (enum mimi_backend / mimi_isa / mimi_weights)
    int precision;              // --precision (enum mimi_precision), with --backend cuda
    int offline, float_wav, quiet, json, text, any_model;
    int rate, channels;         // --rate, --channels; 0 when not given
    enum audio_raw raw;
    const char *format;         // --format, for outputs named from a directory
    unsigned long long seed;
    enum synth_naming naming;
    enum synth_dtype dtype;
};

// Usage texts (cli_help.c).
extern const char USAGE_MAIN[], USAGE_ENCODE[], USAGE_DECODE[], USAGE_ROUNDTRIP[], USAGE_INFO[],
    USAGE_SYNTH[];

// The commands (one file each).
int cmd_encode(const struct opts *o);
int cmd_decode(const struct opts *o);
int cmd_roundtrip(const struct opts *o);
int cmd_info(const struct opts *o);

// ---- messages ----

// Prints "mimi: <file>: <message>" (a message that already starts with "<file>:" is printed as
// it is). Thread-safe; clears the progress bar first.
void cli_fail(const char *file, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

// Prints "mimi: <message>" unless --quiet was given (cli_set_quiet). Thread-safe.
void cli_note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void cli_set_quiet(int quiet);

// Writes the message into err and returns `code` (for functions that report through a buffer).
int cli_err(char *err, size_t errlen, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

// Prints "mimi <cmd>: <message> (see `mimi <cmd> --help`)" and returns 2.
int cli_usage_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

double cli_now(void);

// "stereo", "mono", "6 channels".
const char *cli_channels_name(int channels, char *buf, size_t len);

// ---- the model ----

// The model path (--model or $MIMI_MODEL), or NULL after printing why there is none.
const char *cli_model_path(const struct opts *o);

// Loads the model; on failure prints one line naming the file and the cause, returns NULL.
struct mimi_model *cli_load_model(const char *path, const struct opts *o);

// XXH64 of the model file as 16 hex digits, computed once (thread-safe). NULL after printing why
// on failure.
const char *cli_model_hash(const char *path);

// ---- frames: codes or continuous latents, whichever the model makes ----
//
// The commands run one code path for both kinds of model: a frame is CLI_MAX_FRAME 4-byte
// values at most, int32 codes (n_codebooks per frame) for a Mimi model with a quantizer, float
// latents (latent_size per frame) for Pocket TTS's Mimi; the calls below pick the library's code
// or *_latent function by the frame type.

#define CLI_MAX_FRAME 4096

union frame_buf {
    int32_t codes[CLI_MAX_FRAME];
    float latents[CLI_MAX_FRAME];
};

// The frame type of `model` in *type. --codebooks with a model that has no codebooks is a usage
// error: prints it and returns 2; else returns 0.
int cli_frame_type(const struct opts *o, const struct mimi_model *model, const char *path,
                   enum frame_type *type);

// "continuous latents, 32 floats x 12.5 Hz" for a model with latents.
void cli_latents_desc(const struct mimi_model *model, char *buf, size_t len);

// The library's step, push, flush and offline calls for frames of `type` (same contracts).
int cli_encoder_step(struct mimi_encoder *enc, enum frame_type type, const float *pcm,
                     void *frame);
int cli_encoder_push(struct mimi_encoder *enc, enum frame_type type, const float *pcm,
                     size_t n_samples, void *frames, int max_frames);
int cli_encoder_flush(struct mimi_encoder *enc, enum frame_type type, void *frames,
                      int max_frames);
int cli_decoder_step(struct mimi_decoder *dec, enum frame_type type, const void *frame,
                     float *pcm);
// Offline: frames are row-major [values per frame][n_frames], as in codes files.
int64_t cli_encode_offline(const struct mimi_model *model, const struct mimi_stream_params *sp,
                           enum frame_type type, const float *pcm, int64_t n_samples,
                           void *frames, int64_t max_values);
int64_t cli_decode_offline(const struct mimi_model *model, const struct mimi_stream_params *sp,
                           enum frame_type type, const void *frames, int64_t n_frames,
                           float *pcm, int64_t max_samples);

// Checks the n values of one frame before decoding: codes in [0, card), latents finite.
// Returns 0, or MIMI_EINVAL with "frame F: ..." naming the value in err.
int cli_frame_check(enum frame_type type, const void *frame, int n, int card, int64_t f,
                    char *err, size_t errlen);

// ---- work items: one input file each ----

struct item {
    const char *input;
    char output[4096];          // "" when there is none
    int ok;
    char error[1024];           // the reason when !ok
    int64_t frames, samples;    // codes or latents frames; audio samples at the model's rate
    int n_codebooks;
    int latent_size;            // > 0: the frames are latents of this many floats (no codes)
    double audio_s, wall_s;
    int in_rate, in_channels;   // encode: the input audio's; decode: 0
    char in_format[48];
    double snr_db, bitrate;     // roundtrip: SNR in dB, bits per second
    int64_t clipped;
};

// Records a failure on the item and prints it with cli_fail.
void item_fail(struct item *it, const char *file, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

// Fills items[i].output for every input: with one input and an output that is not a directory,
// the output itself; otherwise <output dir>/<input name without extension><ext> (an output
// ending in '/' is created when missing). Outputs that are the same file as an input or the
// model, or that two inputs share, fail those items. Returns 0, or 1/2 (message printed) when the
// output cannot be used at all.
int plan_outputs(const struct opts *o, struct item *items, const char *ext, const char *model);

// 1 when `path` names a directory (or ends in '/').
int is_dir_path(const char *path);

// 1 when a and b are the same existing file.
int same_file(const char *a, const char *b);

// Runs fn(ctx, i) for i in [0, n) on `jobs` threads (at most n; 1: in this thread).
void run_jobs(int n, int jobs, void (*fn)(void *ctx, int i), void *ctx);

// ---- progress bar (stderr, only when it is a terminal, the work takes more than about two
// seconds and --quiet is off; MIMI_PROGRESS=always|never overrides the first two) ----

void progress_begin(const char *verb, int n_items, int jobs, int quiet);
// Sets the done fraction [0, 1] of the item that worker slot `slot` works on.
void progress_set(int slot, double fraction);
// The item of `slot` is finished (its fraction moves to the done count).
void progress_item_done(int slot);
void progress_end(void);
// The slot of the calling worker thread (0 .. jobs - 1).
int progress_slot(void);

// ---- --json ----

// Prints s as a JSON string literal (quotes, backslashes and control characters escaped).
void json_string(const char *s);

// Prints {"command":..., "ok": bool, "succeeded": n, "failed": n, "wall_seconds": t,
// "files": [...]} on stdout.
void json_summary(const struct opts *o, const struct item *items, int n, double wall_s);

// Marks the items still marked ok as failed with "not processed" (after a failure that stopped
// the whole command).
void items_abandon(struct item *items, int n);

// 1 after SIGINT/SIGTERM (the item is then marked failed without a message), else 0.
int item_interrupted(struct item *it);

// Exit status for a finished batch: 0 when every item succeeded, else 1.
int items_status(const struct item *items, int n);

// Runs the command's items (fn(ctx, i) for each input, on --jobs threads; with o->group > 1,
// fn(ctx, g) for each group of that many inputs) with the progress bar,
// then prints the "<past> k of n files" note and the --json summary. `setup_rc` is the status
// of the setup before any item (0: run them; 1: a failure that stops the command, whose items are
// then reported as not processed). Returns the exit status.
int run_items(const struct opts *o, struct item *items, int setup_rc, const char *verb,
              const char *past, int quiet, void (*fn)(void *ctx, int i), void *ctx);
// The inputs of group g (o->group per group): *first and the count.
int group_span(const struct opts *o, int g, int *first);
// The audio a group holds in memory before its library call, in samples at the model's rate
// (2^27: 93 minutes at 24 kHz, 512 MB of f32); a group of longer files makes several calls.
#define GROUP_SAMPLES ((int64_t)1 << 27)

#endif
