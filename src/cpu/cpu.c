/*
 * cpu.c - the fast CPU path's lifetime (kernel choice, pool, packed weights) and the calls that
 * run kernels on the pool: mimi_cpu_gemm, mimi_cpu_conv, mimi_cpu_for, mimi_linear_apply.
 *
 * Not here: the kernels (kernels_impl.h), the packing layouts (pack.c), the feature detection
 * (dispatch.c). The reference arithmetic these replace is src/nn/ops_ref.c.
 */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#if defined(__linux__)
#include <sys/mman.h>
#endif

#include "cpu.h"
#include "nn/ops.h"

// ---- memory ----

#define HUGE_PAGE ((size_t)2 << 20)

void mimi_cpu_reserve(struct mimi_cpu *cpu, size_t bytes) {
#if defined(__linux__) && defined(MAP_ANONYMOUS) && defined(MADV_HUGEPAGE)
    size_t mapped = bytes + HUGE_PAGE;
    void *base = mmap(NULL, mapped, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (base == MAP_FAILED) return;
    char *start = (char *)(((uintptr_t)base + HUGE_PAGE - 1) & ~(uintptr_t)(HUGE_PAGE - 1));
    madvise(start, bytes, MADV_HUGEPAGE);  // a hint: without it the region still works
    cpu->region_base = base;
    cpu->region_mapped = mapped;
    cpu->region = start;
    cpu->region_size = bytes;
#else
    (void)cpu;
    (void)bytes;
#endif
}

void mimi_cpu_release(struct mimi_cpu *cpu) {
#if defined(__linux__) && defined(MAP_ANONYMOUS) && defined(MADV_HUGEPAGE)
    if (cpu->region_base) munmap(cpu->region_base, cpu->region_mapped);
#endif
    cpu->region = NULL;
    cpu->region_base = NULL;
    for (int i = 0; i < cpu->n_owned; i++) free(cpu->owned[i]);
    free(cpu->owned);
    cpu->owned = NULL;
    cpu->n_owned = cpu->cap_owned = 0;
}

void *mimi_cpu_alloc(struct mimi_cpu *cpu, size_t bytes) {
    size_t at = (cpu->region_used + 63) & ~(size_t)63;
    if (cpu->region && at + bytes <= cpu->region_size) {
        cpu->region_used = at + bytes;
        return cpu->region + at;
    }
    if (cpu->n_owned == cpu->cap_owned) {
        int cap = cpu->cap_owned ? 2 * cpu->cap_owned : 256;
        void **grown = realloc(cpu->owned, sizeof(void *) * (size_t)cap);
        if (!grown) return NULL;
        cpu->owned = grown;
        cpu->cap_owned = cap;
    }
    void *p = aligned_alloc(64, (bytes + 63) & ~(size_t)63);
    if (p) cpu->owned[cpu->n_owned++] = p;
    return p;
}

// ---- lifetime ----

static const char *isa_name(int isa) {
    switch (isa) {
    case MIMI_ISA_AVX2: return "avx2";
    case MIMI_ISA_AVX512: return "avx512";
    case MIMI_ISA_NEON: return "neon";
    default: return "?";
    }
}

int mimi_cpu_prepare(struct mimi_model *m) {
    const struct mimi_kernels *k = NULL;
    // a model on a CUDA device never runs the CPU layers: nothing to pack
    if (m->isa != MIMI_ISA_REFERENCE && m->backend != MIMI_BACKEND_CUDA) {
        k = mimi_kernels_get(m->isa);
        if (!k && m->isa != MIMI_ISA_AUTO) {
            mimi_log(m, MIMI_LOG_ERROR, "CPU kernels '%s' are not %s", isa_name(m->isa),
                     mimi_kernels_get(MIMI_ISA_AUTO) || m->isa == MIMI_ISA_AVX512
                         ? "supported by this CPU or not compiled in"
                         : "available");
            return MIMI_EUNSUPPORTED;
        }
    }
    struct mimi_cpu *cpu = calloc(1, sizeof *cpu);
    if (!cpu) return MIMI_ENOMEM;
    m->cpu = cpu;
    cpu->k = k;
    cpu->n_threads = k ? m->n_threads : 1;
    cpu->bf16 = k && m->weights == MIMI_WEIGHTS_BF16;
    // a CUDA model's threads do the host's share of large steps (mimi_host_copy), no kernels
    const int pool_threads = k ? cpu->n_threads : m->backend == MIMI_BACKEND_CUDA ? m->n_threads : 1;
    if (pool_threads > 1 && !(cpu->pool = mimi_pool_create(pool_threads))) {
        mimi_log(m, MIMI_LOG_ERROR, "cannot start %d threads", pool_threads);
        return MIMI_ENOMEM;
    }
    // room for a packed copy of every weight, panel padding included
    if (k) mimi_cpu_reserve(cpu, (size_t)m->n_params * 4 * 21 / 20 + (64u << 20));
    int rc = mimi_pack_model(m);
    if (rc == 0)
        mimi_log(m, MIMI_LOG_INFO, "CPU path: %s, %d thread%s, %s weights (%.1f MB packed)",
                 k ? k->name : "reference", cpu->n_threads, cpu->n_threads > 1 ? "s" : "",
                 cpu->bf16 ? "bf16" : "f32", (double)cpu->packed_bytes / 1e6);
    return rc;
}

void mimi_cpu_free(struct mimi_model *m) {
    if (!m || !m->cpu) return;
    struct mimi_cpu *cpu = m->cpu;
    mimi_pool_destroy(cpu->pool);
    mimi_cpu_release(cpu);
    free(cpu);
    m->cpu = NULL;
}

// ---- profile ----

_Thread_local struct mimi_cpu_profile *mimi_cpu_profiling;

double mimi_cpu_now_us(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return 1e6 * (double)t.tv_sec + 1e-3 * (double)t.tv_nsec;
}

void mimi_cpu_stage(const char *stage) {
    struct mimi_cpu_profile *p = mimi_cpu_profiling;
    if (!p) return;
    const double now = mimi_cpu_now_us();
    if (p->stage && now - p->stage_t0 > p->timed) p->fn(p->user, "other", p->stage, now - p->stage_t0 - p->timed);
    p->stage = stage;
    p->stage_t0 = now;
    p->timed = 0.0;
}

// Reports one call that began at t0 (microseconds) to the thread's profile.
static void profiled(struct mimi_cpu_profile *p, const char *op, double t0) {
    const double us = mimi_cpu_now_us() - t0;
    p->fn(p->user, op, p->stage, us);
    p->timed += us;
}

// ---- running kernels ----

// A kernel call shared out in chunks of work items: each thread takes the next chunk until none
// is left, so a thread the OS delays holds up one chunk, not a fixed share.
struct job {
    const struct mimi_kernels *k;
    const void *args;
    int is_conv;
    long n_items, chunk;
    atomic_long next;
    // mimi_cpu_for
    mimi_cpu_range_fn range;
    void *ctx;
};

static void kernel_task(void *ctx, int ith, int nth) {
    (void)ith;
    (void)nth;
    struct job *j = ctx;
    for (;;) {
        long begin = atomic_fetch_add_explicit(&j->next, j->chunk, memory_order_relaxed);
        if (begin >= j->n_items) return;
        long end = begin + j->chunk < j->n_items ? begin + j->chunk : j->n_items;
        if (j->is_conv) j->k->conv(j->args, begin, end);
        else j->k->gemm(j->args, begin, end);
    }
}

// `granule`: chunks are multiples of it (the streaming gemm takes panels in groups).
static void run_kernel(const struct mimi_cpu *cpu, struct job *j, double macs, long granule) {
    // a region costs about a microsecond: small calls run on the caller alone
    int nth = macs < 20000.0 || j->n_items < 2 ? 1 : cpu->n_threads;
    // about 12 chunks per thread: the last one to finish idles the others for one small chunk
    long chunk = (j->n_items + 12L * nth - 1) / (12L * nth);
    j->chunk = (chunk + granule - 1) / granule * granule;
    atomic_init(&j->next, 0);
    mimi_pool_run(cpu->pool, nth, kernel_task, j);
}

// Products of at most two columns stream their weights (bandwidth-bound); wider ones are
// compute-bound: the profile names them apart.
void mimi_cpu_gemm(const struct mimi_cpu *cpu, const struct mimi_gemm_args *a) {
    struct mimi_cpu_profile *p = mimi_cpu_profiling;
    const double t0 = p ? mimi_cpu_now_us() : 0.0;
    struct job j = {.k = cpu->k, .args = a};
    j.n_items = (long)((a->M + cpu->k->mr - 1) / cpu->k->mr) *
                ((a->N + cpu->k->gemm_cols - 1) / cpu->k->gemm_cols);
    run_kernel(cpu, &j, (double)a->M * a->N * a->K, a->N <= 2 ? 4 : 1);
    if (p) profiled(p, a->N <= 2 ? "matmul_stream" : "matmul", t0);
}

void mimi_cpu_conv(const struct mimi_cpu *cpu, const struct mimi_conv_args *a) {
    struct mimi_cpu_profile *p = mimi_cpu_profiling;
    const double t0 = p ? mimi_cpu_now_us() : 0.0;
    struct job j = {.k = cpu->k, .args = a, .is_conv = 1};
    j.n_items = (long)((a->M + cpu->k->mr - 1) / cpu->k->mr) *
                ((a->T + cpu->k->conv_steps - 1) / cpu->k->conv_steps);
    run_kernel(cpu, &j, (double)a->M * a->T * a->J, 1);
    if (p) profiled(p, "conv", t0);
}

static void range_task(void *ctx, int ith, int nth) {
    const struct job *j = ctx;
    int begin = (int)(j->n_items * ith / nth), end = (int)(j->n_items * (ith + 1) / nth);
    if (begin < end) j->range(j->ctx, begin, end, ith);
}

void mimi_cpu_for(const struct mimi_cpu *cpu, const char *op, int n_items, int min_split, mimi_cpu_range_fn fn,
                  void *ctx) {
    if (n_items <= 0) return;
    struct mimi_cpu_profile *p = mimi_cpu_profiling;
    const double t0 = p ? mimi_cpu_now_us() : 0.0;
    if (n_items < min_split || cpu->n_threads == 1) {
        fn(ctx, 0, n_items, 0);
    } else {
        struct job j = {.k = cpu->k, .range = fn, .ctx = ctx, .n_items = n_items};
        mimi_pool_run(cpu->pool, cpu->n_threads, range_task, &j);
    }
    if (p) profiled(p, op, t0);
}

// ---- linear maps ----

void mimi_linear_apply(const struct mimi_linear *l, int N, const float *x, int ldx, float *y,
                       int y_ms, int y_ns) {
    const struct mimi_packed *p = l->packed;
    if (!p) {
        mimi_matmul_nt(l->rows, N, l->cols, l->weight, l->cols, x, ldx, NULL, y, y_ms, y_ns);
        return;
    }
    struct mimi_gemm_args a = {
        .M = l->rows,
        .N = N,
        .K = l->cols,
        .w = p->panels,
        .w_bf16 = p->bf16,
        .bias = NULL,
        .b = x,
        .ldb = ldx,
        .out = {.y = y, .group = l->rows, .gs = 0, .ms = y_ms, .cs = y_ns},
        .epi = MIMI_EPI_NONE,
    };
    mimi_cpu_gemm(p->cpu, &a);
}
