/*
 * codes_file.h - Mimi codes on disk and in pipes.
 *
 * Codes files hold one signal's codes as a 2-D integer array of shape [codebooks, frames] (the
 * reference's layout; row 0 is the semantic codebook):
 * - .npy: int16, int32 (written) or int64, no metadata;
 * - .safetensors: one tensor "codes" (I32 written; I16, I32, I64 read) and string metadata:
 *     format         "mimi-codes"
 *     format_version "1"
 *     sample_rate    "24000"   the model's audio rate
 *     frame_rate     "12.5"    frames per second
 *     frame_size     "1920"    samples per frame
 *     n_codebooks    "8"       rows of `codes`
 *     codebook_size  "2048"    codes are in [0, codebook_size)
 *     n_samples      "40800"   audio samples (at sample_rate) the codes stand for; decoding
 *                              trims its output to this length
 *     model_xxh64    "…"       XXH64 (seed 0) of the model file's bytes, 16 lowercase hex
 *                              digits, the value `xxh64sum MODEL` prints
 *     model_naming   "kyutai"  the model's tensor naming scheme
 *     mode           "streaming" or "offline"
 *     source         the input file's name (no directory), when it had one
 *     encoder        "libmimi 0.1.0"
 *   Readers ignore keys they do not know; every key is optional on read.
 *
 * Frame streams carry codes one frame at a time, for pipes: binary (n_codebooks int32
 * little-endian values per frame, nothing else) or text (one line per frame: n_codebooks decimal
 * integers separated by spaces; blank lines are skipped on read).
 *
 * Functions return 0 (or a count) or a negative MIMI_E* code with a one-line reason starting with
 * the path in errbuf. Nothing is printed.
 */
#ifndef MIMI_CODES_FILE_H
#define MIMI_CODES_FILE_H

#include <stddef.h>
#include <stdint.h>

// ---- hashing ----

// XXH64 of n bytes with `seed` (Yann Collet's xxHash, 64-bit variant).
uint64_t xxh64(const void *data, size_t n, uint64_t seed);

// XXH64 (seed 0) of a whole file as 16 lowercase hex digits in `hex` (17 bytes).
int file_xxh64(const char *path, char hex[17], char *errbuf, size_t errlen);

// ---- metadata ----

#define CODES_MAX_META 32

struct codes_meta {
    int n;
    char key[CODES_MAX_META][64];
    char value[CODES_MAX_META][256];
};

// The value of `key`, or NULL.
const char *codes_meta_get(const struct codes_meta *m, const char *key);

// Sets `key` (replacing an earlier value). Values longer than 255 bytes are cut.
void codes_meta_set(struct codes_meta *m, const char *key, const char *value);

// ---- codes files ----

enum codes_kind { CODES_NONE = 0, CODES_NPY = 1, CODES_SAFETENSORS = 2 };

// By extension (.npy, .safetensors); CODES_NONE otherwise.
enum codes_kind codes_kind_from_path(const char *path);

struct codes {
    int32_t *data;        // codebook-major: data[q * n_frames + f]
    int n_codebooks;
    int64_t n_frames;
    enum codes_kind kind;
    char dtype[8];        // "int16", "int32", "int64"
    struct codes_meta meta;  // empty for .npy
};

// Reads a codes file, .npy or .safetensors, told apart by content. A safetensors file without a
// "codes" tensor (a model, say) is an error that says so. Free with codes_free.
int codes_read(const char *path, struct codes *c, char *errbuf, size_t errlen);
void codes_free(struct codes *c);

// Writes codebook-major codes as int32, in the format of the extension; `meta` is stored in a
// .safetensors file (may be NULL) and ignored for .npy. Atomic (temporary file, then rename).
int codes_write(const char *path, const int32_t *data, int n_codebooks, int64_t n_frames,
                const struct codes_meta *meta, char *errbuf, size_t errlen);

// ---- frame streams ----

// Writes one frame of n codes to fd, binary or text, in one write. `name` is for messages.
// EPIPE gives MIMI_EIO with "broken pipe" in the reason.
int codes_stream_put(int fd, int text, const int32_t *codes, int n, const char *name,
                     char *errbuf, size_t errlen);

struct codes_reader {
    int fd, text, n;
    char name[256];
    int64_t frame, line;   // frames returned, text lines read
    size_t pos, len;
    int eof;
    char buf[65536];
};

// Reads frames of n codes from fd (not closed by the reader).
void codes_reader_init(struct codes_reader *r, int fd, int text, int n, const char *name);

// Reads the next frame into codes[0 .. n). Returns 1, 0 at the end of the input, or a negative
// code: a frame cut short, a line with another count of codes, or text that is not a number.
// Never waits for more input than the frame needs.
int codes_reader_next(struct codes_reader *r, int32_t *codes, char *errbuf, size_t errlen);

#endif
