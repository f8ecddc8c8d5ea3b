/*
 * audio.h - audio in and out for the `mimi` command: files through libsndfile, headerless PCM
 * through pipes, sample rates through libsoxr (resample.h).
 *
 * A source reads mono float samples at the rate the caller asks for, one block at a time, from
 * any file libsndfile reads (WAV, FLAC, Ogg Vorbis/Opus, MP3, AIFF, ...; "-" reads such a stream
 * from standard input) or from headerless PCM (s16le or f32le, any rate and channel count).
 * Channels are averaged to mono; a different rate is converted with libsoxr. A source never
 * reads more than it needs for the block asked for, so a pipe costs no more latency than the
 * block size. NaN or infinite input samples are an error naming the sample and the channel.
 *
 * A sink writes mono float samples given at one rate to a file whose format follows its
 * extension (.wav, .flac, .ogg (Vorbis), .opus (Ogg/Opus), .mp3; .npy: a float32 array), or as
 * headerless PCM to a file or standard output, at the same or another rate (libsoxr). Files are
 * written to a temporary "<path>.tmp.<pid>.<k>" beside the target and renamed over it by
 * audio_sink_close, so a failure never leaves a partial file. Integer outputs clip to [-1, 1]
 * and count the samples they clipped.
 *
 * Every function that can fail returns 0 (or a count) or a negative MIMI_E* code and writes a
 * one-line reason starting with the path ("-" reads as "stdin"/"stdout") into errbuf. Nothing is
 * printed.
 */
#ifndef MIMI_AUDIO_H
#define MIMI_AUDIO_H

#include <stddef.h>
#include <stdint.h>

// Headerless PCM sample encodings (little-endian, channels interleaved).
enum audio_raw { AUDIO_RAW_NONE = 0, AUDIO_RAW_S16LE = 1, AUDIO_RAW_F32LE = 2 };

// "s16le" / "f32le" -> AUDIO_RAW_*; AUDIO_RAW_NONE for anything else.
enum audio_raw audio_raw_parse(const char *name);

// ---- sources ----

struct audio_src;

struct audio_src_info {
    int rate;          // the input's sample rate
    int channels;      // the input's channel count
    int64_t frames;    // the input's length in samples per channel; -1 when unknown (pipes)
    char format[48];   // "WAV 16-bit", "FLAC 16-bit", "MP3", "raw s16le", ...
};

// Opens `path` ("-": standard input). raw == AUDIO_RAW_NONE: a file libsndfile reads, described
// by its header; otherwise headerless PCM at raw_rate Hz with raw_channels channels. Samples come
// out mono at out_rate (0: the input's own rate). Fails on a missing or unreadable file, a file
// that is not audio, and an empty one ("empty audio").
int audio_src_open(struct audio_src **src, const char *path, int out_rate, enum audio_raw raw,
                   int raw_rate, int raw_channels, char *errbuf, size_t errlen);

const struct audio_src_info *audio_src_info(const struct audio_src *src);

// Reads n mono samples, fewer only at the end of the input. Returns the count (0 at the end) or
// a negative code: a read error, a NaN or infinite sample, or raw input that held no sample at
// all ("empty audio").
int64_t audio_src_read(struct audio_src *src, float *out, int64_t n, char *errbuf,
                       size_t errlen);

// Input samples (per channel) consumed so far, for progress.
int64_t audio_src_position(const struct audio_src *src);

void audio_src_close(struct audio_src *src);

// ---- sinks ----

struct audio_sink;

// The output kinds by extension; AUDIO_OUT_NONE when the extension names none of them.
enum audio_out {
    AUDIO_OUT_NONE = 0,
    AUDIO_OUT_WAV,
    AUDIO_OUT_FLAC,
    AUDIO_OUT_OGG,
    AUDIO_OUT_OPUS,
    AUDIO_OUT_MP3,
    AUDIO_OUT_NPY,
};
enum audio_out audio_out_from_path(const char *path);

// "wav", "flac", "ogg", "opus", "mp3", "npy" -> the kind; AUDIO_OUT_NONE otherwise.
enum audio_out audio_out_parse(const char *name);
const char *audio_out_ext(enum audio_out kind);  // ".wav", ...

// Opens an output for samples given at in_rate, written at out_rate. raw != AUDIO_RAW_NONE:
// headerless PCM to `path` ("-": standard output, written as it comes with no temporary file);
// otherwise the format follows the extension of `path`. float_wav: a WAV holds 32-bit floats
// (not clipped) instead of 16-bit PCM. Fails at once on an unknown extension or a rate the
// format cannot hold (Opus: 8, 12, 16, 24 or 48 kHz).
int audio_sink_open(struct audio_sink **sink, const char *path, int in_rate, int out_rate,
                    enum audio_raw raw, int float_wav, char *errbuf, size_t errlen);

// Writes n samples (standard output: before returning). EPIPE on a pipe gives MIMI_EIO with
// "broken pipe" in the reason.
int audio_sink_write(struct audio_sink *sink, const float *x, int64_t n, char *errbuf,
                     size_t errlen);

// Samples outside [-1, 1] written so far to an integer format (clipped there).
int64_t audio_sink_clipped(const struct audio_sink *sink);

// Samples written so far, at out_rate.
int64_t audio_sink_written(const struct audio_sink *sink);

// Writes what the resampler held back, completes the file and renames it into place; frees the
// sink whatever happens (on failure the temporary file is removed).
int audio_sink_close(struct audio_sink *sink, char *errbuf, size_t errlen);

// Frees the sink and removes its temporary file. NULL is allowed.
void audio_sink_abort(struct audio_sink *sink);

// ---- whole files (the first version's interface, kept for other tools) ----

// Reads `path` into a new malloc'd buffer of mono floats at the file's own rate.
int audio_read_mono(const char *path, float **samples, int64_t *n_samples, int *sample_rate,
                    int *channels, char *errbuf, size_t errlen);

enum audio_encoding {
    AUDIO_PCM16 = 0,  // 16-bit integer PCM: round(clip(x) * 32767), NaN as 0
    AUDIO_FLOAT = 1,  // 32-bit IEEE float, values written unchanged (not clipped)
};

// Writes n samples as a mono WAV file at `sample_rate`, atomically.
int audio_write_wav(const char *path, const float *samples, int64_t n, int sample_rate,
                    enum audio_encoding encoding, int64_t *n_clipped, char *errbuf,
                    size_t errlen);

#endif
