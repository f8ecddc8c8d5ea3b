/*
 * codes_file.h - Mimi frames on disk and in pipes: integer codes, or continuous latents.
 *
 * A model's 80 ms frames are either codes (n_codebooks integers in [0, codebook_size), the
 * default Mimi) or continuous latents (latent_size floats, Pocket TTS's Mimi without quantizer).
 * Both are stored the same way, as a 2-D array of shape [rows, frames] (the reference's layout;
 * rows are the codebooks, semantic first, or the latent's channels):
 * - .npy: codes int16, int32 (written) or int64; latents float32 (written) or float64; no
 *   metadata. The dtype tells the two apart.
 * - .safetensors: one tensor "codes" (I32 written; I16, I32, I64 read) or "latents" (F32
 *   written; F32, F16, BF16, F64 read) and string metadata:
 *     format         "mimi-codes" or "mimi-latents"
 *     format_version "1"
 *     sample_rate    "24000"   the model's audio rate
 *     frame_rate     "12.5"    frames per second
 *     frame_size     "1920"    samples per frame
 *     n_codebooks    "8"       codes: rows of `codes`
 *     codebook_size  "2048"    codes: codes are in [0, codebook_size)
 *     latent_size    "32"      latents: rows of `latents`
 *     n_samples      "40800"   audio samples (at sample_rate) the frames stand for; decoding
 *                              trims its output to this length
 *     model_xxh64    "…"       XXH64 (seed 0) of the model file's bytes, 16 lowercase hex
 *                              digits, the value `xxh64sum MODEL` prints
 *     model_naming   "kyutai"  the model's tensor naming scheme
 *     model_family   "mimi"    "mimi" (codes) or "pocket-tts" (latents)
 *     mode           "streaming" or "offline"
 *     source         the input file's name (no directory), when it had one
 *     encoder        "libmimi 0.1.0"
 *   Readers ignore keys they do not know; every key is optional on read.
 *
 * Frame streams carry frames one at a time, for pipes: binary (n int32 codes or n float32
 * latent values per frame, little-endian, nothing else) or text (one line per frame: n decimal
 * integers, or n floats printed with 9 significant digits so that they read back exactly,
 * separated by spaces; blank lines are skipped on read).
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

// ---- frame types ----

// What one frame holds. Values of both types are 4 bytes, so storage, transposition and the
// binary stream are the same for both; only text, checks and the codec calls differ.
enum frame_type {
    FRAME_CODES = 0,    // int32 codes
    FRAME_LATENTS = 1,  // float32 latent values
};

// "codes" or "latents" (the tensor name of a .safetensors file too).
const char *frame_type_name(enum frame_type type);

// ---- codes and latents files ----

enum codes_kind { CODES_NONE = 0, CODES_NPY = 1, CODES_SAFETENSORS = 2 };

// By extension (.npy, .safetensors); CODES_NONE otherwise.
enum codes_kind codes_kind_from_path(const char *path);

struct codes {
    enum frame_type type;
    void *data;           // row-major [rows][n_frames]: int32 codes or float latents, per type
    int rows;             // codebooks, or floats per latent
    int64_t n_frames;
    enum codes_kind kind;
    char dtype[8];        // "int16", "int32", "int64", "float32", "float64", "float16", ...
    struct codes_meta meta;  // empty for .npy
};

// data as codes / latents (NULL when the file holds the other type).
const int32_t *codes_i32(const struct codes *c);
const float *codes_f32(const struct codes *c);

// Copies frame f (column f of every row) into frame[0 .. rows) (4-byte values, either type).
void codes_frame(const struct codes *c, int64_t f, int rows, void *frame);

// Reads a codes or latents file, .npy or .safetensors, told apart by content (the .npy dtype,
// the safetensors tensor name). A safetensors file with neither tensor (a model, say) is an
// error that says so. Free with codes_free.
int codes_read(const char *path, struct codes *c, char *errbuf, size_t errlen);
void codes_free(struct codes *c);

// Writes a row-major [rows][n_frames] array, int32 codes or float32 latents, in the format of
// the extension; `meta` is stored in a .safetensors file (may be NULL) and ignored for .npy.
// Atomic (temporary file, then rename).
int codes_write(const char *path, enum frame_type type, const void *data, int rows,
                int64_t n_frames, const struct codes_meta *meta, char *errbuf, size_t errlen);

// ---- frame streams ----

// Writes one frame of n values to fd, binary or text, in one write. `name` is for messages.
// EPIPE gives MIMI_EIO with "broken pipe" in the reason.
int codes_stream_put(int fd, int text, enum frame_type type, const void *frame, int n,
                     const char *name, char *errbuf, size_t errlen);

struct codes_reader {
    int fd, text, n;
    enum frame_type type;
    char name[256];
    int64_t frame, line;   // frames returned, text lines read
    size_t pos, len;
    int eof;
    char buf[65536];
};

// Reads frames of n values of `type` from fd (not closed by the reader).
void codes_reader_init(struct codes_reader *r, int fd, int text, enum frame_type type, int n,
                       const char *name);

// Reads the next frame into frame[0 .. n). Returns 1, 0 at the end of the input, or a negative
// code: a frame cut short, a line with another count of values, or text that is not a number.
// Never waits for more input than the frame needs. Values are not range-checked here.
int codes_reader_next(struct codes_reader *r, void *frame, char *errbuf, size_t errlen);

#endif
