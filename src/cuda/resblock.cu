/*
 * resblock.cu - a SEANet residual block over many columns in one kernel (op_resblock; reference
 * src/nn/seanet.c): the k3 conv's input window is staged once per block with its ELU, the hidden
 * activations stay in shared memory, and the 1x1 conv adds the residual as it stores. It stands
 * in for im2col, two products and an ELU pass on the top SEANet level of large steps (64 channels
 * over 1920 steps per frame): 3.0 ms against 4.4 ms for 2048 rows on an H200. At 128 channels
 * and 480 steps it lost to them (3.0 against 2.5 ms), so it takes 64 channels only.
 *
 * A block takes RB_TILE columns of one row and every channel; warp w computes the hidden outputs
 * w*RB_OUTS .. +RB_OUTS, each lane RB_COLS columns 32 apart (consecutive lanes read consecutive
 * shared words), so a reduction index costs RB_COLS shared loads and two broadcast 16-byte weight
 * loads for RB_OUTS * RB_COLS multiply-adds, in f32.
 */
#include "cuda/common.cuh"

#define RB_OUTS 8    // outputs per warp and pass (a multiple of 4)
#define RB_COLS 4    // columns per lane
#define RB_BATCH 13  // window loads in flight per thread
#define RB_TILE (32 * RB_COLS)
#define RB_WIN (RB_TILE + GPU_RESBLOCK_K - 1)
// Blocks per SM: shared memory holds 6 windows of 130 columns; the bound keeps registers within
// that (80). At 2048 rows: 160-column tiles, 27 loads in flight and 5 blocks took 3.25 ms; 96
// columns and 8 blocks 3.02; this 3.01.
#define RB_MIN_BLOCKS 6

// The RB_OUTS floats at p (16-byte aligned), through the read-only path.
static __device__ __forceinline__ void load_w(const float *p, float w[RB_OUTS]) {
#pragma unroll
    for (int q = 0; q < RB_OUTS / 4; q++) {
        const float4 a = __ldg((const float4 *)p + q);
        w[4 * q] = a.x, w[4 * q + 1] = a.y, w[4 * q + 2] = a.z, w[4 * q + 3] = a.w;
    }
}

// acc[o][c] += w[o] * v[c] over one reduction index.
static __device__ __forceinline__ void outer(float acc[RB_OUTS][RB_COLS], const float w[RB_OUTS],
                                             const float v[RB_COLS]) {
#pragma unroll
    for (int c = 0; c < RB_COLS; c++)
#pragma unroll
        for (int o = 0; o < RB_OUTS; o++) acc[o][c] = fmaf(w[o], v[c], acc[o][c]);
}

template <int C>
static __global__ void __launch_bounds__(32 * (C / 2 / RB_OUTS), RB_MIN_BLOCKS) resblock_kernel(const struct op_resblock a) {
    constexpr int HID = C / 2, THREADS = 32 * (HID / RB_OUTS), K = GPU_RESBLOCK_K;
    pdl_begin();
    extern __shared__ float xs[];  // (C, RB_WIN): xin over the tile's window; then h (HID, RB_TILE)
    const struct op_im2col &in = a.in;
    const int T = in.T, tiles = (T + RB_TILE - 1) / RB_TILE;
    const int r = blockIdx.x / tiles, t0 = (blockIdx.x - r * tiles) * RB_TILE;
    const int lane = threadIdx.x & 31, j0 = (threadIdx.x >> 5) * RB_OUTS;
    // the window: xin(i, r, t0 + u) for u < RB_WIN, zeros past the row's end. Each thread has
    // RB_BATCH loads of x in flight before it applies the ELU (with fewer the kernel waited on
    // them: in 160-column tiles 5.0 ms at 9, 6.0 ms at 1, 3.4 ms at 27 for 2048 rows); the
    // history's H columns (first tile only) are filled apart.
    static_assert(C * RB_WIN % (THREADS * RB_BATCH) == 0, "the window splits evenly");
    const int H = in.H;
#pragma unroll 1
    for (int e0 = threadIdx.x; e0 < C * RB_WIN; e0 += THREADS * RB_BATCH) {
        float v[RB_BATCH];
#pragma unroll
        for (int q = 0; q < RB_BATCH; q++) {
            const int e = e0 + q * THREADS, i = e / RB_WIN, t = t0 + e - i * RB_WIN - H;
            v[q] = t >= 0 && t < T ? in.x[((size_t)i * in.R + r) * T + t] : 0.0f;
        }
#pragma unroll
        for (int q = 0; q < RB_BATCH; q++) {
            const int e = e0 + q * THREADS;
            if (t0 + e % RB_WIN >= H) xs[e] = elu_f(v[q]);
        }
    }
    if (t0 == 0)
        for (int e = threadIdx.x; e < C * H; e += THREADS) xs[(e / H) * RB_WIN + e % H] = xin(in, e / H, r, e % H);
    __syncthreads();

    // h = elu(b1 + W1 . window) for this warp's outputs and this lane's columns
    float acc[RB_OUTS][RB_COLS] = {}, w[RB_OUTS], v[RB_COLS];
#pragma unroll 2  // two channels' loads in flight together: 3.41 -> 3.30 ms at 2048 rows
    for (int i = 0; i < C; i++) {
#pragma unroll
        for (int k = 0; k < K; k++) {
            load_w(a.w1t + (size_t)(i * K + k) * HID + j0, w);
#pragma unroll
            for (int c = 0; c < RB_COLS; c++) v[c] = xs[i * RB_WIN + 32 * c + lane + k];
            outer(acc, w, v);
        }
    }
    load_w(a.w1t + (size_t)C * K * HID + j0, w);
    __syncthreads();  // every warp is done with the window: h takes its place
    float *h = xs;
#pragma unroll
    for (int o = 0; o < RB_OUTS; o++)
#pragma unroll
        for (int c = 0; c < RB_COLS; c++) h[(j0 + o) * RB_TILE + 32 * c + lane] = elu_f(acc[o][c] + w[o]);
    __syncthreads();

    // y = x + (b2 + W2 . h): outputs j0 .. +RB_OUTS, then HID + j0 .. +RB_OUTS
#pragma unroll 1
    for (int o0 = j0; o0 < C; o0 += HID) {
#pragma unroll
        for (int o = 0; o < RB_OUTS; o++)
#pragma unroll
            for (int c = 0; c < RB_COLS; c++) acc[o][c] = 0.0f;
#pragma unroll 2
        for (int j = 0; j < HID; j++) {
            load_w(a.w2t + (size_t)j * C + o0, w);
#pragma unroll
            for (int c = 0; c < RB_COLS; c++) v[c] = h[j * RB_TILE + 32 * c + lane];
            outer(acc, w, v);
        }
        load_w(a.w2t + (size_t)HID * C + o0, w);
#pragma unroll
        for (int c = 0; c < RB_COLS; c++) {
            const int t = t0 + 32 * c + lane;
            if (t >= T) continue;
#pragma unroll
            for (int o = 0; o < RB_OUTS; o++) {
                const size_t at = ((size_t)(o0 + o) * in.R + r) * T + t;
                a.y[at] = in.x[at] + (acc[o][c] + w[o]);
            }
        }
    }
}

template <int C>
static int launch(const struct op_resblock *a, struct gpu_exec *ex) {
    const size_t smem = sizeof(float) * C * RB_WIN;
    const unsigned blocks = (unsigned)a->in.R * ((a->in.T + RB_TILE - 1) / RB_TILE);
    if (smem > 48 * 1024 &&
        cudaFuncSetAttribute(resblock_kernel<C>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem) != cudaSuccess)
        return launch_status(ex, "resblock (shared memory)");
    pdl_launch(resblock_kernel<C>, dim3(blocks), dim3(32 * (C / 2 / RB_OUTS)), smem, ex, *a);
    return launch_status(ex, "resblock");
}

extern "C" int mimi_cuda_resblock(const struct op_resblock *a, struct gpu_exec *ex) {
    const int c = a->in.c_in;
    if (!GPU_RESBLOCK_FITS(c, a->hid) || a->in.K != GPU_RESBLOCK_K || a->in.S != 1 || a->in.replicate) {
        if (ex->errmsg) snprintf(ex->errmsg, ex->errlen, "resblock: %d channels, %d hidden, K %d, stride %d: no kernel", c,
                                 a->hid, a->in.K, a->in.S);
        return MIMI_EUNSUPPORTED;
    }
    return launch<64>(a, ex);
}
