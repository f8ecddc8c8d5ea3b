/*
 * threadpool.h - a persistent pthread pool that runs one parallel region at a time.
 *
 * A region is fn(ctx, ith, nth) called once on each of nth threads, the caller being thread 0;
 * mimi_pool_run returns when every call has returned. Workers spin briefly between regions
 * (a step is a few hundred regions back to back) and then sleep on a condition variable.
 * No OpenMP, no threads created per call. Used by src/cpu/cpu.c; the kernels never see it.
 */
#ifndef MIMI_THREADPOOL_H
#define MIMI_THREADPOOL_H

struct mimi_pool;

typedef void (*mimi_pool_fn)(void *ctx, int ith, int nth);

// A pool of n_threads threads in all: the caller of mimi_pool_run plus n_threads - 1 workers.
// Returns NULL when a thread or the memory cannot be had.
struct mimi_pool *mimi_pool_create(int n_threads);

// Joins the workers and frees the pool. NULL is allowed. No region may be running.
void mimi_pool_destroy(struct mimi_pool *pool);

// Threads in the pool, the caller included (1 for a NULL pool).
int mimi_pool_size(const struct mimi_pool *pool);

// Runs fn(ctx, ith, nth) for ith = 0 .. nth-1 with nth = the pool size, thread 0 being the
// caller, and returns when all have returned; fn must accept empty shares. A NULL pool,
// n_wanted <= 1 (not worth waking the workers), or a pool
// already running a region for another thread all run fn(ctx, 0, 1) on the caller instead: a
// region never waits for another one, and the kernels give the same bits whatever nth is.
void mimi_pool_run(struct mimi_pool *pool, int n_wanted, mimi_pool_fn fn, void *ctx);

#endif
