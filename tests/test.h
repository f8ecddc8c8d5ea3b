/*
 * test.h - the test harness: CHECK macros, a seeded PRNG, error measures, SKIP.
 *
 * Each tests/test_*.c is a standalone program; main() runs its cases and returns
 * test_summary(), so the exit status is the verdict (77 = skipped, for ctest's SKIP_RETURN_CODE).
 * A failed check prints file:line, the seed and the command that reproduces it, then the test
 * goes on so one run shows every failure.
 */
#ifndef MIMI_TEST_H
#define MIMI_TEST_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int test_failures = 0;
static int test_checks = 0;
static uint64_t test_seed = 0;
static const char *test_argv0 = "";

// Reads MIMI_TEST_SEED (or picks one from the clock) and prints it.
static inline void test_init(int argc, char **argv) {
    (void)argc;
    test_argv0 = argv[0];
    const char *s = getenv("MIMI_TEST_SEED");
    test_seed = s ? strtoull(s, NULL, 10) : (uint64_t)time(NULL);
    printf("# %s seed=%llu\n", argv[0], (unsigned long long)test_seed);
}

static inline void test_fail_banner(const char *file, int line) {
    test_failures++;
    fprintf(stderr, "FAIL %s:%d (reproduce: MIMI_TEST_SEED=%llu %s)\n", file, line,
            (unsigned long long)test_seed, test_argv0);
}

#define CHECK(cond)                                                                         \
    do {                                                                                    \
        test_checks++;                                                                      \
        if (!(cond)) {                                                                      \
            test_fail_banner(__FILE__, __LINE__);                                           \
            fprintf(stderr, "  expected: %s\n", #cond);                                    \
        }                                                                                   \
    } while (0)

#define CHECK_EQ(a, b)                                                                      \
    do {                                                                                    \
        long long va_ = (long long)(a), vb_ = (long long)(b);                               \
        test_checks++;                                                                      \
        if (va_ != vb_) {                                                                   \
            test_fail_banner(__FILE__, __LINE__);                                           \
            fprintf(stderr, "  %s == %s: %lld != %lld\n", #a, #b, va_, vb_);                \
        }                                                                                   \
    } while (0)

// Relative L2 error ||a - b|| / ||b|| over n values (b is the reference).
static inline double test_rel_l2(const float *a, const float *b, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)a[i] - (double)b[i];
        num += d * d;
        den += (double)b[i] * (double)b[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

// Checks rel_l2(a, ref) <= tol, printing the measure either way under `label`.
#define CHECK_REL_L2(a, ref, n, tol, label)                                                 \
    do {                                                                                    \
        double e_ = test_rel_l2((a), (ref), (n));                                           \
        test_checks++;                                                                      \
        printf("  %-40s rel_l2 %.3e (limit %.0e)\n", (label), e_, (double)(tol));           \
        if (!(e_ <= (tol))) {                                                               \
            test_fail_banner(__FILE__, __LINE__);                                           \
            fprintf(stderr, "  %s: relative L2 error %.3e > %.1e\n", (label), e_,          \
                    (double)(tol));                                                         \
        }                                                                                   \
    } while (0)

// A seeded xorshift64* generator.
static uint64_t test_rng_state = 0x9E3779B97F4A7C15ull;
static inline void test_rng_seed(uint64_t s) { test_rng_state = s ? s : 0x9E3779B97F4A7C15ull; }
static inline uint64_t test_rng_u64(void) {
    uint64_t x = test_rng_state;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    test_rng_state = x;
    return x * 0x2545F4914F6CDD1Dull;
}
// Uniform in [0, n).
static inline int test_rng_int(int n) { return (int)(test_rng_u64() % (uint64_t)n); }
// Uniform in [-1, 1).
static inline float test_rng_float(void) { return (float)((test_rng_u64() >> 40) * (1.0 / (1 << 23)) - 1.0); }

#define TEST_SKIP 77
#define SKIP(...)                                                                           \
    do {                                                                                    \
        printf("SKIP: ");                                                                   \
        printf(__VA_ARGS__);                                                                \
        printf("\n");                                                                       \
        exit(TEST_SKIP);                                                                    \
    } while (0)

static inline int test_summary(void) {
    printf("# %d checks, %d failed\n", test_checks, test_failures);
    return test_failures ? 1 : 0;
}

#endif
