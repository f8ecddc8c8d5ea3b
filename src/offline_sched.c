/*
 * offline_sched.c - many signals' whole-signal passes over lanes of multi-frame batches
 * (offline_sched.h).
 */
#include "offline_sched.h"

#include <stdlib.h>
#include <string.h>

#include "mimi.h"

#define WORD 4  // bytes of a sample, a code or a latent value

// A lane's slots as of its next step, the step staged in its input (rows written, not yet
// queued) and the step queued on the device: per row its slot, signal and first frame.
struct rows {
    int *slot, *sig;
    int64_t *f0;
    int n;
};
struct lane {
    int *sig;         // (slots) the signal in each slot at the next step to stage, -1 when idle
    int64_t *done;    // (slots) that signal's frames staged so far
    int *reset;       // (slots) 1: the slot takes a new signal after the staged step (reset then)
    struct rows staged, queued;
    int staged_valid;  // real frames of the staged step's row 0
    void *in;          // the lane's input rows
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

// Collects the lane's queued step and hands each row to its signal.
static int collect(const struct offline_lanes *d, int l, struct lane *L, const struct offline_signal *sig) {
    const void *rows = NULL;
    int rc = d->collect(d->ctx, l, &rows);
    const unsigned char *out = (const unsigned char *)rows;
    for (int k = 0; rc == MIMI_OK && k < L->queued.n; k++)
        take_row(d, &sig[L->queued.sig[k]], L->queued.f0[k], out + out_row(d) * k);
    L->queued.n = 0;
    return rc;
}

// Checks the signals up to `upto` not checked yet (*checked of them are), in index order: each
// before its first step, and the first bad one is the one named.
static int check_upto(const struct offline_lanes *d, int upto, int *checked) {
    int rc = MIMI_OK;
    for (; rc == MIMI_OK && *checked <= upto; (*checked)++)
        if (d->check) rc = d->check(d->check_ctx, *checked);
    return rc;
}

// Writes the lane's next step into its input (once its queued step, if any, has read its own)
// and advances its slots past it: a slot whose signal ends there takes the next signal (*next),
// to be reset once the staged step is queued. Nothing is staged when no slot has a signal.
static int stage(const struct offline_lanes *d, int l, struct lane *L, const struct offline_signal *sig, int n,
                 int *next, int *checked) {
    int any = 0;
    for (int s = 0; s < d->slots; s++) any |= L->sig[s] >= 0;
    L->staged.n = 0;
    if (!any) return MIMI_OK;
    int rc = d->input(d->ctx, l, &L->in);
    unsigned char *in = (unsigned char *)L->in;
    for (int s = 0; rc == MIMI_OK && s < d->slots; s++) {
        const int i = L->sig[s];
        if (i < 0) continue;
        rc = check_upto(d, i, checked);
        if (rc) break;
        const int k = L->staged.n++;
        if (!k) L->staged_valid = (int)min64(d->frames, sig[i].n_frames - L->done[s]);
        fill_row(d, &sig[i], L->done[s], in + in_row(d) * k);
        L->staged.slot[k] = s, L->staged.sig[k] = i, L->staged.f0[k] = L->done[s];
        L->done[s] += d->frames;
        if (L->done[s] < sig[i].n_frames) continue;
        L->sig[s] = *next < n ? (*next)++ : -1;
        L->done[s] = 0;
        L->reset[s] = L->sig[s] >= 0;
    }
    if (rc) L->staged.n = 0;
    return rc;
}

// Queues the lane's staged step, then the resets of the slots that take a new signal after it.
static int launch(const struct offline_lanes *d, int l, struct lane *L) {
    int rc = d->submit(d->ctx, l, L->staged.n, L->staged.slot, L->in, L->staged_valid);
    struct rows t = L->queued;
    L->queued = L->staged, L->staged = t;
    L->staged.n = 0;
    if (rc) L->queued.n = 0;
    for (int s = 0; s < d->slots; s++) {
        if (rc == MIMI_OK && L->reset[s]) rc = d->reset(d->ctx, l, s);
        L->reset[s] = 0;
    }
    return rc;
}

static int rows_alloc(struct rows *r, int slots) {
    r->slot = (int *)malloc(sizeof(int) * 2 * (size_t)slots);
    r->f0 = (int64_t *)malloc(sizeof(int64_t) * (size_t)slots);
    r->sig = r->slot ? r->slot + slots : NULL;
    r->n = 0;
    return r->slot && r->f0;
}

static void lane_free(struct lane *L) {
    free(L->sig);
    free(L->done);
    free(L->staged.slot), free(L->staged.f0);
    free(L->queued.slot), free(L->queued.f0);
}

int mimi_offline_schedule(const struct offline_lanes *d, int n, const struct offline_signal *sig) {
    struct lane *lanes = (struct lane *)calloc((size_t)d->n_lanes, sizeof *lanes);
    int rc = lanes ? MIMI_OK : MIMI_ENOMEM, next = 0, checked = 0;
    for (int l = 0; rc == MIMI_OK && l < d->n_lanes; l++) {
        struct lane *L = &lanes[l];
        L->sig = (int *)malloc(sizeof(int) * 2 * (size_t)d->slots);
        L->done = (int64_t *)calloc((size_t)d->slots, sizeof(int64_t));
        L->reset = L->sig ? L->sig + d->slots : NULL;
        if (!L->sig || !L->done || !rows_alloc(&L->staged, d->slots) || !rows_alloc(&L->queued, d->slots))
            rc = MIMI_ENOMEM;
        for (int s = 0; rc == MIMI_OK && s < d->slots; s++) L->sig[s] = next < n ? next++ : -1, L->reset[s] = 0;
    }
    // each lane in turn: collect its queued step, queue the staged one, stage the next while the
    // device runs it (and the other lanes' steps); a lane stages its first step when it is first
    // visited, so that the device starts on lane 0's while the host stages lane 1's
    for (int busy = 1; rc == MIMI_OK && busy;) {
        busy = 0;
        for (int l = 0; rc == MIMI_OK && l < d->n_lanes; l++) {
            struct lane *L = &lanes[l];
            const int had_step = L->queued.n > 0;
            if (had_step) rc = collect(d, l, L, sig);
            if (rc == MIMI_OK && !L->staged.n) rc = stage(d, l, L, sig, n, &next, &checked);
            if (rc == MIMI_OK && L->staged.n) {
                rc = launch(d, l, L);
                if (rc == MIMI_OK) rc = stage(d, l, L, sig, n, &next, &checked);
                busy = 1;
            }
            if (rc == MIMI_OK && had_step && !L->queued.n && !L->staged.n && d->retire) d->retire(d->ctx, l);
        }
    }
    for (int l = 0; lanes && l < d->n_lanes; l++) lane_free(&lanes[l]);
    free(lanes);
    return rc;
}
