/*
 * norm.cu - LayerNorm over rows of d values, optionally preceded by the layer-scaled residual
 * add of the previous branch (x += scale * y), as the transformer layer does it (spec 3.3;
 * reference mimi_layer_norm in src/nn/ops_ref.c and src/nn/transformer.c). Mean and biased
 * variance are accumulated in double like the reference; every f32 step is rounded separately.
 */
#include "common.cuh"

#define NORM_WARPS 8  // rows per block, a warp each

// A warp per row: residual (modes RESID, RESID_LN), then the norm (modes LN, RESID_LN). Lane l
// takes the row's values l, l + 32, ... in every pass (the later passes read them again, from
// L1), so out may be x; no block-wide barriers.
static __global__ void __launch_bounds__(32 * NORM_WARPS) norm_kernel(const struct op_norm a) {
    pdl_begin();
    const int row = blockIdx.x * NORM_WARPS + threadIdx.x / 32, lane = threadIdx.x % 32, d = a.d;
    if (row >= a.rows) return;
    float *x = a.x + (size_t)row * d;
    double s = 0.0;
    for (int i = lane; i < d; i += 32) {
        float v = x[i];
        if (a.mode != NORM_LN) {
            v = __fadd_rn(v, __fmul_rn(a.scale[i], a.y[(size_t)row * d + i]));
            x[i] = v;
        }
        s += v;
    }
    if (a.mode == NORM_RESID) return;
    const double mean = warp_sum_d(s) / d;
    double q = 0.0;
    for (int i = lane; i < d; i += 32) q += ((double)x[i] - mean) * ((double)x[i] - mean);
    const double var = warp_sum_d(q) / d;
    const float inv = (float)(1.0 / sqrt(var + (double)a.eps)), mf = (float)mean;
    float *out = a.out + (size_t)row * d;
    for (int i = lane; i < d; i += 32) out[i] = __fadd_rn(__fmul_rn(__fmul_rn(__fsub_rn(x[i], mf), inv), a.w[i]), a.b[i]);
}

static int launch_norm(const struct op_norm *a, struct gpu_exec *ex) {
    pdl_launch(norm_kernel, (a->rows + NORM_WARPS - 1) / NORM_WARPS, 32 * NORM_WARPS, 0, ex, *a);
    return launch_status(ex, "layernorm");
}

extern "C" int mimi_cuda_norm(const struct op_norm *a, struct gpu_exec *ex) { return launch_norm(a, ex); }
