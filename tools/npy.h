/*
 * npy.h - reading and writing numpy .npy files, for code and sample arrays.
 *
 * Read: format versions 1.0 and 2.0, little-endian integer ('<i2', '<i4', '<i8') and float
 * ('<f4', '<f8') arrays in C order. The file is distrusted: the header length is checked against
 * the file size, the header dict is parsed with hard limits (exactly the keys 'descr',
 * 'fortran_order' and 'shape'), the shape product is overflow-checked and the data section must
 * have exactly the size the shape implies.
 * Write: format version 1.0, atomically (a temporary "<path>.tmp.<pid>" renamed over `path`,
 * removed on failure), header padded so that the data starts on a 64-byte boundary.
 *
 * Every function returns 0 or a negative MIMI_E* code (include/mimi.h) and, on failure, writes a
 * one-line reason that starts with the path ("codes.npy: expected 1234 bytes of data, found
 * 1000") into errbuf, which is always terminated when errlen > 0. Nothing is printed.
 */
#ifndef MIMI_NPY_H
#define MIMI_NPY_H

#include <stddef.h>
#include <stdint.h>

#define NPY_MAX_DIMS 8
#define NPY_MAX_HEADER 65536  // bytes of header dict accepted on read

// Reads a 2-D integer array ('<i4', '<i2', or '<i8' whose values all fit in int32) into a new
// malloc'd int32 buffer, row-major: (*data)[r * shape[1] + c]. The caller frees *data.
// Dimensions may be 0 (then *data is a valid, empty allocation).
int npy_read_i32_2d(const char *path, int32_t **data, int64_t shape[2], char *errbuf,
                    size_t errlen);

// Reads a float array ('<f4', or '<f8' converted to float) of 1 .. NPY_MAX_DIMS dimensions into a
// new malloc'd buffer in C order. *n_dims and shape[0 .. *n_dims) receive the shape.
int npy_read_f32(const char *path, float **data, int *n_dims, int64_t shape[NPY_MAX_DIMS],
                 char *errbuf, size_t errlen);

// Writes an int32 array of shape [rows, cols] ('<i4', C order) from data[r * cols + c].
int npy_write_i32_2d(const char *path, const int32_t *data, int64_t rows, int64_t cols,
                     char *errbuf, size_t errlen);

// Writes a float32 array ('<f4', C order) of n_dims (1 or 2) dimensions.
int npy_write_f32(const char *path, const float *data, int n_dims, const int64_t *shape,
                  char *errbuf, size_t errlen);

#endif
