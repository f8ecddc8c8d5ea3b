/*
 * synth.h - the synthetic deterministic Mimi weights of the reference vectors.
 *
 * Every tensor is a pure function of (seed, native tensor name, shape); the rule is written out in
 * synth.c and in tests/data/testweights.py. The model has the full geometry of the released
 * Mimi (318 native tensors, 96,151,393 values) but its weights are not trained: it produces no
 * meaningful audio. It exists so that tests, benchmarks and the quick start need no download.
 */
#ifndef MIMI_SYNTH_H
#define MIMI_SYNTH_H

#include <stddef.h>
#include <stdint.h>

// KYUTAI and HF write the default Mimi; POCKET writes Pocket TTS's Mimi (its own names, spec 8.3)
// under "mimi." with a few TTS tensors beside it.
enum synth_naming { SYNTH_NAMING_KYUTAI = 0, SYNTH_NAMING_HF = 1, SYNTH_NAMING_POCKET = 2 };
enum synth_dtype { SYNTH_F32 = 0, SYNTH_F16 = 1, SYNTH_BF16 = 2 };

// One tensor of the native checkpoint: its name and shape.
struct synth_tensor_info {
    const char *name;
    int n_dims;
    int64_t shape[3];
};

// The native tensor table (318 entries, in checkpoint order). *n receives the count.
const struct synth_tensor_info *synth_native_tensors(int *n);

// The Pocket TTS table: its 87 codec tensors then 3 TTS tensors. *n receives the count.
const struct synth_tensor_info *synth_pocket_tensors(int *n);

// Fills out[0 .. n_elements) with the values of native tensor `name` of `shape` for `seed`.
void synth_fill(const char *name, const int64_t *shape, int n_dims, uint64_t seed, float *out);

// Writes the whole synthetic model to `path` (atomically) in the given naming and dtype.
// HF naming renames every tensor and splits/permutes the attention projections as the official
// conversion does. Returns 0 or a negative MIMI_E* code with a reason in errbuf.
int synth_write_model(const char *path, uint64_t seed, enum synth_naming naming,
                      enum synth_dtype dtype, char *errbuf, size_t errlen);

// ---- the pieces synth_write_model is built from (exposed for the tests) ----

#define SYNTH_MAX_NAME 128  // bytes of any native or HF tensor name, with the terminator

// One tensor of the HF-named checkpoint, made from one native tensor.
struct synth_hf_tensor {
    char name[SYNTH_MAX_NAME];
    int n_dims;
    int64_t shape[3];
    const float *data;  // its values, inside the hf_values buffer given to synth_hf_convert
};

// Renames a native tensor name by the official conversion's ordered substring rewrites (a fused
// `in_proj_weight` keeps that suffix; synth_hf_convert splits it). Returns 0, or MIMI_EINVAL when
// the result does not fit in out_len bytes.
int synth_hf_name(const char *native_name, char *out, size_t out_len);

// Converts native tensor `t` with its `values` to HF naming: 3 tensors (q, k, v) for a fused
// attention in_proj_weight, with the q and k rows permuted per head for half-split rotary; 1
// renamed tensor otherwise. `hf_values` (as many floats as `values`) receives the values in
// file order, and out[i].data points into it. Returns the count, or MIMI_EINVAL.
int synth_hf_convert(const struct synth_tensor_info *t, const float *values, float *hf_values,
                     struct synth_hf_tensor out[3]);

// f32 -> IEEE half / bfloat16 bit patterns, rounding to nearest even (overflow gives infinity,
// NaN stays a quiet NaN, the f16 subnormal range is rounded exactly).
uint16_t synth_f32_to_f16(float x);
uint16_t synth_f32_to_bf16(float x);

#endif
