/*
 * fuzz_safetensors.c - a libFuzzer target for the safetensors reader.
 *
 * Each input is parsed as a whole image with st_open_memory. A refused image must come with a
 * one-line reason; an accepted one must describe tensors that lie inside the input, that st_find
 * locates by name, and that convert without reading out of bounds. Any broken promise traps.
 */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "safetensors.h"

#define MAX_CONVERT 4096  // elements converted per tensor; larger ones are only looked up

static float f32_buf[MAX_CONVERT];
static int32_t i32_buf[MAX_CONVERT];

// Checks one accepted tensor and converts it when small.
static void touch(const struct st_file *f, const struct st_tensor *t, const uint8_t *data,
                  size_t size) {
    if (st_find(f, t->name) != t) __builtin_trap();
    if (t->data < data + 8 || t->n_bytes > size || t->data + t->n_bytes > data + size)
        __builtin_trap();
    if ((size_t)t->n_elements * st_dtype_size(t->dtype) != t->n_bytes) __builtin_trap();
    if (t->n_dims < 0 || t->n_dims > ST_MAX_DIMS) __builtin_trap();
    if (t->n_elements <= MAX_CONVERT) {
        st_to_f32(t, f32_buf);
        st_to_i32(t, i32_buf);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    struct st_file f;
    char err[256];
    memset(err, 'x', sizeof err);
    if (st_open_memory(&f, data, size, err, sizeof err) == 0) {
        for (int i = 0; i < f.n_tensors; i++) touch(&f, &f.tensors[i], data, size);
        if (f.metadata_json && f.metadata_json[0] != '{') __builtin_trap();
    } else {
        size_t len = strnlen(err, sizeof err);
        if (len == 0 || len == sizeof err || memchr(err, '\n', len)) __builtin_trap();
        if (f.tensors || f.n_tensors || f.base) __builtin_trap();
    }
    st_close(&f);
    st_close(&f);
    return 0;
}
