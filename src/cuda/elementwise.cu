/*
 * elementwise.cu - per-element ops of the plans: bias (with ELU or a residual add), ELU, GELU,
 * rounding to bfloat16, the (a, b) -> (b, a) transpose between the conv layout and the
 * transformer's rows, and the end-of-step counter update. References: src/nn/ops_ref.c,
 * src/nn/seanet.c.
 *
 * Additions and products use explicit round-to-nearest intrinsics where the CPU reference rounds
 * each operation separately, so that no fused multiply-add changes the result.
 */
#include <stdint.h>

#include "common.cuh"

// ---- bias, activations, residual ----

// blockIdx.y walks the channels (and EW_ELU_ONES's rows of ones after them), x the columns.
static __global__ void pointwise_kernel(const struct op_pointwise a, int rows) {
    pdl_begin();
    for (int c = blockIdx.y; c < rows; c += gridDim.y) {
        float *y = a.y + (size_t)c * a.cols, *x = a.x ? a.x + (size_t)c * a.cols : NULL;
        const float b = a.bias && c < a.channels ? a.bias[c] : 0.0f;
        for (size_t j = (size_t)blockIdx.x * blockDim.x + threadIdx.x; j < a.cols; j += (size_t)gridDim.x * blockDim.x) {
            float v = y[j];
            switch (a.mode) {
            case EW_BIAS: y[j] = __fadd_rn(v, b); break;
            case EW_BIAS_ELU: y[j] = elu_f(__fadd_rn(v, b)); break;
            case EW_RESIDUAL: x[j] = __fadd_rn(x[j], __fadd_rn(v, b)); break;
            case EW_ELU: y[j] = elu_f(v); break;
            case EW_ELU_ONES: y[j] = c < a.channels ? elu_f(v) : 1.0f; break;
            case EW_GELU: y[j] = gelu_f(v); break;
            }
        }
    }
}

// EW_ELU, EW_ELU_ONES and EW_GELU over rows of a multiple of 4 columns, 16 bytes per load and
// store (the kernel above is bound by its instructions on the large steps' activations).
static __global__ void act4_kernel(const struct op_pointwise a, int rows) {
    pdl_begin();
    const size_t cols4 = a.cols / 4;
    for (int c = blockIdx.y; c < rows; c += gridDim.y) {
        float4 *y = (float4 *)(a.y + (size_t)c * a.cols);
        const bool ones = c >= a.channels;
        for (size_t j = (size_t)blockIdx.x * blockDim.x + threadIdx.x; j < cols4; j += (size_t)gridDim.x * blockDim.x) {
            if (ones) {
                y[j] = make_float4(1.0f, 1.0f, 1.0f, 1.0f);
                continue;
            }
            const float4 v = y[j];
            y[j] = a.mode == EW_GELU ? make_float4(gelu_f(v.x), gelu_f(v.y), gelu_f(v.z), gelu_f(v.w))
                                     : make_float4(elu_f(v.x), elu_f(v.y), elu_f(v.z), elu_f(v.w));
        }
    }
}

// EW_BF16, EW_ELU_BF16 and EW_GELU_BF16: y (bf16) = f(x) (the ELU as elu_bf16) over n values,
// then `ones` rows of 1.0; four values per thread (16-byte loads, 8-byte stores), the rest one by
// one.
template <int MODE>
static __device__ __forceinline__ float to_bf16_f(float v) {
    return MODE == EW_ELU_BF16 ? elu_bf16(v) : MODE == EW_GELU_BF16 ? gelu_f(v) : v;
}

template <int MODE>
static __global__ void to_bf16_kernel(const struct op_pointwise a, size_t n) {
    pdl_begin();
    __nv_bfloat16 *y = (__nv_bfloat16 *)a.y;
    FOR_EACH(j, n / 4) {
        const float4 v = ((const float4 *)a.x)[j];
        ((uint2 *)y)[j] = bf16x4(to_bf16_f<MODE>(v.x), to_bf16_f<MODE>(v.y), to_bf16_f<MODE>(v.z), to_bf16_f<MODE>(v.w));
    }
    FOR_EACH(j, n % 4) y[n / 4 * 4 + j] = __float2bfloat16_rn(to_bf16_f<MODE>(a.x[n / 4 * 4 + j]));
    const size_t n1 = (size_t)a.ones * a.cols;
    if (n % 4 == 0) {
        FOR_EACH(j, n1 / 4) ((uint2 *)(y + n))[j] = bf16x4(1.0f, 1.0f, 1.0f, 1.0f);
        FOR_EACH(j, n1 % 4) y[n + n1 / 4 * 4 + j] = __float2bfloat16_rn(1.0f);
    } else {
        FOR_EACH(j, n1) y[n + j] = __float2bfloat16_rn(1.0f);
    }
}

static int launch_pointwise(const struct op_pointwise *a, struct gpu_exec *ex) {
    if (a->mode == EW_BF16 || a->mode == EW_ELU_BF16 || a->mode == EW_GELU_BF16) {
        const size_t n = (size_t)a->channels * a->cols;
        if ((uintptr_t)a->x % 16 || (uintptr_t)a->y % 8) {
            if (ex->errmsg) snprintf(ex->errmsg, ex->errlen, "to_bf16: operands not aligned");
            return MIMI_EINVAL;
        }
        void (*kernel)(const struct op_pointwise, size_t) = a->mode == EW_ELU_BF16    ? to_bf16_kernel<EW_ELU_BF16>
                                                             : a->mode == EW_GELU_BF16 ? to_bf16_kernel<EW_GELU_BF16>
                                                                                       : to_bf16_kernel<EW_BF16>;
        pdl_launch(kernel, grid_for((n + (size_t)a->ones * a->cols) / 4 + 1, 256), 256, 0, ex, *a, n);
        return launch_status(ex, "to_bf16");
    }
    const int rows = a->channels + (a->mode == EW_ELU_ONES ? a->ones : 0);
    if ((a->mode == EW_ELU || a->mode == EW_ELU_ONES || a->mode == EW_GELU) && a->cols % 4 == 0 &&
        (uintptr_t)a->y % 16 == 0) {
        const dim3 grid = grid_rows(a->cols / 4, 256, rows);
        pdl_launch(act4_kernel, grid, 256, 0, ex, *a, rows);
        return launch_status(ex, "pointwise");
    }
    const dim3 grid = grid_rows(a->cols, 256, rows);
    pdl_launch(pointwise_kernel, grid, 256, 0, ex, *a, rows);
    return launch_status(ex, "pointwise");
}

extern "C" int mimi_cuda_pointwise(const struct op_pointwise *a, struct gpu_exec *ex) {
    return launch_pointwise(a, ex);
}

// ---- transpose ----

#define TILE 32

// out (cols, rows) = in (rows, cols), through a padded shared tile (coalesced both ways).
static __global__ void transpose_kernel(const struct op_transpose a) {
    pdl_begin();
    __shared__ float tile[TILE][TILE + 1];
    const int c0 = blockIdx.x * TILE, r0 = blockIdx.y * TILE;
    for (int dy = threadIdx.y; dy < TILE; dy += blockDim.y) {
        int r = r0 + dy, c = c0 + threadIdx.x;
        if (r < a.rows && c < a.cols) tile[dy][threadIdx.x] = a.in[(size_t)r * a.cols + c];
    }
    __syncthreads();
    for (int dy = threadIdx.y; dy < TILE; dy += blockDim.y) {
        int c = c0 + dy, r = r0 + threadIdx.x;
        if (r < a.rows && c < a.cols) a.out[(size_t)c * a.rows + r] = tile[threadIdx.x][dy];
    }
}

static int launch_transpose(const struct op_transpose *a, struct gpu_exec *ex) {
    dim3 grid((a->cols + TILE - 1) / TILE, (a->rows + TILE - 1) / TILE), block(TILE, 8);
    pdl_launch(transpose_kernel, grid, block, 0, ex, *a);
    return launch_status(ex, "transpose");
}

extern "C" int mimi_cuda_transpose(const struct op_transpose *a, struct gpu_exec *ex) {
    return launch_transpose(a, ex);
}

// ---- end of step ----

static __global__ void finish_kernel(const struct op_finish a) {
    pdl_begin();
    finish_rows(a, blockIdx.x * blockDim.x + threadIdx.x, gridDim.x * blockDim.x);
}

static int launch_finish(const struct op_finish *a, struct gpu_exec *ex) {
    pdl_launch(finish_kernel, grid_for((size_t)a->R, 128), 128, 0, ex, *a);
    return launch_status(ex, "finish");
}

extern "C" int mimi_cuda_finish(const struct op_finish *a, struct gpu_exec *ex) { return launch_finish(a, ex); }
