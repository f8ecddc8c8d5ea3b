/*
 * convtr1d.cu - the streaming ConvTranspose1d (spec 5.2; reference src/nn/conv.c). Large dense
 * layers: per-tap products from one cuBLAS call (matmul.cu), then the overlap-add here (the
 * emitted columns with bias and the previous call's tail, then the new tail without bias); a
 * depthwise layer (the upsample) multiplies its input in the overlap-add. Small dense layers:
 * the whole layer in one direct kernel (direct.cuh) and a copy of the new tail.
 */
#include <stdint.h>

#include "convtr.cuh"
#include "direct.cuh"

// ---- emitted columns ----

// y[o, r, j] = ((bias + taps) + tail[j]) for j < S*T; blockIdx.y walks the channels o, x the
// (row, column) pairs with 32-bit index arithmetic. With `carry` (S*T >= P: no new tail column
// takes an old one) the thread of column j < P stores the new tail's column j after reading the
// old one.
static __global__ void convtr_out_kernel(const struct op_convtr a) {
    pdl_begin();
    const unsigned L = a.S * a.T, N = (unsigned)a.R * L;
    for (int o = blockIdx.y; o < a.c_out; o += gridDim.y) {
        const float b = a.bias ? a.bias[o] : 0.0f;
        for (unsigned n = blockIdx.x * blockDim.x + threadIdx.x; n < N; n += gridDim.x * blockDim.x) {
            const unsigned r = n / L;
            convtr_emit(a, o, r, n - r * L, b);
        }
    }
}

// The same for a dense layer with K = 2S (every SEANet upsampling layer): output step t*S + f
// takes tap f at input step t and, for t > 0, tap f + S at step t - 1, added in that ascending
// order. A thread takes one input step (o, r, t) and writes its S outputs: the taps it reads
// are coalesced rows, with no per-output index arithmetic.
// (bias + tap f + S of column n - 1) + tap f of column n: output f of an input step t > 0.
static __device__ __forceinline__ float convtr_pair(const float *taps, unsigned N, unsigned n, int S, int f, float b) {
    return __fadd_rn(__fadd_rn(b, taps[(size_t)(f + S) * N + n - 1]), taps[(size_t)f * N + n]);
}

// With a.next (small steps), the new tail of channel o, row r staged for the step's tails op:
// column f is (bias + tap f + S of the row's last input step) - bias, as convtr_tail2_kernel
// stores it; `last` points at tap 0 of that step (taps of one channel, N columns apart).
static __device__ __forceinline__ void stage_next2(const struct op_convtr &a, int o, unsigned r, const float *last,
                                                   unsigned N, float b) {
    float *next = a.next + ((size_t)o * a.R + r) * a.S;
    for (int f = 0; f < a.S; f++) next[f] = __fsub_rn(__fadd_rn(b, last[(size_t)(f + a.S) * N]), b);
}

static __global__ void convtr_out2_kernel(const struct op_convtr a) {
    pdl_begin();
    const unsigned N = (unsigned)a.R * a.T;
    const int S = a.S;
    for (int o = blockIdx.y; o < a.c_out; o += gridDim.y) {
        const float b = a.bias ? a.bias[o] : 0.0f;
        const float *taps = a.taps + (size_t)o * 2 * S * N;  // tap k of column n at taps[k*N + n]
        for (unsigned n = blockIdx.x * blockDim.x + threadIdx.x; n < N; n += gridDim.x * blockDim.x) {
            const unsigned r = n / a.T, t = n - r * a.T;
            float *y = a.y + ((size_t)o * N + n) * S;
            if (a.next && t == a.T - 1) stage_next2(a, o, r, taps + n, N, b);
            if (t > 0 && S % 4 == 0 && (uintptr_t)a.y % 16 == 0) {  // 16-byte stores
                for (int f = 0; f < S; f += 4)
                    *(float4 *)(y + f) = make_float4(convtr_pair(taps, N, n, S, f, b), convtr_pair(taps, N, n, S, f + 1, b),
                                                     convtr_pair(taps, N, n, S, f + 2, b), convtr_pair(taps, N, n, S, f + 3, b));
                continue;
            }
            if (t > 0) {
                for (int f = 0; f < S; f++) y[f] = convtr_pair(taps, N, n, S, f, b);
                continue;
            }
            for (int f = 0; f < S; f++) y[f] = add_tail(a, o, r, f, S, __fadd_rn(b, taps[(size_t)f * N + n]));
        }
    }
}

// The same, 4 input steps per thread where T % 4 = 0 (the 4 lie in one row, and only the first
// can be its step 0): 16-byte loads of each tap row, and the 4S contiguous outputs stored as S
// 16-byte stores. The sums are convtr_pair's.
template <int S>
static __global__ void convtr_out2x4_kernel(const struct op_convtr a) {
    pdl_begin();
    const unsigned N = (unsigned)a.R * a.T, N4 = N / 4;
    for (int o = blockIdx.y; o < a.c_out; o += gridDim.y) {
        const float b = a.bias ? a.bias[o] : 0.0f;
        const float *taps = a.taps + (size_t)o * 2 * S * N;
        for (unsigned g = blockIdx.x * blockDim.x + threadIdx.x; g < N4; g += gridDim.x * blockDim.x) {
            const unsigned n = 4 * g, r = n / a.T, t = n - r * a.T;
            if (a.next && t + 4 == (unsigned)a.T) stage_next2(a, o, r, taps + n + 3, N, b);
            float out[4 * S];  // out[u*S + f]: output f of input step n + u
#pragma unroll
            for (int f = 0; f < S; f++) {
                const float4 cur = *(const float4 *)(taps + (size_t)f * N + n);
                const float4 prev = *(const float4 *)(taps + (size_t)(f + S) * N + n);
                out[f] = t > 0 ? __fadd_rn(__fadd_rn(b, taps[(size_t)(f + S) * N + n - 1]), cur.x)
                               : add_tail(a, o, r, f, S, __fadd_rn(b, cur.x));
                out[S + f] = __fadd_rn(__fadd_rn(b, prev.x), cur.y);
                out[2 * S + f] = __fadd_rn(__fadd_rn(b, prev.y), cur.z);
                out[3 * S + f] = __fadd_rn(__fadd_rn(b, prev.z), cur.w);
            }
            float4 *y = (float4 *)(a.y + ((size_t)o * N + n) * S);
#pragma unroll
            for (int q = 0; q < S; q++) y[q] = make_float4(out[4 * q], out[4 * q + 1], out[4 * q + 2], out[4 * q + 3]);
        }
    }
}

template <int S>
static int launch_out2x4(const struct op_convtr *a, struct gpu_exec *ex) {
    const dim3 grid = grid_rows((size_t)a->R * a->T / 4, 256, a->c_out);
    pdl_launch(convtr_out2x4_kernel<S>, grid, 256, 0, ex, *a);
    return launch_status(ex, "convtr_out");
}

static int launch_out(const struct op_convtr *a, struct gpu_exec *ex) {
    if (a->next && (a->carry || !a->taps || a->K != 2 * a->S)) {
        if (ex->errmsg)
            snprintf(ex->errmsg, ex->errlen, "convtr_out: a staged tail takes a dense layer with K = 2S and no carry "
                     "(K %d, S %d)", a->K, a->S);
        return MIMI_EINVAL;
    }
    if (a->carry) {
        if (!GPU_CONVTR_OUT_CARRIES(a->K, a->S, a->T)) {
            if (ex->errmsg)
                snprintf(ex->errmsg, ex->errlen, "convtr_out: a tail of %d columns over %d outputs takes the tail launch",
                         a->K - a->S, a->S * a->T);
            return MIMI_EUNSUPPORTED;
        }
        pdl_launch(convtr_out_kernel, grid_rows((size_t)a->R * a->S * a->T, 256, a->c_out), 256, 0, ex, *a);
        return launch_status(ex, "convtr_out");
    }
    if (a->taps && a->K == 2 * a->S && a->T % 4 == 0 && (uintptr_t)a->taps % 16 == 0 && (uintptr_t)a->y % 16 == 0) {
        switch (a->S) {
        case 4: return launch_out2x4<4>(a, ex);
        case 5: return launch_out2x4<5>(a, ex);
        case 6: return launch_out2x4<6>(a, ex);
        case 8: return launch_out2x4<8>(a, ex);
        default: break;
        }
    }
    if (a->taps && a->K == 2 * a->S) {
        const dim3 grid = grid_rows((size_t)a->R * a->T, 256, a->c_out);
        pdl_launch(convtr_out2_kernel, grid, 256, 0, ex, *a);
        return launch_status(ex, "convtr_out");
    }
    const size_t N = (size_t)a->R * a->S * a->T;
    const dim3 grid = grid_rows(N, 256, a->c_out);
    pdl_launch(convtr_out_kernel, grid, 256, 0, ex, *a);
    return launch_status(ex, "convtr_out");
}

extern "C" int mimi_cuda_convtr_out(const struct op_convtr *a, struct gpu_exec *ex) { return launch_out(a, ex); }

// ---- carried tail ----

// tail[j] = full[S*T + j] - bias, with full as the reference forms it (bias + taps + old tail).
// One thread per (channel, row), ascending: column j reads old column S*T + j > j.
static __global__ void convtr_tail_kernel(const struct op_convtr a) {
    pdl_begin();
    const int P = a.K - a.S, L = a.S * a.T;
    FOR_EACH(idx, (size_t)a.c_out * a.R) {
        int o = (int)(idx / a.R), r = (int)(idx - (size_t)o * a.R);
        int slot = a.row_slot[r];
        if (slot < 0) continue;
        float *tail = a.tail + (size_t)slot * a.slot_stride + (size_t)o * P;
        float b = a.bias ? a.bias[o] : 0.0f;
        for (int j = 0; j < P; j++) {
            float v = convtr_col(a, o, r, L + j, b);
            if (L + j < P) v = __fadd_rn(v, tail[L + j]);
            tail[j] = __fsub_rn(v, b);
        }
    }
}

// The same for a dense layer with K = 2S: tail column f is tap f + S of the last input step
// alone (the old tail only reaches the first S output columns), with the bias added and taken
// off as the reference forms it; a thread per (channel, row, column).
static __global__ void convtr_tail2_kernel(const struct op_convtr a) {
    pdl_begin();
    const size_t N = (size_t)a.R * a.T;
    FOR_EACH(idx, (size_t)a.c_out * a.R * a.S) {
        const int f = (int)(idx % a.S);
        const size_t orow = idx / a.S;
        const int o = (int)(orow / a.R), r = (int)(orow - (size_t)o * a.R);
        const int slot = a.row_slot[r];
        if (slot < 0) continue;
        const float b = a.bias ? a.bias[o] : 0.0f;
        const float v = __fadd_rn(b, a.taps[((size_t)o * a.K + f + a.S) * N + (size_t)r * a.T + a.T - 1]);
        a.tail[(size_t)slot * a.slot_stride + (size_t)o * a.S + f] = __fsub_rn(v, b);
    }
}

static int launch_tail(const struct op_convtr *a, struct gpu_exec *ex) {
    if (a->taps && a->K == 2 * a->S) {
        pdl_launch(convtr_tail2_kernel, grid_for((size_t)a->c_out * a->R * a->S, 256), 256, 0, ex, *a);
        return launch_status(ex, "convtr_tail");
    }
    pdl_launch(convtr_tail_kernel, grid_for((size_t)a->c_out * a->R, 128), 128, 0, ex, *a);
    return launch_status(ex, "convtr_tail");
}

extern "C" int mimi_cuda_convtr_tail(const struct op_convtr *a, struct gpu_exec *ex) { return launch_tail(a, ex); }

// ---- direct (small dense layers, K = 2S) ----

// The transposed conv as a direct-kernel geometry: output phase f = j mod S, columns
// (row, t) with t = 0 .. T (t = T: the next tail), reduction index u*c_in + i for the taps
// k = f + u*S on input step t - u.
struct convtr_geom {
    struct op_convtr_direct a;
    __device__ int cols() const { return a.tr.R * (a.tr.T + 1); }
    __device__ int reduction() const { return 2 * a.c_in; }
    __device__ int phases() const { return a.tr.S; }
    __device__ int c_out() const { return a.tr.c_out; }
    __host__ __device__ const struct gpu_split &split() const { return a.split; }
    __device__ const float *weight(int o, int f, int p) const {
        const int u = p / a.c_in;
        return a.tr.w + ((size_t)o * a.tr.K + f + u * a.tr.S) * a.c_in + (p - u * a.c_in);
    }
    __device__ bool weights_vec(int p0, int n) const {
        return a.c_in % 4 == 0 && p0 % 4 == 0 && n % 4 == 0 && (uintptr_t)a.tr.w % 16 == 0;
    }
    // Column n's input x(i, r, t - u) at index p = u*c_in + i, stepped DIRECT_WARPS at a time.
    struct cursor {
        const float *x;  // the row's channel-0 input
        int t, u, i;
    };
    __device__ cursor start(int n, int, int p) const {
        const int r = n / (a.tr.T + 1), u = p / a.c_in;
        return cursor{a.tr.x + (size_t)r * a.tr.T, n - r * (a.tr.T + 1), u, p - u * a.c_in};
    }
    __device__ float take(const cursor &c, bool &act) const {
        const int t = c.t - c.u;
        act = false;  // the input is taken as it is (the ELU before it is a launch of its own)
        return t >= 0 && t < a.tr.T ? c.x[(size_t)c.i * a.tr.R * a.tr.T + t] : 0.0f;
    }
    __device__ float activate(float v) const { return v; }
    __device__ void advance(cursor &c) const {
        c.i += DIRECT_WARPS;
        while (c.i >= a.c_in) c.i -= a.c_in, c.u++;
    }
    __device__ void staged(const float *, int, int, int, int) const {}
    struct epi {
        float bias, tail;  // the bias; at a row's step 0 the tail's column f (zero without a slot)
        bool tailed;
    };
    __device__ epi load(int o, int f, int n) const {
        const struct op_convtr &tr = a.tr;
        const int r = n / (tr.T + 1), t = n - r * (tr.T + 1);
        const float *tail = t == 0 && t != tr.T ? slot_tail(tr, o, r, tr.S) : NULL;
        return epi{tr.bias ? tr.bias[o] : 0.0f, tail ? tail[f] : 0.0f, tail != NULL};
    }
    __device__ void store(int o, int f, int n, float v, const epi &e) const {
        const struct op_convtr &tr = a.tr;
        const int r = n / (tr.T + 1), t = n - r * (tr.T + 1), S = tr.S;
        v = __fadd_rn(e.bias, v);
        if (t == tr.T) {  // the tail the full output leaves, without the bias
            a.next[((size_t)o * tr.R + r) * S + f] = __fsub_rn(v, e.bias);
            return;
        }
        if (e.tailed) v = __fadd_rn(v, e.tail);  // add_tail's sum
        tr.y[((size_t)o * tr.R + r) * S * tr.T + t * S + f] = v;
    }
};

extern "C" int mimi_cuda_convtr_direct(const struct op_convtr_direct *a, struct gpu_exec *ex) {
    if (a->tr.K != 2 * a->tr.S) {
        if (ex->errmsg) snprintf(ex->errmsg, ex->errlen, "convtr_direct: kernel %d is not twice the stride %d", a->tr.K, a->tr.S);
        return MIMI_EINVAL;
    }
    return direct_launch(convtr_geom{*a}, a->tr.R * (a->tr.T + 1), a->tr.c_out, a->tr.S, ex, "convtr_direct");
}

// tail (c_out, P = S) of every non-padding row's slot = next.
static __global__ void convtr_copy_kernel(const struct op_convtr_direct a) {
    pdl_begin();
    const struct op_convtr &tr = a.tr;
    FOR_EACH(idx, (size_t)tr.c_out * tr.R * tr.S) {
        const int f = (int)(idx % tr.S), r = (int)(idx / tr.S % tr.R), o = (int)(idx / ((size_t)tr.S * tr.R));
        const int slot = tr.row_slot[r];
        if (slot >= 0) tr.tail[(size_t)slot * tr.slot_stride + (size_t)o * tr.S + f] = a.next[idx];
    }
}

extern "C" int mimi_cuda_convtr_copy(const struct op_convtr_direct *a, struct gpu_exec *ex) {
    pdl_launch(convtr_copy_kernel, grid_for((size_t)a->tr.c_out * a->tr.R * a->tr.S, 256), 256, 0, ex, *a);
    return launch_status(ex, "convtr_copy");
}
