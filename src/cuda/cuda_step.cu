/*
 * cuda_step.cu - the steps of a device batch: one host-to-device copy of the slot list and
 * inputs, one launch of the bucket's graph, one device-to-host copy of the outputs; split into
 * submit and collect for asynchronous use, with codes read from device memory as an option, the
 * taps, and a profile that launches the plan op by op between timing events.
 */
#include <stdlib.h>
#include <string.h>

#include "cuda/cuda_batch.cuh"

// ---- steps ----

static int bucket_of(const struct mimi_cuda_batch *gb, int n) {
    int i = 0;
    while (i + 1 < gb->n_buckets && gb->plans[i].R < n) i++;
    return i;
}

// Checks the batch can take a step and fills the pinned stage for bucket i: row_slot (R) and
// the error flag, then (when `input` is given) n input rows at the batch's input rows
// (mimi_cuda_input_rows: after the row list of `capacity` rows, so that they do not move with
// the bucket); PCM or latents with a NaN or infinity are refused here (MIMI_EINVAL), before
// anything is queued. Input already in the input rows is taken as it is (checked by the caller).
// With `pieces` set, PCM or latents to copy are left for queue_input, which checks and copies
// them piece by piece while the copy engine sends the ones before (*pieces = 1 then).
static int stage(struct mimi_batch *b, int n, const int *slots, const void *input, int *bucket, int *pieces) {
    struct mimi_cuda_batch *gb = b->gpu;
    if (gb->poisoned) return MIMI_ESTATE;
    if (gb->pending) {
        mimi_batch_error(b, "a submitted step was not collected");
        return MIMI_ESTATE;
    }
    const int i = bucket_of(gb, n), R = gb->plans[i].R;
    int32_t *row_slot = (int32_t *)gb->host;
    for (int r = 0; r < R; r++) row_slot[r] = r < n ? slots[r] : -1;
    row_slot[R] = 0;
    if (input) {
        // PCM and latents are checked for NaN and infinity as they are copied (one pass over a
        // step's megabytes); codes were checked by the caller
        const size_t row = sizeof(float) * gb->L.in_per_row;
        unsigned char *in = (unsigned char *)mimi_cuda_input_rows(b);
        const int encode = gb->L.direction == MIMI_DIRECTION_ENCODE, floats = encode || !b->model->quantizer.n_q;
        const size_t count = (size_t)gb->L.in_per_row * n;
        if (input == in) {
            // written there by the caller, who checked it
        } else if (!floats) {
            memcpy(in, input, row * n);
        } else if (pieces) {
            *pieces = 1;
        } else {
            int rc = mimi_batch_copy_finite(b, (float *)in, (const float *)input, count, 0, encode ? "sample" : "latent");
            if (rc) return rc;
        }
    }
    *bucket = i;
    CK(cudaSetDevice(gb->device), "set device");
    return MIMI_OK;
}

// Counts a launch of one of the batch's plans, first zeroing the versioned words where the count
// reached GPU_VERSION_PERIOD (cuda_batch.cuh).
static int count_launch(struct mimi_batch *b) {
    return ++b->gpu->launches < GPU_VERSION_PERIOD ? MIMI_OK : mimi_cuda_clear_versions(b);
}

// Large inputs and outputs move in up to GPU_COPY_PIECES pieces of at least GPU_COPY_PIECE_MIN
// bytes, so that the host copies one piece while the device's copy engine moves another (at
// 10,240 streams a step's PCM is 79 MB each way).
static int copy_pieces(size_t bytes) {
    const size_t k = bytes / GPU_COPY_PIECE_MIN;
    return k < 2 ? 1 : k < GPU_COPY_PIECES ? (int)k : GPU_COPY_PIECES;
}

// The first of n rows in piece k of `pieces` (piece k: rows piece_row(k) .. piece_row(k + 1) - 1).
static size_t piece_row(int n, int k, int pieces) { return (size_t)n * k / pieces; }

// Queues the output copy behind the step, in pieces, each (when there are several) followed by
// its event for mimi_cuda_collect; then the error flag's copy when the step's codes came from
// device memory (only the gather raises it, on codes nobody checked: codes from the host were
// checked there, so the flag of any other step is zero). A small step is one copy and `done`.
static int queue_output(struct mimi_batch *b, int i, int n, int device_codes) {
    struct mimi_cuda_batch *gb = b->gpu;
    const struct gpu_plan *p = &gb->plans[i];
    unsigned char *out = gb->host + gb->host_stage_bytes;
    const size_t row = sizeof(float) * gb->L.out_per_row;
    const int pieces = copy_pieces(row * n);
    for (int k = 0; k < pieces; k++) {
        const size_t r0 = piece_row(n, k, pieces), r1 = piece_row(n, k + 1, pieces);
        CK(cudaMemcpyAsync(out + row * r0, (const char *)p->output + row * r0, row * (r1 - r0), cudaMemcpyDeviceToHost,
                           gb->stream), "output copy");
        if (pieces > 1) CK(cudaEventRecord(gb->piece[k], gb->stream), "event");
    }
    gb->pending_pieces = pieces;
    if (device_codes)
        CK(cudaMemcpyAsync(out + gb->host_out_bytes, p->stage + p->R, sizeof(int32_t), cudaMemcpyDeviceToHost,
                           gb->stream), "flag copy");
    else
        *(int32_t *)(out + gb->host_out_bytes) = 0;
    CK(cudaEventRecord(gb->done, gb->stream), "event");
    gb->pending = 1;
    gb->pending_n = n;
    gb->pending_bucket = i;
    return MIMI_OK;
}

// Queues the copy of the staged step to the device: the row list and flag, the n input rows,
// zeros for the bucket's padding rows; the list and flag go with the first piece of rows (the
// stage is laid out alike on both sides), so that a small step's inputs are one copy. With
// `input` (stage's *pieces) the rows are first checked and copied into the stage piece by piece,
// each piece's copy to the device queued before the host takes the next; a NaN or infinity in a
// piece returns MIMI_EINVAL once the pieces queued before it have left the stage (they only wrote
// the input rows' scratch: nothing runs on them).
static int queue_input(struct mimi_batch *b, const struct gpu_plan *p, int n, const float *input) {
    struct mimi_cuda_batch *gb = b->gpu;
    const size_t row = sizeof(float) * gb->L.in_per_row, head = sizeof(float) * gpu_stage_input_offset(gb->L.capacity);
    unsigned char *in = (unsigned char *)mimi_cuda_input_rows(b);
    const int pieces = input ? copy_pieces(row * n) : 1;
    const char *what = gb->L.direction == MIMI_DIRECTION_ENCODE ? "sample" : "latent";
    for (int k = 0; k < pieces; k++) {
        const size_t r0 = piece_row(n, k, pieces), r1 = piece_row(n, k + 1, pieces), per = gb->L.in_per_row;
        if (input) {
            int rc = mimi_batch_copy_finite(b, (float *)(in + row * r0), input + per * r0, per * (r1 - r0), per * r0,
                                            what);
            if (rc) {
                CK(cudaStreamSynchronize(gb->stream), "input copy");
                return rc;
            }
        }
        const size_t from = k == 0 ? 0 : head + row * r0;  // piece 0 from the row list on
        CK(cudaMemcpyAsync((char *)p->stage + from, gb->host + from, head + row * r1 - from, cudaMemcpyHostToDevice,
                           gb->stream), "input copy");
    }
    if (n < p->R) CK(cudaMemsetAsync((char *)p->input + row * n, 0, row * (p->R - n), gb->stream), "padding rows");
    return MIMI_OK;
}

extern "C" int mimi_cuda_submit(struct mimi_batch *b, int n, const int *slots, const void *input) {
    struct mimi_cuda_batch *gb = b->gpu;
    int i, pieces = 0, rc = stage(b, n, slots, input, &i, &pieces);
    if (rc) return rc;
    const struct gpu_plan *p = &gb->plans[i];
    rc = queue_input(b, p, n, pieces ? (const float *)input : NULL);
    if (rc) return rc;
    CK(cudaEventRecord(gb->staged, gb->stream), "event");
    if ((rc = count_launch(b))) return rc;
    CK(cudaGraphLaunch(gb->graphs[i], gb->stream), "graph launch");
    return queue_output(b, i, n, 0);
}

extern "C" int mimi_cuda_submit_device_codes(struct mimi_batch *b, int n, const int *slots, const int32_t *codes,
                                             int64_t offset, int64_t stride, void *wait_stream) {
    struct mimi_cuda_batch *gb = b->gpu;
    int i, rc = stage(b, n, slots, NULL, &i, NULL);
    if (rc) return rc;
    const struct gpu_plan *p = &gb->plans[i];
    // the slot list and the cleared error flag from the host, the codes from device memory
    CK(cudaMemcpyAsync(p->stage, gb->host, sizeof(int32_t) * (p->R + 1), cudaMemcpyHostToDevice, gb->stream),
       "slot list copy");
    if (wait_stream) {
        CK(cudaEventRecord(gb->ready, (cudaStream_t)wait_stream), "event on the caller's stream");
        CK(cudaStreamWaitEvent(gb->stream, gb->ready, 0), "wait on the caller's stream");
    }
    rc = mimi_cuda_copy_codes((int32_t *)p->input, codes, offset, stride, n, p->R, gb->L.in_per_row, &gb->ex);
    if (rc) return op_failed(b, rc);
    if ((rc = count_launch(b))) return rc;
    CK(cudaGraphLaunch(gb->graphs[i], gb->stream), "graph launch");
    return queue_output(b, i, n, 1);
}

// Hands each tap its (channels, n * steps) slice of the step that just completed (of a whole-
// signal batch's one row: the columns of its first tap_frames frames).
static int run_taps(struct mimi_batch *b, int i, int n) {
    struct mimi_cuda_batch *gb = b->gpu;
    const struct gpu_plan *p = &gb->plans[i];
    for (int t = 0; t < GPU_N_TAPS; t++) {
        const size_t cols = (size_t)n * p->tap_steps[t] / gb->L.frames * gb->tap_frames;
        const size_t pitch = (size_t)p->R * p->tap_steps[t];
        CK(cudaMemcpy2D(gb->tap_buf, sizeof(float) * cols, p->taps[t], sizeof(float) * pitch, sizeof(float) * cols,
                        p->tap_channels[t], cudaMemcpyDeviceToHost), "tap copy");
        b->tap(b->tap_user, p->tap_names[t], gb->tap_buf, p->tap_channels[t], (int)cols);
    }
    return MIMI_OK;
}

extern "C" int mimi_cuda_collect(struct mimi_batch *b, void *output) {
    struct mimi_cuda_batch *gb = b->gpu;
    if (!gb->pending) {
        mimi_batch_error(b, "nothing was submitted");
        return MIMI_ESTATE;
    }
    gb->pending = 0;
    CK(cudaSetDevice(gb->device), "set device");
    const unsigned char *out = gb->host + gb->host_stage_bytes;
    if (output && output != out) {  // each piece as soon as it has arrived
        const size_t row = sizeof(float) * gb->L.out_per_row;
        const int n = gb->pending_n, pieces = gb->pending_pieces;
        for (int k = 0; k < pieces; k++) {
            const size_t r0 = piece_row(n, k, pieces), r1 = piece_row(n, k + 1, pieces);
            CK(cudaEventSynchronize(pieces > 1 ? gb->piece[k] : gb->done), "step");
            mimi_host_copy(b->model, (char *)output + row * r0, out + row * r0, row * (r1 - r0));
        }
    }
    CK(cudaEventSynchronize(gb->done), "step");
    if (b->tap) {
        int rc = run_taps(b, gb->pending_bucket, gb->pending_n);
        if (rc) return rc;
    }
    if (*(const int32_t *)(out + gb->host_out_bytes)) {
        mimi_batch_error(b, "a code in device memory is outside [0, %d): its slot did not advance",
                         b->model->quantizer.bins);
        return MIMI_EINVAL;
    }
    return MIMI_OK;
}

extern "C" void *mimi_cuda_input_rows(struct mimi_batch *b) {
    return b->gpu->host + sizeof(float) * gpu_stage_input_offset(b->gpu->L.capacity);
}

extern "C" int mimi_cuda_input_free(struct mimi_batch *b) {
    struct mimi_cuda_batch *gb = b->gpu;
    if (!gb->pending) return MIMI_OK;
    CK(cudaSetDevice(gb->device), "set device");
    CK(cudaEventSynchronize(gb->staged), "input copy");
    return MIMI_OK;
}

extern "C" const void *mimi_cuda_output_rows(const struct mimi_batch *b) {
    return b->gpu->host + b->gpu->host_stage_bytes;
}

extern "C" int mimi_cuda_step(struct mimi_batch *b, int n, const int *slots, const void *input, void *output) {
    int rc = mimi_cuda_submit(b, n, slots, input);
    return rc ? rc : mimi_cuda_collect(b, output);
}

extern "C" int mimi_cuda_pending(const struct mimi_batch *b) { return b->gpu && b->gpu->pending; }

extern "C" void *mimi_cuda_stream(const struct mimi_batch *b) { return b->gpu ? (void *)b->gpu->stream : NULL; }

// ---- profile ----

// The step of mimi_cuda_submit + mimi_cuda_collect, but each op launched on its own between
// events, so that its time can be attributed.
extern "C" int mimi_cuda_profile(struct mimi_batch *b, int n, const int *slots, const void *input, void *output,
                                 mimi_profile_fn fn, void *user) {
    struct mimi_cuda_batch *gb = b->gpu;
    int i, rc = stage(b, n, slots, input, &i, NULL);
    if (rc) return rc;
    const struct gpu_plan *p = &gb->plans[i];
    cudaEvent_t *ev = (cudaEvent_t *)calloc((size_t)p->n_ops + 1, sizeof *ev);
    if (!ev) return MIMI_ENOMEM;
    int made = 0;
    cudaError_t e = cudaSuccess;
    while (made <= p->n_ops && (e = cudaEventCreate(&ev[made])) == cudaSuccess) made++;
    if (e == cudaSuccess) rc = queue_input(b, p, n, NULL);  // (its failure is recorded)
    if (e == cudaSuccess && rc == MIMI_OK) rc = count_launch(b);
    if (e == cudaSuccess) e = cudaEventRecord(ev[0], gb->stream);
    for (int k = 0; e == cudaSuccess && rc == MIMI_OK && k < p->n_ops; k++) {
        rc = mimi_cuda_run_op(&p->ops[k], &gb->ex);
        if (rc == MIMI_OK) e = cudaEventRecord(ev[k + 1], gb->stream);
    }
    if (e == cudaSuccess && rc == MIMI_OK) e = cudaStreamSynchronize(gb->stream);
    for (int k = 0; e == cudaSuccess && rc == MIMI_OK && k < p->n_ops; k++) {
        float ms = 0.0f;
        e = cudaEventElapsedTime(&ms, ev[k], ev[k + 1]);
        if (e == cudaSuccess) fn(user, p->ops[k].name, p->ops[k].stage, 1000.0 * ms);
    }
    for (int k = 0; k < made; k++) cudaEventDestroy(ev[k]);
    free(ev);
    if (rc) return op_failed(b, rc);
    if (e != cudaSuccess) return fail(b, e, "profile");
    rc = queue_output(b, i, n, 0);
    return rc ? rc : mimi_cuda_collect(b, output);
}
