/*
 * audio.c - audio sources and sinks: libsndfile files, headerless PCM, libsoxr rates (audio.h).
 *
 * A source reads interleaved blocks (libsndfile's sf_readf_float, or read() of raw bytes),
 * averages the channels into a mono block at the input rate, and hands that through the
 * resampler when the caller wants another rate. Blocks are sized from what the caller still
 * needs, so a pipe is never read further ahead than the current request.
 *
 * A sink converts and writes as samples arrive. libsndfile writes into a temporary file opened
 * here (so the descriptor can be synced once libsndfile has finished the header) and the file is
 * renamed into place at the end. The PEAK chunk libsndfile would add to float WAV files is turned
 * off, because it holds a timestamp and would make identical audio give different files.
 */
#include "audio.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <sndfile.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fdio.h"
#include "mimi.h"
#include "npy.h"
#include "resample.h"

#define AUDIO_BLOCK 4096  // frames per read or conversion step

enum audio_raw audio_raw_parse(const char *name) {
    if (strcmp(name, "s16le") == 0) return AUDIO_RAW_S16LE;
    if (strcmp(name, "f32le") == 0) return AUDIO_RAW_F32LE;
    return AUDIO_RAW_NONE;
}

static int raw_bytes(enum audio_raw raw) { return raw == AUDIO_RAW_S16LE ? 2 : 4; }

// ---- sources ----

struct audio_src {
    struct audio_src_info info;
    char name[1024];          // the path, or "stdin"
    SNDFILE *sf;
    int fd, own_fd;           // raw input
    enum audio_raw raw;
    struct resampler *rs;
    float *block;             // AUDIO_BLOCK interleaved frames
    uint8_t *bytes;           // raw bytes of one block
    float *mono;              // AUDIO_BLOCK mono samples at the input rate
    size_t mono_pos, mono_len;
    int eof, out_rate;
    int64_t pos;              // input frames consumed
};

static void describe_sf(const SF_INFO *in, char *out, size_t len) {
    int type = in->format & SF_FORMAT_TYPEMASK;
    SF_FORMAT_INFO major = {.format = type};
    const char *name = type == SF_FORMAT_WAV || type == SF_FORMAT_WAVEX || type == SF_FORMAT_RF64
                           ? "WAV"
                       : type == SF_FORMAT_OGG  ? "Ogg"
                       : type == SF_FORMAT_MPEG ? "MP3"
                       : type == SF_FORMAT_FLAC ? "FLAC"
                       : type == SF_FORMAT_AIFF ? "AIFF"
                                                : NULL;
    if (!name && sf_command(NULL, SFC_GET_FORMAT_INFO, &major, sizeof major) == 0)
        name = major.extension;
    if (!name) name = "audio";
    int sub = in->format & SF_FORMAT_SUBMASK;
    const char *bits = sub == SF_FORMAT_PCM_16   ? " 16-bit"
                       : sub == SF_FORMAT_PCM_24 ? " 24-bit"
                       : sub == SF_FORMAT_PCM_32 ? " 32-bit"
                       : sub == SF_FORMAT_PCM_U8 || sub == SF_FORMAT_PCM_S8 ? " 8-bit"
                       : sub == SF_FORMAT_FLOAT  ? " float"
                       : sub == SF_FORMAT_DOUBLE ? " double"
                       : sub == SF_FORMAT_OPUS   ? " Opus"
                       : sub == SF_FORMAT_VORBIS ? " Vorbis"
                                                 : "";
    snprintf(out, len, "%s%s", name, bits);
}

int audio_src_open(struct audio_src **out, const char *path, int out_rate, enum audio_raw raw,
                   int raw_rate, int raw_channels, char *errbuf, size_t errlen) {
    *out = NULL;
    int is_stdin = strcmp(path, "-") == 0;
    struct audio_src *s = calloc(1, sizeof *s);
    if (!s) return fd_fail(errbuf, errlen, MIMI_ENOMEM, "%s: out of memory", path);
    snprintf(s->name, sizeof s->name, "%s", is_stdin ? "stdin" : path);
    s->fd = -1;
    s->raw = raw;
    int rc = 0;
    if (!is_stdin) {
        struct stat st;
        if (stat(path, &st) != 0) {
            rc = fd_fail(errbuf, errlen, MIMI_EIO, "%s: cannot open (%s)", path, strerror(errno));
            goto out;
        }
        if (S_ISDIR(st.st_mode)) {
            rc = fd_fail(errbuf, errlen, MIMI_EIO, "%s: is a directory", path);
            goto out;
        }
    }
    if (raw != AUDIO_RAW_NONE) {
        s->fd = is_stdin ? 0 : open(path, O_RDONLY);
        s->own_fd = !is_stdin;
        if (s->fd < 0) {
            rc = fd_fail(errbuf, errlen, MIMI_EIO, "%s: cannot open (%s)", path, strerror(errno));
            goto out;
        }
        s->info.rate = raw_rate;
        s->info.channels = raw_channels;
        s->info.frames = -1;
        snprintf(s->info.format, sizeof s->info.format, "raw %s",
                 raw == AUDIO_RAW_S16LE ? "s16le" : "f32le");
        if (!is_stdin) {
            struct stat st;
            if (fstat(s->fd, &st) == 0 && S_ISREG(st.st_mode))
                s->info.frames = st.st_size / (raw_bytes(raw) * raw_channels);
        }
    } else {
        SF_INFO info;
        memset(&info, 0, sizeof info);
        s->sf = is_stdin ? sf_open_fd(0, SFM_READ, &info, SF_FALSE) : sf_open(path, SFM_READ, &info);
        if (!s->sf) {
            rc = fd_fail(errbuf, errlen, MIMI_EFORMAT, "%s: not a readable audio file (libsndfile: %s)%s",
                      s->name, sf_strerror(NULL),
                      is_stdin ? "; from a pipe, send WAV, or headerless PCM with --raw" : "");
            goto out;
        }
        if (info.channels < 1 || info.samplerate < 1) {
            rc = fd_fail(errbuf, errlen, MIMI_EFORMAT, "%s: invalid audio header (%d channels, %d Hz)",
                      s->name, info.channels, info.samplerate);
            goto out;
        }
        s->info.rate = info.samplerate;
        s->info.channels = info.channels;
        s->info.frames = info.frames >= 0 && info.frames < SF_COUNT_MAX / 4 ? info.frames : -1;
        describe_sf(&info, s->info.format, sizeof s->info.format);
        if (s->info.frames == 0) {
            rc = fd_fail(errbuf, errlen, MIMI_EINVAL, "%s: empty audio (0 samples)", s->name);
            goto out;
        }
    }
    if (s->info.channels < 1 || s->info.channels > 1024) {
        rc = fd_fail(errbuf, errlen, MIMI_EINVAL, "%s: %d channels is not supported", s->name,
                  s->info.channels);
        goto out;
    }
    size_t ch = (size_t)s->info.channels;
    s->block = malloc(AUDIO_BLOCK * ch * sizeof *s->block);
    s->bytes = raw ? malloc(AUDIO_BLOCK * ch * 4) : NULL;
    s->mono = malloc(AUDIO_BLOCK * sizeof *s->mono);
    if (!s->block || !s->mono || (raw && !s->bytes)) {
        rc = fd_fail(errbuf, errlen, MIMI_ENOMEM, "%s: out of memory", s->name);
        goto out;
    }
    if (out_rate > 0 && out_rate != s->info.rate) {
        char why[256];
        s->out_rate = out_rate;
        s->rs = resample_create(s->info.rate, out_rate, why, sizeof why);
        if (!s->rs) {
            rc = fd_fail(errbuf, errlen, MIMI_EINVAL, "%s: %s", s->name, why);
            goto out;
        }
    }
out:
    if (rc) {
        audio_src_close(s);
        return rc;
    }
    *out = s;
    return 0;
}

const struct audio_src_info *audio_src_info(const struct audio_src *src) { return &src->info; }

int64_t audio_src_position(const struct audio_src *src) { return src->pos; }

void audio_src_close(struct audio_src *s) {
    if (!s) return;
    if (s->sf) sf_close(s->sf);
    if (s->own_fd && s->fd >= 0) close(s->fd);
    resample_destroy(s->rs);
    free(s->block);
    free(s->bytes);
    free(s->mono);
    free(s);
}

// Reads up to `want` (1 .. AUDIO_BLOCK) frames into s->mono. Returns the count (0 at the end)
// or a negative code.
static int64_t refill(struct audio_src *s, int64_t want, char *errbuf, size_t errlen) {
    int ch = s->info.channels;
    int64_t got;
    if (s->raw) {
        size_t frame_bytes = (size_t)raw_bytes(s->raw) * (size_t)ch;
        ssize_t r = fd_read_full(s->fd, s->bytes, (size_t)want * frame_bytes);
        if (r < 0)
            return fd_fail(errbuf, errlen, MIMI_EIO, "%s: %s", s->name,
                        errno == EINTR ? "interrupted" : strerror(errno));
        got = r / (ssize_t)frame_bytes;  // a partial frame at the very end is dropped
        for (int64_t i = 0; i < got * ch; i++) {
            const uint8_t *b = s->bytes + i * raw_bytes(s->raw);
            if (s->raw == AUDIO_RAW_S16LE) {
                s->block[i] = (float)(int16_t)(uint16_t)(b[0] | b[1] << 8) / 32768.0f;
            } else {
                uint32_t u = (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 |
                             (uint32_t)b[3] << 24;
                memcpy(&s->block[i], &u, 4);
            }
        }
    } else {
        got = sf_readf_float(s->sf, s->block, want);
        if (got < 0) got = 0;
        if (got == 0 && sf_error(s->sf) != SF_ERR_NO_ERROR)
            return fd_fail(errbuf, errlen, MIMI_EIO, "%s: read error (libsndfile: %s)", s->name,
                        sf_strerror(s->sf));
    }
    for (int64_t i = 0; i < got; i++) {
        double sum = 0;
        for (int c = 0; c < ch; c++) {
            float v = s->block[i * ch + c];
            if (!isfinite(v))
                return fd_fail(errbuf, errlen, MIMI_EINVAL,
                            "%s: sample %lld of channel %d is not a finite number (%s)", s->name,
                            (long long)(s->pos + i), c, isnan(v) ? "nan" : "inf");
            sum += v;
        }
        s->mono[i] = (float)(sum / ch);
    }
    s->pos += got;
    s->mono_pos = 0;
    s->mono_len = (size_t)got;
    return got;
}

int64_t audio_src_read(struct audio_src *s, float *out, int64_t n, char *errbuf, size_t errlen) {
    int64_t have = 0;
    while (have < n) {
        if (s->mono_pos == s->mono_len && !s->eof) {
            int64_t want = n - have;
            if (s->rs) want = want * s->info.rate / s->out_rate + 1;  // about the input it takes
            if (want > AUDIO_BLOCK) want = AUDIO_BLOCK;
            if (want < 1) want = 1;
            int64_t r = refill(s, want, errbuf, errlen);
            if (r < 0) return r;
            if (r == 0) {
                s->eof = 1;
                if (s->pos == 0)
                    return fd_fail(errbuf, errlen, MIMI_EINVAL, "%s: empty audio (0 samples)",
                                s->name);
            }
        }
        size_t left = s->mono_len - s->mono_pos;
        if (s->rs) {
            if (left) {
                size_t used = left;
                have += (int64_t)resample_process(s->rs, s->mono + s->mono_pos, &used, out + have,
                                                  (size_t)(n - have));
                s->mono_pos += used;
            } else if (s->eof) {
                size_t o = resample_flush(s->rs, out + have, (size_t)(n - have));
                if (o == 0) break;
                have += (int64_t)o;
            }
        } else {
            if (!left && s->eof) break;
            size_t k = left < (size_t)(n - have) ? left : (size_t)(n - have);
            memcpy(out + have, s->mono + s->mono_pos, k * sizeof *out);
            s->mono_pos += k;
            have += (int64_t)k;
        }
    }
    return have;
}

// ---- sinks ----

static const struct {
    const char *name;
    enum audio_out kind;
} OUT_KINDS[] = {{"wav", AUDIO_OUT_WAV}, {"flac", AUDIO_OUT_FLAC}, {"ogg", AUDIO_OUT_OGG},
                 {"opus", AUDIO_OUT_OPUS}, {"mp3", AUDIO_OUT_MP3}, {"npy", AUDIO_OUT_NPY}};
#define N_OUT_KINDS (sizeof OUT_KINDS / sizeof OUT_KINDS[0])

enum audio_out audio_out_parse(const char *name) {
    for (size_t i = 0; i < N_OUT_KINDS; i++)
        if (strcasecmp(name, OUT_KINDS[i].name) == 0) return OUT_KINDS[i].kind;
    return AUDIO_OUT_NONE;
}

enum audio_out audio_out_from_path(const char *path) {
    const char *dot = strrchr(path, '.'), *slash = strrchr(path, '/');
    if (!dot || (slash && dot < slash)) return AUDIO_OUT_NONE;
    return audio_out_parse(dot + 1);
}

const char *audio_out_ext(enum audio_out kind) {
    static const char *const EXT[] = {"", ".wav", ".flac", ".ogg", ".opus", ".mp3", ".npy"};
    return (unsigned)kind < sizeof EXT / sizeof EXT[0] ? EXT[kind] : "";
}

struct audio_sink {
    enum audio_out kind;
    enum audio_raw raw;
    int float_wav, is_stdout, fd;
    char path[4096], tmp[4160];
    SNDFILE *sf;
    struct resampler *rs;
    float *npy;               // .npy: every sample, written at close
    int64_t npy_cap;
    int64_t clipped, written;
    float rbuf[AUDIO_BLOCK];  // resampler output
    union {
        int16_t s16[AUDIO_BLOCK];
        float f32[AUDIO_BLOCK];
        uint8_t bytes[4 * AUDIO_BLOCK];
    } conv;
};

static int16_t to_pcm16(float x, int64_t *clipped) {
    if (!(x >= -1.0f && x <= 1.0f)) {  // also true for NaN
        (*clipped)++;
        if (isnan(x)) return 0;
        x = x > 0 ? 1.0f : -1.0f;
    }
    return (int16_t)lroundf(x * 32767.0f);
}

static const char *out_name(const struct audio_sink *k) { return k->is_stdout ? "stdout" : k->path; }

static int sink_open_kind(struct audio_sink **out, const char *path, enum audio_out kind,
                          int in_rate, int out_rate, enum audio_raw raw, int float_wav,
                          char *errbuf, size_t errlen) {
    *out = NULL;
    struct audio_sink *k = calloc(1, sizeof *k);
    if (!k) return fd_fail(errbuf, errlen, MIMI_ENOMEM, "%s: out of memory", path);
    k->kind = kind;
    k->raw = raw;
    k->float_wav = float_wav;
    k->fd = -1;
    k->is_stdout = raw && strcmp(path, "-") == 0;
    snprintf(k->path, sizeof k->path, "%s", path);
    int rc = 0;
    if (!raw && kind == AUDIO_OUT_NONE) {
        rc = fd_fail(errbuf, errlen, MIMI_EINVAL,
                  "%s: unknown audio format (name it .wav, .flac, .ogg, .opus, .mp3 or .npy)", path);
        goto out;
    }
    if (!raw && kind == AUDIO_OUT_OPUS && out_rate != 8000 && out_rate != 12000 &&
        out_rate != 16000 && out_rate != 24000 && out_rate != 48000) {
        rc = fd_fail(errbuf, errlen, MIMI_EINVAL,
                  "%s: Opus holds 8, 12, 16, 24 or 48 kHz audio, not %d Hz", path, out_rate);
        goto out;
    }
    if (in_rate != out_rate) {
        char why[256];
        if (!(k->rs = resample_create(in_rate, out_rate, why, sizeof why))) {
            rc = fd_fail(errbuf, errlen, MIMI_EINVAL, "%s: %s", path, why);
            goto out;
        }
    }
    if (k->is_stdout) {
        k->fd = 1;
        goto out;
    }
    if (kind == AUDIO_OUT_NPY && !raw) goto out;  // written whole by audio_sink_close
    if (fd_temp_path(path, k->tmp, sizeof k->tmp)) {
        rc = fd_fail(errbuf, errlen, MIMI_EINVAL, "%s: path too long", path);
        goto out;
    }
    k->fd = open(k->tmp, O_RDWR | O_CREAT | O_TRUNC | O_NOFOLLOW, 0666);
    if (k->fd < 0) {
        k->tmp[0] = '\0';
        rc = fd_fail(errbuf, errlen, MIMI_EIO, "%s: cannot create file (%s)", path, strerror(errno));
        goto out;
    }
    if (raw) goto out;
    SF_INFO info;
    memset(&info, 0, sizeof info);
    info.samplerate = out_rate;
    info.channels = 1;
    switch (kind) {
    case AUDIO_OUT_WAV: info.format = SF_FORMAT_WAV | (float_wav ? SF_FORMAT_FLOAT : SF_FORMAT_PCM_16); break;
    case AUDIO_OUT_FLAC: info.format = SF_FORMAT_FLAC | SF_FORMAT_PCM_16; break;
    case AUDIO_OUT_OGG: info.format = SF_FORMAT_OGG | SF_FORMAT_VORBIS; break;
    case AUDIO_OUT_OPUS: info.format = SF_FORMAT_OGG | SF_FORMAT_OPUS; break;
    default: info.format = SF_FORMAT_MPEG | SF_FORMAT_MPEG_LAYER_III; break;
    }
    k->sf = sf_open_fd(k->fd, SFM_WRITE, &info, SF_FALSE);
    if (!k->sf) {
        rc = fd_fail(errbuf, errlen, MIMI_EIO, "%s: cannot write this format (libsndfile: %s)", path,
                  sf_strerror(NULL));
        goto out;
    }
    sf_command(k->sf, SFC_SET_ADD_PEAK_CHUNK, NULL, SF_FALSE);
out:
    if (rc) {
        audio_sink_abort(k);
        return rc;
    }
    *out = k;
    return 0;
}

int audio_sink_open(struct audio_sink **sink, const char *path, int in_rate, int out_rate,
                    enum audio_raw raw, int float_wav, char *errbuf, size_t errlen) {
    return sink_open_kind(sink, path, raw ? AUDIO_OUT_NONE : audio_out_from_path(path), in_rate,
                          out_rate, raw, float_wav, errbuf, errlen);
}

// Converts and writes n (<= AUDIO_BLOCK) samples at the output rate.
static int emit(struct audio_sink *k, const float *y, size_t n, char *errbuf, size_t errlen) {
    int ok = 1;
    if (k->raw) {
        if (k->raw == AUDIO_RAW_S16LE) {
            for (size_t i = 0; i < n; i++) {
                uint16_t v = (uint16_t)to_pcm16(y[i], &k->clipped);
                k->conv.bytes[2 * i] = (uint8_t)v;
                k->conv.bytes[2 * i + 1] = (uint8_t)(v >> 8);
            }
        } else {
            for (size_t i = 0; i < n; i++) {
                uint32_t v;
                memcpy(&v, &y[i], 4);
                for (int b = 0; b < 4; b++) k->conv.bytes[4 * i + (size_t)b] = (uint8_t)(v >> (8 * b));
            }
        }
        if (fd_write_full(k->fd, k->conv.bytes, n * (size_t)raw_bytes(k->raw)) != 0)
            return fd_fail(errbuf, errlen, MIMI_EIO, "%s: write failed (%s)", out_name(k),
                        errno == EPIPE ? "broken pipe: the reader went away" : strerror(errno));
    } else if (k->kind == AUDIO_OUT_NPY) {
        if (k->written + (int64_t)n > k->npy_cap) {
            int64_t cap = k->npy_cap ? 2 * k->npy_cap : 65536;
            while (cap < k->written + (int64_t)n) cap *= 2;
            float *p = realloc(k->npy, (size_t)cap * sizeof *p);
            if (!p) return fd_fail(errbuf, errlen, MIMI_ENOMEM, "%s: out of memory", k->path);
            k->npy = p;
            k->npy_cap = cap;
        }
        memcpy(k->npy + k->written, y, n * sizeof *y);
    } else if (k->kind == AUDIO_OUT_WAV && k->float_wav) {
        ok = sf_write_float(k->sf, y, (sf_count_t)n) == (sf_count_t)n;
    } else if (k->kind == AUDIO_OUT_WAV || k->kind == AUDIO_OUT_FLAC) {
        for (size_t i = 0; i < n; i++) k->conv.s16[i] = to_pcm16(y[i], &k->clipped);
        ok = sf_write_short(k->sf, k->conv.s16, (sf_count_t)n) == (sf_count_t)n;
    } else {  // lossy coders take floats, clipped here so that the count is known
        for (size_t i = 0; i < n; i++) {
            float v = y[i];
            if (!(v >= -1.0f && v <= 1.0f)) {
                k->clipped++;
                v = isnan(v) ? 0.0f : v > 0 ? 1.0f : -1.0f;
            }
            k->conv.f32[i] = v;
        }
        ok = sf_write_float(k->sf, k->conv.f32, (sf_count_t)n) == (sf_count_t)n;
    }
    if (!ok)
        return fd_fail(errbuf, errlen, MIMI_EIO, "%s: write failed (libsndfile: %s)", k->path,
                    sf_strerror(k->sf));
    k->written += (int64_t)n;
    return 0;
}

int audio_sink_write(struct audio_sink *k, const float *x, int64_t n, char *errbuf,
                     size_t errlen) {
    while (n > 0) {
        int rc;
        if (k->rs) {
            size_t used = (size_t)n;
            size_t o = resample_process(k->rs, x, &used, k->rbuf, AUDIO_BLOCK);
            x += used;
            n -= (int64_t)used;
            rc = emit(k, k->rbuf, o, errbuf, errlen);
        } else {
            size_t m = n < AUDIO_BLOCK ? (size_t)n : AUDIO_BLOCK;
            rc = emit(k, x, m, errbuf, errlen);
            x += m;
            n -= (int64_t)m;
        }
        if (rc) return rc;
    }
    return 0;
}

int64_t audio_sink_clipped(const struct audio_sink *k) { return k->clipped; }
int64_t audio_sink_written(const struct audio_sink *k) { return k->written; }

int audio_sink_close(struct audio_sink *k, char *errbuf, size_t errlen) {
    int rc = 0;
    size_t o;
    while (k->rs && (o = resample_flush(k->rs, k->rbuf, AUDIO_BLOCK)) > 0 && !rc)
        rc = emit(k, k->rbuf, o, errbuf, errlen);
    if (rc || k->is_stdout) goto out;
    if (k->kind == AUDIO_OUT_NPY && !k->raw) {
        char why[1024];
        int64_t n = k->written;
        if (npy_write_f32(k->path, k->npy ? k->npy : k->rbuf, 1, &n, why, sizeof why))
            rc = fd_fail(errbuf, errlen, MIMI_EIO, "%s", why);
        goto out;
    }
    char why[256] = "";
    if (k->sf) {
        int e = sf_close(k->sf);
        k->sf = NULL;
        if (e) snprintf(why, sizeof why, "libsndfile could not finish the file: %s", sf_error_number(e));
    }
    if (!*why && fsync(k->fd) != 0 && errno != EINVAL) snprintf(why, sizeof why, "%s", strerror(errno));
    if (close(k->fd) != 0 && !*why) snprintf(why, sizeof why, "%s", strerror(errno));
    k->fd = -1;
    if (!*why && rename(k->tmp, k->path) != 0) snprintf(why, sizeof why, "%s", strerror(errno));
    if (*why) rc = fd_fail(errbuf, errlen, MIMI_EIO, "%s: write failed (%s)", k->path, why);
    else k->tmp[0] = '\0';  // renamed: nothing to remove
out:
    audio_sink_abort(k);
    return rc;
}

void audio_sink_abort(struct audio_sink *k) {
    if (!k) return;
    if (k->sf) sf_close(k->sf);
    if (k->fd >= 0 && !k->is_stdout) close(k->fd);
    if (k->tmp[0]) unlink(k->tmp);
    resample_destroy(k->rs);
    free(k->npy);
    free(k);
}

// ---- whole files ----

int audio_read_mono(const char *path, float **samples, int64_t *n_samples, int *sample_rate,
                    int *channels, char *errbuf, size_t errlen) {
    *samples = NULL;
    *n_samples = 0;
    *sample_rate = 0;
    if (channels) *channels = 0;
    struct audio_src *s;
    int rc = audio_src_open(&s, path, 0, AUDIO_RAW_NONE, 0, 0, errbuf, errlen);
    if (rc) return rc;
    float *buf = NULL;
    int64_t n = 0, cap = 0, got;
    do {
        if (n + AUDIO_BLOCK > cap) {
            cap = cap ? 2 * cap : 65536;
            float *p = realloc(buf, (size_t)cap * sizeof *p);
            if (!p) {
                rc = fd_fail(errbuf, errlen, MIMI_ENOMEM, "%s: out of memory", path);
                break;
            }
            buf = p;
        }
        got = audio_src_read(s, buf + n, AUDIO_BLOCK, errbuf, errlen);
        if (got < 0) rc = (int)got;
        else n += got;
    } while (!rc && got == AUDIO_BLOCK);
    if (!rc) {
        *samples = buf;
        *n_samples = n;
        *sample_rate = s->info.rate;
        if (channels) *channels = s->info.channels;
    } else {
        free(buf);
    }
    audio_src_close(s);
    return rc;
}

int audio_write_wav(const char *path, const float *samples, int64_t n, int sample_rate,
                    enum audio_encoding encoding, int64_t *n_clipped, char *errbuf,
                    size_t errlen) {
    if (n_clipped) *n_clipped = 0;
    if (n < 0 || (n > 0 && !samples) || sample_rate < 1)
        return fd_fail(errbuf, errlen, MIMI_EINVAL, "%s: invalid arguments for a WAV file", path);
    struct audio_sink *k;
    int rc = sink_open_kind(&k, path, AUDIO_OUT_WAV, sample_rate, sample_rate, AUDIO_RAW_NONE,
                            encoding == AUDIO_FLOAT, errbuf, errlen);
    if (rc) return rc;
    if ((rc = audio_sink_write(k, samples, n, errbuf, errlen))) {
        audio_sink_abort(k);
        return rc;
    }
    int64_t clipped = k->clipped;
    rc = audio_sink_close(k, errbuf, errlen);
    if (!rc && n_clipped) *n_clipped = clipped;
    return rc;
}
