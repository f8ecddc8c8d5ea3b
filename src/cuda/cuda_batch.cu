/*
 * cuda_batch.cu - a batch on the device: its slots' streaming state and scratch in device
 * memory, and one plan per row bucket captured once as a CUDA graph (design.md, "The GPU
 * backend: static per-frame plans"); slot resets. The steps that replay the graphs are in
 * cuda_step.cu.
 *
 * A device failure poisons the batch (every later call gives MIMI_ESTATE); other batches and
 * the model stay usable where the device allows.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/common.cuh"
#include "cuda/cuda_batch.cuh"
#include "cuda/grid.cuh"

// ---- plans ----

int mimi_cuda_run_op(const struct gpu_op *op, struct gpu_exec *ex) {
    switch (op->kind) {
    case GOP_IM2COL: return mimi_cuda_im2col(&op->u.im2col, ex);
    case GOP_CARRY: return mimi_cuda_carry(&op->u.im2col, ex);
    case GOP_CONV: return mimi_cuda_conv(&op->u.conv, ex);
    case GOP_RESBLOCK: return mimi_cuda_resblock(&op->u.resblock, ex);
    case GOP_RESBLOCK_MMA: return mimi_cuda_resblock_mma(&op->u.resblock_mma, ex);
    case GOP_CONV_MMA: return mimi_cuda_conv_mma(&op->u.conv_mma, ex);
    case GOP_CONVTR_MMA: return mimi_cuda_convtr_mma(&op->u.convtr_mma, ex);
    case GOP_CONVTR_MMA_TAIL: return mimi_cuda_convtr_mma_tail(&op->u.convtr_mma, ex);
    case GOP_GEMM: return mimi_cuda_gemm(&op->u.gemm, ex);
    case GOP_POINTWISE: return mimi_cuda_pointwise(&op->u.pointwise, ex);
    case GOP_TRANSPOSE: return mimi_cuda_transpose(&op->u.transpose, ex);
    case GOP_FINISH: return mimi_cuda_finish(&op->u.finish, ex);
    case GOP_CONVTR_OUT: return mimi_cuda_convtr_out(&op->u.convtr, ex);
    case GOP_CONVTR_TAIL: return mimi_cuda_convtr_tail(&op->u.convtr, ex);
    case GOP_CONVTR_DIRECT: return mimi_cuda_convtr_direct(&op->u.convtr_direct, ex);
    case GOP_CONVTR_COPY: return mimi_cuda_convtr_copy(&op->u.convtr_direct, ex);
    case GOP_NORM: return mimi_cuda_norm(&op->u.norm, ex);
    case GOP_POSITIONS: return mimi_cuda_positions(&op->u.attention, ex);
    case GOP_ATTENTION: return mimi_cuda_attention(&op->u.attention, ex);
    case GOP_ARGMIN: return mimi_cuda_argmin(&op->u.argmin, ex);
    case GOP_GATHER: return mimi_cuda_gather(&op->u.gather, ex);
    case GOP_TRANSFORMER: return mimi_cuda_transformer(&op->u.transformer, ex);
    case GOP_RVQ_CHAIN: return mimi_cuda_rvq_chain(&op->u.rvq_chain, ex);
    case GOP_TAILS: return mimi_cuda_tails(&op->u.tails, ex);
    }
    return MIMI_EINVAL;
}

static int run_plan(const struct gpu_plan *p, struct gpu_exec *ex) {
    for (int i = 0; i < p->n_ops; i++) {
        int rc = mimi_cuda_run_op(&p->ops[i], ex);
        if (rc) return rc;
    }
    return MIMI_OK;
}

// Captures bucket i's plan as a graph on the batch's stream.
static int capture(struct mimi_batch *b, int i) {
    struct mimi_cuda_batch *gb = b->gpu;
    cudaGraph_t graph = NULL;
    CK(cudaStreamBeginCapture(gb->stream, cudaStreamCaptureModeThreadLocal), "begin capture");
    int rc = run_plan(&gb->plans[i], &gb->ex);
    cudaError_t e = cudaStreamEndCapture(gb->stream, &graph);
    if (rc == MIMI_OK && e != cudaSuccess) rc = fail(b, e, "end capture");
    if (rc == MIMI_OK) {
        e = cudaGraphInstantiate(&gb->graphs[i], graph, 0);
        // the upload is otherwise part of the first step (about 1 ms for a whole-signal lane)
        if (e == cudaSuccess) e = cudaGraphUpload(gb->graphs[i], gb->stream);
        if (e != cudaSuccess) rc = fail(b, e, "graph instantiate");
    }
    if (graph) cudaGraphDestroy(graph);
    return rc;
}

// ---- lifetime ----

static int setup_device(struct mimi_batch *b, int precision) {
    struct mimi_cuda_batch *gb = b->gpu;
    const struct gpu_layout *L = &gb->L;
    CK(cudaSetDevice(gb->device), "set device");
    CK(cudaStreamCreateWithFlags(&gb->stream, cudaStreamNonBlocking), "stream");
    CK(cudaEventCreateWithFlags(&gb->done, cudaEventDisableTiming), "event");
    CK(cudaEventCreateWithFlags(&gb->ready, cudaEventDisableTiming), "event");
    CK(cudaEventCreateWithFlags(&gb->staged, cudaEventDisableTiming), "event");
    for (int k = 0; k < GPU_COPY_PIECES; k++) CK(cudaEventCreateWithFlags(&gb->piece[k], cudaEventDisableTiming), "event");
    if (cublasCreate(&gb->cublas) != CUBLAS_STATUS_SUCCESS || cublasLtCreate(&gb->cublaslt) != CUBLAS_STATUS_SUCCESS) {
        mimi_batch_error(b, "cuda: cublasCreate failed");
        return MIMI_EDEVICE;
    }
    CK(cudaMalloc(&gb->workspace, WORKSPACE_BYTES), "cuBLAS workspace");
    if (cublasSetStream(gb->cublas, gb->stream) != CUBLAS_STATUS_SUCCESS ||
        cublasSetWorkspace(gb->cublas, gb->workspace, WORKSPACE_BYTES) != CUBLAS_STATUS_SUCCESS ||
        cublasSetMathMode(gb->cublas, precision != MIMI_PRECISION_STRICT ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH) !=
            CUBLAS_STATUS_SUCCESS) {
        mimi_batch_error(b, "cuda: cuBLAS setup failed");
        return MIMI_EDEVICE;
    }
    int major = 0;
    CK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, gb->device), "device attribute");
    gb->ex = (struct gpu_exec){gb->stream, gb->cublas, precision, b->errmsg, sizeof b->errmsg, major >= 9,
                               gb->cublaslt, gb->workspace, WORKSPACE_BYTES};
    // state: zeros, position rings at the empty sentinel; scratch zeroed once (padding rows)
    const size_t cap = (size_t)L->capacity;
    CK(cudaMalloc((void **)&gb->state, sizeof(float) * L->slot_elems * cap), "state");
    CK(cudaMalloc((void **)&gb->scratch, sizeof(float) * L->scratch_elems), "scratch");
    CK(cudaMemsetAsync(gb->state, 0, sizeof(float) * L->slot_elems * cap, gb->stream), "memset");
    CK(cudaMemset2DAsync(gb->state + L->st_positions, sizeof(float) * L->slot_elems, 0xFF,
                         sizeof(int32_t) * L->ring, cap, gb->stream), "memset");
    CK(cudaMemsetAsync(gb->scratch, 0, sizeof(float) * L->scratch_elems, gb->stream), "memset");
    gb->host_stage_bytes = sizeof(float) * (gpu_stage_input_offset(L->capacity) + cap * L->in_per_row);
    gb->host_out_bytes = sizeof(float) * cap * L->out_per_row;
    // page-locked by registering page-aligned memory: 0.5-0.8 ms for the 8 MB of a whole-signal
    // lane, against 3-5 ms for cudaHostAlloc (H200 host)
    const size_t host_bytes = gb->host_stage_bytes + gb->host_out_bytes + 64;
    if (posix_memalign((void **)&gb->host, 4096, host_bytes)) {
        gb->host = NULL;
        mimi_batch_error(b, "cuda: out of host memory (%zu bytes)", host_bytes);
        return MIMI_ENOMEM;
    }
    // defined bytes throughout: a step copies the whole row list of `capacity` entries with its
    // inputs (queue_input), also the entries past its own rows
    memset(gb->host, 0, host_bytes);
    const cudaError_t e = cudaHostRegister(gb->host, host_bytes, cudaHostRegisterDefault);
    if (e != cudaSuccess) {
        free(gb->host);
        gb->host = NULL;
        return fail(b, e, "pinned host memory");
    }
    return MIMI_OK;
}

// The plans and graphs of rows R = 1, 2, 4, ..., capacity, or of capacity rows only (`all` 0).
static int build_plans(struct mimi_batch *b, int all) {
    struct mimi_cuda_batch *gb = b->gpu;
    const struct mimi_cuda_model *cm = b->model->cuda;
    for (int R = all ? 1 : b->capacity;; R *= 2) {
        int i = gb->n_buckets, rows = R < b->capacity ? R : b->capacity;
        int rc = gpu_plan_build(&gb->plans[i], &gb->L, b->model, &cm->w, gb->state, gb->scratch, rows);
        if (rc) return rc;
        gb->n_buckets++;
        // a whole-signal lane's large products on their fastest exact algorithm (gemm_tune.cu)
        for (int k = 0; !all && k < gb->plans[i].n_ops; k++)
            if (gb->plans[i].ops[k].kind == GOP_GEMM) mimi_cuda_gemm_tune(&gb->plans[i].ops[k].u.gemm, &gb->ex, cm->tuning);
        // captured without an eager run first: kernels and cuBLAS's choices load during the
        // capture (an eager run of a whole-signal lane's plan cost a step, 4% of a 64-file pass)
        rc = capture(b, i);
        if (rc) return rc;
        if (rows == b->capacity) break;
    }
    CK(cudaStreamSynchronize(gb->stream), "batch setup");
    return MIMI_OK;
}

static void batch_free(struct mimi_batch *b);

// Batches are made and freed one at a time in the process: capturing a plan while another
// thread made or freed a batch failed inside cuBLAS ("an internal operation failed", then the
// capture invalidated), four threads' whole-signal calls on one H200. Steps run unlocked.
static pthread_mutex_t setup_lock = PTHREAD_MUTEX_INITIALIZER;

// A batch whose step advances each listed slot by `frames` frames; with `all_buckets` 0 it has
// one plan, of capacity rows, that every step pads to.
static struct mimi_batch *create(const struct mimi_model *m, const struct mimi_batch_params *params, int frames,
                                 int all_buckets, int *err) {
    struct mimi_batch *b = (struct mimi_batch *)calloc(1, sizeof *b);
    int rc = b ? MIMI_OK : MIMI_ENOMEM;
    if (b) {
        b->model = m;
        b->direction = params->direction;
        b->capacity = params->capacity;
        b->n_codebooks = m->quantizer.n_q ? params->n_codebooks : 0;
        b->attention = params->attention;
        b->tap = params->tap;
        b->tap_user = params->tap_user;
        b->block = calloc(2 * (size_t)b->capacity, 1);
        b->gpu = (struct mimi_cuda_batch *)calloc(1, sizeof *b->gpu);
        if (!b->block || !b->gpu) rc = MIMI_ENOMEM;
    }
    if (!rc) {
        b->open = (unsigned char *)b->block;
        b->listed = b->open + b->capacity;
        b->gpu->device = m->cuda->device;
        rc = gpu_layout_init(&b->gpu->L, m, b->direction, b->capacity, b->n_codebooks, b->attention, frames);
    }
    if (!rc) b->gpu->tap_frames = frames;
    pthread_mutex_lock(&setup_lock);
    if (!rc) rc = setup_device(b, m->precision);
    const int sms = rc ? 0 : device_sms();
    if (sms > 0) b->gpu->L.direct_blocks = GPU_DIRECT_PER_SM * sms;  // a direct conv's one wave
    const int optin = rc ? 0 : device_attribute(cudaDevAttrMaxSharedMemoryPerBlockOptin);
    if (optin > 0) b->gpu->L.smem_optin = (size_t)optin;
    if (!rc) rc = build_plans(b, all_buckets);
    if (rc && b) batch_free(b);
    pthread_mutex_unlock(&setup_lock);
    if (!rc && b->tap) {
        const struct gpu_layout *L = &b->gpu->L;
        int ch = L->d > L->frame_dim ? L->d : L->frame_dim;
        b->gpu->tap_buf = (float *)malloc(sizeof(float) * ch * (size_t)b->capacity * L->steps);
        if (!b->gpu->tap_buf) rc = MIMI_ENOMEM;
    }
    if (rc) {
        if (b) mimi_log(m, MIMI_LOG_ERROR, "cuda: batch of %d slots: %s", b->capacity, b->errmsg);
        if (b) mimi_cuda_batch_free(b);  // freed already when the setup failed
        if (b) free(b->block);
        free(b);
        if (err) *err = rc;
        return NULL;
    }
    if (err) *err = MIMI_OK;
    return b;
}

// A streaming batch comes before the whole-signal lanes models keep between calls: when it
// cannot be made, those of every model on its device are freed and it is tried once more.
extern "C" struct mimi_batch *mimi_cuda_batch_create(const struct mimi_model *m,
                                                     const struct mimi_batch_params *params, int *err) {
    struct mimi_batch *b = create(m, params, 1, 1, err);
    const int freed = b ? 0 : mimi_cuda_offline_trim_device(m->cuda->device);
    if (freed) {
        b = create(m, params, 1, 1, err);
        if (b) mimi_log(m, MIMI_LOG_INFO, "cuda: batch of %d slots made after freeing %d kept whole-signal batches",
                        params->capacity, freed);
    }
    return b;
}

extern "C" struct mimi_batch *mimi_cuda_offline_create(const struct mimi_model *m,
                                                       const struct mimi_batch_params *params, int frames, int *err) {
    return create(m, params, frames, 0, err);
}

extern "C" void mimi_cuda_batch_free(struct mimi_batch *b) {
    if (!b || !b->gpu) return;
    pthread_mutex_lock(&setup_lock);
    batch_free(b);
    pthread_mutex_unlock(&setup_lock);
}

static void batch_free(struct mimi_batch *b) {
    if (!b || !b->gpu) return;
    struct mimi_cuda_batch *gb = b->gpu;
    cudaSetDevice(gb->device);
    if (gb->stream) cudaStreamSynchronize(gb->stream);
    for (int i = 0; i < gb->n_buckets; i++) {
        if (gb->graphs[i]) cudaGraphExecDestroy(gb->graphs[i]);
        gpu_plan_free(&gb->plans[i]);
    }
    if (gb->cublas) cublasDestroy(gb->cublas);
    if (gb->cublaslt) cublasLtDestroy(gb->cublaslt);
    cudaFree(gb->workspace);
    cudaFree(gb->state);
    cudaFree(gb->scratch);
    if (gb->host) cudaHostUnregister(gb->host);
    free(gb->host);
    if (gb->done) cudaEventDestroy(gb->done);
    if (gb->ready) cudaEventDestroy(gb->ready);
    if (gb->staged) cudaEventDestroy(gb->staged);
    for (int k = 0; k < GPU_COPY_PIECES; k++)
        if (gb->piece[k]) cudaEventDestroy(gb->piece[k]);
    if (gb->stream) cudaStreamDestroy(gb->stream);
    cudaGetLastError();
    free(gb->tap_buf);
    free(gb);
    b->gpu = NULL;
}

extern "C" int mimi_cuda_slot_reset(struct mimi_batch *b, int slot) {
    struct mimi_cuda_batch *gb = b->gpu;
    if (gb->poisoned) return MIMI_ESTATE;
    const struct gpu_layout *L = &gb->L;
    float *s = gb->state + (size_t)slot * L->slot_elems;
    CK(cudaSetDevice(gb->device), "set device");
    CK(cudaMemsetAsync(s, 0, sizeof(float) * L->slot_elems, gb->stream), "slot reset");
    CK(cudaMemsetAsync(s + L->st_positions, 0xFF, sizeof(int32_t) * L->ring, gb->stream), "slot reset");
    return MIMI_OK;
}

// A launch's count stays below the period (the host counts every launch the device does, and
// zeroes both at the period), so no version reaches the word's upper 32 bits.
static_assert((unsigned long long)GPU_VERSION_PERIOD * GRID_MAX_VERSIONS <= 1ull << 32,
              "versions of the launches within a period fit 32 bits");

extern "C" int mimi_cuda_clear_versions(struct mimi_batch *b) {
    struct mimi_cuda_batch *gb = b->gpu;
    if (gb->poisoned) return MIMI_ESTATE;
    const struct gpu_layout *L = &gb->L;
    CK(cudaSetDevice(gb->device), "set device");
    // each kernel's words, then its counters (plan.c lays them out one after the other)
    if (L->sc_tr_barrier)
        CK(cudaMemsetAsync(gb->scratch + L->sc_tr_part, 0,
                           sizeof(float) * (L->sc_tr_barrier + GPU_TR_COUNTERS - L->sc_tr_part), gb->stream),
           "clear versions");
    if (L->sc_rvq_barrier)
        CK(cudaMemsetAsync(gb->scratch + L->sc_rvq_part, 0,
                           sizeof(float) * (L->sc_rvq_barrier + GPU_RVQ_CHAIN_COUNTERS - L->sc_rvq_part), gb->stream),
           "clear versions");
    gb->launches = 0;
    return MIMI_OK;
}

extern "C" uint32_t mimi_cuda_launches(struct mimi_batch *b, const uint32_t *set) {
    if (set) b->gpu->launches = *set;
    return b->gpu->launches;
}
