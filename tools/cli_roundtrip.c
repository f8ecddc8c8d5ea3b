/*
 * cli_roundtrip.c - `mimi roundtrip`: encode and decode in one pass, frame by frame, and report
 * what the codec did: duration, bitrate, real-time factor and the SNR of the output against the
 * input (after the input's downmix and resampling to the model's rate). With a model that has
 * continuous latents (Pocket TTS's Mimi) the frames are latents and the bitrate line describes
 * them instead.
 *
 * The report goes to standard output (or stderr when the decoded audio itself goes there).
 * SNR = 10 log10(sum x^2 / sum (x - y)^2) over the input's samples, with x the 24 kHz mono input
 * and y the decoded output, sample for sample (the decoder's output is aligned with the encoder's
 * input frame by frame).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "fdio.h"

// Runs source -> encoder -> decoder -> sink (may be NULL). Returns 0 or a code (reason in err).
static int roundtrip(const struct mimi_model *model, enum frame_type type, int nq,
                     struct audio_src *src, struct audio_sink *sink, struct item *it, char *err,
                     size_t errlen) {
    int fs = mimi_model_frame_size(model), e = 0, rc = 0;
    struct mimi_stream_params sp;
    mimi_stream_params_default(&sp);
    sp.n_codebooks = nq;
    struct mimi_encoder *enc = mimi_encoder_create(model, &sp, &e);
    struct mimi_decoder *dec = enc ? mimi_decoder_create(model, &sp, &e) : NULL;
    float *x = calloc((size_t)fs, sizeof *x), *y = malloc((size_t)fs * sizeof *y);
    union frame_buf frame;
    if (!enc || !dec || !x || !y) {
        rc = e ? e : MIMI_ENOMEM;
        snprintf(err, errlen, "cannot create the codec: %s", mimi_strerror(rc));
    }
    const struct audio_src_info *info = audio_src_info(src);
    double sig = 0, noise = 0;
    for (int64_t n = fs; !rc && n == fs;) {
        if (fd_interrupted) {
            rc = cli_err(err, errlen, MIMI_EIO, "interrupted after %lld frames",
                         (long long)it->frames);
            break;
        }
        n = audio_src_read(src, x, fs, err, errlen);
        if (n <= 0) {
            rc = (int)n;
            break;
        }
        for (int64_t i = n; i < fs; i++) x[i] = 0.0f;  // the last frame, zero-padded
        int r = cli_encoder_step(enc, type, x, &frame);
        const char *m = r < 0 ? mimi_encoder_errmsg(enc) : "";
        if (r >= 0) {
            r = cli_decoder_step(dec, type, &frame, y);
            if (r < 0) m = mimi_decoder_errmsg(dec);
        }
        if (r < 0) {
            snprintf(err, errlen, "codec failed at frame %lld: %s", (long long)it->frames,
                     *m ? m : mimi_strerror(r));
            rc = r;
            break;
        }
        for (int64_t i = 0; i < n; i++) {
            double d = (double)x[i] - (double)y[i];
            sig += (double)x[i] * x[i];
            noise += d * d;
        }
        it->frames++;
        it->samples += n;
        if (sink) rc = audio_sink_write(sink, y, n, err, errlen);
        if (info->frames > 0)
            progress_set(0, (double)audio_src_position(src) / (double)info->frames);
    }
    it->snr_db = noise > 0 ? 10.0 * log10(sig / noise) : INFINITY;
    mimi_decoder_destroy(dec);
    mimi_encoder_destroy(enc);
    free(x);
    free(y);
    return rc;
}

int cmd_roundtrip(const struct opts *o) {
    if (o->n_inputs != 1) return cli_usage_error(o->cmd, "roundtrip takes one input");
    const char *input = o->inputs[0], *name = strcmp(input, "-") ? input : "stdin";
    const char *output = o->output;
    int audio_to_stdout = output && strcmp(output, "-") == 0;
    if (output && !audio_to_stdout && audio_out_from_path(output) == AUDIO_OUT_NONE)
        return cli_usage_error(o->cmd, "cannot tell the audio format of '%s': name it .wav, .flac, "
                               ".ogg, .opus, .mp3 or .npy, or use -o - for PCM on stdout", output);
    if (audio_to_stdout && o->json)
        return cli_usage_error(o->cmd, "--json prints on stdout, which carries the audio here");
    if (audio_to_stdout && isatty(1))
        return cli_usage_error(o->cmd, "refusing to write raw audio to a terminal");
    const char *mpath = cli_model_path(o);
    if (!mpath) return 2;
    struct item it = {.input = input, .ok = 1};
    if (output) {
        struct opts po = *o;
        po.output = output;
        if (plan_outputs(&po, &it, ".wav", mpath)) return 1;
        if (!it.ok) return 1;
    }
    struct mimi_model *model = cli_load_model(mpath, o);
    if (!model) return 1;
    enum frame_type type;
    int rc = cli_frame_type(o, model, mpath, &type);
    if (rc) {
        mimi_model_destroy(model);
        return rc;
    }
    int latent = mimi_model_latent_size(model);
    int nq = latent ? latent : o->codebooks ? o->codebooks : 8;
    int rate = mimi_model_sample_rate(model);
    struct audio_src *src = NULL;
    struct audio_sink *sink = NULL;
    char err[1400] = "";
    if (nq > CLI_MAX_FRAME || (!latent && nq > mimi_model_max_codebooks(model))) {
        rc = MIMI_EINVAL;
        snprintf(err, sizeof err, "%s: has %d codebooks, --codebooks %d asks for more", mpath,
                 mimi_model_max_codebooks(model), nq);
    }
    if (!rc)
        rc = audio_src_open(&src, input, rate, o->raw, o->raw && o->rate ? o->rate : rate,
                            o->channels ? o->channels : 1, err, sizeof err);
    if (!rc) {
        const struct audio_src_info *info = audio_src_info(src);
        it.in_rate = info->rate;
        it.in_channels = info->channels;
        snprintf(it.in_format, sizeof it.in_format, "%s", info->format);
        if (info->rate != rate || info->channels != 1) {
            char ch[32];
            cli_note("%s: %d Hz %s -> %d Hz mono", name, info->rate,
                     cli_channels_name(info->channels, ch, sizeof ch), rate);
        }
    }
    if (!rc && output) {
        enum audio_raw raw = audio_to_stdout ? AUDIO_RAW_S16LE : AUDIO_RAW_NONE;
        int out_rate = o->rate && !o->raw ? o->rate : rate;
        rc = audio_sink_open(&sink, output, rate, out_rate, raw, o->float_wav, err, sizeof err);
    }
    double t0 = cli_now();
    if (!rc) {
        progress_begin("roundtrip", 1, 1, o->quiet || strcmp(input, "-") == 0);
        rc = roundtrip(model, type, nq, src, sink, &it, err, sizeof err);
        progress_end();
    }
    it.wall_s = cli_now() - t0;
    it.audio_s = (double)it.samples / rate;
    it.n_codebooks = latent ? 0 : nq;
    it.latent_size = latent;
    if (!rc && sink) {
        it.clipped = audio_sink_clipped(sink);
        rc = audio_sink_close(sink, err, sizeof err);
        sink = NULL;
    }
    it.bitrate = latent ? NAN : log2((double)mimi_model_codebook_size(model)) * nq * rate /
                                    mimi_model_frame_size(model);
    if (rc) {
        item_fail(&it, name, "%s", err);
    } else if (o->json) {
        json_summary(o, &it, 1, it.wall_s);
    } else {
        FILE *rep = audio_to_stdout ? stderr : stdout;
        double fr = (double)rate / mimi_model_frame_size(model);
        double bits = it.bitrate;
        double rtf = it.audio_s > 0 ? it.wall_s / it.audio_s : 0;
        char ch[32];
        char conv[64] = "";
        if (it.in_rate != rate || it.in_channels != 1)
            snprintf(conv, sizeof conv, ", converted to %d Hz mono", rate);
        fprintf(rep, "%s: %.2f s of audio (%d Hz %s%s), %lld frames\n", name, it.audio_s,
                it.in_rate, cli_channels_name(it.in_channels, ch, sizeof ch), conv,
                (long long)it.frames);
        char desc[96];
        cli_latents_desc(model, desc, sizeof desc);
        if (latent)
            fprintf(rep, "  frames:           %s\n", desc);
        else
            fprintf(rep, "  bitrate:          %.0f bit/s (%g bits x %d codebooks x %g frames/s)\n",
                    bits, log2((double)mimi_model_codebook_size(model)), nq, fr);
        fprintf(rep, "  real-time factor: %.3f (%.2fx %s than real time), %.1f ms per frame\n",
                rtf, rtf > 0 && rtf < 1 ? 1 / rtf : rtf, rtf < 1 ? "faster" : "slower",
                it.frames ? 1000.0 * it.wall_s / it.frames : 0.0);
        fprintf(rep, "  SNR:              %.2f dB (output against the %d Hz mono input)\n",
                it.snr_db, rate);
        if (output)
            fprintf(rep, "  output:           %s%s\n", audio_to_stdout ? "stdout" : output,
                    it.clipped ? " (some samples clipped to [-1, 1])" : "");
    }
    audio_sink_abort(sink);
    audio_src_close(src);
    mimi_model_destroy(model);
    return rc ? 1 : 0;
}
