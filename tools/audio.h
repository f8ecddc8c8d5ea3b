/*
 * audio.h - reading and writing audio files through libsndfile.
 *
 * Read: any format libsndfile knows (WAV, FLAC, AIFF, OGG, ...) into mono float samples at the
 * file's own rate; several channels are downmixed by averaging them. Integer formats are scaled
 * to [-1, 1) by libsndfile (a 16-bit sample s becomes s / 32768). Nothing is resampled: the caller
 * compares the returned rate with the rate it needs.
 * Write: WAV, mono, 16-bit PCM or 32-bit float, atomically (a temporary "<path>.tmp.<pid>" renamed
 * over `path`, removed on failure).
 *
 * Every function returns 0 or a negative MIMI_E* code (include/mimi.h) and, on failure, writes a
 * one-line reason that starts with the path into errbuf (always terminated when errlen > 0).
 * Nothing is printed.
 */
#ifndef MIMI_AUDIO_H
#define MIMI_AUDIO_H

#include <stddef.h>
#include <stdint.h>

// Reads `path` into a new malloc'd buffer of *n_samples mono floats (the caller frees *samples).
// *sample_rate receives the file's rate and *channels (may be NULL) its channel count. Fails on a
// file that cannot be opened or is not audio, on a file with no samples ("empty audio"), and on
// NaN or infinite samples in float files.
int audio_read_mono(const char *path, float **samples, int64_t *n_samples, int *sample_rate,
                    int *channels, char *errbuf, size_t errlen);

enum audio_encoding {
    AUDIO_PCM16 = 0,  // 16-bit integer PCM (the default)
    AUDIO_FLOAT = 1,  // 32-bit IEEE float, values written unchanged (not clipped)
};

// Writes n samples as a mono WAV file at `sample_rate`.
// AUDIO_PCM16: each sample is clipped to [-1, 1], multiplied by 32767 and rounded to the nearest
// integer, halfway cases away from zero (so 1.0 -> 32767, -1.0 -> -32767, 0.5 -> 16384); NaN is
// written as 0. *n_clipped (may be NULL) receives the number of samples outside [-1, 1] or NaN.
// AUDIO_FLOAT: samples are written as they are; *n_clipped receives 0.
int audio_write_wav(const char *path, const float *samples, int64_t n, int sample_rate,
                    enum audio_encoding encoding, int64_t *n_clipped, char *errbuf,
                    size_t errlen);

#endif
