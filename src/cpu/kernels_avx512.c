/*
 * kernels_avx512.c - the fast CPU kernels compiled for AVX-512
 * (-mavx512f -mavx512bw -mavx512dq -mavx512vl -mfma).
 *
 * Only sets the instruction set and the name suffix; the bodies are in kernels_impl.h, the
 * reference they are tested against in src/nn/ops_ref.c.
 */
#define MIMI_SIMD_AVX512 1
#define KSUF(name) name##_avx512
#define KSUF_NAME avx512
#define KSUF_STR "avx512"
#define KSUF_ISA MIMI_ISA_AVX512

#include "mimi.h"
#include "kernels_impl.h"
