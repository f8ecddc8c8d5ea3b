/*
 * gen_audio.c - writes and inspects audio files for tests/test_cli_audio.sh, with libsndfile
 * (so the tests need neither sox nor Python).
 *
 *   gen_audio OUT RATE CHANNELS SAMPLES [pcm16|float]
 *       Writes a test signal: channel c is 0.3 sin(2 pi (220 + 110 c) t) plus a little
 *       deterministic noise. The format follows the extension of OUT: .wav (pcm16 or float),
 *       .flac, .ogg (Vorbis), .opus, .mp3, .aiff.
 *   gen_audio --raw s16le|f32le CHANNELS SAMPLES
 *       Writes the same signal at 24 kHz as headerless PCM to stdout.
 *   gen_audio --info FILE
 *       Prints "RATE CHANNELS FRAMES MAJOR SUBTYPE", e.g. "24000 1 40800 wav pcm16".
 *   gen_audio --peak FILE
 *       Prints the largest absolute sample value, e.g. "0.300003".
 * Exits 1 with a message on stderr on any failure.
 */
#include <math.h>
#include <sndfile.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static float sample(int64_t i, int c, int rate) {
    uint32_t x = (uint32_t)(i * 2654435761u + (uint32_t)c * 40503u);
    x ^= x >> 15;
    x *= 2246822519u;
    x ^= x >> 13;
    double noise = ((double)(x & 0xffff) / 65535.0 - 0.5) * 0.02;
    return (float)(0.3 * sin(2 * M_PI * (220.0 + 110.0 * c) * (double)i / rate) + noise);
}

static int die(const char *what, const char *why) {
    fprintf(stderr, "gen_audio: %s: %s\n", what, why);
    return 1;
}

static int write_file(const char *path, int rate, int ch, int64_t n, int use_float) {
    const char *ext = strrchr(path, '.');
    SF_INFO info = {.samplerate = rate, .channels = ch};
    if (!ext) return die(path, "no extension");
    if (strcasecmp(ext, ".wav") == 0)
        info.format = SF_FORMAT_WAV | (use_float ? SF_FORMAT_FLOAT : SF_FORMAT_PCM_16);
    else if (strcasecmp(ext, ".flac") == 0) info.format = SF_FORMAT_FLAC | SF_FORMAT_PCM_16;
    else if (strcasecmp(ext, ".ogg") == 0) info.format = SF_FORMAT_OGG | SF_FORMAT_VORBIS;
    else if (strcasecmp(ext, ".opus") == 0) info.format = SF_FORMAT_OGG | SF_FORMAT_OPUS;
    else if (strcasecmp(ext, ".mp3") == 0) info.format = SF_FORMAT_MPEG | SF_FORMAT_MPEG_LAYER_III;
    else if (strcasecmp(ext, ".aiff") == 0) info.format = SF_FORMAT_AIFF | SF_FORMAT_PCM_16;
    else return die(path, "unknown extension");
    SNDFILE *sf = sf_open(path, SFM_WRITE, &info);
    if (!sf) return die(path, sf_strerror(NULL));
    float *buf = malloc(sizeof *buf * (size_t)ch * 1024);
    if (!buf) return die(path, "out of memory");
    for (int64_t done = 0; done < n;) {
        int64_t k = n - done < 1024 ? n - done : 1024;
        for (int64_t i = 0; i < k; i++)
            for (int c = 0; c < ch; c++) buf[i * ch + c] = sample(done + i, c, rate);
        if (sf_writef_float(sf, buf, k) != k) return die(path, sf_strerror(sf));
        done += k;
    }
    free(buf);
    if (sf_close(sf)) return die(path, "cannot finish the file");
    return 0;
}

static int write_raw(const char *enc, int ch, int64_t n) {
    int f32 = strcmp(enc, "f32le") == 0;
    if (!f32 && strcmp(enc, "s16le")) return die(enc, "not s16le or f32le");
    for (int64_t i = 0; i < n; i++) {
        for (int c = 0; c < ch; c++) {
            float v = sample(i, c, 24000);
            unsigned char b[4];
            if (f32) {
                uint32_t u;
                memcpy(&u, &v, 4);
                for (int k = 0; k < 4; k++) b[k] = (unsigned char)(u >> (8 * k));
            } else {
                uint16_t s = (uint16_t)(int16_t)lrintf(v * 32767.0f);
                b[0] = (unsigned char)s;
                b[1] = (unsigned char)(s >> 8);
            }
            if (fwrite(b, f32 ? 4 : 2, 1, stdout) != 1) return die("stdout", "write failed");
        }
    }
    return fflush(stdout) ? die("stdout", "write failed") : 0;
}

static int show(const char *path, int peak) {
    SF_INFO info = {0};
    SNDFILE *sf = sf_open(path, SFM_READ, &info);
    if (!sf) return die(path, sf_strerror(NULL));
    if (peak) {
        float buf[4096];
        double m = 0;
        sf_count_t got;
        while ((got = sf_read_float(sf, buf, 4096)) > 0)
            for (sf_count_t i = 0; i < got; i++) m = fabs(buf[i]) > m ? fabs(buf[i]) : m;
        printf("%f\n", m);
    } else {
        SF_FORMAT_INFO major = {.format = info.format & SF_FORMAT_TYPEMASK};
        sf_command(NULL, SFC_GET_FORMAT_INFO, &major, sizeof major);
        int sub = info.format & SF_FORMAT_SUBMASK;
        const char *s = sub == SF_FORMAT_PCM_16 ? "pcm16" : sub == SF_FORMAT_FLOAT ? "float"
                        : sub == SF_FORMAT_VORBIS ? "vorbis" : sub == SF_FORMAT_OPUS ? "opus"
                        : sub == SF_FORMAT_MPEG_LAYER_III ? "mp3" : "other";
        printf("%d %d %lld %s %s\n", info.samplerate, info.channels, (long long)info.frames,
               major.extension ? major.extension : "?", s);
    }
    sf_close(sf);
    return 0;
}

int main(int argc, char **argv) {
    if (argc == 3 && strcmp(argv[1], "--info") == 0) return show(argv[2], 0);
    if (argc == 3 && strcmp(argv[1], "--peak") == 0) return show(argv[2], 1);
    if (argc == 5 && strcmp(argv[1], "--raw") == 0)
        return write_raw(argv[2], atoi(argv[3]), atoll(argv[4]));
    if (argc == 5 || argc == 6)
        return write_file(argv[1], atoi(argv[2]), atoi(argv[3]), atoll(argv[4]),
                          argc == 6 && strcmp(argv[5], "float") == 0);
    fprintf(stderr, "usage: gen_audio OUT RATE CHANNELS SAMPLES [pcm16|float]\n"
                    "       gen_audio --raw s16le|f32le CHANNELS SAMPLES\n"
                    "       gen_audio --info FILE | --peak FILE\n");
    return 2;
}
