/*
 * audio.c - audio file input and output with libsndfile (see audio.h).
 *
 * Reading goes through sf_readf_float in blocks and downmixes as it goes, so a long multichannel
 * file needs memory for its mono samples only. Writing opens the temporary file itself (so the
 * descriptor can be synced after libsndfile has finalised the header) and hands it to
 * sf_open_fd; the PEAK chunk libsndfile would add to float files is turned off, because it holds
 * a timestamp and would make identical audio give different files.
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
#include <sys/stat.h>
#include <unistd.h>

#include "mimi.h"

#define AUDIO_BLOCK 4096  // frames per libsndfile call

// ---- errors ----

static int fail(char *errbuf, size_t errlen, int code, const char *fmt, ...) {
    if (errbuf && errlen > 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(errbuf, errlen, fmt, ap);
        va_end(ap);
    }
    return code;
}

// ---- reading ----

int audio_read_mono(const char *path, float **samples, int64_t *n_samples, int *sample_rate,
                    int *channels, char *errbuf, size_t errlen) {
    if (errbuf && errlen) errbuf[0] = '\0';
    *samples = NULL;
    *n_samples = 0;
    *sample_rate = 0;
    if (channels) *channels = 0;

    struct stat st;
    if (stat(path, &st) != 0)
        return fail(errbuf, errlen, MIMI_EIO, "%s: cannot open (%s)", path, strerror(errno));
    if (S_ISDIR(st.st_mode)) return fail(errbuf, errlen, MIMI_EIO, "%s: is a directory", path);

    SF_INFO info;
    memset(&info, 0, sizeof info);
    SNDFILE *sf = sf_open(path, SFM_READ, &info);
    if (!sf)
        return fail(errbuf, errlen, MIMI_EFORMAT, "%s: not a readable audio file (libsndfile: %s)",
                    path, sf_strerror(NULL));
    int rc = 0;
    float *mono = NULL, *block = NULL;
    int nch = info.channels;
    if (nch < 1 || info.samplerate < 1) {
        rc = fail(errbuf, errlen, MIMI_EFORMAT, "%s: invalid audio header (%d channels, %d Hz)",
                  path, nch, info.samplerate);
        goto out;
    }
    if (info.frames <= 0) {
        rc = fail(errbuf, errlen, MIMI_EINVAL, "%s: empty audio (0 samples)", path);
        goto out;
    }
    if ((uint64_t)info.frames > SIZE_MAX / sizeof(float) || info.frames > INT64_MAX / 2) {
        rc = fail(errbuf, errlen, MIMI_ENOMEM, "%s: audio too long (%lld samples)", path,
                  (long long)info.frames);
        goto out;
    }
    mono = malloc((size_t)info.frames * sizeof *mono);
    block = malloc((size_t)AUDIO_BLOCK * (size_t)nch * sizeof *block);
    if (!mono || !block) {
        rc = fail(errbuf, errlen, MIMI_ENOMEM, "%s: out of memory for %lld samples", path,
                  (long long)info.frames);
        goto out;
    }
    int64_t total = 0;
    while (total < info.frames) {
        sf_count_t want = info.frames - total < AUDIO_BLOCK ? info.frames - total : AUDIO_BLOCK;
        sf_count_t got = sf_readf_float(sf, block, want);
        if (got <= 0) break;
        for (sf_count_t i = 0; i < got; i++) {
            double sum = 0;
            for (int c = 0; c < nch; c++) {
                float v = block[i * nch + c];
                if (!isfinite(v)) {
                    rc = fail(errbuf, errlen, MIMI_EINVAL,
                              "%s: sample %lld of channel %d is not a finite number (%s)", path,
                              (long long)(total + i), c, isnan(v) ? "nan" : "inf");
                    goto out;
                }
                sum += v;
            }
            mono[total + i] = (float)(sum / nch);
        }
        total += got;
    }
    if (sf_error(sf) != SF_ERR_NO_ERROR) {
        rc = fail(errbuf, errlen, MIMI_EIO, "%s: read error (libsndfile: %s)", path,
                  sf_strerror(sf));
        goto out;
    }
    if (total == 0) {
        rc = fail(errbuf, errlen, MIMI_EINVAL, "%s: empty audio (0 samples)", path);
        goto out;
    }
    *samples = mono;
    mono = NULL;
    *n_samples = total;
    *sample_rate = info.samplerate;
    if (channels) *channels = nch;
out:
    free(block);
    free(mono);
    sf_close(sf);
    return rc;
}

// ---- writing ----

static int16_t to_pcm16(float x, int64_t *clipped) {
    if (!(x >= -1.0f && x <= 1.0f)) {  // also true for NaN
        (*clipped)++;
        if (isnan(x)) return 0;
        x = x > 0 ? 1.0f : -1.0f;
    }
    return (int16_t)lroundf(x * 32767.0f);
}

int audio_write_wav(const char *path, const float *samples, int64_t n, int sample_rate,
                    enum audio_encoding encoding, int64_t *n_clipped, char *errbuf,
                    size_t errlen) {
    if (errbuf && errlen) errbuf[0] = '\0';
    int64_t clipped = 0;
    if (n_clipped) *n_clipped = 0;
    int bytes = encoding == AUDIO_FLOAT ? 4 : 2;
    if (n < 0 || (n > 0 && !samples) || sample_rate < 1 ||
        (encoding != AUDIO_PCM16 && encoding != AUDIO_FLOAT))
        return fail(errbuf, errlen, MIMI_EINVAL, "%s: invalid arguments for a WAV file", path);
    if ((uint64_t)n > (UINT32_MAX - 4096u) / (unsigned)bytes)
        return fail(errbuf, errlen, MIMI_EINVAL,
                    "%s: %lld samples do not fit in a WAV file (4 GiB limit)", path, (long long)n);

    char tmp[4096];
    if ((size_t)snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid()) >= sizeof tmp)
        return fail(errbuf, errlen, MIMI_EINVAL, "%s: path too long", path);
    int fd = open(tmp, O_RDWR | O_CREAT | O_TRUNC | O_NOFOLLOW, 0666);
    if (fd < 0)
        return fail(errbuf, errlen, MIMI_EIO, "%s: cannot create file (%s)", path,
                    strerror(errno));

    SF_INFO info;
    memset(&info, 0, sizeof info);
    info.samplerate = sample_rate;
    info.channels = 1;
    info.format = SF_FORMAT_WAV | (encoding == AUDIO_FLOAT ? SF_FORMAT_FLOAT : SF_FORMAT_PCM_16);
    SNDFILE *sf = sf_open_fd(fd, SFM_WRITE, &info, SF_FALSE);
    if (!sf) {
        int rc = fail(errbuf, errlen, MIMI_EIO, "%s: cannot write WAV (libsndfile: %s)", path,
                      sf_strerror(NULL));
        close(fd);
        unlink(tmp);
        return rc;
    }
    sf_command(sf, SFC_SET_ADD_PEAK_CHUNK, NULL, SF_FALSE);

    int ok = 1;
    if (encoding == AUDIO_FLOAT) {
        for (int64_t done = 0; ok && done < n;) {
            sf_count_t k = n - done < 65536 ? n - done : 65536;
            ok = sf_write_float(sf, samples + done, k) == k;
            done += k;
        }
    } else {
        int16_t block[AUDIO_BLOCK];
        for (int64_t done = 0; ok && done < n;) {
            sf_count_t k = n - done < AUDIO_BLOCK ? n - done : AUDIO_BLOCK;
            for (sf_count_t i = 0; i < k; i++) block[i] = to_pcm16(samples[done + i], &clipped);
            ok = sf_write_short(sf, block, k) == k;
            done += k;
        }
    }
    char why[256] = "";
    if (!ok) snprintf(why, sizeof why, "libsndfile: %s", sf_strerror(sf));
    if (sf_close(sf) != 0 && ok) {
        ok = 0;
        snprintf(why, sizeof why, "libsndfile could not finish the file");
    }
    if (ok && fsync(fd) != 0 && errno != EINVAL) {
        ok = 0;
        snprintf(why, sizeof why, "%s", strerror(errno));
    }
    if (close(fd) != 0 && ok) {
        ok = 0;
        snprintf(why, sizeof why, "%s", strerror(errno));
    }
    if (ok && rename(tmp, path) != 0) {
        ok = 0;
        snprintf(why, sizeof why, "%s", strerror(errno));
    }
    if (!ok) {
        unlink(tmp);
        return fail(errbuf, errlen, MIMI_EIO, "%s: write failed (%s)", path, why);
    }
    if (n_clipped) *n_clipped = clipped;
    return 0;
}
