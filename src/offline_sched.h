/*
 * offline_sched.h - whole-signal passes of many signals over batches that step several frames
 * of several slots at once (a device's offline batches; tests/test_gpu_plan.c's emulated ones).
 *
 * Each signal gets a slot for its whole length and advances `frames` frames per step, its last
 * step zero-padded (every op is causal: the padding changes no output that is kept); when it
 * ends, its slot is reset and takes the next signal. Slots are spread over `n_lanes` batches
 * ("lanes") that are submitted in turn. A lane's next step is staged (its rows written to the
 * lane's input) as soon as its queued step has read its own input, so that the host writes
 * rows while the device runs that lane's step and the others': a lane's step is queued the
 * moment the one before it is collected.
 */
#ifndef MIMI_OFFLINE_SCHED_H
#define MIMI_OFFLINE_SCHED_H

#include <stddef.h>
#include <stdint.h>

// One signal, checked by the caller. Encode: `in` holds n_samples samples; `out` receives
// (per_frame, n_frames) codebook-major codes or latents. Decode: `in` holds (per_frame,
// n_frames) codebook-major codes or latents; `out` receives n_frames * frame_size samples.
// Codes and samples are both 4-byte words: they are moved, never converted.
struct offline_signal {
    const void *in;
    int64_t n_samples;  // encode only
    int64_t n_frames;
    void *out;
};

// The batches a schedule runs on. A step's input is n rows of frames * (frame_size samples or
// per_frame codes), frame-major within a row; its output n rows of the other kind.
struct offline_lanes {
    int n_lanes, slots, frames;  // batches, slots per batch (open, ids 0 .. slots-1), frames per step
    int encode, frame_size, per_frame;
    // Where the lane's next step's input rows go (*rows), once the lane's queued step (if any)
    // no longer reads them. A device lane hands out its pinned stage, so that rows are written
    // once, after the queued step's input copy.
    int (*input)(void *ctx, int lane, void **rows);
    // Queues a step of the n listed slots, whose rows are in the lane's input; `valid` is the
    // number of real frames of row 0 (for a single signal's taps). MIMI_OK or a negative code.
    int (*submit)(void *ctx, int lane, int n, const int *slots, const void *in, int valid);
    // Waits for the lane's queued step; *out: its output rows, valid until the lane's next step.
    int (*collect)(void *ctx, int lane, const void **out);
    // Returns a slot to its just-opened state (between two signals).
    int (*reset)(void *ctx, int lane, int slot);
    // The lane has no signal left and no step queued (NULL: nothing to do): a device lane is
    // freed then, while the other lanes' last steps run.
    void (*retire)(void *ctx, int lane);
    void *ctx;
    // Checks signal i before its first step is staged (NULL: every signal was checked
    // beforehand). Signals are checked in index order, so that the first bad one is the one named.
    int (*check)(void *check_ctx, int signal);
    void *check_ctx;
    // Copies the samples of a row in or out (NULL: memcpy); a device lane splits a long signal's
    // megabytes over the model's host threads.
    void (*copy)(void *ctx, void *dst, const void *src, size_t bytes);
};

// Runs the n signals; returns MIMI_OK, MIMI_ENOMEM or the first failure of a callback (after
// which the lanes may hold a queued step: the caller destroys them).
int mimi_offline_schedule(const struct offline_lanes *d, int n, const struct offline_signal *sig);

#endif
