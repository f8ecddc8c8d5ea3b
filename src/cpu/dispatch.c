/*
 * dispatch.c - which kernel sets were compiled in, which the CPU can run, and the choice for a
 * model's MIMI_ISA_* request.
 *
 * The per-ISA tables come from kernels_<isa>.c (built only where the compiler supports the
 * flags: MIMI_HAVE_AVX2 / _AVX512 / _NEON say which). Not here: the kernels, the packing.
 */
#include "cpu.h"

// ---- CPU features ----

static int cpu_supports(int isa) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    if (isa == MIMI_ISA_AVX2)
        return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    if (isa == MIMI_ISA_AVX512)
        return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
               __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl") &&
               __builtin_cpu_supports("fma");
    return 0;
#elif defined(__aarch64__)
    return isa == MIMI_ISA_NEON;  // Advanced SIMD is part of the AArch64 baseline
#else
    (void)isa;
    return 0;
#endif
}

// ---- tables ----

static const struct mimi_kernels *compiled(int isa) {
    switch (isa) {
#if defined(MIMI_HAVE_AVX512)
    case MIMI_ISA_AVX512: return &mimi_kernels_avx512;
#endif
#if defined(MIMI_HAVE_AVX2)
    case MIMI_ISA_AVX2: return &mimi_kernels_avx2;
#endif
#if defined(MIMI_HAVE_NEON)
    case MIMI_ISA_NEON: return &mimi_kernels_neon;
#endif
    default: return NULL;
    }
}

const struct mimi_kernels *mimi_kernels_get(int isa) {
    if (isa == MIMI_ISA_AUTO) {
        // best first
        static const int order[] = {MIMI_ISA_AVX512, MIMI_ISA_AVX2, MIMI_ISA_NEON};
        for (int i = 0; i < (int)(sizeof order / sizeof order[0]); i++) {
            const struct mimi_kernels *k = mimi_kernels_get(order[i]);
            if (k) return k;
        }
        return NULL;
    }
    const struct mimi_kernels *k = compiled(isa);
    return k && cpu_supports(isa) ? k : NULL;
}
