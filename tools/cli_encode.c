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
 * shared.
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

// Reads the whole source, then runs the reference's offline path.
static int encode_offline(struct enc_ctx *x, struct item *it, struct audio_src *src,
                          struct codes_out *out, char *err, size_t errlen) {
    float *pcm = NULL;
    char *cm = NULL;  // row-major [nq][frames] codes or latents
    union frame_buf *frame = malloc(sizeof *frame);
    int64_t n = 0, cap = 0, got;
    int rc = frame ? 0 : cli_err(err, errlen, MIMI_ENOMEM, "out of memory");
    while (!rc) {
        if (n + x->fs > cap) {
            cap = cap ? 2 * cap : 16 * x->fs;
            float *p = realloc(pcm, (size_t)cap * sizeof *p);
            if (!p) {
                rc = MIMI_ENOMEM;
                snprintf(err, errlen, "out of memory");
                break;
            }
            pcm = p;
        }
        got = audio_src_read(src, pcm + n, x->fs, err, errlen);
        if (got < 0) rc = (int)got;
        else n += got;
        if (got != x->fs) break;
    }
    int64_t frames = n ? mimi_frames_for_samples(x->model, n) : 0;
    if (!rc && !(cm = malloc((size_t)(frames ? frames : 1) * (size_t)x->nq * 4))) {
        rc = MIMI_ENOMEM;
        snprintf(err, errlen, "out of memory");
    }
    if (!rc) {
        struct mimi_stream_params sp;
        mimi_stream_params_default(&sp);
        sp.n_codebooks = x->nq;
        int64_t r = cli_encode_offline(x->model, &sp, x->type, pcm, n, cm, frames * x->nq);
        if (r != frames) {
            rc = r < 0 ? (int)r : MIMI_ESTATE;
            snprintf(err, errlen, "encoding failed: %s", mimi_strerror(rc));
        }
    }
    for (int64_t f = 0; !rc && f < frames; f++) {
        for (int q = 0; q < x->nq; q++)
            memcpy((char *)frame + 4 * q, cm + 4 * (q * frames + f), 4);
        rc = codes_out_put(out, x, frame, err, errlen);
    }
    it->samples = n;
    it->frames = frames;
    free(cm);
    free(pcm);
    free(frame);
    return rc;
}

static void encode_item(void *ctx, int i) {
    struct enc_ctx *x = ctx;
    struct item *it = &x->items[i];
    const struct opts *o = x->o;
    const char *name = strcmp(it->input, "-") ? it->input : "stdin";
    double t0 = cli_now();
    struct audio_src *src = NULL;
    struct codes_out out = {.stream = x->stream_out};
    char err[1400] = "";
    int rc = 0;
    if (!it->ok || item_interrupted(it)) goto done;
    rc = audio_src_open(&src, it->input, x->rate, o->raw, o->rate ? o->rate : x->rate,
                        o->channels ? o->channels : 1, err, sizeof err);
    if (rc) goto done;
    const struct audio_src_info *info = audio_src_info(src);
    it->in_rate = info->rate;
    it->in_channels = info->channels;
    snprintf(it->in_format, sizeof it->in_format, "%s", info->format);
    if (info->rate != x->rate || info->channels != 1) {
        char ch[32];
        cli_note("%s: %d Hz %s -> %d Hz mono", name, info->rate,
                 cli_channels_name(info->channels, ch, sizeof ch), x->rate);
    }
    rc = o->offline ? encode_offline(x, it, src, &out, err, sizeof err)
                    : encode_streaming(x, it, src, &out, err, sizeof err);
    if (!rc) rc = codes_out_finish(&out, x, it, err, sizeof err);
    it->wall_s = cli_now() - t0;
    it->audio_s = (double)it->samples / x->rate;
    it->n_codebooks = x->type == FRAME_CODES ? x->nq : 0;
    it->latent_size = x->type == FRAME_LATENTS ? x->nq : 0;
done:
    if (rc) item_fail(it, name, "%s", err);
    else if (it->ok)
        cli_note("encoded %s -> %s: %lld frame%s (%.2f s of audio, %s) in %.2f s, %.1f ms per "
                 "frame, %.2fx real time", name, strcmp(it->output, "-") ? it->output : "stdout",
                 (long long)it->frames, it->frames == 1 ? "" : "s", it->audio_s, o->offline ? "offline" : "streaming",
                 it->wall_s, it->frames ? 1000.0 * it->wall_s / (double)it->frames : 0.0,
                 it->wall_s > 0 ? it->audio_s / it->wall_s : 0.0);
    audio_src_close(src);
    free(out.frames);
    progress_item_done(progress_slot());
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
    rc = run_items(o, items, rc, "encode", "encoded", o->quiet || stdin_in, encode_item, &x);
    mimi_model_destroy(model);
    free(items);
    return rc;
}
