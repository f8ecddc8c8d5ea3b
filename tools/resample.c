/*
 * resample.c - libsoxr behind the small interface of resample.h.
 */
#include "resample.h"

#include <soxr.h>
#include <stdio.h>
#include <stdlib.h>

struct resampler {
    soxr_t soxr;
};

struct resampler *resample_create(int in_rate, int out_rate, char *errbuf, size_t errlen) {
    struct resampler *r = calloc(1, sizeof *r);
    if (!r) {
        snprintf(errbuf, errlen, "out of memory for a resampler");
        return NULL;
    }
    soxr_io_spec_t io = soxr_io_spec(SOXR_FLOAT32_I, SOXR_FLOAT32_I);
    soxr_quality_spec_t q = soxr_quality_spec(SOXR_HQ, 0);
    soxr_runtime_spec_t rt = soxr_runtime_spec(1);
    soxr_error_t e = NULL;
    r->soxr = soxr_create((double)in_rate, (double)out_rate, 1, &e, &io, &q, &rt);
    if (!r->soxr || e) {
        snprintf(errbuf, errlen, "cannot resample %d Hz to %d Hz (libsoxr: %s)", in_rate, out_rate,
                 e ? e : "unknown error");
        if (r->soxr) soxr_delete(r->soxr);
        free(r);
        return NULL;
    }
    return r;
}

void resample_destroy(struct resampler *r) {
    if (!r) return;
    soxr_delete(r->soxr);
    free(r);
}

size_t resample_process(struct resampler *r, const float *in, size_t *n_in, float *out,
                        size_t max_out) {
    size_t idone = 0, odone = 0;
    if (*n_in == 0) return 0;  // a NULL or empty input would mean "end of input" to libsoxr
    soxr_process(r->soxr, in, *n_in, &idone, out, max_out, &odone);
    *n_in = idone;
    return odone;
}

size_t resample_flush(struct resampler *r, float *out, size_t max_out) {
    size_t odone = 0;
    soxr_process(r->soxr, NULL, 0, NULL, out, max_out, &odone);
    return odone;
}
