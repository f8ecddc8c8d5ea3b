/*
 * rvq.cu - the split residual vector quantizer's per-row work (spec 4; reference
 * src/nn/quantizer.c): the nearest codebook entry from the distance products (computed by
 * cuBLAS, matmul.cu) with the residual update, the decode lookup and sum, and the copy of codes
 * that another component left in device memory.
 */
#include "common.cuh"

#define RVQ_THREADS 256

// ---- nearest entry ----

// Whether (v, j) beats (bv, bj): smaller distance, ties to the lower index (the reference's
// first minimum).
static __device__ __forceinline__ bool better(float v, int j, float bv, int bj) {
    return v < bv || (v == bv && j < bj);
}

// One block per row: argmin over bins of norms[j] - 2 scores[j], then residual -= book[code].
static __global__ void argmin_kernel(const struct op_argmin a) {
    __shared__ float best_v[RVQ_THREADS];
    __shared__ int best_j[RVQ_THREADS];
    const int r = blockIdx.x;
    const float *sc = a.scores + (size_t)r * a.bins;
    float bv = INFINITY;
    int bj = a.bins;
    for (int j = threadIdx.x; j < a.bins; j += blockDim.x) {
        float v = a.norms[j] - 2.0f * sc[j];
        if (better(v, j, bv, bj)) bv = v, bj = j;
    }
    best_v[threadIdx.x] = bv;
    best_j[threadIdx.x] = bj;
    __syncthreads();
    for (int half = blockDim.x / 2; half > 0; half /= 2) {
        if (threadIdx.x < half &&
            better(best_v[threadIdx.x + half], best_j[threadIdx.x + half], best_v[threadIdx.x], best_j[threadIdx.x])) {
            best_v[threadIdx.x] = best_v[threadIdx.x + half];
            best_j[threadIdx.x] = best_j[threadIdx.x + half];
        }
        __syncthreads();
    }
    int code = best_j[0] < a.bins ? best_j[0] : 0;  // all-NaN distances fall back to entry 0
    if (threadIdx.x == 0) a.codes[(size_t)r * a.code_stride] = code;
    if (!a.residual) return;
    float *res = a.residual + (size_t)r * a.dim;
    const float *e = a.book + (size_t)code * a.dim;
    for (int i = threadIdx.x; i < a.dim; i += blockDim.x) res[i] = __fsub_rn(res[i], e[i]);
}

static int launch_argmin(const struct op_argmin *a, struct gpu_exec *ex) {
    argmin_kernel<<<a->R, RVQ_THREADS, 0, STREAM(ex)>>>(*a);
    return launch_status(ex, "argmin");
}

extern "C" int mimi_cuda_argmin(const struct op_argmin *a, struct gpu_exec *ex) { return launch_argmin(a, ex); }

// ---- decode lookup ----

// One block per row. A row with a code outside [0, bins) becomes padding: it reads nothing,
// advances no state, and raises the step's error flag.
static __global__ void gather_kernel(const struct op_gather a) {
    const int r = blockIdx.x;
    const int32_t *c = a.codes + (size_t)r * a.n_cb;
    bool bad = false;
    for (int q = 0; q < a.n_cb; q++) bad |= c[q] < 0 || c[q] >= a.bins;
    if (bad && threadIdx.x == 0) {
        a.row_slot[r] = -1;
        *a.error = 1;
    }
    for (int i = threadIdx.x; i < a.dim; i += blockDim.x) {
        float e = 0.0f, s = 0.0f;
        if (!bad) {
            e = a.books[(size_t)c[0] * a.dim + i];
            for (int q = 1; q < a.n_cb; q++) s = __fadd_rn(s, a.books[((size_t)q * a.bins + c[q]) * a.dim + i]);
        }
        a.e0[(size_t)r * a.dim + i] = e;
        a.sum[(size_t)r * a.dim + i] = s;
    }
}

static int launch_gather(const struct op_gather *a, struct gpu_exec *ex) {
    gather_kernel<<<a->R, RVQ_THREADS, 0, STREAM(ex)>>>(*a);
    return launch_status(ex, "gather");
}

extern "C" int mimi_cuda_gather(const struct op_gather *a, struct gpu_exec *ex) { return launch_gather(a, ex); }

// ---- codes from device memory ----

static __global__ void copy_codes_kernel(int32_t *dst, const int32_t *src, int64_t offset, int64_t stride,
                                         int n, int R, int n_cb) {
    FOR_EACH(idx, (size_t)R * n_cb) {
        int r = (int)(idx / n_cb), q = (int)(idx - (size_t)r * n_cb);
        dst[idx] = r < n ? src[offset + (int64_t)r * stride + q] : 0;
    }
}

extern "C" int mimi_cuda_copy_codes(int32_t *dst, const int32_t *src, int64_t offset, int64_t stride, int n,
                                    int R, int n_cb, struct gpu_exec *ex) {
    copy_codes_kernel<<<grid_for((size_t)R * n_cb, 128), 128, 0, STREAM(ex)>>>(dst, src, offset, stride, n, R, n_cb);
    return launch_status(ex, "copy_codes");
}
