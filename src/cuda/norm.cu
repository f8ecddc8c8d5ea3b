/*
 * norm.cu - LayerNorm over rows of d values, optionally preceded by the layer-scaled residual
 * add of the previous branch (x += scale * y), as the transformer layer does it (spec 3.3;
 * reference mimi_layer_norm in src/nn/ops_ref.c and src/nn/transformer.c). Mean and biased
 * variance are accumulated in double like the reference; every f32 step is rounded separately.
 */
#include <stdint.h>

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
    for (int i = lane; i < d; i += 32) {
        const float v = __fadd_rn(__fmul_rn(__fmul_rn(__fsub_rn(x[i], mf), inv), a.w[i]), a.b[i]);
        if (a.out_bf16) ((__nv_bfloat16 *)a.out)[(size_t)row * d + i] = __float2bfloat16_rn(v);
        else a.out[(size_t)row * d + i] = v;
    }
}

// The same arithmetic with the row in registers: lane l holds values 4 (l + 32 k) .. + 3, k < V
// (d = 128 V), read once with 16-byte loads; the passes after the first reuse them. Only the
// order of the double sums differs from the kernel above. At 2048 rows of 512 (a whole-signal
// lane's step) the kernel above took about 18 us, this one 11 (H200).
template <int V>
static __global__ void __launch_bounds__(32 * NORM_WARPS) norm_rows_kernel(const struct op_norm a) {
    pdl_begin();
    const int row = blockIdx.x * NORM_WARPS + threadIdx.x / 32, lane = threadIdx.x % 32, d = a.d;
    if (row >= a.rows) return;
    float4 *x = (float4 *)(a.x + (size_t)row * d);
    float4 v[V];
#pragma unroll
    for (int k = 0; k < V; k++) v[k] = x[lane + 32 * k];
    if (a.mode != NORM_LN) {
        const float4 *y = (const float4 *)(a.y + (size_t)row * d), *sc = (const float4 *)a.scale;
#pragma unroll
        for (int k = 0; k < V; k++) {
            const float4 u = y[lane + 32 * k], s = sc[lane + 32 * k];
            v[k] = make_float4(__fadd_rn(v[k].x, __fmul_rn(s.x, u.x)), __fadd_rn(v[k].y, __fmul_rn(s.y, u.y)),
                               __fadd_rn(v[k].z, __fmul_rn(s.z, u.z)), __fadd_rn(v[k].w, __fmul_rn(s.w, u.w)));
            x[lane + 32 * k] = v[k];
        }
    }
    if (a.mode == NORM_RESID) return;
    double s = 0.0;
#pragma unroll
    for (int k = 0; k < V; k++) s += (double)v[k].x + (double)v[k].y + (double)v[k].z + (double)v[k].w;
    const double mean = warp_sum_d(s) / d;
    double q = 0.0;
#pragma unroll
    for (int k = 0; k < V; k++) {
        const double e0 = v[k].x - mean, e1 = v[k].y - mean, e2 = v[k].z - mean, e3 = v[k].w - mean;
        q += e0 * e0 + e1 * e1 + e2 * e2 + e3 * e3;
    }
    const double var = warp_sum_d(q) / d;
    const float inv = (float)(1.0 / sqrt(var + (double)a.eps)), mf = (float)mean;
    const float4 *w = (const float4 *)a.w, *b = (const float4 *)a.b;
    auto f = [&](float x, float w, float b) { return __fadd_rn(__fmul_rn(__fmul_rn(__fsub_rn(x, mf), inv), w), b); };
#pragma unroll
    for (int k = 0; k < V; k++) {
        const float4 wk = w[lane + 32 * k], bk = b[lane + 32 * k];
        const float4 o = make_float4(f(v[k].x, wk.x, bk.x), f(v[k].y, wk.y, bk.y), f(v[k].z, wk.z, bk.z),
                                     f(v[k].w, wk.w, bk.w));
        if (a.out_bf16) ((uint2 *)a.out)[(size_t)row * d / 4 + lane + 32 * k] = bf16x4(o.x, o.y, o.z, o.w);
        else ((float4 *)a.out)[(size_t)row * d / 4 + lane + 32 * k] = o;
    }
}

static bool aligned16(const void *p) { return (uintptr_t)p % 16 == 0; }

static int launch_norm(const struct op_norm *a, struct gpu_exec *ex) {
    const unsigned blocks = (a->rows + NORM_WARPS - 1) / NORM_WARPS;
    const bool resid = a->mode != NORM_LN, ln = a->mode != NORM_RESID;
    const bool rows4 = a->d % 128 == 0 && aligned16(a->x) && (!resid || (aligned16(a->y) && aligned16(a->scale))) &&
                       (!ln || (aligned16(a->out) && aligned16(a->w) && aligned16(a->b)));
    if (rows4 && a->d == 512) pdl_launch(norm_rows_kernel<4>, blocks, 32 * NORM_WARPS, 0, ex, *a);
    else if (rows4 && a->d == 1024) pdl_launch(norm_rows_kernel<8>, blocks, 32 * NORM_WARPS, 0, ex, *a);
    else pdl_launch(norm_kernel, blocks, 32 * NORM_WARPS, 0, ex, *a);
    return launch_status(ex, "layernorm");
}

extern "C" int mimi_cuda_norm(const struct op_norm *a, struct gpu_exec *ex) { return launch_norm(a, ex); }
