/*
 * threadpool.c - the persistent worker pool of threadpool.h.
 *
 * Protocol: the caller publishes (fn, ctx, nth), bumps `generation` and wakes sleepers; every
 * worker runs its share and decrements `pending`; the caller runs share
 * 0 and spins until `pending` is 0. Workers spin on `generation` for a while before sleeping, so
 * back-to-back regions cost about a microsecond. A `busy` flag makes a second thread that calls
 * mimi_pool_run while a region is in flight run its region alone instead of waiting.
 */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "threadpool.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define CPU_RELAX() _mm_pause()
#elif defined(__aarch64__)
#define CPU_RELAX() __asm__ __volatile__("yield")
#else
#define CPU_RELAX() ((void)0)
#endif

// pause iterations a worker spins before sleeping (well under a millisecond); every
// YIELD_EVERY of them it also yields the core, so that an oversubscribed machine runs the
// thread it waits for instead of the spin
#define SPIN_LIMIT 20000
#define YIELD_EVERY 256

struct worker {
    struct mimi_pool *pool;
    int index;  // 1 .. n_threads-1
    pthread_t thread;
};

struct mimi_pool {
    int n_threads;
    struct worker *workers;  // (n_threads - 1)
    int n_started;
    // the region being run
    mimi_pool_fn fn;
    void *ctx;
    int nth;
    atomic_uint generation;  // bumped once per region
    atomic_int pending;      // worker shares not finished yet
    atomic_int busy;         // 1 while a caller owns the pool
    atomic_int sleepers;     // workers blocked on `wake`
    atomic_int stop;
    pthread_mutex_t lock;
    pthread_cond_t wake;
};

// ---- workers ----

static void *worker_main(void *arg) {
    struct worker *w = arg;
    struct mimi_pool *p = w->pool;
    // the generation at creation (0), not the one this thread first reads: a region published
    // between pthread_create and this line is still this worker's to run (reading it here made
    // the worker skip that region and its caller spin forever)
    unsigned seen = 0;
    for (;;) {
        // wait for a new generation: spin first, then sleep
        unsigned gen;
        int spins = 0;
        while ((gen = atomic_load_explicit(&p->generation, memory_order_acquire)) == seen &&
               !atomic_load(&p->stop)) {
            if (++spins < SPIN_LIMIT) {
                if (spins % YIELD_EVERY == 0) sched_yield();
                else CPU_RELAX();
                continue;
            }
            pthread_mutex_lock(&p->lock);
            atomic_fetch_add(&p->sleepers, 1);
            while (atomic_load(&p->generation) == seen && !atomic_load(&p->stop))
                pthread_cond_wait(&p->wake, &p->lock);
            atomic_fetch_sub(&p->sleepers, 1);
            pthread_mutex_unlock(&p->lock);
            spins = 0;
        }
        if (atomic_load(&p->stop)) return NULL;
        seen = gen;
        // run this worker's share
        p->fn(p->ctx, w->index, p->nth);
        atomic_fetch_sub_explicit(&p->pending, 1, memory_order_release);
    }
}

// ---- lifetime ----

struct mimi_pool *mimi_pool_create(int n_threads) {
    if (n_threads < 1) return NULL;
    struct mimi_pool *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->n_threads = n_threads;
    atomic_init(&p->generation, 0);
    atomic_init(&p->pending, 0);
    atomic_init(&p->busy, 0);
    atomic_init(&p->sleepers, 0);
    atomic_init(&p->stop, 0);
    if (pthread_mutex_init(&p->lock, NULL)) {
        free(p);
        return NULL;
    }
    if (pthread_cond_init(&p->wake, NULL)) {
        pthread_mutex_destroy(&p->lock);
        free(p);
        return NULL;
    }
    p->workers = calloc((size_t)n_threads, sizeof *p->workers);
    if (!p->workers) {
        mimi_pool_destroy(p);
        return NULL;
    }
    for (int i = 1; i < n_threads; i++) {
        struct worker *w = &p->workers[i - 1];
        w->pool = p;
        w->index = i;
        if (pthread_create(&w->thread, NULL, worker_main, w)) {
            mimi_pool_destroy(p);
            return NULL;
        }
        p->n_started++;
    }
    return p;
}

void mimi_pool_destroy(struct mimi_pool *p) {
    if (!p) return;
    pthread_mutex_lock(&p->lock);
    atomic_store(&p->stop, 1);
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->lock);
    for (int i = 0; i < p->n_started; i++) pthread_join(p->workers[i].thread, NULL);
    pthread_cond_destroy(&p->wake);
    pthread_mutex_destroy(&p->lock);
    free(p->workers);
    free(p);
}

int mimi_pool_size(const struct mimi_pool *p) { return p ? p->n_threads : 1; }

// ---- regions ----

void mimi_pool_run(struct mimi_pool *p, int n_wanted, mimi_pool_fn fn, void *ctx) {
    // every worker takes part in every region (a worker that skipped one could mistake the next
    // region's arguments for it); shares beyond the work are simply empty
    int nth = p && n_wanted > 1 ? p->n_threads : 1;
    int expected = 0;
    if (nth <= 1 || !atomic_compare_exchange_strong(&p->busy, &expected, 1)) {
        fn(ctx, 0, 1);
        return;
    }
    // publish the region, then start the workers
    p->fn = fn;
    p->ctx = ctx;
    p->nth = nth;
    atomic_store_explicit(&p->pending, nth - 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&p->generation, 1, memory_order_seq_cst);
    if (atomic_load(&p->sleepers) > 0) {
        pthread_mutex_lock(&p->lock);
        pthread_cond_broadcast(&p->wake);
        pthread_mutex_unlock(&p->lock);
    }
    fn(ctx, 0, nth);
    // wait for the workers' shares
    for (int spins = 1; atomic_load_explicit(&p->pending, memory_order_acquire) > 0; spins++) {
        if (spins % YIELD_EVERY == 0) sched_yield();
        else CPU_RELAX();
    }
    atomic_store(&p->busy, 0);
}
