/*
 * cpu.h - the fast CPU path as the model code sees it: a model's kernel table, thread pool and
 * packed weights, and the calls that run the kernels on the pool.
 *
 * A model gets a struct mimi_cpu at load (mimi_cpu_prepare, from model.c) when a SIMD kernel
 * set is selected; the nn/ code then takes its fast branch wherever a layer carries packed
 * weights, and its reference branch (ops.h, ops_ref.c) otherwise. The kernels themselves are in
 * kernels.h / kernels_impl.h; the pool in threadpool.h.
 */
#ifndef MIMI_CPU_H
#define MIMI_CPU_H

#include "internal.h"
#include "kernels.h"
#include "threadpool.h"

// A conv or transposed conv runs the direct (time-vectorised) kernel when its kernel sees at
// least this many steps per slot and its weights are f32; the gemm kernel over im2col otherwise.
#define MIMI_DIRECT_MIN_T 32

// One weight matrix (rows, cols) in the kernels' panel layout (kernels.h).
struct mimi_packed {
    const struct mimi_cpu *cpu;
    int rows, cols;
    int bf16;            // panels hold bfloat16 (else f32)
    const void *panels;  // (ceil(rows / mr), cols, mr)
    const float *bias;   // (ceil(rows / mr) * mr) or NULL
    int taps;            // convs: taps per input channel in the packed column order
};

struct mimi_cpu {
    const struct mimi_kernels *k;
    struct mimi_pool *pool;  // NULL with one thread; a CUDA model's serves mimi_host_copy only
    int n_threads;
    int bf16;              // MIMI_WEIGHTS_BF16 was asked for
    int64_t packed_bytes;  // weight bytes the fast kernels read, all packed matrices
    // everything allocated for the fast path, freed by mimi_cpu_free: a region reserved at
    // load (on Linux with transparent huge pages asked for: streaming weights through 4 KB pages
    // costs a third of the memory bandwidth), then separate blocks if it runs out
    char *region;
    size_t region_size, region_used, region_mapped;
    void *region_base;
    void **owned;
    int n_owned, cap_owned;
};

// ---- lifetime (cpu.c) ----

// Selects the kernels for m->isa, creates the pool and packs every weight matrix; fills the
// quantizer's linear maps (on the reference path too). Called at the end of mimi_model_bind.
// Returns 0, MIMI_EUNSUPPORTED (ISA not compiled or not on this CPU) or MIMI_ENOMEM.
int mimi_cpu_prepare(struct mimi_model *m);

// Joins the pool and frees what mimi_cpu_prepare made. Called by mimi_model_free.
void mimi_cpu_free(struct mimi_model *m);

// ---- running kernels (cpu.c) ----

void mimi_cpu_gemm(const struct mimi_cpu *cpu, const struct mimi_gemm_args *a);
void mimi_cpu_conv(const struct mimi_cpu *cpu, const struct mimi_conv_args *a);

// Calls fn(ctx, begin, end, ith) over a split of [0, n_items) on the pool; ith < n_threads
// indexes per-thread scratch. Small counts (below min_split) run on the caller alone. `op`
// names the work in a profile ("attention", "layernorm", ...).
typedef void (*mimi_cpu_range_fn)(void *ctx, int begin, int end, int ith);
void mimi_cpu_for(const struct mimi_cpu *cpu, const char *op, int n_items, int min_split, mimi_cpu_range_fn fn,
                  void *ctx);

// ---- profile (cpu.c) ----

// The profile of the step running on this thread (mimi_batch_profile on a CPU batch), or NULL:
// every call above then reports its time to fn as (op, stage), and adds it to `timed`.
struct mimi_cpu_profile {
    mimi_profile_fn fn;
    void *user;
    const char *stage;  // "enc.seanet", ...: set by the step as it goes (mimi_cpu_stage)
    double stage_t0;    // when the stage began (mimi_cpu_now_us)
    double timed;       // microseconds reported since the stage began
};
extern _Thread_local struct mimi_cpu_profile *mimi_cpu_profiling;

// Monotonic microseconds.
double mimi_cpu_now_us(void);

// Moves the thread's profiled step, if any, to `stage` (NULL: the step's end). The ending stage's
// time not covered by the calls it reported goes out as op "other".
void mimi_cpu_stage(const char *stage);

// ---- streaming convolutions (conv_fast.c) ----

struct conv_mem;

// What a fast conv call fuses around the convolution.
struct mimi_conv_fuse {
    int elu_input;  // ELU the new input columns first (the history already holds ELU'd values)
    int epi;        // MIMI_EPI_NONE, MIMI_EPI_ELU, or MIMI_EPI_ADD (y += conv, in place)
};

// The fast counterparts of conv1d_stream / convtr_stream (src/nn/nn.h), same arguments and
// layouts, for a conv with packed weights. fuse may be NULL.
void mimi_cpu_conv_stream(const struct mimi_conv *c, struct conv_mem **mems, int n, const float *x,
                          int T, float *y, float *work, const struct mimi_conv_fuse *fuse);

// Floats of scratch a fast call over n slots of T input steps needs.
size_t mimi_cpu_conv_work_floats(const struct mimi_conv *c, int n, int T);

// Floats of one slot's streaming memory: the reference's (c_in or c_out, kernel - stride), or
// for a fast transposed conv the larger of that and its input history (c_in, J - 1).
size_t mimi_cpu_conv_mem_floats(const struct mimi_conv *c);

// ---- streaming transformer (transformer_fast.c) ----

struct transformer_mem;
struct transformer_scratch;

// The fast counterpart of transformer_forward (src/nn/nn.h), same arguments, for a transformer
// with packed weights. It uses sc->scores as its own scratch, laid out with the size below.
void mimi_cpu_transformer_forward(const struct transformer *t, struct transformer_mem **mems, int n,
                                  struct transformer_scratch *sc, float *io, int steps);

// Floats the fast path needs in sc->scores for n slots of `steps` steps and rings of `capacity`.
size_t mimi_cpu_transformer_scratch_floats(const struct transformer *t, int n, int steps,
                                           int capacity);

// ---- kernel selection (dispatch.c) ----

// The kernel table for an explicit ISA (MIMI_ISA_AVX2, ...) if it was compiled in and the CPU
// has it, else NULL. For MIMI_ISA_AUTO the best such table, or NULL (reference path).
const struct mimi_kernels *mimi_kernels_get(int isa);

// ---- packing (pack.c) ----

// Packs (rows, cols) row-major weights (row stride ld) into panels; bias (rows) may be NULL.
// bf16: store bfloat16 (round to nearest even); round_only: f32 panels holding bf16-rounded
// values. Returns NULL when out of memory.
struct mimi_packed *mimi_pack_matrix(struct mimi_cpu *cpu, const float *w, int rows, int cols,
                                     size_t ld, const float *bias, int bf16, int round_only);

// Packs every weight of the model (convs, transformers, resamplers, quantizer maps).
int mimi_pack_model(struct mimi_model *m);

// Allocates `bytes` (64-byte aligned) owned by cpu, from its region while there is room. NULL
// when out of memory.
void *mimi_cpu_alloc(struct mimi_cpu *cpu, size_t bytes);

// Reserves the region: `bytes` of address space, on Linux asked to be backed by transparent
// huge pages (pages appear as they are written). Without it mimi_cpu_alloc uses malloc.
void mimi_cpu_reserve(struct mimi_cpu *cpu, size_t bytes);

// Frees the region and everything mimi_cpu_alloc returned.
void mimi_cpu_release(struct mimi_cpu *cpu);

#endif
