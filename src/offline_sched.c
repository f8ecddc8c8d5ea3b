/*
 * offline_sched.c - many signals' whole-signal passes over lanes of multi-frame batches
 * (offline_sched.h).
 */
#include "offline_sched.h"

#include <stdlib.h>
#include <string.h>

#include "mimi.h"

#define WORD 4  // bytes of a sample, a code or a latent value

struct lane {
    int *sig;         // (slots) the signal in each slot, -1 when idle
    int64_t *done;    // (slots) the frames of that signal stepped so far
    int *listed;      // (slots) the queued step's slots, in row order; n_listed of them
    int n_listed;
};

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

// Bytes of one input row and one output row: `frames` frames of samples or of per_frame values.
static size_t in_row(const struct offline_lanes *d) {
    return (size_t)WORD * d->frames * (d->encode ? d->frame_size : d->per_frame);
}
static size_t out_row(const struct offline_lanes *d) {
    return (size_t)WORD * d->frames * (d->encode ? d->per_frame : d->frame_size);
}

static void copy(const struct offline_lanes *d, void *dst, const void *src, size_t bytes) {
    if (d->copy) d->copy(d->ctx, dst, src, bytes);
    else memcpy(dst, src, bytes);
}

// Frames f0 .. f0 + frames - 1 of signal s as one input row, zeros past its end.
static void fill_row(const struct offline_lanes *d, const struct offline_signal *s, int64_t f0, unsigned char *row) {
    const unsigned char *in = (const unsigned char *)s->in;
    if (d->encode) {
        const int64_t start = f0 * d->frame_size, want = (int64_t)d->frames * d->frame_size;
        const int64_t take = s->n_samples > start ? min64(s->n_samples - start, want) : 0;
        copy(d, row, in + (size_t)WORD * start, (size_t)WORD * take);
        memset(row + (size_t)WORD * take, 0, (size_t)WORD * (want - take));
        return;
    }
    // codebook-major (per_frame, n_frames) to frame-major (frames, per_frame); code 0 or a zero
    // latent past the end
    memset(row, 0, in_row(d));
    const int64_t valid = min64(d->frames, s->n_frames - f0);
    for (int64_t f = 0; f < valid; f++)
        for (int q = 0; q < d->per_frame; q++)
            memcpy(row + (size_t)WORD * (f * d->per_frame + q), in + (size_t)WORD * (q * s->n_frames + f0 + f), WORD);
}

// The real frames of one output row into signal s, from frame f0.
static void take_row(const struct offline_lanes *d, const struct offline_signal *s, int64_t f0,
                     const unsigned char *row) {
    unsigned char *out = (unsigned char *)s->out;
    const int64_t valid = min64(d->frames, s->n_frames - f0);
    if (!d->encode) {
        copy(d, out + (size_t)WORD * f0 * d->frame_size, row, (size_t)WORD * valid * d->frame_size);
        return;
    }
    for (int64_t f = 0; f < valid; f++)
        for (int q = 0; q < d->per_frame; q++)
            memcpy(out + (size_t)WORD * (q * s->n_frames + f0 + f), row + (size_t)WORD * (f * d->per_frame + q), WORD);
}

// Collects the lane's queued step, hands each row to its signal, and moves a slot whose signal
// ended to the next signal (*next), resetting it.
static int collect(const struct offline_lanes *d, int l, struct lane *L, const struct offline_signal *sig, int n,
                   int *next) {
    const void *rows = NULL;
    int rc = d->collect(d->ctx, l, &rows);
    const unsigned char *out = (const unsigned char *)rows;
    for (int k = 0; rc == MIMI_OK && k < L->n_listed; k++) {
        const int s = L->listed[k];
        take_row(d, &sig[L->sig[s]], L->done[s], out + out_row(d) * k);
        L->done[s] += d->frames;
        if (L->done[s] < sig[L->sig[s]].n_frames) continue;
        L->sig[s] = *next < n ? (*next)++ : -1;
        L->done[s] = 0;
        if (L->sig[s] >= 0) rc = d->reset(d->ctx, l, s);
    }
    L->n_listed = 0;
    return rc;
}

// Queues a step of every slot of the lane that has a signal; *queued is set when there was one.
static int submit(const struct offline_lanes *d, int l, struct lane *L, const struct offline_signal *sig,
                  int *queued) {
    int valid = 0, any = 0;
    for (int s = 0; s < d->slots; s++) any |= L->sig[s] >= 0;
    if (!any) return MIMI_OK;
    void *rows = NULL;
    int rc = d->input(d->ctx, l, &rows);
    if (rc) return rc;
    unsigned char *in = (unsigned char *)rows;
    for (int s = 0; s < d->slots; s++) {
        if (L->sig[s] < 0) continue;
        const struct offline_signal *x = &sig[L->sig[s]];
        rc = L->done[s] == 0 && d->check ? d->check(d->check_ctx, L->sig[s]) : MIMI_OK;
        if (rc) {
            L->n_listed = 0;
            return rc;
        }
        if (!L->n_listed) valid = (int)min64(d->frames, x->n_frames - L->done[s]);
        fill_row(d, x, L->done[s], in + in_row(d) * L->n_listed);
        L->listed[L->n_listed++] = s;
    }
    *queued = 1;
    rc = d->submit(d->ctx, l, L->n_listed, L->listed, in, valid);
    if (rc) L->n_listed = 0;
    return rc;
}

int mimi_offline_schedule(const struct offline_lanes *d, int n, const struct offline_signal *sig) {
    struct lane *lanes = (struct lane *)calloc((size_t)d->n_lanes, sizeof *lanes);
    int rc = lanes ? MIMI_OK : MIMI_ENOMEM, next = 0;
    for (int l = 0; rc == MIMI_OK && l < d->n_lanes; l++) {
        struct lane *L = &lanes[l];
        L->sig = (int *)malloc(sizeof(int) * 2 * (size_t)d->slots);
        L->done = (int64_t *)calloc((size_t)d->slots, sizeof(int64_t));
        if (!L->sig || !L->done) rc = MIMI_ENOMEM;
        else L->listed = L->sig + d->slots;
        for (int s = 0; rc == MIMI_OK && s < d->slots; s++) L->sig[s] = next < n ? next++ : -1;
    }
    // each lane in turn: collect its step, queue its next; the others run meanwhile
    for (int queued = 1; rc == MIMI_OK && queued;) {
        queued = 0;
        for (int l = 0; rc == MIMI_OK && l < d->n_lanes; l++) {
            const int had_step = lanes[l].n_listed;
            if (had_step) rc = collect(d, l, &lanes[l], sig, n, &next);
            if (rc == MIMI_OK) rc = submit(d, l, &lanes[l], sig, &queued);
            if (rc == MIMI_OK && had_step && !lanes[l].n_listed && d->retire) d->retire(d->ctx, l);
        }
    }
    for (int l = 0; lanes && l < d->n_lanes; l++) {
        free(lanes[l].sig);
        free(lanes[l].done);
    }
    free(lanes);
    return rc;
}
