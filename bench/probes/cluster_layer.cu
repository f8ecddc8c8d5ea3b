/*
 * cluster_layer.cu - the skeleton of a one-stream transformer layer held by one thread-block
 * cluster (docs/GPU-PERFORMANCE.md): its four products (in_proj 1536 x 512, out_proj 512 x 512,
 * linear1 2048 x 512, linear2 512 x 2048, f32, two rows: a frame's two steps) with every weight
 * streamed once through a ring of shared memory (cp.async, issued as far ahead as the ring
 * allows, across the waits), each product's outputs gathered into every block over distributed
 * shared memory after a cluster barrier, and a LayerNorm-like block reduction before in_proj and
 * linear1. No attention, rotation or residual arithmetic: it times what the products, the weight
 * stream and the cluster's exchanges cost, against the persistent kernel's 21-23 us a layer.
 * A probe, not part of the library or its tests; the build's `cluster-layer-probe`, or by hand:
 *   nvcc -O3 -arch=sm_90 -Iinclude -Isrc/cuda -Isrc -o cluster_layer bench/probes/cluster_layer.cu
 * Each line: the clusters and their size (with several, each cluster holds its share of every
 * product's rows and exchanges only within itself: a lower bound on a design of that many
 * clusters that meet through global memory), the chunks of 16 KB a product takes at a time (one
 * wait and two block barriers for them), us a layer (8 layers a launch, 100 MB of weights from
 * DRAM) and the rate the weights streamed at; then the same with parts left out: the products' arithmetic (mode 1), the
 * weights' copies (mode 2), or both (3: the waits, barriers and exchanges alone).
 */
#include <cooperative_groups.h>
#include <stdio.h>

#include "common.cuh"  // cp_async16, warp_sum_f
#include "probe_time.cuh"

namespace cg = cooperative_groups;

#define THREADS 512
#define WARPS (THREADS / 32)
#define S 2          // rows (steps)
#define D 512
#define FF 2048
#define LAYERS 8
#define LAYER_FLOATS (3 * D * D + D * D + FF * D + D * FF)  // a layer's weights
#define CHUNK 4096   // floats a ring slot (16 KB)
#define SLOTS 12     // 192 KB of ring
#define MAXG 4  // the most chunks a product takes at a time
#define MINC 8  // the smallest cluster: its blocks hold the most outputs of a product

// Product m of a layer (in_proj, out_proj, linear1, linear2): J outputs of K inputs; weights (J, K)
// row-major after the layer's earlier ones.
static __host__ __device__ constexpr int prod_J(int m) { return m == 0 ? 3 * D : m == 2 ? FF : D; }
static __host__ __device__ constexpr int prod_K(int m) { return m == 3 ? FF : D; }

// The block's chunks, in the order they are used: for each layer and product, its J / B rows
// (B: the blocks of all clusters), CHUNK / K rows a chunk. next() gives the next chunk's first
// weight (or NULL past the last).
struct stream {
    const float *w;
    int B, rank;  // rank among all B blocks
    int l, m, c;  // the next chunk: layer, product, chunk
    __device__ const float *next() {
        if (l >= LAYERS) return nullptr;
        size_t at = (size_t)l * LAYER_FLOATS;
        for (int i = 0; i < m; i++) at += (size_t)prod_J(i) * prod_K(i);
        const int J = prod_J(m), K = prod_K(m), rows = J / B, per = CHUNK / K;
        const float *src = w + at + ((size_t)rank * rows + (size_t)c * per) * K;
        if (++c == rows / per) c = 0, l += ++m == 4, m %= 4;
        return src;
    }
};

template <int G>  // chunks taken at a time
static __global__ void __launch_bounds__(THREADS, 1) layer_kernel(const float *w, float *out, int mode) {
    extern __shared__ float4 smem4[];
    float *ring = (float *)smem4;                    // SLOTS * CHUNK
    float *x = ring + SLOTS * CHUNK;                 // (S, FF): the current product's input, whole
    float *part = x + S * FF;                        // (MAXG * WARPS, S): the warps' sums of a group
    float *slice = part + MAXG * WARPS * S;          // (2, S, FF / MINC): this block's outputs, by parity
    __shared__ float stat[S];
    cg::cluster_group cl = cg::this_cluster();
    const int C = (int)cl.num_blocks(), rank = (int)cl.block_rank(), warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int NC = gridDim.x / C;  // clusters: each holds 1 / NC of every product's rows (and exchanges
                                   // only within itself: a lower bound on a design of NC clusters)
    stream st = {w, C * NC, (int)(blockIdx.x / C) * C + rank, 0, 0, 0};
    int issued = 0, used = 0;  // chunks requested and consumed
    const auto issue = [&]() {
        const float *src = st.next();
        if (src && !(mode & 2)) {
            float *dst = ring + (size_t)(issued % SLOTS) * CHUNK;
            for (int e = threadIdx.x; e < CHUNK / 4; e += THREADS) cp_async16(dst + 4 * e, src + 4 * e);
        }
        asm volatile("cp.async.commit_group;" ::: "memory");  // an empty group past the end keeps the count
        issued++;
    };
    for (int k = 0; k < SLOTS; k++) issue();
    for (int i = threadIdx.x; i < S * FF; i += THREADS) x[i] = 0.01f * (i % 7);
    __syncthreads();
    int parity = 0;
    for (int l = 0; l < LAYERS; l++)
        for (int m = 0; m < 4; m++) {
            const int J = prod_J(m) / NC, K = prod_K(m), rows = J / C, per = CHUNK / K;  // J: the cluster's outputs
            if (m == 0 || m == 2) {  // a LayerNorm's statistics: a warp a row, its sum and its squares
                if (warp < S) {
                    float a = 0.0f, q = 0.0f;
                    for (int i = lane; i < D; i += 32) a += x[warp * FF + i], q += x[warp * FF + i] * x[warp * FF + i];
                    a = warp_sum_f(a), q = warp_sum_f(q);
                    if (lane == 0) stat[warp] = rsqrtf(q / D - (a / D) * (a / D) + 1e-5f);
                }
                __syncthreads();
            }
            float *mine = slice + (size_t)parity * S * (FF / MINC);
            // G chunks at a time: warp w takes rows r0 .. r0 + rpw - 1 of the group, inputs
            // [q n, q n + n) of them; a row's wpr parts added in order
            const int grows = G * per;  // the group's rows
            const int wpr = grows >= WARPS ? 1 : WARPS / grows, rpw = grows >= WARPS ? grows / WARPS : 1;
            const int n = K / wpr, r0 = warp / wpr * rpw, q = warp % wpr;
            for (int c = 0; c < rows / per; c += G) {
                asm volatile("cp.async.wait_group %0;" ::"n"(SLOTS - G) : "memory");
                __syncthreads();
                const float *wc = ring + (size_t)(used % SLOTS) * CHUNK;  // the group's rows, contiguous
                for (int rr = 0; rr < (mode & 1 ? 0 : rpw); rr++) {
                    float acc[S] = {};
                    for (int k = q * n + lane; k < (q + 1) * n; k += 32) {
                        const float wv = wc[(size_t)(r0 + rr) * K + k];
#pragma unroll
                        for (int s = 0; s < S; s++) acc[s] += wv * x[s * FF + k];
                    }
#pragma unroll
                    for (int s = 0; s < S; s++) {
                        const float v = warp_sum_f(acc[s]);
                        if (lane == 0) part[((r0 + rr) * wpr + q) * S + s] = v;
                    }
                }
                __syncthreads();  // the slots are free, the parts stored
                used += G;
                for (int k = 0; k < G; k++) issue();
                if (threadIdx.x < grows * S) {
                    const int i = threadIdx.x / S, s = threadIdx.x % S;
                    float v = 0.0f;
                    for (int p = 0; p < wpr; p++) v += part[(i * wpr + p) * S + s];
                    mine[s * rows + c * per + i] = v * (m == 0 || m == 2 ? stat[s] : 1.0f);
                }
            }
            cl.sync();  // every block's outputs
            for (int i = threadIdx.x; i < S * J; i += THREADS) {  // gathered: output j of row s from block j / rows
                const int s = i / J, j = i % J;
                const float *src = cl.map_shared_rank(slice + (size_t)parity * S * (FF / MINC), j / rows);
                const float v = src[s * rows + j % rows];
                if (m != 0 || j < D) x[s * FF + j] = 0.5f * v;  // (in_proj: q stands in for the attention's output)
            }
            parity ^= 1;
            __syncthreads();
        }
    cl.sync();  // no block leaves while another reads its slice
    if (threadIdx.x == 0 && x[rank] == 12345.0f) out[rank] = x[0];
}

int main(void) {
    const size_t n = (size_t)LAYERS * LAYER_FLOATS;
    float *w, *out;
    if (cudaMalloc(&w, n * sizeof(float)) != cudaSuccess || cudaMalloc(&out, 64 * sizeof(float)) != cudaSuccess) {
        fprintf(stderr, "cluster_layer: no CUDA device\n");
        return 1;
    }
    cudaMemset(w, 0, n * sizeof(float));
    const size_t smem = sizeof(float) * ((size_t)SLOTS * CHUNK + S * FF + MAXG * WARPS * S + 2 * S * (FF / MINC));
    void (*kernels[3])(const float *, float *, int) = {layer_kernel<1>, layer_kernel<2>, layer_kernel<4>};
    for (auto k : kernels) {
        cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
        cudaFuncSetAttribute(k, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
    }
    float *flush;  // a buffer written between launches, so that L2 holds none of the weights
    cudaMalloc(&flush, (size_t)256 << 20);
    const int shapes[][2] = {{8, 1}, {16, 1}, {8, 2}, {16, 2}, {8, 8}, {16, 4}};  // cluster size, clusters
    static const char *what[4] = {"", " (no products)", " (no weight copies)", " (exchanges only)"};
    for (int mode = 0; mode < 4; mode++)
        for (int gi = 0; gi < 3; gi++)
            for (const auto &sh : shapes) {
                const int C = sh[0], NC = sh[1], B = C * NC, G = 1 << gi;
                if (mode && (gi == 1 || (B != 16 && B != 64))) continue;  // the parts: a few shapes
                bool fits = true;  // every product's rows in whole groups of chunks
                for (int m = 0; m < 4; m++) {
                    const int rows = prod_J(m) / B, per = CHUNK / prod_K(m);
                    fits = fits && rows % per == 0 && rows / per % G == 0;
                }
                if (!fits) continue;
                cudaLaunchAttribute attr;
                cudaLaunchConfig_t cfg = probe_cluster_config(&attr, C, B, THREADS, smem);
                const float best = probe_best_ms(
                    "cluster_layer", 6, [&](int rep) { cudaMemset(flush, rep, (size_t)256 << 20); },
                    [&] { cudaLaunchKernelEx(&cfg, kernels[gi], (const float *)w, out, mode); });
                if (best < 0) continue;
                const double gbs = n * 4.0 / (best * 1e-3) / 1e9;
                printf("cluster_layer %d cluster(s) of %2d blocks, %d chunks a wait: %.2f us a layer, "
                       "weights at %.0f GB/s (%.1f an SM)%s\n",
                       NC, C, G, best * 1e3f / LAYERS, gbs, gbs / B, what[mode]);
            }
    return 0;
}
