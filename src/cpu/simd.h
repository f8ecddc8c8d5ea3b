/*
 * simd.h - the thin vector layer the kernels are written against (kernels_impl.h).
 *
 * One vector type `vf` of SIMD_W floats, a mask type `vmask`, and the handful of operations the
 * kernels use: loads (f32 and bf16), stores, broadcast, add/sub/mul/div, fused multiply-add,
 * min/max, compare and select, round to nearest, 2^n, horizontal sum and max. Exactly one of
 * MIMI_SIMD_AVX2, MIMI_SIMD_AVX512 or MIMI_SIMD_NEON is defined by the file that includes this
 * (kernels_<isa>.c), which is compiled with that instruction set's flags.
 * Not here: any kernel logic (kernels_impl.h), feature detection (dispatch.c).
 */
#ifndef MIMI_SIMD_H
#define MIMI_SIMD_H

#include <stddef.h>
#include <stdint.h>

#define SIMD_INLINE static inline __attribute__((always_inline))

#if defined(MIMI_SIMD_AVX512)
// ---- AVX-512 (F, BW, DQ, VL): 16 lanes ----
#include <immintrin.h>
#define SIMD_W 16
typedef __m512 vf;
typedef __mmask16 vmask;
SIMD_INLINE vf v_load(const float *p) { return _mm512_loadu_ps(p); }
SIMD_INLINE void v_store(float *p, vf v) { _mm512_storeu_ps(p, v); }
SIMD_INLINE vf v_set1(float x) { return _mm512_set1_ps(x); }
SIMD_INLINE vf v_bcast(const float *p) { return _mm512_set1_ps(*p); }
SIMD_INLINE vf v_zero(void) { return _mm512_setzero_ps(); }
SIMD_INLINE vf v_add(vf a, vf b) { return _mm512_add_ps(a, b); }
SIMD_INLINE vf v_sub(vf a, vf b) { return _mm512_sub_ps(a, b); }
SIMD_INLINE vf v_mul(vf a, vf b) { return _mm512_mul_ps(a, b); }
SIMD_INLINE vf v_div(vf a, vf b) { return _mm512_div_ps(a, b); }
SIMD_INLINE vf v_fma(vf a, vf b, vf c) { return _mm512_fmadd_ps(a, b, c); }
SIMD_INLINE vf v_min(vf a, vf b) { return _mm512_min_ps(a, b); }
SIMD_INLINE vf v_max(vf a, vf b) { return _mm512_max_ps(a, b); }
SIMD_INLINE vmask v_gt(vf a, vf b) { return _mm512_cmp_ps_mask(a, b, _CMP_GT_OQ); }
SIMD_INLINE vf v_select(vmask m, vf a, vf b) { return _mm512_mask_blend_ps(m, b, a); }
SIMD_INLINE vf v_round(vf x) {
    return _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}
// 2^n for integral n in [-126, 127]
SIMD_INLINE vf v_pow2i(vf n) {
    __m512i e = _mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127));
    return _mm512_castsi512_ps(_mm512_slli_epi32(e, 23));
}
// SIMD_W bfloat16 values widened to f32 (a bf16 is the high half of an f32)
SIMD_INLINE vf v_load_bf16(const uint16_t *p) {
    __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
}
SIMD_INLINE float v_hsum(vf v) {
    __m256 h = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
    __m128 q = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
    q = _mm_add_ps(q, _mm_movehl_ps(q, q));
    q = _mm_add_ss(q, _mm_movehdup_ps(q));
    return _mm_cvtss_f32(q);
}
SIMD_INLINE float v_hmax(vf v) { return _mm512_reduce_max_ps(v); }

#elif defined(MIMI_SIMD_AVX2)
// ---- AVX2 + FMA: 8 lanes ----
#include <immintrin.h>
#define SIMD_W 8
typedef __m256 vf;
typedef __m256 vmask;
SIMD_INLINE vf v_load(const float *p) { return _mm256_loadu_ps(p); }
SIMD_INLINE void v_store(float *p, vf v) { _mm256_storeu_ps(p, v); }
SIMD_INLINE vf v_set1(float x) { return _mm256_set1_ps(x); }
SIMD_INLINE vf v_bcast(const float *p) { return _mm256_broadcast_ss(p); }
SIMD_INLINE vf v_zero(void) { return _mm256_setzero_ps(); }
SIMD_INLINE vf v_add(vf a, vf b) { return _mm256_add_ps(a, b); }
SIMD_INLINE vf v_sub(vf a, vf b) { return _mm256_sub_ps(a, b); }
SIMD_INLINE vf v_mul(vf a, vf b) { return _mm256_mul_ps(a, b); }
SIMD_INLINE vf v_div(vf a, vf b) { return _mm256_div_ps(a, b); }
SIMD_INLINE vf v_fma(vf a, vf b, vf c) { return _mm256_fmadd_ps(a, b, c); }
SIMD_INLINE vf v_min(vf a, vf b) { return _mm256_min_ps(a, b); }
SIMD_INLINE vf v_max(vf a, vf b) { return _mm256_max_ps(a, b); }
SIMD_INLINE vmask v_gt(vf a, vf b) { return _mm256_cmp_ps(a, b, _CMP_GT_OQ); }
SIMD_INLINE vf v_select(vmask m, vf a, vf b) { return _mm256_blendv_ps(b, a, m); }
SIMD_INLINE vf v_round(vf x) {
    return _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}
SIMD_INLINE vf v_pow2i(vf n) {
    __m256i e = _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127));
    return _mm256_castsi256_ps(_mm256_slli_epi32(e, 23));
}
SIMD_INLINE vf v_load_bf16(const uint16_t *p) {
    __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
}
SIMD_INLINE float v_hsum(vf v) {
    __m128 q = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    q = _mm_add_ps(q, _mm_movehl_ps(q, q));
    q = _mm_add_ss(q, _mm_movehdup_ps(q));
    return _mm_cvtss_f32(q);
}
SIMD_INLINE float v_hmax(vf v) {
    __m128 q = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    q = _mm_max_ps(q, _mm_movehl_ps(q, q));
    q = _mm_max_ss(q, _mm_movehdup_ps(q));
    return _mm_cvtss_f32(q);
}

#elif defined(MIMI_SIMD_NEON)
// ---- NEON (AArch64): 4 lanes ----
#include <arm_neon.h>
#define SIMD_W 4
typedef float32x4_t vf;
typedef uint32x4_t vmask;
SIMD_INLINE vf v_load(const float *p) { return vld1q_f32(p); }
SIMD_INLINE void v_store(float *p, vf v) { vst1q_f32(p, v); }
SIMD_INLINE vf v_set1(float x) { return vdupq_n_f32(x); }
SIMD_INLINE vf v_bcast(const float *p) { return vld1q_dup_f32(p); }
SIMD_INLINE vf v_zero(void) { return vdupq_n_f32(0.0f); }
SIMD_INLINE vf v_add(vf a, vf b) { return vaddq_f32(a, b); }
SIMD_INLINE vf v_sub(vf a, vf b) { return vsubq_f32(a, b); }
SIMD_INLINE vf v_mul(vf a, vf b) { return vmulq_f32(a, b); }
SIMD_INLINE vf v_div(vf a, vf b) { return vdivq_f32(a, b); }
SIMD_INLINE vf v_fma(vf a, vf b, vf c) { return vfmaq_f32(c, a, b); }
SIMD_INLINE vf v_min(vf a, vf b) { return vminq_f32(a, b); }
SIMD_INLINE vf v_max(vf a, vf b) { return vmaxq_f32(a, b); }
SIMD_INLINE vmask v_gt(vf a, vf b) { return vcgtq_f32(a, b); }
SIMD_INLINE vf v_select(vmask m, vf a, vf b) { return vbslq_f32(m, a, b); }
SIMD_INLINE vf v_round(vf x) { return vrndnq_f32(x); }
SIMD_INLINE vf v_pow2i(vf n) {
    int32x4_t e = vaddq_s32(vcvtnq_s32_f32(n), vdupq_n_s32(127));
    return vreinterpretq_f32_s32(vshlq_n_s32(e, 23));
}
SIMD_INLINE vf v_load_bf16(const uint16_t *p) {
    return vreinterpretq_f32_u32(vshll_n_u16(vld1_u16(p), 16));
}
SIMD_INLINE float v_hsum(vf v) {
    float32x2_t h = vadd_f32(vget_low_f32(v), vget_high_f32(v));
    return vget_lane_f32(vpadd_f32(h, h), 0);
}
SIMD_INLINE float v_hmax(vf v) { return vmaxvq_f32(v); }

#else
#error "simd.h: define MIMI_SIMD_AVX2, MIMI_SIMD_AVX512 or MIMI_SIMD_NEON"
#endif

// ---- partial vectors (tails), the same on every ISA ----

// The first n (< SIMD_W) floats at p, zeros after.
SIMD_INLINE vf v_load_n(const float *p, int n) {
    float t[SIMD_W] = {0};
    for (int i = 0; i < n; i++) t[i] = p[i];
    return v_load(t);
}

// Stores the first n lanes of v at p.
SIMD_INLINE void v_store_n(float *p, vf v, int n) {
    float t[SIMD_W];
    v_store(t, v);
    for (int i = 0; i < n; i++) p[i] = t[i];
}

#endif
