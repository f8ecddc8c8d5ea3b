/*
 * matmul.cu - every matrix product of the plans (column-major, f32 in and out).
 *
 * Products with at most SKINNY_MAX columns on their small side (one stream's transformer rows,
 * the late SEANet layers, the quantizer at small batch) read each weight once and are bound by
 * memory bandwidth: a split-K kernel streams the weight rows with all warps of the chip and
 * keeps the few small-side columns in registers. Everything else goes to cuBLAS. Strict mode
 * accumulates in f32 with CUBLAS_COMPUTE_32F (no TF32); fast mode lets cuBLAS use TF32 tensor
 * cores in both fast modes (CUBLAS_COMPUTE_32F_FAST_TF32: 10-bit mantissa inputs, f32
 * accumulation; CUBLAS_COMPUTE_32F_FAST_16BF measured no faster on these products, whose f32
 * operands stay in memory either way); the skinny kernel is f32 in every mode. The cuBLAS handle is the batch's, bound to its stream and its own
 * workspace (cuda_batch.cu), so the calls can be captured into a graph.
 * Reference: mimi_matmul_nt in src/nn/ops_ref.c.
 */
#include <cublas_v2.h>
#include <stdint.h>

#include "convtr.cuh"

#define SKINNY_MAX GPU_SKINNY_MAX
#define SKINNY_WARPS 8

// ---- skinny products ----

// C[j*cj + s*cs] = sum_p w[j*wj + p] x[s*xs + p*xp] (+ beta C) for j < J, s < S <= SKINNY_MAX.
struct skinny {
    const float *w, *x;
    float *c;
    long long wj, xs, xp, cj, cs;
    int J, S, K, split;  // split: warps sharing one j, each a contiguous share of p
    float beta;
    int gelu;            // C = gelu(sum) (beta = 0)
    int elu;             // C = elu(sum) (beta = 0)
    int wvec, xvec;      // 16-byte loads of w (and of x, when xp = 1) are aligned
    const float *ln_x, *ln_y, *ln_scale, *ln_w, *ln_b;  // x from a LayerNorm (op_gemm)
    float *ln_out;
    float ln_eps;
    struct op_convtr up;  // op_gemm's upsampling epilogue, when up_on
    int up_on;
};

// Where the small side is read: the operand, or the LayerNorm rows in shared memory.
struct xsrc {
    const float *x;
    long long xs, xp;
    bool vec;
};

// Four consecutive x values of column s from p.
static __device__ __forceinline__ float4 x4(const struct xsrc &x, int s, int p) {
    const float *xr = x.x + s * x.xs;
    if (x.vec) return *(const float4 *)(xr + p);
    return make_float4(xr[p * x.xp], xr[(p + 1) * x.xp], xr[(p + 2) * x.xp], xr[(p + 3) * x.xp]);
}

// hs (S, K) = LayerNorm(x_new) * ln_w + ln_b per row, x_new = ln_x + ln_scale * ln_y (or ln_x);
// block 0 stores x_new to ln_out. Every thread takes the elements i = t, t + blockDim, ... of
// each row (kept in hs between the passes, read back by the thread that wrote them), so a row
// costs one memory round trip however few rows there are. The mean and biased variance are
// accumulated in double (warps, then the block's warps in order) and every f32 step is rounded
// separately, as norm.cu does.
// red[warp][s] = the warp's sum of v (the caller syncs before reading it).
static __device__ void warp_sum(double v, double (*red)[SKINNY_MAX], int s) {
    v = warp_sum_d(v);
    if (threadIdx.x % 32 == 0) red[threadIdx.x / 32][s] = v;
}

static __device__ void ln_prologue(const struct skinny &a, float *hs) {
    __shared__ double sums[SKINNY_WARPS][SKINNY_MAX], squares[SKINNY_WARPS][SKINNY_MAX];
    __shared__ float mean[SKINNY_MAX], inv[SKINNY_MAX];
    const int K = a.K, S = a.S, t = threadIdx.x, T = blockDim.x;
    for (int s = 0; s < S; s++) {
        const float *x = a.ln_x + (size_t)s * K, *y = a.ln_y ? a.ln_y + (size_t)s * K : NULL;
        double sum = 0.0;
        for (int i = t; i < K; i += T) {
            float v = x[i];
            if (y) v = __fadd_rn(v, __fmul_rn(a.ln_scale[i], y[i]));
            hs[(size_t)s * K + i] = v;
            sum += v;
        }
        warp_sum(sum, sums, s);
    }
    __syncthreads();
    for (int s = 0; s < S; s++) {
        double sum = 0.0;
        for (int w = 0; w < SKINNY_WARPS; w++) sum += sums[w][s];
        const double m = sum / K;
        double q = 0.0;
        for (int i = t; i < K; i += T) {
            const double d = (double)hs[(size_t)s * K + i] - m;
            q += d * d;
        }
        warp_sum(q, squares, s);
        if (t == 0) mean[s] = (float)m;
    }
    __syncthreads();
    if (t < S) {
        double q = 0.0;
        for (int w = 0; w < SKINNY_WARPS; w++) q += squares[w][t];
        inv[t] = (float)(1.0 / sqrt(q / K + (double)a.ln_eps));
    }
    __syncthreads();
    for (int s = 0; s < S; s++)
        for (int i = t; i < K; i += T) {
            float *h = hs + (size_t)s * K + i;
            const float v = *h;
            if (blockIdx.x == 0 && a.ln_out) a.ln_out[(size_t)s * K + i] = v;
            *h = __fadd_rn(__fmul_rn(__fmul_rn(__fsub_rn(v, mean[s]), inv[s]), a.ln_w[i]), a.ln_b[i]);
        }
    __syncthreads();
}

// C[j, s] = gelu(v), elu(v), or v + beta C[j, s], or v: a product's output, both skinny kernels;
// with up_on, then the upsampling's outputs of channel j, row s (which read C[j, s] back) and
// its carried tail.
static __device__ __forceinline__ void skinny_store(const struct skinny &a, int j, int s, float v) {
    float *c = a.c + (long long)j * a.cj + (long long)s * a.cs;
    *c = a.gelu ? gelu_f(v) : a.elu ? elu_f(v) : a.beta != 0.0f ? v + a.beta * *c : v;
    if (!a.up_on) return;
    const float b = a.up.bias ? a.up.bias[j] : 0.0f;
    for (int q = 0; q < a.up.S; q++) convtr_emit(a.up, j, s, q, b);
}

static __device__ __forceinline__ float4 w4(const struct skinny &a, const float *w, int p) {
    if (a.wvec) return *(const float4 *)(w + p);
    return make_float4(w[p], w[p + 1], w[p + 2], w[p + 3]);
}

// A block holds SKINNY_WARPS warps: SKINNY_WARPS / split rows j, `split` warps per row. A lane
// takes 4 consecutive p at a time, 4 groups per round (16 weights in flight per lane), and keeps
// the S partial sums in registers; warps then reduce through shared memory.
static __global__ void skinny_kernel(const struct skinny a) {
    __shared__ float part[SKINNY_WARPS][SKINNY_MAX];
    extern __shared__ float4 skinny_smem[];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int rows = SKINNY_WARPS / a.split, jr = warp / a.split, ks = warp % a.split;
    const int j = blockIdx.x * rows + jr;
    const int share = ((a.K + a.split - 1) / a.split + 3) & ~3, p0 = ks * share;
    const int p1 = p0 + share < a.K ? p0 + share : a.K;
    // the first round of weights is loaded before the wait (it arrives while the predecessor
    // runs), every next round before the current one is used
    const bool mine = j < a.J && p0 < p1;
    const float *w = a.w + (long long)(mine ? j : 0) * a.wj;
    int p = p0 + 4 * lane;
    float4 wv[4];
    bool round = mine && p + 384 + 3 < p1;
    if (round) {
#pragma unroll
        for (int u = 0; u < 4; u++) wv[u] = w4(a, w, p + 128 * u);
    }
    const int early = round ? 512 : 0;  // the rest of the share toward L2
    if (mine && p1 - p0 > early) prefetch_l2(w + p0 + early, sizeof(float) * (p1 - p0 - early), lane, 32);
    pdl_begin();
    struct xsrc xv = {a.x, a.xs, a.xp, a.xvec != 0};
    if (a.ln_w) {
        ln_prologue(a, (float *)skinny_smem);
        xv = (struct xsrc){(const float *)skinny_smem, a.K, 1, a.K % 4 == 0};
    }
    float acc[SKINNY_MAX];
#pragma unroll
    for (int s = 0; s < SKINNY_MAX; s++) acc[s] = 0.0f;
    if (mine) {
        while (round) {
            const bool next = p + 512 + 384 + 3 < p1;
            float4 nv[4];
#pragma unroll
            for (int u = 0; u < 4; u++) nv[u] = next ? w4(a, w, p + 512 + 128 * u) : wv[u];
#pragma unroll
            for (int s = 0; s < SKINNY_MAX; s++)
                if (s < a.S)
                    acc[s] += dot4(wv[0], x4(xv, s, p)) + dot4(wv[1], x4(xv, s, p + 128)) +
                              dot4(wv[2], x4(xv, s, p + 256)) + dot4(wv[3], x4(xv, s, p + 384));
#pragma unroll
            for (int u = 0; u < 4; u++) wv[u] = nv[u];
            p += 512;
            round = next;
        }
        for (; p + 3 < p1; p += 128) {
            float4 wv = w4(a, w, p);
#pragma unroll
            for (int s = 0; s < SKINNY_MAX; s++)
                if (s < a.S) acc[s] += dot4(wv, x4(xv, s, p));
        }
        // the last (p1 - p0) % 4 values, one per lane
        int q = p1 - ((p1 - p0) & 3) + lane;
        if (q < p1) {
            float wq = w[q];
#pragma unroll
            for (int s = 0; s < SKINNY_MAX; s++)
                if (s < a.S) acc[s] += wq * xv.x[s * xv.xs + q * xv.xp];
        }
    }
    // sum over the warp, then over the warps of one row
#pragma unroll
    for (int s = 0; s < SKINNY_MAX; s++) {
        if (s >= a.S) break;
        const float v = warp_sum_f(acc[s]);
        if (lane == 0) part[warp][s] = v;
    }
    __syncthreads();
    if (ks == 0 && lane < a.S && j < a.J) {
        float v = 0.0f;
        for (int k = 0; k < a.split; k++) v += part[warp + k][lane];
        skinny_store(a, j, lane, v);
    }
}

// ---- large skinny products: rows streamed by a persistent grid ----

// Products of a few columns whose weights are several MB (one stream's late SEANet layers) are
// bound by how much of the weights the chip has in flight. skinny_kernel, a short block per row
// group, spends its time on block turnover and on reading x (strided, a scalar load per value
// and column) from L1. Here every block first stages x in shared memory as (S, Kp) rows, then
// walks row groups g = blockIdx.x, + gridDim.x, ...: a warp takes ROWS_RW rows over its share
// of p, ROWS_U float4 per row per lane in flight, and the x values it reads serve all its rows.
// The sums keep skinny_kernel's structure (a lane's p in ascending order, then the warp, then
// the warps of a row in order), so a row's result does not depend on the grid.
#define ROWS_U 2
#define ROWS_RW 4
#define ROWS_MIN_WEIGHTS (1 << 20)          // floats: below this, skinny_kernel
#define ROWS_MAX_STAGE (96 * 1024)          // bytes of x per block (two blocks per SM)

// xs (S, Kp) = x's columns, zeros past K. A thread has ROWS_STAGE_LOADS loads in flight; the
// products' usual layout, (s, p) at s + p*S (an im2col buffer of S columns), is read as float4s.
#define ROWS_STAGE_LOADS 8
static __device__ __forceinline__ void rows_stage_x(const struct skinny &a, float *xs, int Kp) {
    const int S = a.S, K = a.K, n = S * K;
    for (int e = threadIdx.x; e < S * (Kp - K); e += blockDim.x) {
        const int s = e / (Kp - K);
        xs[s * Kp + K + e - s * (Kp - K)] = 0.0f;
    }
    if (a.xs == 1 && a.xp == S && (uintptr_t)a.x % 16 == 0) {
        const int n4 = n / 4;
        const float4 *x4 = (const float4 *)a.x;
        for (int e0 = threadIdx.x; e0 < n4; e0 += ROWS_STAGE_LOADS * blockDim.x) {
            float4 v[ROWS_STAGE_LOADS];
#pragma unroll
            for (int u = 0; u < ROWS_STAGE_LOADS; u++)
                if (e0 + u * (int)blockDim.x < n4) v[u] = x4[e0 + u * blockDim.x];
#pragma unroll
            for (int u = 0; u < ROWS_STAGE_LOADS; u++) {
                const int e = e0 + u * blockDim.x;
                if (e >= n4) break;
                const float q[4] = {v[u].x, v[u].y, v[u].z, v[u].w};
#pragma unroll
                for (int k = 0; k < 4; k++) {
                    const int m = 4 * e + k, p = m / S;
                    xs[(m - p * S) * Kp + p] = q[k];
                }
            }
        }
        for (int m = 4 * n4 + threadIdx.x; m < n; m += blockDim.x) {  // the last n % 4
            const int p = m / S;
            xs[(m - p * S) * Kp + p] = a.x[m];
        }
        return;
    }
    for (int m0 = threadIdx.x; m0 < n; m0 += ROWS_STAGE_LOADS * blockDim.x) {
        float v[ROWS_STAGE_LOADS];
#pragma unroll
        for (int u = 0; u < ROWS_STAGE_LOADS; u++) {
            const int m = m0 + u * blockDim.x, s = m / K, p = m - s * K;  // column-major walk
            if (m < n) v[u] = a.x[s * a.xs + p * a.xp];
        }
#pragma unroll
        for (int u = 0; u < ROWS_STAGE_LOADS; u++) {
            const int m = m0 + u * blockDim.x, s = m / K, p = m - s * K;
            if (m < n) xs[s * Kp + p] = v[u];
        }
    }
}

template <int SMAX>
static __global__ void __launch_bounds__(32 * SKINNY_WARPS, 2) skinny_rows_kernel(const struct skinny a) {
    extern __shared__ float4 rows_smem[];
    float *xs = (float *)rows_smem;  // (S, Kp)
    __shared__ float part[SKINNY_WARPS][ROWS_RW][SMAX];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, S = a.S, K = a.K, Kp = (K + 3) & ~3;
    const int rows = SKINNY_WARPS / a.split * ROWS_RW, jr = warp / a.split * ROWS_RW, ks = warp % a.split;
    const int share = ((K + a.split - 1) / a.split + 3) & ~3, p0 = ks * share, p1 = min(K, p0 + share);
    const int groups = (a.J + rows - 1) / rows;
    // the first group's weights toward L2 while the predecessor runs
    if (blockIdx.x < groups && p0 < p1)
        for (int r = 0; r < ROWS_RW; r++) {
            const int j = min(blockIdx.x * rows + jr + r, a.J - 1);
            prefetch_l2(a.w + (long long)j * a.wj + p0, sizeof(float) * (p1 - p0), lane, 32);
        }
    pdl_begin();
    rows_stage_x(a, xs, Kp);
    __syncthreads();
    for (int g = blockIdx.x; g < groups; g += gridDim.x) {
        const int j0 = g * rows + jr;
        const float *w[ROWS_RW];
#pragma unroll
        for (int r = 0; r < ROWS_RW; r++) w[r] = a.w + (long long)min(j0 + r, a.J - 1) * a.wj;
        float acc[ROWS_RW][SMAX];
#pragma unroll
        for (int r = 0; r < ROWS_RW; r++)
#pragma unroll
            for (int s = 0; s < SMAX; s++) acc[r][s] = 0.0f;
        for (int pb = p0 + 4 * lane; pb < p1; pb += 128 * ROWS_U) {
            float4 v[ROWS_U][ROWS_RW];
#pragma unroll
            for (int u = 0; u < ROWS_U; u++)
#pragma unroll
                for (int r = 0; r < ROWS_RW; r++) {
                    const int p = pb + 128 * u;
                    const float *q = w[r] + p;
                    if (p + 3 < p1) v[u][r] = __ldcs((const float4 *)q);
                    else v[u][r] = make_float4(p < p1 ? q[0] : 0.0f, p + 1 < p1 ? q[1] : 0.0f, p + 2 < p1 ? q[2] : 0.0f, 0.0f);
                }
#pragma unroll
            for (int u = 0; u < ROWS_U; u++) {
                const int p = pb + 128 * u;
                if (p >= p1) break;
#pragma unroll
                for (int s = 0; s < SMAX; s++) {
                    if (s >= S) break;
                    const float4 xv = *(const float4 *)(xs + s * Kp + p);
#pragma unroll
                    for (int r = 0; r < ROWS_RW; r++) acc[r][s] += dot4(v[u][r], xv);
                }
            }
        }
#pragma unroll
        for (int r = 0; r < ROWS_RW; r++)
#pragma unroll
            for (int s = 0; s < SMAX; s++) {
                if (s >= S) break;
                const float v = warp_sum_f(acc[r][s]);
                if (lane == 0) part[warp][r][s] = v;
            }
        __syncthreads();
        if (ks == 0 && lane < S * ROWS_RW) {
            const int r = lane / S, s = lane - r * S, j = j0 + r;
            if (j < a.J) {
                float v = 0.0f;
                for (int k = 0; k < a.split; k++) v += part[warp + k][r][s];
                skinny_store(a, j, s, v);
            }
        }
        __syncthreads();  // part is reused by the next group
    }
}

// Whether the product goes to skinny_rows_kernel, and its launch.
static size_t rows_stage_bytes(const struct skinny *s) { return sizeof(float) * (size_t)s->S * ((s->K + 3) & ~3); }

static int rows_fit(const struct skinny *s) {
    return !s->ln_w && s->wvec && s->S <= 8 && (long long)s->J * s->K >= ROWS_MIN_WEIGHTS &&
           rows_stage_bytes(s) <= ROWS_MAX_STAGE;
}

static int launch_skinny_rows(struct skinny s, struct gpu_exec *ex) {
    // a warp's share of about 1024 indices (2 rounds of loads per row)
    s.split = s.K > 4096 ? 8 : s.K > 2048 ? 4 : s.K > 1024 ? 2 : 1;
    const int rows = SKINNY_WARPS / s.split * ROWS_RW, groups = (s.J + rows - 1) / rows;
    const int grid = max(1, min(groups, 2 * device_sms()));
    const size_t smem = rows_stage_bytes(&s);
    const int smax = s.S <= 2 ? 2 : s.S <= 4 ? 4 : 8;
    void (*k)(const struct skinny) = smax == 2 ? skinny_rows_kernel<2> : smax == 4 ? skinny_rows_kernel<4> : skinny_rows_kernel<8>;
    // (with the kernel's static sums, past the 48 KB a block gets without opting in)
    if (smem + sizeof(float) * SKINNY_WARPS * ROWS_RW * smax > 48 * 1024 &&
        cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, ROWS_MAX_STAGE) != cudaSuccess)
        return launch_status(ex, "skinny product (rows)");
    pdl_launch(k, grid, 32 * SKINNY_WARPS, smem, ex, s);
    char what[128];
    snprintf(what, sizeof what, "skinny product (%d x %d x %d, rows kernel)", s.J, s.S, s.K);
    return launch_status(ex, what);
}

// Maps a column-major product onto the skinny form when one side has few columns and the other
// operand (the weights) is contiguous along k; 0 when it does not fit.
static int as_skinny(const struct op_gemm *g, struct skinny *s) {
    if (g->ab_bf16) return 0;  // cuBLAS's alone
    // (w, x, c, wj, xs, xp, cj, cs, J, S) of the three shapes
    auto set = [&](const float *w, const float *x, long long wj, long long xs, long long xp, long long cj, long long cs,
                   int J, int S) {
        *s = skinny{};
        s->w = w, s->x = x, s->c = g->c, s->wj = wj, s->xs = xs, s->xp = xp, s->cj = cj, s->cs = cs;
        s->J = J, s->S = S, s->K = g->k, s->split = 1, s->beta = g->beta, s->gelu = g->gelu, s->elu = g->elu;
        s->up = g->up, s->up_on = g->with_up;
    };
    if (g->m <= SKINNY_MAX && !g->transa && !g->transb)  // convs: small A (m, k), weights B
        set(g->b, g->a, g->ldb, 1, g->lda, g->ldc, 1, g->n, g->m);
    else if (g->m <= SKINNY_MAX && g->transa && !g->transb)  // decode projections: small A^T
        set(g->b, g->a, g->ldb, g->lda, 1, g->ldc, 1, g->n, g->m);
    else if (g->n <= SKINNY_MAX && g->transa)  // linears: weights A^T, small B
        set(g->a, g->b, g->lda, g->transb ? 1 : g->ldb, g->transb ? g->ldb : 1, 1, g->ldc, g->m, g->n);
    else
        return 0;
    if (g->ln_w) {
        if (!(g->transa && g->n <= SKINNY_MAX) || g->k * g->n > GPU_LN_MAX_FLOATS) return 0;
        s->ln_x = g->ln_x, s->ln_y = g->ln_y, s->ln_scale = g->ln_scale, s->ln_w = g->ln_w, s->ln_b = g->ln_b;
        s->ln_out = g->ln_out, s->ln_eps = g->ln_eps;
    }
    // split k so that every warp streams at least ~512 weights and the chip has enough in flight
    s->split = s->K >= 8 * 512 ? 8 : s->K >= 4 * 512 ? 4 : s->K >= 2 * 512 ? 2 : 1;
    s->wvec = s->wj % 4 == 0 && (uintptr_t)s->w % 16 == 0;
    s->xvec = s->xp == 1 && s->xs % 4 == 0 && (uintptr_t)s->x % 16 == 0;
    return 1;
}

static int launch_skinny(const struct skinny *s, struct gpu_exec *ex) {
    if (rows_fit(s)) return launch_skinny_rows(*s, ex);
    const int rows = SKINNY_WARPS / s->split;
    const size_t smem = s->ln_w ? sizeof(float) * (size_t)s->S * s->K : 0;
    pdl_launch(skinny_kernel, (s->J + rows - 1) / rows, 32 * SKINNY_WARPS, smem, ex, *s);
    return launch_status(ex, "skinny product");
}

// ---- cuBLAS ----

// cuBLAS's default algorithm for g's product.
static int gemm_default(const struct op_gemm *g, struct gpu_exec *ex) {
    const float alpha = 1.0f, beta = g->beta;
    // bf16 operands accumulate in f32 (CUBLAS_COMPUTE_32F); f32 ones in f32 or on TF32 cores
    const cublasComputeType_t compute = ex->precision == MIMI_PRECISION_STRICT || g->ab_bf16
                                            ? CUBLAS_COMPUTE_32F
                                            : CUBLAS_COMPUTE_32F_FAST_TF32;
    const cudaDataType_t ab = g->ab_bf16 ? CUDA_R_16BF : CUDA_R_32F;
    cublasStatus_t st = cublasGemmEx((cublasHandle_t)ex->cublas, g->transa ? CUBLAS_OP_T : CUBLAS_OP_N,
                                     g->transb ? CUBLAS_OP_T : CUBLAS_OP_N, g->m, g->n, g->k, &alpha, g->a, ab,
                                     g->lda, g->b, ab, g->ldb, &beta, g->c, CUDA_R_32F, g->ldc, compute,
                                     CUBLAS_GEMM_DEFAULT);
    if (st == CUBLAS_STATUS_SUCCESS) return MIMI_OK;
    if (ex->errmsg)
        snprintf(ex->errmsg, ex->errlen, "cublasGemmEx (%d x %d x %d): %s", g->m, g->n, g->k,
                 cublasGetStatusString(st));
    return MIMI_EDEVICE;
}

// The upsampling epilogue's conv: depthwise (no taps) over C itself, one input step a row, its
// tail carried by the same stores, one channel per output j and a row per column s.
static int up_fits(const struct skinny *s) {
    const struct op_convtr &u = s->up;
    return !u.taps && u.x == s->c && u.T == 1 && u.carry && u.K > u.S && GPU_CONVTR_OUT_CARRIES(u.K, u.S, u.T) &&
           u.c_out == s->J && u.R == s->S && s->cj == s->S && s->cs == 1 && !s->gelu && !s->elu && s->beta == 0.0f;
}

static int launch_gemm(const struct op_gemm *g, struct gpu_exec *ex) {
    struct skinny s;
    const int skinny = as_skinny(g, &s);
    if (g->with_up && !(skinny && up_fits(&s))) {
        if (ex->errmsg)
            snprintf(ex->errmsg, ex->errlen, "gemm: the upsampling epilogue takes a skinny product over at most %d "
                     "rows into a packed C, and a depthwise conv over C of one step a row that carries its tail",
                     SKINNY_MAX);
        return MIMI_EINVAL;
    }
    if (skinny) return launch_skinny(&s, ex);
    if (g->ln_w || g->elu) {
        if (ex->errmsg) snprintf(ex->errmsg, ex->errlen, "gemm: a LayerNorm operand or an ELU needs the skinny kernel");
        return MIMI_EINVAL;
    }
    if (g->gelu && (g->ldc != g->m || g->beta != 0.0f)) {
        if (ex->errmsg) snprintf(ex->errmsg, ex->errlen, "gemm: GELU needs a packed C and beta = 0");
        return MIMI_EINVAL;
    }
    const int rc = g->algo ? mimi_cuda_gemm_tuned(g, ex) : gemm_default(g, ex);  // gemm_tune.cu's choice
    if (rc || !g->gelu) return rc;
    struct op_pointwise gelu = {g->c, NULL, NULL, 1, (size_t)g->m * g->n, EW_GELU, 0};
    return mimi_cuda_pointwise(&gelu, ex);
}

extern "C" int mimi_cuda_gemm(const struct op_gemm *g, struct gpu_exec *ex) { return launch_gemm(g, ex); }

extern "C" int mimi_cuda_gemm_on_cublas(const struct op_gemm *g) {
    struct skinny s;
    return !as_skinny(g, &s) && !g->ln_w && !g->elu && !g->with_up;
}
