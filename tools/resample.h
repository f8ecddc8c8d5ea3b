/*
 * resample.h - streaming sample-rate conversion of mono float audio with libsoxr.
 *
 * One resampler converts one stream from in_rate to out_rate at libsoxr's high quality
 * (SOXR_HQ: 20-bit precision, linear phase, passband to 91% of the lower Nyquist frequency).
 * Feed it any number of samples at a time; it keeps what it still needs. The output is aligned
 * with the input (libsoxr removes its filter delay), and after resample_flush the total output is
 * in_samples * out_rate / in_rate samples, rounded.
 */
#ifndef MIMI_RESAMPLE_H
#define MIMI_RESAMPLE_H

#include <stddef.h>

struct resampler;

// Returns NULL with a reason in errbuf when libsoxr refuses the rates or memory runs out.
struct resampler *resample_create(int in_rate, int out_rate, char *errbuf, size_t errlen);
void resample_destroy(struct resampler *r);

// Converts in[0 .. *n_in) into out[0 .. max_out). *n_in receives the samples consumed (fewer
// than given when `out` filled up: give the rest again). Returns the samples written.
size_t resample_process(struct resampler *r, const float *in, size_t *n_in, float *out,
                        size_t max_out);

// After the last input: writes up to max_out of the samples still held back. Call it until it
// returns 0.
size_t resample_flush(struct resampler *r, float *out, size_t max_out);

#endif
