/*
 * safetensors.h - a bounded reader for the safetensors format.
 *
 * Knows nothing about Mimi. The file (or a caller's buffer) is mapped read-only, the JSON header
 * is parsed with hard limits, and every tensor's dtype, shape and byte range is checked against
 * the data section before anyone may look at it. Overlapping tensors are rejected. The header is
 * never trusted: lengths, offsets and shape products are overflow-checked.
 */
#ifndef MIMI_SAFETENSORS_H
#define MIMI_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#define ST_MAX_DIMS 8
#define ST_MAX_NAME 512          // bytes of a tensor name, without the terminator
#define ST_MAX_HEADER (64 << 20) // bytes of JSON header accepted
#define ST_MAX_TENSORS 65536     // tensors accepted (a Mimi checkpoint has a few hundred)

enum st_dtype { ST_F32, ST_F16, ST_BF16, ST_F64, ST_I64, ST_I32, ST_I16, ST_I8, ST_U8, ST_BOOL };

struct st_tensor {
    char name[ST_MAX_NAME + 1];
    enum st_dtype dtype;
    int n_dims;
    int64_t shape[ST_MAX_DIMS];
    int64_t n_elements;   // product of shape (1 for a scalar)
    const uint8_t *data;  // n_bytes bytes inside the mapping; alignment not guaranteed
    size_t n_bytes;
};

struct st_file {
    const uint8_t *base;  // the whole image
    size_t size;
    int mapped;           // 1 when base came from mmap and must be unmapped
    int n_tensors;
    struct st_tensor *tensors;  // sorted by name
    char *metadata_json;  // raw text of "__metadata__" object or NULL (owned)
};

// Opens and maps `path`. On failure returns a negative MIMI_E* code and writes a one-line reason
// into errbuf (which is always terminated when errlen > 0).
int st_open(struct st_file *f, const char *path, char *errbuf, size_t errlen);

// Parses a caller-owned image (borrowed; must outlive the st_file).
int st_open_memory(struct st_file *f, const void *data, size_t size, char *errbuf, size_t errlen);

// Releases the mapping and the tensor table. Safe on a zeroed or already-closed st_file.
void st_close(struct st_file *f);

// Looks a tensor up by exact name (binary search); NULL if absent.
const struct st_tensor *st_find(const struct st_file *f, const char *name);

// Size in bytes of one element of `dtype`.
size_t st_dtype_size(enum st_dtype dtype);

// "F32", "BF16", ...
const char *st_dtype_name(enum st_dtype dtype);

// Converts a float tensor (F32, F16, BF16, F64) into `out` (n_elements floats).
// Returns 0, or MIMI_EFORMAT for a non-float dtype.
int st_to_f32(const struct st_tensor *t, float *out);

// Copies an integer tensor (I32, I64, I16, I8, U8, BOOL) into `out` as int32, checking range.
// Returns 0, or MIMI_EFORMAT for a non-integer dtype or a value outside int32.
int st_to_i32(const struct st_tensor *t, int32_t *out);

// Writing: a tiny writer used by tools and tests to produce safetensors files.
struct st_write_tensor {
    const char *name;
    enum st_dtype dtype;
    int n_dims;
    int64_t shape[ST_MAX_DIMS];
    const void *data;  // raw little-endian bytes, n_elements * dtype size
};

// Writes tensors (in the given order) and optional metadata (a JSON object text such as
// {"seed":"0"}, or NULL) to `path` atomically: a temporary file beside it, renamed on success,
// removed on failure. Returns 0 or a negative MIMI_E* code with a reason in errbuf.
int st_write(const char *path, const struct st_write_tensor *tensors, int n_tensors,
             const char *metadata_json, char *errbuf, size_t errlen);

#endif
