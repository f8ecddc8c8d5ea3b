/*
 * cli_decode.c - `mimi decode`: frames in (.npy, .safetensors, or a live frame stream on standard
 * input), audio out (WAV, FLAC, Ogg Vorbis, Ogg/Opus, MP3, float .npy, or PCM on standard output).
 * Frames are codes for a Mimi model, continuous latents for Pocket TTS's Mimi; one code path
 * serves both, and a file of the other kind is refused.
 *
 * A file is checked whole before any audio is made: its kind and shape against the model, the
 * metadata a .safetensors file carries (rates, sizes, the model hash) and every value (codes in
 * range, latents finite). Frames then go through a decoder one at a time and each frame's
 * samples go to the output as they come (resampled with --rate). A frame stream is checked frame
 * by frame as it arrives. The audio is trimmed to the length the encoder recorded (metadata
 * n_samples) when it is known. With --offline and --group (the default on a GPU) the files of a
 * group are read and checked first, then decoded by one mimi_decode_offline_many call per
 * codebook count.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "codes_file.h"
#include "fdio.h"

struct dec_ctx {
    const struct opts *o;
    const struct mimi_model *model;
    const char *model_path;
    struct item *items;
    enum frame_type type;  // what the model decodes
    int latent;            // latents: floats per frame
    int fs, rate, card, max_q;
};

// ---- checks of a codes or latents file ----

// The metadata value of `key` as an integer, or -1 when absent or not a number.
static long long meta_int(const struct codes *c, const char *key) {
    const char *v = codes_meta_get(&c->meta, key);
    char *end;
    if (!v || !*v) return -1;
    long long n = strtoll(v, &end, 10);
    return *end ? -1 : n;
}

// Checks the values of a codes file: shape against the model and --codebooks, every code in
// range. Returns 0 or 1 (the item failed, message printed).
static int check_code_values(struct dec_ctx *x, struct item *it, const struct codes *c) {
    const char *in = it->input;
    long long n;
    if ((n = meta_int(c, "codebook_size")) >= 0 && n != x->card) {
        item_fail(it, in, "the codes are for codebooks of %lld entries, the model's have %d", n,
                  x->card);
        return 1;
    }
    if ((n = meta_int(c, "n_codebooks")) >= 0 && n != c->rows) {
        item_fail(it, in, "the metadata says %lld codebooks, the codes tensor has %d", n, c->rows);
        return 1;
    }
    if (c->rows > x->max_q) {
        item_fail(it, in, "has %d codebooks, the model has at most %d (is the array [codebooks, "
                  "frames]?)", c->rows, x->max_q);
        return 1;
    }
    const int32_t *d = codes_i32(c);
    for (int64_t i = 0; i < (int64_t)c->rows * c->n_frames; i++) {
        if (d[i] < 0 || d[i] >= x->card) {
            item_fail(it, in, "code %ld at codebook %lld, frame %lld is out of range [0, %d)",
                      (long)d[i], (long long)(i / c->n_frames), (long long)(i % c->n_frames),
                      x->card);
            return 1;
        }
    }
    int nq = x->o->codebooks ? x->o->codebooks : c->rows;
    if (nq > c->rows) {
        item_fail(it, in, "has %d codebooks, --codebooks %d asks for more", c->rows, nq);
        return 1;
    }
    return 0;
}

// The same for a latents file: its size against the model's, every value finite.
static int check_latent_values(struct dec_ctx *x, struct item *it, const struct codes *c) {
    const char *in = it->input;
    long long n;
    if ((n = meta_int(c, "latent_size")) >= 0 && n != c->rows) {
        item_fail(it, in, "the metadata says latents of %lld floats, the latents tensor has %d "
                  "rows", n, c->rows);
        return 1;
    }
    if (c->rows != x->latent) {
        item_fail(it, in, "has latents of %d floats, the model's have %d (is the array [%d, "
                  "frames]?)", c->rows, x->latent, x->latent);
        return 1;
    }
    const float *d = codes_f32(c);
    for (int64_t i = 0; i < (int64_t)c->rows * c->n_frames; i++) {
        if (!isfinite(d[i])) {
            item_fail(it, in, "latent value %lld of frame %lld is not a finite number (%s)",
                      (long long)(i / c->n_frames), (long long)(i % c->n_frames),
                      isnan(d[i]) ? "nan" : "inf");
            return 1;
        }
    }
    return 0;
}

// Checks a codes or latents file against the model. Returns 0 or 1 (the item failed, message
// printed).
static int check_codes(struct dec_ctx *x, struct item *it, const struct codes *c) {
    const char *in = it->input, *v;
    const char *what = frame_type_name(c->type);
    long long n;
    if (c->type == FRAME_CODES && x->type == FRAME_LATENTS) {
        item_fail(it, in, "holds Mimi codes, but %s is a %s model with continuous latents: decode "
                  "codes with a Mimi model", x->model_path, mimi_model_family(x->model));
        return 1;
    }
    if (c->type == FRAME_LATENTS && x->type == FRAME_CODES) {
        item_fail(it, in, "holds continuous latents (%d floats per frame), but %s is a Mimi model "
                  "with codes: decode latents with a Pocket TTS model", c->rows, x->model_path);
        return 1;
    }
    if (c->rows == 0 || c->n_frames == 0) {
        item_fail(it, in, "no %s (shape (%d, %lld))", what, c->rows, (long long)c->n_frames);
        return 1;
    }
    const char *format = c->type == FRAME_LATENTS ? "mimi-latents" : "mimi-codes";
    if ((v = codes_meta_get(&c->meta, "format")) && strcmp(v, format)) {
        item_fail(it, in, "not Mimi %s (metadata format '%s')", what, v);
        return 1;
    }
    if ((n = meta_int(c, "sample_rate")) >= 0 && n != x->rate) {
        item_fail(it, in, "the %s are for %lld Hz audio, the model makes %d Hz", what, n, x->rate);
        return 1;
    }
    if ((n = meta_int(c, "frame_size")) >= 0 && n != x->fs) {
        item_fail(it, in, "the %s have %lld samples per frame, the model %d", what, n, x->fs);
        return 1;
    }
    if ((v = codes_meta_get(&c->meta, "frame_rate")) && atof(v) != (double)x->rate / x->fs) {
        item_fail(it, in, "the %s are at %s frames per second, the model at %g", what, v,
                  (double)x->rate / x->fs);
        return 1;
    }
    if ((v = codes_meta_get(&c->meta, "model_xxh64")) && !x->o->any_model) {
        const char *h = cli_model_hash(x->model_path);
        if (!h) {
            item_fail(it, in, "cannot check the model hash (see above)");
            return 1;
        }
        if (strcmp(h, v) != 0) {
            item_fail(it, in, "was encoded with another model (xxh64 %s; %s has %s): decode "
                      "with that model, or add --any-model to decode anyway", v,
                      x->model_path, h);
            return 1;
        }
    }
    return c->type == FRAME_CODES ? check_code_values(x, it, c) : check_latent_values(x, it, c);
}

// ---- one input ----

// Writes up to n samples of one frame, keeping to the length limit (-1: none).
static int put_audio(struct audio_sink *sink, struct item *it, const float *pcm, int64_t n,
                     int64_t limit, char *err, size_t errlen) {
    if (limit >= 0 && it->samples + n > limit) n = limit - it->samples;
    if (n <= 0) return 0;
    it->samples += n;
    return audio_sink_write(sink, pcm, n, err, errlen);
}

// The end of an item: a failure (rc) or a note of what was decoded.
static void report(const struct dec_ctx *x, struct item *it, const char *name, int rc, const char *err) {
    if (rc) item_fail(it, name, "%s", err);
    else if (it->ok) {
        const char *out = strcmp(it->output, "-") ? it->output : "stdout";
        cli_note("decoded %s -> %s: %lld frame%s (%.2f s of audio, %s) in %.2f s, %.1f ms per "
                 "frame, %.2fx real time", name, out, (long long)it->frames,
                 it->frames == 1 ? "" : "s", it->audio_s,
                 x->o->offline ? "offline" : "streaming", it->wall_s,
                 it->frames ? 1000.0 * it->wall_s / (double)it->frames : 0.0,
                 it->wall_s > 0 ? it->audio_s / it->wall_s : 0.0);
        if (it->clipped)
            cli_note("%s: note: %lld of %lld samples were outside [-1, 1] and were clipped%s", out,
                     (long long)it->clipped, (long long)it->samples,
                     audio_out_from_path(it->output) == AUDIO_OUT_WAV ? " (--float keeps them)" : "");
    }
}

static void decode_item(void *ctx, int i) {
    struct dec_ctx *x = ctx;
    struct item *it = &x->items[i];
    const struct opts *o = x->o;
    int from_stdin = strcmp(it->input, "-") == 0;
    const char *name = from_stdin ? "stdin" : it->input;
    double t0 = cli_now();
    struct codes c = {0};
    struct audio_sink *sink = NULL;
    struct mimi_decoder *dec = NULL;
    struct codes_reader *reader = NULL;
    float *pcm = NULL;
    char err[1400] = "";
    int rc = 0, e = 0;
    if (!it->ok || item_interrupted(it)) goto done;
    int64_t limit = -1;
    int latents = x->type == FRAME_LATENTS;
    int nq = latents ? x->latent : o->codebooks ? o->codebooks : 8;  // values per frame
    if (from_stdin) {
        if (!(reader = malloc(sizeof *reader))) {
            rc = cli_err(err, sizeof err, MIMI_ENOMEM, "out of memory");
            goto done;
        }
        codes_reader_init(reader, 0, o->text, x->type, nq, "stdin");
    } else {
        if ((rc = codes_read(it->input, &c, err, sizeof err))) goto done;
        if (check_codes(x, it, &c)) goto done;
        if (!latents) nq = o->codebooks ? o->codebooks : c.rows;
        long long n = meta_int(&c, "n_samples");
        if (n >= 0 && n <= c.n_frames * x->fs) limit = n;
    }
    it->n_codebooks = latents ? 0 : nq;
    it->latent_size = latents ? nq : 0;
    if (!latents && nq > x->max_q) {
        rc = cli_err(err, sizeof err, MIMI_EINVAL, "--codebooks %d: the model has %d", nq, x->max_q);
        goto done;
    }
    enum audio_raw raw = o->raw ? o->raw : strcmp(it->output, "-") ? AUDIO_RAW_NONE : AUDIO_RAW_S16LE;
    int out_rate = o->rate ? o->rate : x->rate;
    if ((rc = audio_sink_open(&sink, it->output, x->rate, out_rate, raw, o->float_wav, err,
                              sizeof err)))
        goto done;
    struct mimi_stream_params sp;
    mimi_stream_params_default(&sp);
    sp.n_codebooks = nq;
    int64_t frames = from_stdin ? -1 : c.n_frames;
    int64_t n_pcm = o->offline ? frames * x->fs : x->fs;
    if (o->offline && from_stdin) {
        rc = cli_err(err, sizeof err, MIMI_EINVAL, "--offline needs a %s file, not a stream",
                     frame_type_name(x->type));
        goto done;
    }
    if (!(pcm = malloc((size_t)n_pcm * sizeof *pcm))) {
        rc = cli_err(err, sizeof err, MIMI_ENOMEM, "out of memory");
        goto done;
    }
    if (o->offline) {  // the first nq rows of the row-major array
        int64_t r = cli_decode_offline(x->model, &sp, x->type, c.data, frames, pcm, n_pcm);
        if (r != n_pcm) {
            rc = r < 0 ? (int)r : MIMI_ESTATE;
            snprintf(err, sizeof err, "decoding failed: %s", mimi_strerror(rc));
            goto done;
        }
        it->frames = frames;
        rc = put_audio(sink, it, pcm, n_pcm, limit, err, sizeof err);
        goto finish;
    }
    if (!(dec = mimi_decoder_create(x->model, &sp, &e))) {
        rc = e;
        snprintf(err, sizeof err, "cannot create a decoder: %s", mimi_strerror(e));
        goto done;
    }
    union frame_buf frame;
    for (int64_t f = 0; !rc && (frames < 0 || f < frames); f++) {
        if (fd_interrupted) {
            rc = cli_err(err, sizeof err, MIMI_EIO, "interrupted after %lld frames", (long long)f);
            break;
        }
        if (reader) {
            int r = codes_reader_next(reader, &frame, err, sizeof err);
            if (r <= 0) {
                rc = r;
                break;
            }
            if ((rc = cli_frame_check(x->type, &frame, nq, x->card, f, err, sizeof err))) break;
        } else {
            codes_frame(&c, f, nq, &frame);
        }
        int r = cli_decoder_step(dec, x->type, &frame, pcm);
        if (r < 0) {
            const char *m = mimi_decoder_errmsg(dec);
            snprintf(err, sizeof err, "decoding failed at frame %lld: %s", (long long)f,
                     *m ? m : mimi_strerror(r));
            rc = r;
            break;
        }
        it->frames++;
        rc = put_audio(sink, it, pcm, x->fs, limit, err, sizeof err);
        if (frames > 0) progress_set(progress_slot(), (double)(f + 1) / (double)frames);
    }
finish:
    if (!rc && it->frames == 0) {
        rc = MIMI_EINVAL;
        snprintf(err, sizeof err, "no %s in the input", frame_type_name(x->type));
    }
    if (!rc) {
        it->clipped = audio_sink_clipped(sink);
        rc = audio_sink_close(sink, err, sizeof err);
        sink = NULL;
    }
    it->wall_s = cli_now() - t0;
    it->audio_s = (double)it->samples / x->rate;
done:
    report(x, it, name, rc, err);
    audio_sink_abort(sink);
    mimi_decoder_destroy(dec);
    codes_free(&c);
    free(reader);
    free(pcm);
    progress_item_done(progress_slot());
}

// ---- many files per library call (--offline, --group) ----

// One file of a group: its frames, then its audio.
struct member {
    struct codes c;
    float *pcm;
    int64_t limit;      // samples to keep (-1: all)
    int nq, rc;         // codebooks decoded; a failure (reason in err)
    int tried, checked; // attempted; passed check_codes (which reports its own failures)
    int decoded;        // decoded by the group's call
    double own_s, share_s;  // reading and writing; its share of the call
    char err[1400];
};

// Writes a whole file's audio and closes it. Returns 0 or a code (reason in err).
static int write_whole(const struct dec_ctx *x, struct item *it, const float *pcm, int64_t n, int64_t limit,
                       char *err, size_t errlen) {
    const struct opts *o = x->o;
    struct audio_sink *sink = NULL;
    enum audio_raw raw = o->raw ? o->raw : strcmp(it->output, "-") ? AUDIO_RAW_NONE : AUDIO_RAW_S16LE;
    int rc = audio_sink_open(&sink, it->output, x->rate, o->rate ? o->rate : x->rate, raw, o->float_wav, err, errlen);
    if (!rc) rc = put_audio(sink, it, pcm, n, limit, err, errlen);
    if (!rc) {
        it->clipped = audio_sink_clipped(sink);
        rc = audio_sink_close(sink, err, errlen);
        sink = NULL;
    }
    audio_sink_abort(sink);
    return rc;
}

// Reads and checks one file of a group and makes room for its audio.
static void load_member(struct dec_ctx *x, struct item *it, struct member *b) {
    const struct opts *o = x->o;
    double t0 = cli_now();
    b->tried = 1;
    b->rc = codes_read(it->input, &b->c, b->err, sizeof b->err);
    if (b->rc || check_codes(x, it, &b->c)) return;
    b->checked = 1;
    b->nq = o->codebooks ? o->codebooks : b->c.rows;
    it->n_codebooks = b->nq;
    if (b->nq > x->max_q)
        b->rc = cli_err(b->err, sizeof b->err, MIMI_EINVAL, "--codebooks %d: the model has %d", b->nq, x->max_q);
    long long keep = meta_int(&b->c, "n_samples");
    b->limit = keep >= 0 && keep <= b->c.n_frames * x->fs ? keep : -1;
    if (!b->rc && !(b->pcm = malloc((size_t)(b->c.n_frames * x->fs) * sizeof *b->pcm)))
        b->rc = cli_err(b->err, sizeof b->err, MIMI_ENOMEM, "out of memory");
    b->own_s = cli_now() - t0;
}

// Decodes, in one mimi_decode_offline_many call, the group's good files of `nq` codebooks from
// member k on; each gets its share, by frames, of the call's time.
static void decode_together(struct dec_ctx *x, struct member *mb, int n, int k, const int32_t **codes,
                            int64_t *frames, float **pcm, int64_t *max) {
    const int nq = mb[k].nq;
    int m = 0;
    int64_t total = 0;
    for (int j = k; j < n; j++) {
        struct member *b = &mb[j];
        if (!b->checked || b->rc || b->nq != nq) continue;
        codes[m] = (const int32_t *)b->c.data, frames[m] = b->c.n_frames, pcm[m] = b->pcm;
        max[m++] = b->c.n_frames * x->fs;
        total += b->c.n_frames;
    }
    struct mimi_stream_params sp;
    mimi_stream_params_default(&sp);
    sp.n_codebooks = nq;
    double t0 = cli_now();
    const int ok = m > 1 && mimi_decode_offline_many(x->model, &sp, m, codes, frames, pcm, max) == MIMI_OK;
    const double call_s = cli_now() - t0;
    for (int j = k; j < n && ok; j++) {
        struct member *b = &mb[j];
        if (!b->checked || b->rc || b->nq != nq) continue;
        b->decoded = 1;
        b->share_s = call_s * (double)b->c.n_frames / (double)total;
    }
}

// Decodes the group's good members [from, to) (one call per codebook count), then writes and
// reports them in order and frees their frames and audio. A failed call is redone one file at a
// time, which names the file at fault. codes, frames, pcm and max: room for the calls' arguments.
static void decode_members(struct dec_ctx *x, int first, struct member *mb, int from, int to, const int32_t **codes,
                           int64_t *frames, float **pcm, int64_t *max) {
    for (int k = from; k < to; k++)
        if (mb[k].checked && !mb[k].rc && !mb[k].decoded) decode_together(x, mb, to, k, codes, frames, pcm, max);
    for (int k = from; k < to; k++) {
        struct item *it = &x->items[first + k];
        struct member *b = &mb[k];
        if (b->tried && (b->checked || b->rc)) {
            double t1 = cli_now();
            const int64_t n_pcm = b->c.n_frames * x->fs;
            if (!b->rc && !b->decoded) {
                struct mimi_stream_params sp;
                mimi_stream_params_default(&sp);
                sp.n_codebooks = b->nq;
                int64_t r = cli_decode_offline(x->model, &sp, x->type, b->c.data, b->c.n_frames, b->pcm, n_pcm);
                if (r != n_pcm) {
                    b->rc = r < 0 ? (int)r : MIMI_ESTATE;
                    snprintf(b->err, sizeof b->err, "decoding failed: %s", mimi_strerror(b->rc));
                }
            }
            if (!b->rc) {
                it->frames = b->c.n_frames;
                b->rc = write_whole(x, it, b->pcm, n_pcm, b->limit, b->err, sizeof b->err);
            }
            it->wall_s = b->own_s + b->share_s + (cli_now() - t1);
            it->audio_s = (double)it->samples / x->rate;
            report(x, it, it->input, b->rc, b->err);
        }
        codes_free(&b->c);
        free(b->pcm);
        b->pcm = NULL;
        progress_item_done(progress_slot());
    }
}

// Group g: files g * group .. read, checked and decoded together (decode_members), in calls of
// at most GROUP_SAMPLES samples of audio to hold (plus the file that crosses it).
static void decode_group(void *ctx, int g) {
    struct dec_ctx *x = ctx;
    int first;
    const int n = group_span(x->o, g, &first);
    struct member *mb = calloc((size_t)n, sizeof *mb);
    const int32_t **codes = calloc((size_t)n, sizeof *codes);
    float **pcm = calloc((size_t)n, sizeof *pcm);
    int64_t *frames = calloc((size_t)n, sizeof *frames), *max = calloc((size_t)n, sizeof *max), pending = 0;
    const int oom = !mb || !codes || !pcm || !frames || !max;
    for (int k = 0, from = 0; k < n; k++) {
        struct item *it = &x->items[first + k];
        if (oom) {
            if (it->ok) item_fail(it, it->input, "out of memory");
            progress_item_done(progress_slot());
            continue;
        }
        if (it->ok && !item_interrupted(it)) load_member(x, it, &mb[k]);
        pending += mb[k].checked ? mb[k].c.n_frames * x->fs : 0;
        if (pending >= GROUP_SAMPLES || k == n - 1) {
            decode_members(x, first, mb, from, k + 1, codes, frames, pcm, max);
            from = k + 1, pending = 0;
        }
    }
    free(mb), free(codes), free(pcm), free(frames), free(max);
}

// ---- the command ----

int cmd_decode(const struct opts *o) {
    int stdin_in = o->n_inputs == 1 && strcmp(o->inputs[0], "-") == 0;
    for (int i = 0; i < o->n_inputs; i++)
        if (strcmp(o->inputs[i], "-") == 0 && o->n_inputs > 1)
            return cli_usage_error(o->cmd, "'-' (standard input) must be the only input");
    if (!o->output) return cli_usage_error(o->cmd, "missing the output (-o FILE, -o DIR/ or -o -)");
    int stdout_out = strcmp(o->output, "-") == 0;
    enum audio_out kind = AUDIO_OUT_WAV;
    if (o->format && (kind = audio_out_parse(o->format)) == AUDIO_OUT_NONE)
        return cli_usage_error(o->cmd, "--format is wav, flac, ogg, opus, mp3 or npy, not '%s'",
                               o->format);
    if (!stdout_out && !o->raw && !is_dir_path(o->output) && o->n_inputs == 1 &&
        audio_out_from_path(o->output) == AUDIO_OUT_NONE && !same_file(o->output, o->inputs[0]))
        return cli_usage_error(o->cmd, "cannot tell the audio format of '%s': name it .wav, .flac, "
                               ".ogg, .opus, .mp3 or .npy, or use --raw", o->output);
    if (o->group && !o->offline) return cli_usage_error(o->cmd, "--group needs --offline");
    if (stdout_out && o->json)
        return cli_usage_error(o->cmd, "--json prints on stdout, which carries the audio here");
    if (stdout_out && isatty(1))
        return cli_usage_error(o->cmd, "refusing to write raw audio to a terminal: redirect or "
                               "pipe stdout");
    if (o->rate && (o->rate < 1000 || o->rate > 384000))
        return cli_usage_error(o->cmd, "--rate %d is outside 1000 .. 384000 Hz", o->rate);
    const char *mpath = cli_model_path(o);
    if (!mpath) return 2;

    struct item *items = calloc((size_t)o->n_inputs, sizeof *items);
    if (!items) return 1;
    for (int i = 0; i < o->n_inputs; i++) {
        items[i].input = o->inputs[i];
        items[i].ok = 1;
    }
    int rc = plan_outputs(o, items, o->raw ? ".raw" : audio_out_ext(kind), mpath);
    if (!rc && o->n_inputs == 1 && !items[0].ok) rc = 1;
    struct mimi_model *model = NULL;
    if (!rc && !(model = cli_load_model(mpath, o))) rc = 1;
    enum frame_type type = FRAME_CODES;
    if (!rc) rc = cli_frame_type(o, model, mpath, &type);
    if (!rc && mimi_model_latent_size(model) > CLI_MAX_FRAME) {
        cli_fail(mpath, "latents of %d floats are more than this command handles",
                 mimi_model_latent_size(model));
        rc = 1;
    }
    if (!rc) {
        struct dec_ctx x = {.o = o, .model = model, .model_path = mpath, .items = items,
                            .type = type, .latent = mimi_model_latent_size(model),
                            .fs = mimi_model_frame_size(model),
                            .rate = mimi_model_sample_rate(model),
                            .card = mimi_model_codebook_size(model),
                            .max_q = mimi_model_max_codebooks(model)};
        // whole files on a GPU: many per library call (codes files only)
        struct opts po = *o;
        if (!o->group && o->offline && strcmp(mimi_model_backend_name(model), "cuda") == 0) po.group = 32;
        if (stdin_in || stdout_out || type != FRAME_CODES || o->n_inputs < 2) po.group = 0;
        x.o = &po;
        rc = run_items(&po, items, rc, "decode", "decoded", o->quiet || stdin_in,
                       po.group > 1 ? decode_group : decode_item, &x);
    } else {
        rc = run_items(o, items, rc, "decode", "decoded", 1, NULL, NULL);
    }
    mimi_model_destroy(model);
    free(items);
    return rc;
}
