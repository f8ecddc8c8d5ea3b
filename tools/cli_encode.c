/*
 * cli_encode.c - `mimi encode`: audio in (files of any format, rate and channel count, or PCM on
 * standard input), frames out (.npy, .safetensors with metadata, or a live frame stream): codes
 * with a Mimi model, continuous latents with Pocket TTS's Mimi, through the same code.
 *
 * Each input is read as a stream: blocks of one frame (1920 samples at 24 kHz after downmix and
 * resampling) go through an encoder as they arrive, and with a frame-stream output each frame is
 * written as soon as it is complete. Files are collected in memory (they are small: 8 codebooks
 * or 32 floats x 12.5 frames x 4 bytes = 400 or 1600 bytes per second) and written atomically at
 * the end. Several inputs are spread over --jobs threads, each with its own encoder; the model is
 * shared. With --offline and --group (the default on a GPU) the files are read whole a group at
 * a time and encoded by one mimi_encode_offline_many call per group.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "codes_file.h"
#include "fdio.h"

struct enc_ctx {
    const struct opts *o;
    const struct mimi_model *model;
    const char *model_path;
    struct item *items;
    enum frame_type type;  // codes or latents
    int nq;                // values per frame: codebooks, or the latent size
    int fs, rate, stream_out;
};

// ---- output: a codes or latents file collected in memory, or a frame stream on stdout ----

struct codes_out {
    int stream;
    char *frames;  // frame-major 4-byte values, files only
    int64_t n, cap;
};

static int codes_out_put(struct codes_out *c, const struct enc_ctx *x, const void *frame,
                         char *err, size_t errlen) {
    if (c->stream)
        return codes_stream_put(1, x->o->text, x->type, frame, x->nq, "stdout", err, errlen);
    if (c->n == c->cap) {
        int64_t cap = c->cap ? 2 * c->cap : 1024;
        char *p = realloc(c->frames, (size_t)cap * (size_t)x->nq * 4);
        if (!p) return cli_err(err, errlen, MIMI_ENOMEM, "out of memory");
        c->frames = p;
        c->cap = cap;
    }
    memcpy(c->frames + (size_t)(c->n * x->nq) * 4, frame, (size_t)x->nq * 4);
    c->n++;
    return 0;
}

// Writes a collected file with its metadata. Returns 0 or a code (reason in err).
static int codes_out_finish(struct codes_out *c, const struct enc_ctx *x, const struct item *it,
                            char *err, size_t errlen) {
    if (c->stream) return 0;
    int nq = x->nq;
    char *cm = malloc((size_t)(c->n ? c->n : 1) * (size_t)nq * 4);  // row-major [nq][n]
    if (!cm) return cli_err(err, errlen, MIMI_ENOMEM, "out of memory");
    for (int64_t f = 0; f < c->n; f++)
        for (int q = 0; q < nq; q++)
            memcpy(cm + 4 * (q * c->n + f), c->frames + 4 * (f * nq + q), 4);
    struct codes_meta meta = {0};
    int rc = 0;
    if (codes_kind_from_path(it->output) == CODES_SAFETENSORS) {
        const char *hash = cli_model_hash(x->model_path);
        char v[64];
        const char *base = strrchr(it->input, '/');
        int latents = x->type == FRAME_LATENTS;
        codes_meta_set(&meta, "format", latents ? "mimi-latents" : "mimi-codes");
        codes_meta_set(&meta, "format_version", "1");
        snprintf(v, sizeof v, "%d", x->rate);
        codes_meta_set(&meta, "sample_rate", v);
        snprintf(v, sizeof v, "%g", (double)x->rate / x->fs);
        codes_meta_set(&meta, "frame_rate", v);
        snprintf(v, sizeof v, "%d", x->fs);
        codes_meta_set(&meta, "frame_size", v);
        snprintf(v, sizeof v, "%d", nq);
        codes_meta_set(&meta, latents ? "latent_size" : "n_codebooks", v);
        if (!latents) {
            snprintf(v, sizeof v, "%d", mimi_model_codebook_size(x->model));
            codes_meta_set(&meta, "codebook_size", v);
        }
        snprintf(v, sizeof v, "%lld", (long long)it->samples);
        codes_meta_set(&meta, "n_samples", v);
        if (hash) codes_meta_set(&meta, "model_xxh64", hash);
        else rc = cli_err(err, errlen, MIMI_EIO, "%s: cannot hash the model", x->model_path);
        codes_meta_set(&meta, "model_naming", mimi_model_naming(x->model));
        codes_meta_set(&meta, "model_family", mimi_model_family(x->model));
        codes_meta_set(&meta, "mode", x->o->offline ? "offline" : "streaming");
        if (strcmp(it->input, "-")) codes_meta_set(&meta, "source", base ? base + 1 : it->input);
        snprintf(v, sizeof v, "libmimi %s", mimi_version_string());
        codes_meta_set(&meta, "encoder", v);
    }
    if (!rc) rc = codes_write(it->output, x->type, cm, nq, c->n, &meta, err, errlen);
    free(cm);
    return rc;
}

// ---- one input ----

// Streams the source through an encoder frame by frame. Returns 0 or a code (reason in err).
static int encode_streaming(struct enc_ctx *x, struct item *it, struct audio_src *src,
                            struct codes_out *out, char *err, size_t errlen) {
    int e = 0, rc = 0, fs = x->fs;
    struct mimi_stream_params sp;
    mimi_stream_params_default(&sp);
    sp.n_codebooks = x->nq;
    struct mimi_encoder *enc = mimi_encoder_create(x->model, &sp, &e);
    float *pcm = malloc((size_t)fs * sizeof *pcm);
    union frame_buf *frame = malloc(sizeof *frame);
    if (!enc || !pcm || !frame) {
        rc = e ? e : MIMI_ENOMEM;
        snprintf(err, errlen, "cannot create an encoder: %s", mimi_strerror(rc));
    }
    const struct audio_src_info *info = audio_src_info(src);
    for (int64_t n = fs; !rc && n == fs;) {
        if (fd_interrupted) {
            rc = cli_err(err, errlen, MIMI_EIO, "interrupted after %lld frames",
                         (long long)it->frames);
            break;
        }
        n = audio_src_read(src, pcm, fs, err, errlen);
        if (n < 0) {
            rc = (int)n;
            break;
        }
        if (n == 0) break;
        it->samples += n;
        int r = n == fs ? cli_encoder_step(enc, x->type, pcm, frame) : 0;
        if (n < fs) {  // the last, partial frame: zero-padded by flush
            r = cli_encoder_push(enc, x->type, pcm, (size_t)n, frame, 1);
            if (r == 0) r = cli_encoder_flush(enc, x->type, frame, 1);
            if (r == 1) r = 0;
            else if (r >= 0) r = MIMI_ESTATE;
        }
        if (r < 0) {
            const char *m = mimi_encoder_errmsg(enc);
            snprintf(err, errlen, "encoding failed: %s", *m ? m : mimi_strerror(r));
            rc = r;
            break;
        }
        rc = codes_out_put(out, x, frame, err, errlen);
        it->frames++;
        if (info->frames > 0)
            progress_set(progress_slot(), (double)audio_src_position(src) / (double)info->frames);
    }
    mimi_encoder_destroy(enc);
    free(pcm);
    free(frame);
    return rc;
}

// Reads the whole source into *pcm (*n samples, the caller frees). Returns 0 or a code (reason
// in err).
static int read_all(const struct enc_ctx *x, struct audio_src *src, float **pcm_out, int64_t *n_out, char *err,
                    size_t errlen) {
    float *pcm = NULL;
    int64_t n = 0, cap = 0, got;
    int rc = 0;
    while (!rc) {
        if (n + x->fs > cap) {
            cap = cap ? 2 * cap : 16 * x->fs;
            float *p = realloc(pcm, (size_t)cap * sizeof *p);
            if (!p) {
                rc = cli_err(err, errlen, MIMI_ENOMEM, "out of memory");
                break;
            }
            pcm = p;
        }
        got = audio_src_read(src, pcm + n, x->fs, err, errlen);
        if (got < 0) rc = (int)got;
        else n += got;
        if (got != x->fs) break;
    }
    *pcm_out = pcm;
    *n_out = n;
    return rc;
}

// Encodes n samples whole (the reference's offline path) into codebook-major cm (nq x frames).
static int encode_whole(const struct enc_ctx *x, const float *pcm, int64_t n, int64_t frames, char *cm, char *err,
                        size_t errlen) {
    struct mimi_stream_params sp;
    mimi_stream_params_default(&sp);
    sp.n_codebooks = x->nq;
    int64_t r = cli_encode_offline(x->model, &sp, x->type, pcm, n, cm, frames * x->nq);
    if (r == frames) return 0;
    const int rc = r < 0 ? (int)r : MIMI_ESTATE;
    snprintf(err, errlen, "encoding failed: %s", mimi_strerror(rc));
    return rc;
}

// The codebook-major (nq x frames) values `cm` into the output, frame by frame.
static int put_whole(const struct enc_ctx *x, const char *cm, int64_t frames, struct codes_out *out, char *err,
                     size_t errlen) {
    union frame_buf *frame = malloc(sizeof *frame);
    int rc = frame ? 0 : cli_err(err, errlen, MIMI_ENOMEM, "out of memory");
    for (int64_t f = 0; !rc && f < frames; f++) {
        for (int q = 0; q < x->nq; q++)
            memcpy((char *)frame + 4 * q, cm + 4 * (q * frames + f), 4);
        rc = codes_out_put(out, x, frame, err, errlen);
    }
    free(frame);
    return rc;
}

// Reads the whole source, then runs the reference's offline path.
static int encode_offline(struct enc_ctx *x, struct item *it, struct audio_src *src,
                          struct codes_out *out, char *err, size_t errlen) {
    float *pcm = NULL;
    char *cm = NULL;  // row-major [nq][frames] codes or latents
    int64_t n = 0;
    int rc = read_all(x, src, &pcm, &n, err, errlen);
    int64_t frames = n ? mimi_frames_for_samples(x->model, n) : 0;
    if (!rc && !(cm = malloc((size_t)(frames ? frames : 1) * (size_t)x->nq * 4)))
        rc = cli_err(err, errlen, MIMI_ENOMEM, "out of memory");
    if (!rc) rc = encode_whole(x, pcm, n, frames, cm, err, errlen);
    if (!rc) rc = put_whole(x, cm, frames, out, err, errlen);
    it->samples = n;
    it->frames = frames;
    free(cm);
    free(pcm);
    return rc;
}

static const char *input_name(const struct item *it) { return strcmp(it->input, "-") ? it->input : "stdin"; }

// Opens the item's source and records its format on the item. Returns 0 or a code (reason in err).
static int open_input(const struct enc_ctx *x, struct item *it, struct audio_src **src, char *err, size_t errlen) {
    const struct opts *o = x->o;
    int rc = audio_src_open(src, it->input, x->rate, o->raw, o->rate ? o->rate : x->rate,
                            o->channels ? o->channels : 1, err, errlen);
    if (rc) return rc;
    const struct audio_src_info *info = audio_src_info(*src);
    it->in_rate = info->rate;
    it->in_channels = info->channels;
    snprintf(it->in_format, sizeof it->in_format, "%s", info->format);
    if (info->rate != x->rate || info->channels != 1) {
        char ch[32];
        cli_note("%s: %d Hz %s -> %d Hz mono", input_name(it), info->rate,
                 cli_channels_name(info->channels, ch, sizeof ch), x->rate);
    }
    return 0;
}

// The end of an item that was attempted: its file written (rc 0), its figures set, and a failure
// or a note printed.
static void finish_item(const struct enc_ctx *x, struct item *it, int rc, struct codes_out *out, double wall_s,
                        char *err, size_t errlen) {
    const struct opts *o = x->o;
    if (!rc) rc = codes_out_finish(out, x, it, err, errlen);
    it->wall_s = wall_s;
    it->audio_s = (double)it->samples / x->rate;
    it->n_codebooks = x->type == FRAME_CODES ? x->nq : 0;
    it->latent_size = x->type == FRAME_LATENTS ? x->nq : 0;
    if (rc) item_fail(it, input_name(it), "%s", err);
    else if (it->ok)
        cli_note("encoded %s -> %s: %lld frame%s (%.2f s of audio, %s) in %.2f s, %.1f ms per "
                 "frame, %.2fx real time", input_name(it), strcmp(it->output, "-") ? it->output : "stdout",
                 (long long)it->frames, it->frames == 1 ? "" : "s", it->audio_s, o->offline ? "offline" : "streaming",
                 it->wall_s, it->frames ? 1000.0 * it->wall_s / (double)it->frames : 0.0,
                 it->wall_s > 0 ? it->audio_s / it->wall_s : 0.0);
}

static void encode_item(void *ctx, int i) {
    struct enc_ctx *x = ctx;
    struct item *it = &x->items[i];
    double t0 = cli_now();
    struct audio_src *src = NULL;
    struct codes_out out = {.stream = x->stream_out};
    char err[1400] = "";
    if (it->ok && !item_interrupted(it)) {
        int rc = open_input(x, it, &src, err, sizeof err);
        if (!rc)
            rc = x->o->offline ? encode_offline(x, it, src, &out, err, sizeof err)
                               : encode_streaming(x, it, src, &out, err, sizeof err);
        finish_item(x, it, rc, &out, cli_now() - t0, err, sizeof err);
    }
    audio_src_close(src);
    free(out.frames);
    progress_item_done(progress_slot());
}

// ---- many files per library call (--offline, --group) ----

// One input of a group: its audio, then its codes.
struct member {
    float *pcm;
    char *cm;  // codebook-major (nq x frames)
    int64_t n, frames;
    int rc, tried;
    double own_s;  // reading and writing
    char err[1400];
};

// Reads one input of a group whole and makes room for its codes.
static void load_member(struct enc_ctx *x, struct item *it, struct member *b) {
    double t0 = cli_now();
    struct audio_src *src = NULL;
    b->tried = 1;
    b->rc = open_input(x, it, &src, b->err, sizeof b->err);
    if (!b->rc) b->rc = read_all(x, src, &b->pcm, &b->n, b->err, sizeof b->err);
    audio_src_close(src);
    b->frames = b->n ? mimi_frames_for_samples(x->model, b->n) : 0;
    if (!b->rc && !(b->cm = malloc((size_t)(b->frames ? b->frames : 1) * (size_t)x->nq * 4)))
        b->rc = cli_err(b->err, sizeof b->err, MIMI_ENOMEM, "out of memory");
    it->samples = b->n;
    it->frames = b->frames;
    b->own_s = cli_now() - t0;
}

// Encodes the group's members [from, to) in one mimi_encode_offline_many call (on a GPU the
// call's files share each step), then writes and reports them in order and frees their audio.
// One bad input fails the call for all, so a failed call is redone one file at a time, which
// names the input at fault. A file's time is its own reading and writing plus its share, by
// samples, of the call. pcm, codes, lens and max: room for the call's arguments.
static void encode_members(struct enc_ctx *x, int first, struct member *mb, int from, int to, const float **pcm,
                           int32_t **codes, int64_t *lens, int64_t *max) {
    int m = 0;
    int64_t total = 0;
    for (int k = from; k < to; k++) {
        struct member *b = &mb[k];
        if (!b->tried || b->rc || !b->n) continue;  // nothing to encode: the one-file path reports it
        pcm[m] = b->pcm, lens[m] = b->n, codes[m] = (int32_t *)b->cm, max[m] = b->frames * x->nq;
        total += b->n;
        m++;
    }
    double t0 = cli_now();
    struct mimi_stream_params sp;
    mimi_stream_params_default(&sp);
    sp.n_codebooks = x->nq;
    const int many = m > 1 && mimi_encode_offline_many(x->model, &sp, m, pcm, lens, codes, max) == MIMI_OK;
    const double call_s = cli_now() - t0;
    for (int k = from; k < to; k++) {
        struct item *it = &x->items[first + k];
        struct member *b = &mb[k];
        if (b->tried) {
            double t1 = cli_now();
            struct codes_out out = {.stream = x->stream_out};
            if (!b->rc && !(many && b->n)) b->rc = encode_whole(x, b->pcm, b->n, b->frames, b->cm, b->err, sizeof b->err);
            if (!b->rc) b->rc = put_whole(x, b->cm, b->frames, &out, b->err, sizeof b->err);
            double share = total && many ? call_s * (double)b->n / (double)total : 0.0;
            finish_item(x, it, b->rc, &out, b->own_s + share + (cli_now() - t1), b->err, sizeof b->err);
            free(out.frames);
            free(b->pcm);
            free(b->cm);
        }
        progress_item_done(progress_slot());
    }
}

// Group g: inputs g * group .. read whole and encoded together (encode_members), in calls of at
// most GROUP_SAMPLES samples of audio read ahead (plus the file that crosses it).
static void encode_group(void *ctx, int g) {
    struct enc_ctx *x = ctx;
    int first;
    const int n = group_span(x->o, g, &first);
    struct member *mb = calloc((size_t)n, sizeof *mb);
    const float **pcm = calloc((size_t)n, sizeof *pcm);
    int32_t **codes = calloc((size_t)n, sizeof *codes);
    int64_t *lens = calloc((size_t)n, sizeof *lens), *max = calloc((size_t)n, sizeof *max), pending = 0;
    const int oom = !mb || !pcm || !codes || !lens || !max;
    for (int k = 0, from = 0; k < n; k++) {
        struct item *it = &x->items[first + k];
        if (oom) {
            if (it->ok) item_fail(it, input_name(it), "out of memory");
            progress_item_done(progress_slot());
            continue;
        }
        if (it->ok && !item_interrupted(it)) load_member(x, it, &mb[k]);
        pending += mb[k].n;
        if (pending >= GROUP_SAMPLES || k == n - 1) {
            encode_members(x, first, mb, from, k + 1, pcm, codes, lens, max);
            from = k + 1, pending = 0;
        }
    }
    free(mb), free(pcm), free(codes), free(lens), free(max);
}

// ---- the command ----

int cmd_encode(const struct opts *o) {
    int stdin_in = o->n_inputs == 1 && strcmp(o->inputs[0], "-") == 0;
    for (int i = 0; i < o->n_inputs; i++)
        if (strcmp(o->inputs[i], "-") == 0 && o->n_inputs > 1)
            return cli_usage_error(o->cmd, "'-' (standard input) must be the only input");
    const char *output = o->output ? o->output : (stdin_in || o->raw ? "-" : NULL);
    if (!output) return cli_usage_error(o->cmd, "missing the output (-o FILE, -o DIR/ or -o -)");
    int stream_out = strcmp(output, "-") == 0;
    const char *ext = ".npy";
    if (o->format) {
        if (strcmp(o->format, "npy") && strcmp(o->format, "safetensors"))
            return cli_usage_error(o->cmd, "--format is npy or safetensors, not '%s'", o->format);
        ext = strcmp(o->format, "npy") ? ".safetensors" : ".npy";
    }
    if (!stream_out && !is_dir_path(output) && o->n_inputs == 1 &&
        codes_kind_from_path(output) == CODES_NONE && !same_file(output, o->inputs[0]))
        return cli_usage_error(o->cmd, "cannot tell the file format of '%s': name it .npy or "
                               ".safetensors, or use -o - for a frame stream", output);
    if (o->group && !o->offline) return cli_usage_error(o->cmd, "--group needs --offline");
    if (stream_out && o->json)
        return cli_usage_error(o->cmd, "--json prints on stdout, which carries the frames here");
    if (stream_out && !o->text && isatty(1))
        return cli_usage_error(o->cmd, "refusing to write binary frames to a terminal: redirect "
                               "or pipe stdout, or add --text");
    const char *mpath = cli_model_path(o);
    if (!mpath) return 2;

    struct item *items = calloc((size_t)o->n_inputs, sizeof *items);
    if (!items) return 1;
    for (int i = 0; i < o->n_inputs; i++) {
        items[i].input = o->inputs[i];
        items[i].ok = 1;
    }
    struct opts po = *o;
    po.output = output;
    int rc = plan_outputs(&po, items, ext, mpath);
    if (!rc && o->n_inputs == 1 && !items[0].ok) rc = 1;
    struct mimi_model *model = NULL;
    if (!rc && !(model = cli_load_model(mpath, o))) rc = 1;
    struct enc_ctx x = {.o = &po, .model = model, .model_path = mpath, .items = items,
                        .stream_out = stream_out};
    if (!rc) rc = cli_frame_type(o, model, mpath, &x.type);
    if (!rc) {
        x.nq = x.type == FRAME_LATENTS ? mimi_model_latent_size(model)
                                       : o->codebooks ? o->codebooks : 8;
        x.fs = mimi_model_frame_size(model);
        x.rate = mimi_model_sample_rate(model);
        if (x.nq > CLI_MAX_FRAME) {
            cli_fail(mpath, "%d values per frame is more than this command handles", x.nq);
            rc = 1;
        } else if (x.type == FRAME_CODES && x.nq > mimi_model_max_codebooks(model)) {
            cli_fail(mpath, "has %d codebooks, --codebooks %d asks for more",
                     mimi_model_max_codebooks(model), x.nq);
            rc = 1;
        }
    }
    // whole files on a GPU: many per library call (codes to files only)
    if (!o->group && o->offline && model && strcmp(mimi_model_backend_name(model), "cuda") == 0) po.group = 32;
    if (stream_out || x.type != FRAME_CODES || o->n_inputs < 2) po.group = 0;
    rc = run_items(&po, items, rc, "encode", "encoded", o->quiet || stdin_in, po.group > 1 ? encode_group : encode_item,
                   &x);
    mimi_model_destroy(model);
    free(items);
    return rc;
}
