/*
 * conv1d.cu - the streaming Conv1d (spec 5.1; reference src/nn/conv.c): im2col over
 * [history | f(x)] (f32, or bfloat16 for MIMI_PRECISION_FAST_BF16's products) for the large
 * products, which then are one cuBLAS call (matmul.cu); the whole conv in one kernel for the
 * small ones (one stream's SEANet); and the carry of the newest history columns: a launch after
 * the conv for large steps, or for small ones staged by the direct kernel and stored with every
 * other layer's at the step's end (tails_kernel).
 */
#include <stdint.h>

#include "direct.cuh"

// ---- im2col ----

// Stores of the im2col matrix: f32, or bfloat16 rounded to nearest even (BF16: col_bf16), at an
// index in values; put4 writes values 4 q .. 4 q + 3 as one 16-byte (f32) or 8-byte (bf16) store.
template <bool BF16>
static __device__ __forceinline__ void put1(float *col, size_t i, float v) {
    if (BF16) ((__nv_bfloat16 *)col)[i] = __float2bfloat16_rn(v);
    else col[i] = v;
}

template <bool BF16>
static __device__ __forceinline__ void put4(float *col, size_t q, float v0, float v1, float v2, float v3) {
    if (BF16) ((uint2 *)col)[q] = bf16x4(v0, v1, v2, v3);
    else ((float4 *)col)[q] = make_float4(v0, v1, v2, v3);
}

// The first value of im2col row i's K taps (i >= c_in: row c_in*K + i - c_in, a row of ones).
static __device__ __forceinline__ size_t col_row(const struct op_im2col &a, int i, int K, size_t N) {
    return (i < a.c_in ? (size_t)i * K : (size_t)a.c_in * K + i - a.c_in) * N;
}

// col[(i*K + k), r*T_out + t] = xin(i, r, t*S + k): blockIdx.y walks the input channels i (and
// the rows of ones after them), x the output columns; each thread writes its column's K taps, so
// the index arithmetic is done once per K values and consecutive threads write consecutive columns.
// With a.tail set (small steps) the grid's threads also stage the newest H columns of
// [hist | f(x)] there as (c_in, R, H): the history a carry would store, for the step's tails op.
template <bool BF16>
static __global__ void im2col_kernel(const struct op_im2col a) {
    pdl_begin();
    if (a.tail) {
        const int nt = a.c_in * a.R * a.H, stride = gridDim.x * gridDim.y * blockDim.x;
        for (int e = (blockIdx.y * gridDim.x + blockIdx.x) * blockDim.x + threadIdx.x; e < nt; e += stride) {
            const int j = e % a.H, ir = e / a.H;
            a.tail[e] = xin(a, ir / a.R, ir % a.R, a.T + j);
        }
    }
    const unsigned To = a.T / a.S, N = (unsigned)a.R * To;
    for (int i = blockIdx.y; i < a.c_in + a.ones; i += gridDim.y) {
        const size_t row = col_row(a, i, a.K, N);
        for (unsigned n = blockIdx.x * blockDim.x + threadIdx.x; n < N; n += gridDim.x * blockDim.x) {
            if (i >= a.c_in) {
                put1<BF16>(a.col, row + n, 1.0f);
                continue;
            }
            const unsigned r = n / To, t = n - r * To;
            for (int k = 0; k < a.K; k++) put1<BF16>(a.col, row + (size_t)k * N + n, xin(a, i, r, t * a.S + k));
        }
    }
}

// The same with four consecutive columns per thread (one row r: T_out is a multiple of 4), each
// tap written as one store: a quarter of the store instructions of the kernel above.
template <bool BF16>
static __global__ void im2col4_kernel(const struct op_im2col a) {
    pdl_begin();
    const unsigned To = a.T / a.S, N4 = (unsigned)a.R * To / 4, N = 4 * N4;
    for (int i = blockIdx.y; i < a.c_in + a.ones; i += gridDim.y) {
        const size_t row4 = col_row(a, i, a.K, N) / 4;
        for (unsigned n4 = blockIdx.x * blockDim.x + threadIdx.x; n4 < N4; n4 += gridDim.x * blockDim.x) {
            if (i >= a.c_in) {
                put4<BF16>(a.col, row4 + n4, 1.0f, 1.0f, 1.0f, 1.0f);
                continue;
            }
            const unsigned n = 4 * n4, r = n / To, t = n - r * To;
            for (int k = 0; k < a.K; k++) {
                const int j = (int)t * a.S + k;
                put4<BF16>(a.col, row4 + (size_t)k * N4 + n4, xin(a, i, r, j), xin(a, i, r, j + a.S),
                           xin(a, i, r, j + 2 * a.S), xin(a, i, r, j + 3 * a.S));
            }
        }
    }
}

// The ELU of the im2col kernels: elu_f, or elu_bf16 for a bf16 matrix.
template <bool BF16>
static __device__ __forceinline__ float elu_col(float x) { return BF16 ? elu_bf16(x) : elu_f(x); }

// The same for a compile-time (K, S): the 3S + K inputs the four columns read are formed
// (history, padding, ELU) once each, in registers, instead of once per tap that reads them. With
// VEC (rows 16-byte aligned, H = K - S) they are read as 16-byte loads from the aligned float at
// or before the first; the last one read is the row's float (t + 3)*S + S - 1 - H, which ends a
// 16-byte group, so the loads never pass the row.
template <int K, int S, bool VEC, bool BF16>
static __global__ void im2col4_ks_kernel(const struct op_im2col a) {
    pdl_begin();
    constexpr int NIN = 3 * S + K, H = K - S, O = (4 - H % 4) % 4;
    static_assert((O + NIN) % 4 == 0, "the loads end a 16-byte group");
    const unsigned To = a.T / S, N4 = (unsigned)a.R * To / 4, N = 4 * N4;
    for (int i = blockIdx.y; i < a.c_in + a.ones; i += gridDim.y) {
        const size_t row4 = col_row(a, i, K, N) / 4;
        for (unsigned n4 = blockIdx.x * blockDim.x + threadIdx.x; n4 < N4; n4 += gridDim.x * blockDim.x) {
            if (i >= a.c_in) {
                put4<BF16>(a.col, row4 + n4, 1.0f, 1.0f, 1.0f, 1.0f);
                continue;
            }
            const unsigned n = 4 * n4, r = n / To, t = n - r * To;
            const int j0 = (int)t * S;
            float v[NIN];
            if (VEC && j0 >= H) {
                const float4 *xr = (const float4 *)(a.x + ((size_t)i * a.R + r) * a.T + (j0 - H - O));
                float w[O + NIN];
#pragma unroll
                for (int q = 0; q < (O + NIN) / 4; q++) {
                    const float4 f = xr[q];
                    w[4 * q] = f.x, w[4 * q + 1] = f.y, w[4 * q + 2] = f.z, w[4 * q + 3] = f.w;
                }
#pragma unroll
                for (int u = 0; u < NIN; u++) v[u] = a.elu ? elu_col<BF16>(w[O + u]) : w[O + u];
            } else if (j0 >= a.H) {  // inputs x[j0 - H ..], all inside the row
                const float *xr = a.x + ((size_t)i * a.R + r) * a.T + (j0 - a.H);
#pragma unroll
                for (int u = 0; u < NIN; u++) v[u] = a.elu ? elu_col<BF16>(xr[u]) : xr[u];
            } else {
#pragma unroll
                for (int u = 0; u < NIN; u++) v[u] = xin(a, i, r, j0 + u);
            }
#pragma unroll
            for (int k = 0; k < K; k++) put4<BF16>(a.col, row4 + (size_t)k * N4 + n4, v[k], v[k + S], v[k + 2 * S], v[k + 3 * S]);
        }
    }
}

// The (K, S) pairs of Mimi's SEANet and resampling convs get im2col4_ks_kernel.
template <bool VEC, bool BF16>
static void (*im2col4_for(int K, int S))(const struct op_im2col) {
    if (K == 3 && S == 1) return im2col4_ks_kernel<3, 1, VEC, BF16>;
    if (K == 7 && S == 1) return im2col4_ks_kernel<7, 1, VEC, BF16>;
    if (K == 4 && S == 2) return im2col4_ks_kernel<4, 2, VEC, BF16>;
    if (K == 8 && S == 4) return im2col4_ks_kernel<8, 4, VEC, BF16>;
    if (K == 10 && S == 5) return im2col4_ks_kernel<10, 5, VEC, BF16>;
    if (K == 12 && S == 6) return im2col4_ks_kernel<12, 6, VEC, BF16>;
    if (K == 16 && S == 8) return im2col4_ks_kernel<16, 8, VEC, BF16>;
    return im2col4_kernel<BF16>;
}

template <bool BF16>
static int launch_im2col(const struct op_im2col *a, struct gpu_exec *ex) {
    const size_t N = (size_t)a->R * (a->T / a->S);
    const int rows = a->c_in + a->ones;
    // four columns per thread only where there are many columns: at one stream (N <= 1920) it
    // leaves too few threads to hide the loads (measured slower)
    if (a->tail && a->H <= 0) {
        if (ex->errmsg) snprintf(ex->errmsg, ex->errlen, "im2col: a staged history needs H > 0 (H = %d)", a->H);
        return MIMI_EINVAL;
    }
    if (N >= 32768 && (a->T / a->S) % 4 == 0 && (uintptr_t)a->col % 16 == 0 && !a->tail) {
        const dim3 grid = grid_rows(N / 4, 256, rows);
        const bool vec = a->T % 4 == 0 && (uintptr_t)a->x % 16 == 0 && a->H == a->K - a->S;
        pdl_launch(vec ? im2col4_for<true, BF16>(a->K, a->S) : im2col4_for<false, BF16>(a->K, a->S), grid, 256, 0, ex,
                   *a);
        return launch_status(ex, "im2col");
    }
    const dim3 grid = grid_rows(N, 256, rows);
    pdl_launch(im2col_kernel<BF16>, grid, 256, 0, ex, *a);
    return launch_status(ex, "im2col");
}

extern "C" int mimi_cuda_im2col(const struct op_im2col *a, struct gpu_exec *ex) {
    return a->col_bf16 ? launch_im2col<true>(a, ex) : launch_im2col<false>(a, ex);
}

// ---- direct conv ----

// The conv as a direct-kernel geometry (direct.cuh): columns (row, output step), reduction
// index i*K + k, one phase.
struct conv_geom {
    struct op_conv a;
    __device__ int cols() const { return a.in.R * (a.in.T / a.in.S); }
    __device__ int reduction() const { return a.in.c_in * a.in.K; }
    __device__ int phases() const { return 1; }
    __device__ int c_out() const { return a.c_out; }
    __host__ __device__ const struct gpu_split &split() const { return a.split; }
    __device__ const float *weight(int o, int, int p) const { return a.w + (size_t)o * a.ld + p; }
    __device__ bool weights_vec(int p0, int n) const {
        return a.ld % 4 == 0 && p0 % 4 == 0 && n % 4 == 0 && (uintptr_t)a.w % 16 == 0;
    }
    // Column n's [hist | f(x)] at index p = i*K + k, stepped DIRECT_WARPS indices at a time.
    struct cursor {
        const float *x, *hist;  // the row's channel-0 input and its slot's history (NULL: zeros)
        int i, k, j0, di, dk, replicate;
    };
    __device__ cursor start(int n, int, int p) const {
        const struct op_im2col &in = a.in;
        const int To = in.T / in.S, r = n / To, slot = in.row_slot[r], i = p / in.K;
        const float *hist = slot >= 0 && in.H > 0 ? in.hist + (size_t)slot * in.slot_stride : NULL;
        const int replicate = slot >= 0 && in.replicate && !in.started[(size_t)slot * in.slot_stride];
        return cursor{in.x + (size_t)r * in.T, hist, i, p - i * in.K, (n - r * To) * in.S,
                      DIRECT_WARPS / in.K, DIRECT_WARPS % in.K, replicate};
    }
    // x (f applies), the replicated first column (f applies), or the history as stored (f(x)).
    __device__ float take(const cursor &c, bool &act) const {
        const struct op_im2col &in = a.in;
        const float *xr = c.x + (size_t)c.i * in.R * in.T;
        const int j = c.j0 + c.k;
        const float *at = j >= in.H ? xr + (j - in.H) : c.replicate ? xr : c.hist ? c.hist + (size_t)c.i * in.H + j : NULL;
        act = in.elu && (j >= in.H || c.replicate);
        return at ? *at : 0.0f;
    }
    __device__ float activate(float v) const { return elu_f(v); }
    __device__ void advance(cursor &c) const {
        c.i += c.di, c.k += c.dk;
        if (c.k >= a.in.K) c.k -= a.in.K, c.i++;
    }
    // The newest H = K - S columns of [hist | f(x)] into `tail` (c_in, R, H): a row's last output
    // column t = T/S - 1 reads columns T - S + k at its taps k, so its taps k >= S are column
    // T + k - S of the new history. The blocks of the first channel group whose column tile holds
    // a row's last column store them from the staged slice (each reduction part its own indices),
    // with no memory round trip of their own.
    __device__ void staged(const float *xs, int n0, int, int p0, int kc) const {
        const struct op_im2col &in = a.in;
        if (!a.tail || blockIdx.y != 0) return;
        const int To = in.T / in.S, N = in.R * To;
        for (int r = n0 / To; r < in.R && r * To <= n0 + 31; r++) {
            const int last = r * To + To - 1;
            if (last < n0 || last > n0 + 31 || last >= N) continue;
            for (int q = threadIdx.x; q < kc; q += blockDim.x) {
                const int p = p0 + q, i = p / in.K, k = p - i * in.K;
                if (k >= in.S) a.tail[((size_t)i * in.R + r) * in.H + (k - in.S)] = xs[q * 32 + (last - n0)];
            }
        }
    }
    struct epi {
        float bias, y;  // the bias, and y as it was when the conv adds to it
    };
    __device__ epi load(int o, int, int n) const {
        return epi{a.bias ? a.w[(size_t)o * a.ld + reduction()] : 0.0f, a.accumulate ? a.y[(size_t)o * cols() + n] : 0.0f};
    }
    __device__ void store(int o, int, int n, float v, const epi &e) const {
        if (a.bias) v += e.bias;
        if (a.post_elu) v = elu_f(v);
        v = a.accumulate ? e.y + v : v;
        a.y[(size_t)o * cols() + n] = a.elu_out ? elu_f(v) : v;
    }
};

// ---- narrow conv (one output channel) ----

// Block: GPU_NARROW_COLS consecutive output steps t0 .. of one row, a thread each. For every
// GPU_NARROW_CHANNELS input channels the block stages their windows xin(i, r, t0*S + j),
// j < W = GPU_NARROW_WINDOW(K, S), once (f = ELU applied there), then each thread adds its
// column's c*K products from shared memory, channels and taps in ascending order. FAST: the
// steady windows' ELU is elu_bf16 (in.fast_elu).
template <bool FAST>
static __global__ void narrow_kernel(const struct op_conv a) {
    pdl_begin();
    extern __shared__ float narrow_win[];  // (GPU_NARROW_CHANNELS, W)
    __shared__ float narrow_w[GPU_NARROW_CHANNELS * GPU_NARROW_MAX_K];
    const struct op_im2col &in = a.in;
    const int To = in.T / in.S, tiles = (To + GPU_NARROW_COLS - 1) / GPU_NARROW_COLS;
    const int r = blockIdx.x / tiles, t0 = blockIdx.x % tiles * GPU_NARROW_COLS, t = t0 + threadIdx.x;
    const int W = GPU_NARROW_WINDOW(in.K, in.S), j0 = t0 * in.S;
    float acc = 0.0f;
    for (int i0 = 0; i0 < in.c_in; i0 += GPU_NARROW_CHANNELS) {
        const int nc = min(GPU_NARROW_CHANNELS, in.c_in - i0);
        __syncthreads();  // the previous windows are consumed
        for (int e = threadIdx.x; e < nc * in.K; e += blockDim.x) narrow_w[e] = a.w[(size_t)i0 * in.K + e];
        if (nc == GPU_NARROW_CHANNELS && j0 >= in.H && j0 + W <= in.H + in.T) {
            // a window inside this step's input: every channel's value loaded before any is stored
            const float *x0 = in.x + ((size_t)i0 * in.R + r) * in.T + (j0 - in.H);
            for (int j = threadIdx.x; j < W; j += blockDim.x) {
                float v[GPU_NARROW_CHANNELS];
#pragma unroll
                for (int c = 0; c < GPU_NARROW_CHANNELS; c++) v[c] = x0[(size_t)c * in.R * in.T + j];
#pragma unroll
                for (int c = 0; c < GPU_NARROW_CHANNELS; c++)
                    narrow_win[c * W + j] = !in.elu ? v[c] : FAST ? elu_bf16(v[c]) : elu_f(v[c]);
            }
        } else {
            // zeros past the row's end (the last tile's idle columns)
            for (int c = 0; c < nc; c++)
                for (int j = threadIdx.x; j < W; j += blockDim.x)
                    narrow_win[c * W + j] = j0 + j < in.H + in.T ? xin(in, i0 + c, r, j0 + j) : 0.0f;
        }
        __syncthreads();
        for (int c = 0; c < nc; c++) {
            const float *w = narrow_w + c * in.K, *x = narrow_win + c * W + threadIdx.x * in.S;
            for (int k = 0; k < in.K; k++) acc += w[k] * x[k];
        }
    }
    if (t >= To) return;
    float v = acc;
    if (a.bias) v += a.w[(size_t)in.c_in * in.K];
    if (a.post_elu) v = elu_f(v);
    float *y = a.y + (size_t)r * To + t;
    v = a.accumulate ? *y + v : v;
    *y = a.elu_out ? elu_f(v) : v;
}

static int launch_narrow(const struct op_conv *a, struct gpu_exec *ex) {
    const int To = a->in.T / a->in.S, tiles = (To + GPU_NARROW_COLS - 1) / GPU_NARROW_COLS;
    const size_t smem = sizeof(float) * GPU_NARROW_CHANNELS * GPU_NARROW_WINDOW(a->in.K, a->in.S);
    if (a->c_out != 1 || a->in.K > GPU_NARROW_MAX_K || smem > 40 * 1024) {
        if (ex->errmsg)
            snprintf(ex->errmsg, ex->errlen, "conv: the narrow kernel takes one output channel, K <= %d and windows within 40 KB",
                     GPU_NARROW_MAX_K);
        return MIMI_EINVAL;
    }
    pdl_launch(a->in.fast_elu ? narrow_kernel<true> : narrow_kernel<false>, dim3((unsigned)a->in.R * tiles),
               GPU_NARROW_COLS, smem, ex, *a);
    return launch_status(ex, "conv");
}

extern "C" int mimi_cuda_conv(const struct op_conv *a, struct gpu_exec *ex) {
    if (a->narrow && a->tail) {
        if (ex->errmsg) snprintf(ex->errmsg, ex->errlen, "conv: the narrow kernel does not stage its history");
        return MIMI_EINVAL;
    }
    if (a->narrow) return launch_narrow(a, ex);
    return direct_launch(conv_geom{*a}, a->in.R * (a->in.T / a->in.S), a->c_out, 1, ex, "conv");
}

// ---- carry ----

// Block (r, g) carries channels [g*cpb, (g+1)*cpb) of row r: a contiguous run of its slot's
// history (c_in, H), written in order. Element e = (i, j) takes column T + j of [hist | f(x)]:
// either f(x) or the old history's element e + T of the same channel, which no earlier pass of
// the loop wrote (they write elements below e) and no other block touches. Each pass reads all
// its elements before any thread writes (the overlap lesson of the design notes: with H > T a
// thread per element would race).
#define CARRY_THREADS 256
#define CARRY_PER 4
static __global__ void __launch_bounds__(CARRY_THREADS) carry_kernel(const struct op_im2col a, int cpb) {
    pdl_begin();
    const int r = blockIdx.x, slot = a.row_slot[r];
    if (slot < 0) return;
    const int i0 = blockIdx.y * cpb, e_end = min(a.c_in - i0, cpb) * a.H;
    float *h = (float *)a.hist + (size_t)slot * a.slot_stride + (size_t)i0 * a.H;
    for (int e0 = 0; e0 < e_end; e0 += CARRY_THREADS * CARRY_PER) {
        float v[CARRY_PER];
#pragma unroll
        for (int u = 0; u < CARRY_PER; u++) {
            const int e = e0 + u * CARRY_THREADS + threadIdx.x, i = e / a.H;
            if (e < e_end) v[u] = xin(a, i0 + i, r, a.T + e - i * a.H);
        }
        __syncthreads();
#pragma unroll
        for (int u = 0; u < CARRY_PER; u++) {
            const int e = e0 + u * CARRY_THREADS + threadIdx.x;
            if (e < e_end) h[e] = v[u];
        }
        __syncthreads();
    }
}

static int launch_carry(const struct op_im2col *a, struct gpu_exec *ex) {
    if (a->H <= 0) return 0;
    const int cpb = a->H >= CARRY_THREADS * CARRY_PER ? 1 : CARRY_THREADS * CARRY_PER / a->H;  // one pass per block
    pdl_launch(carry_kernel, dim3(a->R, (a->c_in + cpb - 1) / cpb), CARRY_THREADS, 0, ex, *a, cpb);
    return launch_status(ex, "carry");
}

extern "C" int mimi_cuda_carry(const struct op_im2col *a, struct gpu_exec *ex) {
    return launch_carry(a, ex);
}

// ---- staged tails ----

// Block (x, e) stores entry e's (C, P) per non-padding row, its threads on consecutive elements
// of the source; blocks (x, n) do the step's finish (with_finish).
static __global__ void tails_kernel(const struct op_tails a) {
    pdl_begin();
    if (blockIdx.y == a.n) {
        finish_rows(a.finish, blockIdx.x * blockDim.x + threadIdx.x, gridDim.x * blockDim.x);
        return;
    }
    const struct gpu_tail &t = a.e[blockIdx.y];
    const int total = t.C * a.R * t.P;
    for (int e = blockIdx.x * blockDim.x + threadIdx.x; e < total; e += gridDim.x * blockDim.x) {
        const int j = e % t.P, cr = e / t.P, r = cr % a.R, c = cr / a.R, slot = a.row_slot[r];
        if (slot >= 0) t.dst[(size_t)slot * a.slot_stride + (size_t)c * t.P + j] = t.src[e];
    }
}

extern "C" int mimi_cuda_tails(const struct op_tails *a, struct gpu_exec *ex) {
    if (a->n < 1 || a->n > GPU_MAX_TAILS) {
        if (ex->errmsg) snprintf(ex->errmsg, ex->errlen, "tails: %d entries (1 to %d)", a->n, GPU_MAX_TAILS);
        return MIMI_EINVAL;
    }
    int most = 0;
    for (int e = 0; e < a->n; e++) most = max(most, a->e[e].C * a->R * a->e[e].P);
    pdl_launch(tails_kernel, dim3(grid_for((size_t)most, 256), a->n + (a->with_finish != 0)), 256, 0, ex, *a);
    return launch_status(ex, "tails");
}
