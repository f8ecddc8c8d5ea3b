/*
 * kernels_avx2.c - the fast CPU kernels compiled for AVX2 (-mavx2 -mfma -mf16c).
 *
 * Only sets the instruction set and the name suffix; the bodies are in kernels_impl.h, the
 * reference they are tested against in src/nn/ops_ref.c.
 */
#define MIMI_SIMD_AVX2 1
#define KSUF(name) name##_avx2
#define KSUF_NAME avx2
#define KSUF_STR "avx2"
#define KSUF_ISA MIMI_ISA_AVX2

#include "mimi.h"
#include "kernels_impl.h"
