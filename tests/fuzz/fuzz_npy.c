/*
 * fuzz_npy.c - libFuzzer target for the command's .npy reader (tools/npy.c).
 *
 * The reader takes a path, so each input is written to one temporary file (per process) and read
 * back both as a 2-D integer array (codes) and as a float array (latents, audio). Anything the
 * reader accepts must describe exactly the bytes that follow its header.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "npy.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static char path[64];
    if (!path[0]) snprintf(path, sizeof path, "/tmp/fuzz_npy.%ld.npy", (long)getpid());
    FILE *f = fopen(path, "wb");
    if (!f) return 0;
    if (size && fwrite(data, 1, size, f) != size) {
        fclose(f);
        return 0;
    }
    fclose(f);
    char err[512];
    int32_t *codes = NULL;
    int64_t shape2[2];
    if (npy_read_i32_2d(path, &codes, shape2, err, sizeof err) == 0) {
        // the accepted data fits in the file: touch every value
        int64_t n = shape2[0] * shape2[1];
        if (shape2[0] < 0 || shape2[1] < 0 || n * 2 > (int64_t)size) abort();
        int32_t sum = 0;
        for (int64_t i = 0; i < n; i++) sum ^= codes[i];
        if (sum == 0x7fffffff) fprintf(stderr, "%d\n", (int)sum);  // keeps the reads
    }
    free(codes);
    float *values = NULL;
    int n_dims = 0;
    int64_t shape[NPY_MAX_DIMS];
    if (npy_read_f32(path, &values, &n_dims, shape, err, sizeof err) == 0) {
        int64_t n = 1;
        if (n_dims < 1 || n_dims > NPY_MAX_DIMS) abort();
        for (int d = 0; d < n_dims; d++) n *= shape[d];
        if (n * 4 > (int64_t)size) abort();
        float sum = 0;
        for (int64_t i = 0; i < n; i++) sum += values[i];
        if (sum == 1234.5f) fprintf(stderr, "%g\n", (double)sum);  // keeps the reads
    }
    free(values);
    return 0;
}
