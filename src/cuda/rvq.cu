/*
 * rvq.cu - the split residual vector quantizer's per-row work (spec 4; reference
 * src/nn/quantizer.c): the nearest codebook entry from the distance products (computed by
 * cuBLAS, matmul.cu, or here for small batches) with the residual update, the decode lookup and
 * sum, and the copy of codes that another component left in device memory.
 */
#include "grid.cuh"

#define RVQ_THREADS 256

// ---- nearest entry ----

// Whether (v, j) beats (bv, bj): smaller distance, ties to the lower index (the reference's
// first minimum).
static __device__ __forceinline__ bool better(float v, int j, float bv, int bj) {
    return v < bv || (v == bv && j < bj);
}

// One block per row: argmin over bins of norms[j] - 2 scores[j], then residual -= book[code].
static __global__ void argmin_kernel(const struct op_argmin a) {
    pdl_begin();
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

// ---- distances and nearest entry in one launch (small batches) ----

#define RVQ_WARPS (RVQ_THREADS / 32)

#define RVQ_LANE_VALUES (GPU_RVQ_MAX_DIM / 32)

// A lane's values of entry j (i = lane, lane + 32, ...; zeros past dim and past the bins), all
// loaded before any is used.
static __device__ __forceinline__ void entry_load(const float *book, int bins, int dim, int j,
                                                  float (&e)[RVQ_LANE_VALUES]) {
    const int lane = threadIdx.x % 32;
#pragma unroll
    for (int u = 0; u < RVQ_LANE_VALUES; u++)
        e[u] = j < bins && lane + 32 * u < dim ? book[(size_t)j * dim + lane + 32 * u] : 0.0f;
}

// This block's best (v, j) per row: bins first, first + step, ... scored against the rows'
// queries qs (R, dim) in shared memory, a warp per bin and a lane per 32nd of the entry, the
// warps' bests then kept in warp order; thread s < R passes row s's to keep(s, v, j). wv and wj:
// a (warps, MAXR) scratch in shared memory. `pre`, when given, holds the lane's values of entry
// `first` (entry_load), loaded ahead by the caller.
template <int MAXR, typename Keep>
static __device__ __forceinline__ void score_bins(const float *book, const float *norms, int bins, int dim,
                                                  const float *qs, int R, int first, int step, float *wv, int *wj,
                                                  Keep keep, const float (*pre)[RVQ_LANE_VALUES]) {
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = blockDim.x / 32;
    float bv[MAXR];
    int bj[MAXR];
#pragma unroll
    for (int s = 0; s < MAXR; s++) bv[s] = INFINITY, bj[s] = bins;
    for (int j = first; j < bins; j += step) {
        float e[RVQ_LANE_VALUES];
        if (pre && j == first) {
#pragma unroll
            for (int u = 0; u < RVQ_LANE_VALUES; u++) e[u] = (*pre)[u];
        } else {
            entry_load(book, bins, dim, j, e);
        }
        float dot[MAXR];
#pragma unroll
        for (int s = 0; s < MAXR; s++) dot[s] = 0.0f;
#pragma unroll
        for (int u = 0; u < RVQ_LANE_VALUES; u++) {
            const int i = lane + 32 * u;
            if (i >= dim) break;
#pragma unroll
            for (int s = 0; s < MAXR; s++)
                if (s < R) dot[s] += e[u] * qs[s * dim + i];
        }
#pragma unroll
        for (int s = 0; s < MAXR; s++) {
            if (s >= R) break;
            const float v = norms[j] - 2.0f * warp_sum_f(dot[s]);
            if (better(v, j, bv[s], bj[s])) bv[s] = v, bj[s] = j;
        }
    }
    if (lane == 0)
        for (int s = 0; s < R; s++) wv[warp * MAXR + s] = bv[s], wj[warp * MAXR + s] = bj[s];
    __syncthreads();
    if (threadIdx.x < R) {
        const int s = threadIdx.x;
        float v = INFINITY;
        int j = bins;
        for (int w = 0; w < warps; w++)
            if (better(wv[w * MAXR + s], wj[w * MAXR + s], v, j)) v = wv[w * MAXR + s], j = wj[w * MAXR + s];
        keep(s, v, j);
    }
}

// Row s's code from the candidates of `blocks` (at most PICK_MAX_BLOCKS) blocks, one warp (every
// lane gets it): the (v, j) minimum, the same in any order; all-NaN distances fall back to entry
// 0. A lane's candidates are all loaded before the first is compared (in one memory round trip).
#define PICK_MAX_BLOCKS 256
static_assert(GPU_RVQ_BLOCKS <= PICK_MAX_BLOCKS && GPU_RVQ_CHAIN_MAX_BLOCKS <= PICK_MAX_BLOCKS, "pick_code's loads");
#define PICK_U (PICK_MAX_BLOCKS / 32)
static __device__ int pick_best(const float (&pv)[PICK_U], const int (&pj)[PICK_U], int bins);
static __device__ int pick_code(const float *part_v, const int *part_j, int blocks, int R, int s, int bins) {
    const int lane = threadIdx.x % 32;
    float pv[PICK_U];
    int pj[PICK_U];
#pragma unroll
    for (int u = 0; u < PICK_U; u++) {
        const int b = lane + 32 * u;
        pv[u] = b < blocks ? __ldcg(part_v + (size_t)b * R + s) : INFINITY;
        pj[u] = b < blocks ? __ldcg(part_j + (size_t)b * R + s) : bins;
    }
    return pick_best(pv, pj, bins);
}

// The same from candidates left as versioned words (st_relaxed_u64): block b's row s at
// words[b * R + s] (v) and words[(blocks + b) * R + s] (j), each loaded until it carries
// `version` (all of them requested at once, then again those not there yet).
static __device__ int pick_code_words(const uint64_t *words, int blocks, int R, int s, int bins, uint32_t version) {
    const int lane = threadIdx.x % 32;
    uint64_t wv[PICK_U], wj[PICK_U];
    const uint64_t none = (uint64_t)version << 32;  // past the blocks: already there
#pragma unroll
    for (int u = 0; u < PICK_U; u++) {
        const int b = lane + 32 * u;
        wv[u] = b < blocks ? ld_relaxed_u64(words + (size_t)b * R + s) : none;
        wj[u] = b < blocks ? ld_relaxed_u64(words + (size_t)(blocks + b) * R + s) : none;
    }
    for (bool all = false; !all;) {
        all = true;
#pragma unroll
        for (int u = 0; u < PICK_U; u++) {
            const int b = lane + 32 * u;
            if (wv[u] >> 32 != version) all = false, wv[u] = ld_relaxed_u64(words + (size_t)b * R + s);
            if (wj[u] >> 32 != version) all = false, wj[u] = ld_relaxed_u64(words + (size_t)(blocks + b) * R + s);
        }
    }
    float pv[PICK_U];
    int pj[PICK_U];
#pragma unroll
    for (int u = 0; u < PICK_U; u++) {
        const bool in = lane + 32 * u < blocks;
        pv[u] = in ? __uint_as_float((uint32_t)wv[u]) : INFINITY;
        pj[u] = in ? (int)(uint32_t)wj[u] : bins;
    }
    return pick_best(pv, pj, bins);
}

// The (v, j) minimum of the warp's candidates (pick_code's reduction): every lane gets the code.
static __device__ int pick_best(const float (&pv)[PICK_U], const int (&pj)[PICK_U], int bins) {
    float v = INFINITY;
    int j = bins;
#pragma unroll
    for (int u = 0; u < PICK_U; u++)
        if (better(pv[u], pj[u], v, j)) v = pv[u], j = pj[u];
    for (int off = 16; off; off >>= 1) {
        const float ov = __shfl_xor_sync(0xffffffffu, v, off);
        const int oj = __shfl_xor_sync(0xffffffffu, j, off);
        if (better(ov, oj, v, j)) v = ov, j = oj;
    }
    return j < bins ? j : 0;
}

// Block b scores the bins b, b + G, b + 2G, ... (G blocks; a warp per bin, a lane per 32nd of
// the entry) against every row's query held in shared memory, and keeps each row's best (v, j).
static __global__ void __launch_bounds__(RVQ_THREADS) rvq_level_kernel(const struct op_argmin a) {
    __shared__ float qs[GPU_SKINNY_MAX * GPU_RVQ_MAX_DIM];
    __shared__ float wv[RVQ_WARPS * GPU_SKINNY_MAX];
    __shared__ int wj[RVQ_WARPS * GPU_SKINNY_MAX], code[GPU_SKINNY_MAX];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, R = a.R, G = gridDim.x;
    for (int j = blockIdx.x + warp * G; j < a.bins; j += RVQ_WARPS * G)
        prefetch_l2(a.book + (size_t)j * a.dim, sizeof(float) * a.dim, lane, 32);
    pdl_begin();
    for (int i = threadIdx.x; i < R * a.dim; i += blockDim.x) qs[i] = a.query[i];
    __syncthreads();
    float *part_v = a.part;
    int *part_j = (int *)a.part + (size_t)G * R;
    score_bins<GPU_SKINNY_MAX>(a.book, a.norms, a.bins, a.dim, qs, R, blockIdx.x + warp * G, RVQ_WARPS * G, wv, wj,
                               [&](int s, float v, int j) {
                                   part_v[(size_t)blockIdx.x * R + s] = v;
                                   part_j[(size_t)blockIdx.x * R + s] = j;
                               },
                               NULL);
    // the last block to finish reduces the candidates of all blocks, a warp per row
    if (!last_block(a.counter, G)) return;
    for (int s = warp; s < R; s += RVQ_WARPS) {
        const int c = pick_code(part_v, part_j, G, R, s, a.bins);
        if (lane == 0) {
            code[s] = c;
            a.codes[(size_t)s * a.code_stride] = c;
        }
    }
    __syncthreads();
    if (a.residual)
        for (int i = threadIdx.x; i < R * a.dim; i += blockDim.x) {
            const int s = i / a.dim, c = i - s * a.dim;
            a.residual[i] = __fsub_rn(a.residual[i], a.book[(size_t)code[s] * a.dim + c]);
        }
    if (threadIdx.x == 0) *a.counter = 0;
}

static int launch_argmin(const struct op_argmin *a, struct gpu_exec *ex) {
    if (!a->scores) {
        if (a->R > GPU_SKINNY_MAX || a->dim > GPU_RVQ_MAX_DIM) {
            if (ex->errmsg) snprintf(ex->errmsg, ex->errlen, "argmin: %d rows of %d for the fused form", a->R, a->dim);
            return MIMI_EINVAL;
        }
        pdl_launch(rvq_level_kernel, GPU_RVQ_BLOCKS, RVQ_THREADS, 0, ex, *a);
        return launch_status(ex, "argmin");
    }
    pdl_launch(argmin_kernel, a->R, RVQ_THREADS, 0, ex, *a);
    return launch_status(ex, "argmin");
}

extern "C" int mimi_cuda_argmin(const struct op_argmin *a, struct gpu_exec *ex) { return launch_argmin(a, ex); }

// ---- the acoustic levels of a small step in one persistent launch ----

#define CHAIN_THREADS 512
#define CHAIN_WARPS (CHAIN_THREADS / 32)

// Level k (k < c.levels) of op_rvq_chain: every block holds the rows' residual in shared memory
// and scores its bins (blockIdx.x + (warp + i * CHAIN_WARPS) * gridDim.x) exactly as
// rvq_level_kernel does (a warp per bin, lanes over the entry, the same sums in the same
// order), leaves its best (v, j) per row, and after a grid barrier every block picks the codes
// from all blocks' candidates and subtracts the entries from its residual copy.
// The chain's queries from the latent (PROJECT): output rows j < 2 dim, j < dim the semantic
// query's and the rest the acoustic residual's, a warp each. Lane l holds the row's float4s
// l, l + 32, ... (D % 4 = 0, D <= GPU_RVQ_MAX_LATENT), all loaded before any is used (the
// warp's first row before the latent is staged in lat (D, R)); its sums, then the warp's
// butterfly.
#define CHAIN_W4 (GPU_RVQ_MAX_LATENT / 128)
static __device__ __forceinline__ void chain_row(const struct op_rvq_chain &c, int j, float4 (&w)[CHAIN_W4]) {
    const int dim = c.first.dim, D4 = c.D / 4, lane = threadIdx.x % 32;
    const float4 *row = (const float4 *)(j < dim ? c.in_first + (size_t)j * c.D : c.in_rest + (size_t)(j - dim) * c.D);
#pragma unroll
    for (int u = 0; u < CHAIN_W4; u++)
        w[u] = j < 2 * dim && 32 * u + lane < D4 ? row[32 * u + lane] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
}

template <int MAXR>
static __device__ void chain_project(const struct op_rvq_chain &c, float *lat) {
    const struct op_argmin &a = c.first;
    const int R = a.R, dim = a.dim, D = c.D, lane = threadIdx.x % 32;
    const int first = blockIdx.x * CHAIN_WARPS + threadIdx.x / 32, step = gridDim.x * CHAIN_WARPS;
    float4 w[CHAIN_W4];
    chain_row(c, first, w);
    for (int i = threadIdx.x; i < D * R; i += blockDim.x) lat[i] = c.latent[i];
    __syncthreads();
    for (int j = first; j < 2 * dim; j += step) {
        if (j != first) chain_row(c, j, w);
        float acc[MAXR];
#pragma unroll
        for (int s = 0; s < MAXR; s++) acc[s] = 0.0f;
#pragma unroll
        for (int u = 0; u < CHAIN_W4; u++) {
            const int p = 4 * (32 * u + lane);
            if (p >= D) break;
#pragma unroll
            for (int s = 0; s < MAXR; s++)
                if (s < R) {
                    acc[s] += w[u].x * lat[p * R + s];
                    acc[s] += w[u].y * lat[(p + 1) * R + s];
                    acc[s] += w[u].z * lat[(p + 2) * R + s];
                    acc[s] += w[u].w * lat[(p + 3) * R + s];
                }
        }
#pragma unroll
        for (int s = 0; s < MAXR; s++) {
            if (s >= R) break;
            const float v = warp_sum_f(acc[s]);
            if (lane == 0) {
                if (j < dim) c.sem_query[(size_t)s * dim + j] = v;
                else a.residual[(size_t)s * dim + j - dim] = v;
            }
        }
    }
}

static_assert(GPU_RVQ_MAX_DIM <= GPU_RVQ_MAX_LATENT, "rvq_chain_kernel's sem holds the latent, then a query");

template <int MAXR, bool PROJECT>
static __global__ void __launch_bounds__(CHAIN_THREADS, 1) rvq_chain_kernel(const struct op_rvq_chain c) {
    __shared__ float res[MAXR * GPU_RVQ_MAX_DIM];
    __shared__ float sem[PROJECT ? MAXR * GPU_RVQ_MAX_LATENT : 1];  // the latent, then the semantic query
    __shared__ float wv[CHAIN_WARPS * MAXR];
    __shared__ int wj[CHAIN_WARPS * MAXR], code[MAXR];
    const struct op_argmin &a = c.first;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, R = a.R, G = gridDim.x, dim = a.dim;
    const int first = blockIdx.x + warp * G, step = CHAIN_WARPS * G;  // this warp's bins
    // the lane's values of the warp's first entry of the level to score (of the semantic level:
    // sv), each level's loaded between the barrier before it and its wait
    float ev[RVQ_LANE_VALUES], sv[RVQ_LANE_VALUES];
    const uint32_t launch = grid_launches(c.barrier);  // (the levels' versions)
    if (PROJECT) {
        chain_project<MAXR>(c, sem);
        grid_arrive(c.barrier);
        entry_load(a.book, a.bins, dim, first, ev);
        entry_load(c.semantic.book, c.semantic.bins, dim, first, sv);
        grid_wait(c.barrier, 1);
        for (int i = threadIdx.x; i < R * dim; i += blockDim.x) sem[i] = __ldcg(c.sem_query + i);
        for (int i = threadIdx.x; i < R * dim; i += blockDim.x) res[i] = __ldcg(a.residual + i);
    } else {
        entry_load(a.book, a.bins, dim, first, ev);
        for (int i = threadIdx.x; i < R * dim; i += blockDim.x) res[i] = a.residual[i];
    }
    __syncthreads();
    for (int k = 0; k < c.levels; k++) {
        const float *book = a.book + (size_t)k * a.bins * dim, *norms = a.norms + (size_t)k * a.bins;
        // this block's candidates as versioned words (v, then j: (2, G, R)) in the half of `part`
        // of this level's parity; the semantic level's in part's last third. A block writes
        // level k + 2's into level k's half only once every block has left its level k + 1
        // candidates, each after reading all of level k's, so no word is overwritten unread.
        const uint32_t version = grid_version(launch, GRID_MAX_VERSIONS, (uint32_t)k);
        uint64_t *words = c.part + (size_t)(k & 1) * 2 * G * R, *sem_words = c.part + (size_t)4 * G * R;
        const auto keep = [&](uint64_t *w) {
            return [=](int s, float v, int j) {
                st_relaxed_u64(w + (size_t)blockIdx.x * R + s, (uint64_t)version << 32 | __float_as_uint(v));
                st_relaxed_u64(w + (size_t)(G + blockIdx.x) * R + s, (uint64_t)version << 32 | (uint32_t)j);
            };
        };
        score_bins<MAXR>(book, norms, a.bins, dim, res, R, first, step, wv, wj, keep(words), &ev);
        if (PROJECT && k == 0) {  // the semantic level with the first acoustic one
            __syncthreads();  // wv, wj
            const struct op_argmin &s0 = c.semantic;
            score_bins<MAXR>(s0.book, s0.norms, s0.bins, dim, sem, R, first, step, wv, wj, keep(sem_words), &sv);
        }
        if (k + 1 < c.levels) {  // the next level's first entry of this warp, its others toward L2
            entry_load(book + (size_t)a.bins * dim, a.bins, dim, first, ev);
            for (int j = first + step; j < a.bins; j += step)
                prefetch_l2(book + (size_t)(a.bins + j) * dim, sizeof(float) * dim, lane, 32);
        }
        // every block's candidates, as each arrives (no grid barrier)
        if (PROJECT && k == 0 && blockIdx.x == 0)
            for (int s = warp; s < R; s += CHAIN_WARPS) {
                const int cs = pick_code_words(sem_words, G, R, s, c.semantic.bins, version);
                if (lane == 0) c.semantic.codes[(size_t)s * c.semantic.code_stride] = cs;
            }
        for (int s = warp; s < R; s += CHAIN_WARPS) {
            const int cs = pick_code_words(words, G, R, s, a.bins, version);
            if (lane == 0) {
                code[s] = cs;
                if (blockIdx.x == 0) a.codes[(size_t)s * a.code_stride + k] = cs;
            }
        }
        __syncthreads();
        for (int i = threadIdx.x; i < R * dim; i += blockDim.x) {
            const int s = i / dim;
            res[i] = __fsub_rn(res[i], book[(size_t)code[s] * dim + i - s * dim]);
        }
        __syncthreads();
    }
    if (blockIdx.x == 0)
        for (int i = threadIdx.x; i < R * dim; i += blockDim.x) a.residual[i] = res[i];
    grid_exit(c.barrier);
}

extern "C" int mimi_cuda_rvq_chain(const struct op_rvq_chain *c, struct gpu_exec *ex) {
    const struct op_argmin *a = &c->first;
    int blocks = device_sms();
    if (blocks > GPU_RVQ_CHAIN_MAX_BLOCKS) blocks = GPU_RVQ_CHAIN_MAX_BLOCKS;
    if (!blocks) return launch_status(ex, "rvq chain (device)");
    if (a->R > GPU_SKINNY_MAX || a->dim > GPU_RVQ_MAX_DIM || !a->residual || c->levels < 1 ||
        c->levels >= (int)GRID_MAX_VERSIONS ||
        (c->latent && (a->R > GPU_RVQ_PROJECT_ROWS || c->D > GPU_RVQ_MAX_LATENT || c->D % 4 ||
                      c->semantic.bins != a->bins))) {
        if (ex->errmsg)
            snprintf(ex->errmsg, ex->errlen, "rvq chain: %d rows of %d (latent %d) do not fit", a->R, a->dim, c->D);
        return MIMI_EINVAL;
    }
    static_assert(GPU_RVQ_PROJECT_ROWS == 4, "the projecting forms are instantiated for 1 and 4 rows");
    if (c->latent) {
        if (a->R == 1) return grid_launch(rvq_chain_kernel<1, true>, blocks, CHAIN_THREADS, 0, *c, ex, "rvq chain");
        return grid_launch(rvq_chain_kernel<4, true>, blocks, CHAIN_THREADS, 0, *c, ex, "rvq chain");
    }
    if (a->R == 1) return grid_launch(rvq_chain_kernel<1, false>, blocks, CHAIN_THREADS, 0, *c, ex, "rvq chain");
    if (a->R <= 4) return grid_launch(rvq_chain_kernel<4, false>, blocks, CHAIN_THREADS, 0, *c, ex, "rvq chain");
    return grid_launch(rvq_chain_kernel<GPU_SKINNY_MAX, false>, blocks, CHAIN_THREADS, 0, *c, ex, "rvq chain");
}

// ---- decode lookup ----

// One block per row. A row with a code outside [0, bins) becomes padding: it reads nothing,
// advances no state, and raises the step's error flag.
static __global__ void gather_kernel(const struct op_gather a) {
    pdl_begin();
    const int r = blockIdx.x;
    const int32_t *c = a.codes + (size_t)r * a.n_cb;
    bool bad = false;
    for (int q = 0; q < a.n_cb; q++) bad |= c[q] < 0 || c[q] >= a.bins;
    if (bad && threadIdx.x == 0) {
        a.row_slot[r / a.frames] = -1;
        *a.error = 1;
    }
    for (int i = threadIdx.x; i < a.dim; i += blockDim.x) {
        float e = 0.0f, s = 0.0f;
        if (!bad) {
            e = a.books[(size_t)c[0] * a.dim + i];
            for (int q = 1; q < a.n_cb; q++) s = __fadd_rn(s, a.books[((size_t)q * a.bins + c[q]) * a.dim + i]);
        }
        a.e0[(size_t)r * a.ld + i] = e;
        a.sum[(size_t)r * a.ld + i] = s;
    }
}

static int launch_gather(const struct op_gather *a, struct gpu_exec *ex) {
    pdl_launch(gather_kernel, a->R, RVQ_THREADS, 0, ex, *a);
    return launch_status(ex, "gather");
}

extern "C" int mimi_cuda_gather(const struct op_gather *a, struct gpu_exec *ex) { return launch_gather(a, ex); }

// ---- codes from device memory ----

static __global__ void copy_codes_kernel(int32_t *dst, const int32_t *src, int64_t offset, int64_t stride,
                                         int n, int R, int n_cb) {
    pdl_begin();
    FOR_EACH(idx, (size_t)R * n_cb) {
        int r = (int)(idx / n_cb), q = (int)(idx - (size_t)r * n_cb);
        dst[idx] = r < n ? src[offset + (int64_t)r * stride + q] : 0;
    }
}

extern "C" int mimi_cuda_copy_codes(int32_t *dst, const int32_t *src, int64_t offset, int64_t stride, int n,
                                    int R, int n_cb, struct gpu_exec *ex) {
    pdl_launch(copy_codes_kernel, grid_for((size_t)R * n_cb, 128), 128, 0, ex, dst, src, offset, stride, n, R, n_cb);
    return launch_status(ex, "copy_codes");
}
