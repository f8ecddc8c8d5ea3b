/*
 * bench_util.h - what bench_stream.c measures against: the machine's floors (a streaming
 * memory-read probe and an FMA peak probe, both at a given thread count), the codec's cost per
 * frame derived from the loaded model's layer shapes (spec 9.1 - 9.3), and host facts for the
 * JSON record. Not part of the library.
 */
#ifndef MIMI_BENCH_UTIL_H
#define MIMI_BENCH_UTIL_H

#include <stddef.h>

#include "internal.h"

// Best of a few streaming reads of a buffer far larger than the last-level cache, split over
// n_threads threads: bytes per second. huge_pages: back the buffer with transparent huge pages
// (as the library's packed weights are), else with 4 KB pages.
double bench_read_bandwidth(int n_threads, size_t bytes, int huge_pages);

// Peak fused multiply-add rate with n_threads threads on the widest vectors `isa_name` uses
// ("avx512", "avx2", anything else: the compiler's default vectors): FLOP per second.
double bench_fma_peak(int n_threads, const char *isa_name);

// One direction's cost per 80 ms frame in streaming at batch 1 (spec 9).
struct frame_cost {
    double macs;          // multiply-adds (attention at the full window)
    double params;        // weights read (floats)
    double weight_bytes;  // bytes of weights read as the loaded model stores them
};

// n_q codebooks (encode scans n_q whole codebooks; decode reads n_q rows).
struct frame_cost bench_encode_cost(const struct mimi_model *m, int n_q);
struct frame_cost bench_decode_cost(const struct mimi_model *m, int n_q);

// The CPU kernels the model runs ("avx2", ..., "reference").
const char *bench_kernel_name(const struct mimi_model *m);

// Host facts: CPU model name, compiler, UTC date, git revision of the source tree.
void bench_host_cpu(char *buf, size_t len);
const char *bench_compiler(void);
void bench_date(char *buf, size_t len);
void bench_git_sha(char *buf, size_t len);

// Seconds on the monotonic clock.
double bench_now(void);

#endif
