/*
 * kernels_neon.c - the fast CPU kernels compiled for NEON ((AArch64 baseline)).
 *
 * Only sets the instruction set and the name suffix; the bodies are in kernels_impl.h, the
 * reference they are tested against in src/nn/ops_ref.c.
 */
#define MIMI_SIMD_NEON 1
#define KSUF(name) name##_neon
#define KSUF_NAME neon
#define KSUF_STR "neon"
#define KSUF_ISA MIMI_ISA_NEON

#include "mimi.h"
#include "kernels_impl.h"
