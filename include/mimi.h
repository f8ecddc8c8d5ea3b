/*
 * mimi.h - libmimi, Kyutai's Mimi neural audio codec in C.
 *
 * This header is the whole public API and its manual.
 *
 * Mimi turns 24 kHz mono audio into 12.5 Hz frames of discrete codes and back. One frame is
 * 1920 samples (80 ms) on the audio side and `n_codebooks` integer codes in [0, 2048) on the code
 * side; codebook 0 is the semantic code, codebooks 1.. are residual acoustic codes. libmimi runs
 * the codec exactly as Kyutai's reference implementation does, one frame at a time (streaming) or
 * over a whole signal (offline).
 *
 * A typical program:
 *
 *     struct mimi_model_params mp;
 *     mimi_model_params_default(&mp);
 *     int err;
 *     struct mimi_model *model = mimi_model_load("model.safetensors", &mp, &err);
 *     if (!model) { fprintf(stderr, "%s\n", mimi_strerror(err)); return 1; }
 *
 *     struct mimi_stream_params sp;
 *     mimi_stream_params_default(&sp);
 *     sp.n_codebooks = 8;
 *     struct mimi_encoder *enc = mimi_encoder_create(model, &sp, &err);
 *     struct mimi_decoder *dec = mimi_decoder_create(model, &sp, &err);
 *
 *     float pcm[1920]; int32_t codes[8];
 *     while (read_80ms_of_audio(pcm)) {              // 1920 float samples at 24 kHz
 *         if (mimi_encoder_step(enc, pcm, codes) < 0) break;
 *         if (mimi_decoder_step(dec, codes, pcm) < 0) break;
 *         play(pcm);
 *     }
 *     mimi_decoder_destroy(dec);
 *     mimi_encoder_destroy(enc);
 *     mimi_model_destroy(model);
 *
 * Conventions:
 * - Every fallible function returns an int: MIMI_OK (0) or a negative MIMI_E* code; functions
 *   that count return the count (>= 0) or a negative code. Constructors return a handle or NULL
 *   and store the code in `*err` when `err` is not NULL.
 * - The library never exits, aborts or prints. Details of a failure (the tensor name, the
 *   expected and found shapes, ...) go to the log callback of the model parameters, and for live
 *   objects also to `mimi_encoder_errmsg` / `mimi_decoder_errmsg`.
 * - Audio is float PCM at the model's sample rate (24000 Hz), nominally in [-1, 1]; the decoder's
 *   output is not clipped and may exceed that range. Resampling and file formats are the
 *   caller's job (the `mimi` command does both).
 * - Threads: a model is immutable once loaded and may be used from any number of threads at
 *   once. An encoder or decoder is not locked: use each from one thread at a time.
 * - Ownership: the caller owns every buffer it passes; the library keeps no pointer to a caller
 *   buffer after a call returns, except for mimi_model_load_memory (see there). Every
 *   `_create`/`_load` has a `_destroy` that accepts NULL. Encoders and decoders borrow their
 *   model: destroy them before the model.
 */
#ifndef MIMI_H
#define MIMI_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32) && defined(MIMI_BUILD_SHARED)
#define MIMI_API __declspec(dllexport)
#elif defined(__GNUC__)
#define MIMI_API __attribute__((visibility("default")))
#else
#define MIMI_API
#endif

#if defined(__GNUC__)
#define MIMI_WARN_UNUSED __attribute__((warn_unused_result))
#else
#define MIMI_WARN_UNUSED
#endif

#define MIMI_VERSION_MAJOR 0
#define MIMI_VERSION_MINOR 1
#define MIMI_VERSION_PATCH 0

// ---- error codes (stable, never renumbered) ----

#define MIMI_OK 0
#define MIMI_EINVAL (-1)       /* bad argument, or a code outside [0, codebook_size) */
#define MIMI_ENOMEM (-2)       /* host memory allocation failed */
#define MIMI_EIO (-3)          /* a file could not be opened, read or mapped */
#define MIMI_EFORMAT (-4)      /* a model file is malformed or is not a Mimi checkpoint */
#define MIMI_EUNSUPPORTED (-5) /* a feature that is not compiled in, or not in this model */
#define MIMI_EBUFFER (-6)      /* an output buffer is too small; nothing was consumed */
#define MIMI_EFULL (-7)        /* no free slot in a batch */
#define MIMI_EDEVICE (-8)      /* a compute-device failure */
#define MIMI_ESTATE (-9)       /* the object is poisoned by an earlier failure, or misused */

/* The library version as "MAJOR.MINOR.PATCH". Never NULL. */
MIMI_API const char *mimi_version_string(void);

/* A fixed English sentence for an error code (for example "invalid argument"). Unknown codes
 * give "unknown error". Never NULL; the string is static. */
MIMI_API const char *mimi_strerror(int code);

// ---- logging ----

#define MIMI_LOG_ERROR 0
#define MIMI_LOG_WARN 1
#define MIMI_LOG_INFO 2
#define MIMI_LOG_DEBUG 3

/* A log callback. `level` is one of MIMI_LOG_*; `msg` is one line without a trailing newline,
 * valid only during the call. It may be called from any thread that uses the model. */
typedef void (*mimi_log_fn)(void *user, int level, const char *msg);

// ---- model: immutable weights, shared by every stream ----

struct mimi_model;

/* Instruction sets for the CPU kernels.
 *
 * MIMI_ISA_AUTO picks the best the CPU has at load (AVX-512, else AVX2 + FMA on x86-64; NEON
 * on AArch64), and the plain reference path when none is available. MIMI_ISA_REFERENCE forces
 * the scalar reference path that defines correct results (tests, comparisons). The explicit
 * values force one kernel set, for tests and benchmarks: loading fails with MIMI_EUNSUPPORTED
 * when that set was not compiled into the library or the CPU lacks it.
 *
 * The fast kernels differ from the reference only in rounding (each output is one fused
 * multiply-add chain; ELU, GELU and exp use polynomial approximations within a few float ulps);
 * outputs agree with the reference within the parity gates of the test suite, not bit for bit.
 * Within one kernel set, results do not depend on n_threads or on the batch size. */
enum mimi_isa {
    MIMI_ISA_AUTO = 0,
    MIMI_ISA_REFERENCE = 1,
    MIMI_ISA_AVX2 = 2,   /* x86-64 AVX2 + FMA + F16C */
    MIMI_ISA_AVX512 = 3, /* x86-64 AVX-512 F/BW/DQ/VL */
    MIMI_ISA_NEON = 4,   /* AArch64 Advanced SIMD */
};

/* Storage of the weights the fast kernels read (the reference path always uses f32).
 * MIMI_WEIGHTS_BF16 rounds the SEANet, transformer and projection weights to bfloat16 (round to
 * nearest even), which halves the bytes a frame reads; arithmetic stays f32 and the quantizer's
 * codebooks stay f32, so the nearest-code search is exact. Outputs move by about -45 dB relative
 * to f32 and a few percent of the codes change (README, "Performance", measures both). */
enum mimi_weights {
    MIMI_WEIGHTS_F32 = 0,  /* exact weights as loaded (default) */
    MIMI_WEIGHTS_BF16 = 1, /* bfloat16 copies (opt-in, never the default) */
};

/* Where a model's arithmetic runs (struct mimi_model_params.backend).
 *
 * MIMI_BACKEND_CPU runs every step on the host (see n_threads and isa).
 * MIMI_BACKEND_CUDA runs every encoder, decoder and batch of the model on an NVIDIA GPU. The
 * weights are uploaded once at load (the model keeps its host copy as well) and shared by all
 * of them; each batch keeps its slots' streaming state (conv histories, transposed-conv tails,
 * attention rings) in device memory and runs a step as one captured CUDA graph between one
 * host-to-device and one device-to-host copy. Loading fails with MIMI_EUNSUPPORTED when the
 * library was built without CUDA or the device does not exist, MIMI_EDEVICE on a device failure.
 * Results agree with the CPU within the parity gates of the test suite, not bit for bit.
 * MIMI_BACKEND_AUTO is the CPU in this version: a program gets a GPU only by asking for one, so
 * its results never depend on the machine it happens to run on. Ask mimi_backend_available()
 * first to choose. */
enum mimi_backend {
    MIMI_BACKEND_AUTO = 0,
    MIMI_BACKEND_CPU = 1,
    MIMI_BACKEND_CUDA = 2,
};

/* Arithmetic of the CUDA backend (struct mimi_model_params.precision; the CPU ignores it).
 * STRICT: f32 everywhere; matrix products accumulate in f32 without TF32.
 * FAST: matrix products on TF32 tensor cores (inputs rounded to a 10-bit mantissa, f32
 * accumulation), everything else as STRICT. Faster with many streams, a little less faithful.
 * FAST_BF16_KV: FAST, with the transformers' attention (key/value) rings stored in bfloat16
 * (rounded to nearest even when stored, read back as f32). The rings are the largest part of a
 * stream's device state: this halves a stream's memory (about 23.5 MB to 15 MB per encode and
 * decode pair), so a GPU holds more streams, and attention reads half the bytes.
 * FAST_BF16: FAST_BF16_KV, and more on bfloat16 tensor cores (operands rounded to bfloat16, 8
 * significant bits, nearest even; f32 accumulation): the SEANets' large conv and transposed-conv
 * products (the im2col matrix or the transposed conv's input, and the weights with the bias),
 * the transformers' qkv and feed-forward products of steps of more than 16 rows (more than 8
 * streams, or a whole-signal pass), and the attention of whole-signal passes (queries and
 * softmax probabilities rounded). The ELUs that feed those products use a faster exponential
 * (within 1e-7, far below that rounding). The im2col matrices, the largest scratch of a big step,
 * take half the memory, so a step of many streams or a whole-signal pass runs the fastest of all
 * modes, and the least faithful. Products small enough for the bandwidth-bound kernel (one
 * stream's transformer rows, the late SEANet layers) and products over fewer than 64 values
 * (the first conv) stay f32 in every mode.
 * FAST_INT8_KV: FAST_BF16, with the attention rings of streaming steps (one frame a step) in
 * 8-bit integers: each head's 64 keys (and values) of a position are stored as int8 times one
 * f32 scale, their largest magnitude / 127 (rounded to nearest). Attention reads about half the
 * bytes of bfloat16 rings and a stream's rings take half the memory, so a GPU carries the most
 * streams; the rings' rounding error is about 3.5 times bfloat16's. Whole-signal passes keep
 * bfloat16 rings (theirs live for one call).
 * The measured code agreement and PCM error of each mode against STRICT are in bench/results/
 * (mimi-bench-gpu prints them). */
enum mimi_precision {
    MIMI_PRECISION_STRICT = 0,
    MIMI_PRECISION_FAST = 1,
    MIMI_PRECISION_FAST_BF16_KV = 2,
    MIMI_PRECISION_FAST_BF16 = 3,
    MIMI_PRECISION_FAST_INT8_KV = 4,
};

struct mimi_model_params {
    int isa;            /* enum mimi_isa; default MIMI_ISA_AUTO */
    int n_threads;      /* threads that run one step, the calling thread included, 1 .. 256;
                           default 1. With n > 1 the model owns a pool of n - 1 worker threads
                           (created at load, joined by mimi_model_destroy) that split each layer's
                           rows; outputs are identical to n = 1. The pool runs one step at a
                           time: while one thread's step uses it, a step started by another
                           thread on the same model (another encoder, decoder or batch) runs on
                           its calling thread alone, with the same results. To run several
                           streams in parallel at full speed, put them in one batch, or load one
                           model per concurrent caller. The reference path (MIMI_ISA_REFERENCE)
                           always runs on the calling thread alone. With MIMI_BACKEND_CUDA the
                           threads do the host's share of a large batch step instead: checking
                           and copying the PCM into pinned memory and the output out of it
                           (a millisecond or more per copy from a few hundred streams on). */
    mimi_log_fn log;    /* optional; default NULL (silent) */
    void *log_user;     /* passed to `log` */
    int backend;        /* enum mimi_backend; default MIMI_BACKEND_AUTO (the CPU) */
    int device;         /* CUDA device index, 0 .. count - 1; default 0 */
    int precision;      /* enum mimi_precision; default MIMI_PRECISION_STRICT */
    int weights;        /* enum mimi_weights; default MIMI_WEIGHTS_F32. MIMI_WEIGHTS_BF16 is
                           opt-in and applies to the fast kernels only (ignored with
                           MIMI_ISA_REFERENCE, or when AUTO finds no SIMD kernels) */
};

/* Fills `params` with the defaults listed in struct mimi_model_params. */
MIMI_API void mimi_model_params_default(struct mimi_model_params *params);

/* Loads a Mimi checkpoint from a safetensors file.
 *
 * Accepted files:
 * - Kyutai's native naming (`tokenizer-e351c8d8-checkpoint125.safetensors`,
 *   `mimi-pytorch-e351c8d8@125.safetensors`), with the attention spelt either
 *   `in_proj_weight`/`out_proj.weight` or `in_projs.0.weight`/`out_projs.0.weight`;
 * - Hugging Face transformers naming (`kyutai/mimi`, `model.safetensors`); its per-head rotary
 *   permutation of the q/k rows is undone at load;
 * - tensors in f32, f16 or bf16 (converted to f32 at load).
 * The file is memory-mapped and every length, offset and shape is checked against the file before
 * use. The number of codebooks is read from the file (32 in released files). Tensors the codec
 * does not use are ignored.
 *
 * `params` may be NULL for the defaults. Returns the model, or NULL with `*err` set to
 * MIMI_EIO (cannot open or map), MIMI_EFORMAT (not a valid Mimi checkpoint; the log callback
 * names the tensor and the expected and found shapes), MIMI_ENOMEM, MIMI_EINVAL, or
 * MIMI_EUNSUPPORTED (params->isa names a kernel set not compiled in or not on this CPU).
 * With the fast CPU kernels, loading also makes the model's packed copy of the weights (about
 * 385 MB for the default Mimi in f32, about half that with MIMI_WEIGHTS_BF16). */
MIMI_API struct mimi_model *mimi_model_load(const char *path, const struct mimi_model_params *params,
                                            int *err);

/* Like mimi_model_load, from a safetensors image in memory. The buffer is borrowed: it must stay
 * valid and unchanged until mimi_model_destroy returns. */
MIMI_API struct mimi_model *mimi_model_load_memory(const void *data, size_t size,
                                                   const struct mimi_model_params *params,
                                                   int *err);

/* Frees the model. NULL is allowed. Every encoder and decoder made from it must be destroyed
 * first. */
MIMI_API void mimi_model_destroy(struct mimi_model *model);

/* Frees the device memory a model keeps between calls: a CUDA model keeps the batches of its
 * last whole-signal calls (mimi_encode_offline and the like; at most four, up to about 3.5 GB
 * each for the largest steps) so that the next call of the same shape need not make them again;
 * mimi_batch_create frees those of every model on its device by itself when a batch does not
 * fit otherwise. Calls in progress on other threads keep theirs. Nothing to do for a CPU model.
 * NULL is allowed. */
MIMI_API void mimi_model_trim(struct mimi_model *model);

/* Geometry queries. Never hard-code these numbers; read them from the model. */
MIMI_API int mimi_model_sample_rate(const struct mimi_model *model);   /* 24000 */
MIMI_API int mimi_model_frame_size(const struct mimi_model *model);    /* samples per frame, 1920 */
MIMI_API int mimi_model_max_codebooks(const struct mimi_model *model); /* codebooks in the file */
MIMI_API int mimi_model_codebook_size(const struct mimi_model *model); /* entries per codebook, 2048 */

/* "kyutai", "huggingface" or "pocket-tts": the naming scheme the checkpoint used. */
MIMI_API const char *mimi_model_naming(const struct mimi_model *model);

/* The model family, recognised from the tensors the file holds:
 * - "mimi": the default Mimi (SEANet ratios 8-6-5-4, 8-layer transformers at 25 Hz, a split
 *   residual vector quantizer): frames are codes, used through the code API;
 * - "pocket-tts": the lighter Mimi inside Kyutai's Pocket TTS (ratios 6-5-4, 2-layer transformers
 *   at 200 Hz, no quantizer): frames are continuous latent vectors of mimi_model_latent_size()
 *   floats, used through the *_latent API below. Such a checkpoint may be a whole Pocket TTS
 *   `model.safetensors`, whose codec tensors sit under the prefix "mimi."; the rest is ignored.
 * Calling the code API on a "pocket-tts" model, or the latent API on a "mimi" model, returns
 * MIMI_EUNSUPPORTED with a message saying which to use. */
MIMI_API const char *mimi_model_family(const struct mimi_model *model);

/* Floats per frame of a model with continuous latents (32 for Pocket TTS's Mimi), or 0 for a
 * model with codes. */
MIMI_API int mimi_model_latent_size(const struct mimi_model *model);

/* Number of weights (scalars) in the model as loaded. */
MIMI_API int64_t mimi_model_parameter_count(const struct mimi_model *model);

/* 1 when a model can be loaded with `backend` (enum mimi_backend) in this process: always for
 * AUTO and CPU; for CUDA when the library was built with it and a CUDA device is present.
 * 0 otherwise. Thread-safe. */
MIMI_API int mimi_backend_available(int backend);

/* "cpu" or "cuda": where the model's arithmetic runs. */
MIMI_API const char *mimi_model_backend_name(const struct mimi_model *model);

// ---- streams: an encoder or a decoder, one audio stream each ----

/* Attention window of the transformers.
 *
 * MIMI_ATTENTION_RING reproduces the reference's streaming behaviour exactly: each transformer
 * layer keeps a ring of 250 positions, and both positions of a frame are written before
 * attention runs, so after 10 s the first position of each frame sees 249 keys instead of 250.
 * This is what Moshi, Kyutai's servers and the reference's streaming mode produce.
 *
 * MIMI_ATTENTION_WINDOW gives every position exactly the last 250 positions (itself included),
 * which is what the reference's offline (whole-signal) path computes.
 *
 * Up to 10 s of audio (250 positions) the two are identical. */
enum mimi_attention {
    MIMI_ATTENTION_RING = 0,
    MIMI_ATTENTION_WINDOW = 1,
};

/* An observation point inside a step, for tests and debugging. `name` is one of
 * "enc_seanet" (512 x steps, SEANet encoder output at 25 Hz), "enc_transformer" (after the
 * encoder transformer), "latent" (512 x 1, the quantizer input at 12.5 Hz), "dec_latent"
 * (512 x 1, quantizer output), "dec_upsample" (512 x steps), "dec_transformer" (after the decoder
 * transformer). `data` is channel-major [channels][steps] and valid only during the call. */
typedef void (*mimi_tap_fn)(void *user, const char *name, const float *data, int channels,
                            int steps);

struct mimi_stream_params {
    int n_codebooks;  /* codebooks per frame, 1 .. mimi_model_max_codebooks; default 8; ignored
                         by models with continuous latents */
    int attention;    /* enum mimi_attention; default MIMI_ATTENTION_RING */
    mimi_tap_fn tap;  /* optional; default NULL */
    void *tap_user;   /* passed to `tap` */
};

/* Fills `params` with the defaults listed in struct mimi_stream_params. */
MIMI_API void mimi_stream_params_default(struct mimi_stream_params *params);

// ---- encoder ----

struct mimi_encoder;

/* Creates an encoder for one stream. All memory the stream needs (about 9 MB, mostly the
 * attention cache) is allocated here; steps allocate nothing. `params` may be NULL for the
 * defaults. Returns NULL with `*err` = MIMI_EINVAL (bad parameter) or MIMI_ENOMEM. */
MIMI_API struct mimi_encoder *mimi_encoder_create(const struct mimi_model *model,
                                                  const struct mimi_stream_params *params,
                                                  int *err);

/* Frees the encoder. NULL is allowed. */
MIMI_API void mimi_encoder_destroy(struct mimi_encoder *enc);

/* Encodes exactly one frame: `pcm` holds frame_size (1920) samples, `codes` receives
 * n_codebooks codes, semantic first. Must not be mixed with a partly filled push buffer:
 * returns MIMI_ESTATE if mimi_encoder_pending() is not 0. Returns MIMI_OK, MIMI_EINVAL for NULL
 * pointers or non-finite samples (nothing is consumed). */
MIMI_API int mimi_encoder_step(struct mimi_encoder *enc, const float *pcm, int32_t *codes)
    MIMI_WARN_UNUSED;

/* Feeds any number of samples (0 allowed). Whole frames are encoded as they complete; fewer
 * than frame_size samples stay buffered for the next call. `codes` receives the completed
 * frames frame-major: codes[f * n_codebooks + q]. All or nothing: if the input would complete
 * more than `max_frames` frames, returns MIMI_EBUFFER and consumes nothing. Returns the number
 * of frames written (>= 0) or a negative code. */
MIMI_API int mimi_encoder_push(struct mimi_encoder *enc, const float *pcm, size_t n_samples,
                               int32_t *codes, int max_frames) MIMI_WARN_UNUSED;

/* The number of samples buffered by push and not yet encoded, 0 .. frame_size - 1. */
MIMI_API int mimi_encoder_pending(const struct mimi_encoder *enc);

/* Ends the stream: if samples are pending, zero-pads them to a whole frame and encodes it.
 * Returns the number of frames written (0 or 1) or a negative code; MIMI_EBUFFER if one frame
 * is pending and max_frames < 1. */
MIMI_API int mimi_encoder_flush(struct mimi_encoder *enc, int32_t *codes, int max_frames)
    MIMI_WARN_UNUSED;

/* Returns the encoder to its just-created state (histories, attention cache, position counter
 * and push buffer cleared) without allocating. */
MIMI_API void mimi_encoder_reset(struct mimi_encoder *enc);

/* The continuous-latent variants, for models without a quantizer (mimi_model_latent_size() > 0):
 * the same contracts as above with `latent` holding latent_size floats per frame instead of
 * n_codebooks codes (frame-major for several frames: latents[f * latent_size + i]). */
MIMI_API int mimi_encoder_step_latent(struct mimi_encoder *enc, const float *pcm, float *latent)
    MIMI_WARN_UNUSED;
MIMI_API int mimi_encoder_push_latent(struct mimi_encoder *enc, const float *pcm, size_t n_samples,
                                      float *latents, int max_frames) MIMI_WARN_UNUSED;
MIMI_API int mimi_encoder_flush_latent(struct mimi_encoder *enc, float *latents, int max_frames)
    MIMI_WARN_UNUSED;

/* The last error message recorded on this encoder, or "" if none. Valid until the next call. */
MIMI_API const char *mimi_encoder_errmsg(const struct mimi_encoder *enc);

// ---- decoder ----

struct mimi_decoder;

/* Creates a decoder for one stream (same rules as mimi_encoder_create). n_codebooks may be
 * smaller than the count the codes were made with: the first n_codebooks levels are used. */
MIMI_API struct mimi_decoder *mimi_decoder_create(const struct mimi_model *model,
                                                  const struct mimi_stream_params *params,
                                                  int *err);

/* Frees the decoder. NULL is allowed. */
MIMI_API void mimi_decoder_destroy(struct mimi_decoder *dec);

/* Decodes one frame: `codes` holds n_codebooks codes (semantic first), `pcm` receives
 * frame_size samples. A code outside [0, codebook_size) gives MIMI_EINVAL and leaves the stream
 * untouched; codes are never clamped. */
MIMI_API int mimi_decoder_step(struct mimi_decoder *dec, const int32_t *codes, float *pcm)
    MIMI_WARN_UNUSED;

/* Decodes `n_frames` frames given frame-major (codes[f * n_codebooks + q]) into
 * n_frames * frame_size samples. All codes are checked before any frame is decoded. Returns
 * MIMI_EBUFFER, consuming nothing, if max_samples is too small. Returns the number of samples
 * written or a negative code. */
MIMI_API int mimi_decoder_push(struct mimi_decoder *dec, const int32_t *codes, int n_frames,
                               float *pcm, size_t max_samples) MIMI_WARN_UNUSED;

/* Returns the decoder to its just-created state without allocating. */
MIMI_API void mimi_decoder_reset(struct mimi_decoder *dec);

/* The continuous-latent variants (see the encoder's): `latent` holds latent_size floats per
 * frame; non-finite values are MIMI_EINVAL. Pocket TTS's latents are de-normalised by the TTS
 * model (latent * emb_std + emb_mean) before they reach the codec: that is the caller's step. */
MIMI_API int mimi_decoder_step_latent(struct mimi_decoder *dec, const float *latent, float *pcm)
    MIMI_WARN_UNUSED;
MIMI_API int mimi_decoder_push_latent(struct mimi_decoder *dec, const float *latents, int n_frames,
                                      float *pcm, size_t max_samples) MIMI_WARN_UNUSED;

/* The last error message recorded on this decoder, or "" if none. */
MIMI_API const char *mimi_decoder_errmsg(const struct mimi_decoder *dec);

// ---- batch: many streams advanced together ----

/* A batch holds `capacity` independent streams ("slots") of one direction and advances any
 * subset of them by one frame per call, reading each weight once for all of them: the way to run
 * many concurrent streams (a server) at a fraction of the cost of separate encoders. A slot
 * behaves exactly like a lone encoder or decoder fed the same frames (bit for bit on the CPU).
 * An encoder or decoder is itself a batch of capacity one. Not locked: one thread at a time. */

struct mimi_batch;

enum mimi_direction {
    MIMI_DIRECTION_ENCODE = 0,
    MIMI_DIRECTION_DECODE = 1,
};

struct mimi_batch_params {
    int direction;    /* enum mimi_direction; default MIMI_DIRECTION_ENCODE */
    int capacity;     /* slots, 1 .. 65536; default 1 */
    int n_codebooks;  /* as in mimi_stream_params; default 8 */
    int attention;    /* enum mimi_attention; default MIMI_ATTENTION_RING */
    mimi_tap_fn tap;  /* optional; taps see (channels, n slots x steps) with slots side by side */
    void *tap_user;
};

/* Fills `params` with the defaults listed in struct mimi_batch_params. */
MIMI_API void mimi_batch_params_default(struct mimi_batch_params *params);

/* Creates a batch; all memory for every slot (about 9 MB per slot in f32) is allocated here.
 * Returns NULL with `*err` = MIMI_EINVAL or MIMI_ENOMEM. No slot is open yet. */
MIMI_API struct mimi_batch *mimi_batch_create(const struct mimi_model *model,
                                              const struct mimi_batch_params *params, int *err);

/* Frees the batch. NULL is allowed. */
MIMI_API void mimi_batch_destroy(struct mimi_batch *batch);

/* Opens the lowest free slot in its just-created state and returns its index (>= 0), or
 * MIMI_EFULL when every slot is open. */
MIMI_API int mimi_batch_open(struct mimi_batch *batch) MIMI_WARN_UNUSED;

/* Closes an open slot (its index may be returned by a later open). MIMI_EINVAL if the slot is
 * out of range or not open. */
MIMI_API int mimi_batch_close(struct mimi_batch *batch, int slot);

/* Returns an open slot to its just-created state. MIMI_EINVAL if the slot is not open. */
MIMI_API int mimi_batch_reset(struct mimi_batch *batch, int slot);

/* Advances the n listed slots (distinct, open) of an encode batch by one frame each. `pcm` holds
 * n frames in the order of `slots` (pcm[k * frame_size + i]); `codes` receives n x n_codebooks
 * codes in the same order (codes[k * n_codebooks + q]). Slots not listed do not advance.
 * n = 0 is a no-op. Nothing advances on error: MIMI_EINVAL for a bad slot list or a non-finite
 * sample, MIMI_ESTATE on a decode batch. */
MIMI_API int mimi_batch_encode(struct mimi_batch *batch, int n, const int *slots, const float *pcm,
                               int32_t *codes) MIMI_WARN_UNUSED;

/* Advances the n listed slots of a decode batch by one frame each: codes[k * n_codebooks + q] in,
 * pcm[k * frame_size + i] out. Every code is checked before anything advances. */
MIMI_API int mimi_batch_decode(struct mimi_batch *batch, int n, const int *slots,
                               const int32_t *codes, float *pcm) MIMI_WARN_UNUSED;

/* The continuous-latent variants of the two steps: latents[k * latent_size + i]. */
MIMI_API int mimi_batch_encode_latent(struct mimi_batch *batch, int n, const int *slots,
                                      const float *pcm, float *latents) MIMI_WARN_UNUSED;
MIMI_API int mimi_batch_decode_latent(struct mimi_batch *batch, int n, const int *slots,
                                      const float *latents, float *pcm) MIMI_WARN_UNUSED;

/* The last error message recorded on this batch, or "". */
MIMI_API const char *mimi_batch_errmsg(const struct mimi_batch *batch);

// ---- asynchronous steps ----

/* A step can be split in two: submit queues it and returns at once; collect waits for it and
 * delivers what the synchronous call (mimi_batch_encode, mimi_batch_decode, ...) would have
 * written. Between the two the caller may queue other GPU work (a language-model step) or do
 * I/O while the codec runs. One step may be outstanding per batch: submit again only after
 * collect (MIMI_ESTATE otherwise). Opening, closing or resetting slots in between applies after
 * the submitted step. On the CPU backend, submit runs the whole step before it returns and
 * collect only copies the result, so one program runs on both backends. Argument checks are
 * those of the synchronous calls, made at submit; nothing advances when submit fails. */

/* Queues one encode step (pcm as for mimi_batch_encode). Collect yields codes (n, n_codebooks)
 * as int32, or latents (n, frame_dim) as float for a model without quantizer. */
MIMI_API int mimi_batch_submit_encode(struct mimi_batch *batch, int n, const int *slots,
                                      const float *pcm) MIMI_WARN_UNUSED;

/* Queues one decode step from codes (n, n_codebooks) in host memory, all checked here.
 * Collect yields pcm (n, frame_size) floats. */
MIMI_API int mimi_batch_submit_decode(struct mimi_batch *batch, int n, const int *slots,
                                      const int32_t *codes) MIMI_WARN_UNUSED;

/* As mimi_batch_submit_decode for a model without quantizer: latents (n, frame_dim). */
MIMI_API int mimi_batch_submit_decode_latent(struct mimi_batch *batch, int n, const int *slots,
                                             const float *latents) MIMI_WARN_UNUSED;

/* CUDA batches only: queues one decode step whose codes another component left in device
 * memory (for example a language model's token buffer), with no host round trip. Code q of
 * listed slot k is device_codes[offset + k * stride + q]; stride >= n_codebooks, offset >= 0.
 * When `wait_stream` is not NULL it is a cudaStream_t of the caller: the step waits, on the
 * device, for the work queued on it so far (the writer of the codes). The codes cannot be checked
 * on the host: a slot given a code outside [0, codebook_size) does not advance, outputs zeros,
 * and collect returns MIMI_EINVAL (the other slots advance normally). MIMI_EUNSUPPORTED on a
 * CPU batch. */
MIMI_API int mimi_batch_submit_decode_device(struct mimi_batch *batch, int n, const int *slots,
                                             const int32_t *device_codes, int64_t offset,
                                             int64_t stride, void *wait_stream) MIMI_WARN_UNUSED;

/* Waits for the submitted step and writes its n rows to `output` (host memory): int32 codes,
 * or float latents or pcm, as described at the submit calls. With output NULL the rows stay at
 * mimi_batch_output_rows. MIMI_ESTATE if nothing is outstanding, MIMI_EDEVICE on a device
 * failure (the batch is then poisoned). */
MIMI_API int mimi_batch_collect(struct mimi_batch *batch, void *output) MIMI_WARN_UNUSED;

/* The batch's own host rows for a step's input and output, `capacity` rows each in the layout
 * the step calls take (input: frame_size samples, n_codebooks int32 codes or frame_dim latents
 * a row; output: what collect yields). On the CUDA backend they are page-locked and the device
 * copies straight from and into them. A server that writes its step's n input rows there (as it
 * decodes its network packets, say) and passes mimi_batch_input_rows as the input of a step call
 * saves the library's host copy of them; samples and latents are still checked for NaN and
 * infinity, codes for their range. Write the input rows only while no step is outstanding.
 * After mimi_batch_collect(batch, NULL) the step's n output rows are at mimi_batch_output_rows
 * until the next step. NULL for a NULL batch or when the rows cannot be allocated. */
MIMI_API void *mimi_batch_input_rows(struct mimi_batch *batch);
MIMI_API const void *mimi_batch_output_rows(struct mimi_batch *batch);

/* The cudaStream_t (as void *) a CUDA batch queues its steps on, for callers that order their
 * own work after the codec's (cudaStreamWaitEvent); NULL for a CPU batch. */
MIMI_API void *mimi_batch_cuda_stream(const struct mimi_batch *batch);

/* Receives the time of one op of a profiled step: `op` is the kernel ("sgemm", "im2col",
 * "attention", ... on CUDA; "matmul_stream", "matmul", "conv", "attention", ... on the CPU),
 * `stage` the part of the codec ("enc.seanet", "dec.transformer", ...). */
typedef void (*mimi_profile_fn)(void *user, const char *op, const char *stage,
                                double microseconds);

/* Runs one ordinary step (it advances the slots like mimi_batch_encode or mimi_batch_decode, or
 * their _latent forms for a model without a quantizer; `input` and `output` are what those
 * take) and reports where its time went to `fn`, in execution order, on the calling thread.
 * CUDA: each op is launched on its own between timing events instead of the captured graph
 * (slower than a normal step). CPU: every kernel call of the fast path is timed as it returns
 * (matrix products as "matmul_stream" when they stream the weights for at most two columns,
 * "matmul" otherwise; "conv", "attention", "layernorm", ...), and each stage's remaining time is
 * reported as op "other" (on the reference path, all of it). For finding where time goes. */
MIMI_API int mimi_batch_profile(struct mimi_batch *batch, int n, const int *slots,
                                const void *input, void *output, mimi_profile_fn fn,
                                void *user) MIMI_WARN_UNUSED;

// ---- offline (whole-signal) helpers ----

/* The number of frames an offline encode of n_samples produces: ceil(n_samples / frame_size). */
MIMI_API int64_t mimi_frames_for_samples(const struct mimi_model *model, int64_t n_samples);

/* The offline helpers take the stream parameters for n_codebooks and the tap; their attention
 * field is ignored (offline is always MIMI_ATTENTION_WINDOW). `params` may be NULL.
 *
 * Encodes a whole signal the way the reference's offline `encode` does: the audio is zero-padded
 * on the right to a multiple of frame_size, and attention covers exactly the last 250
 * positions. `codes` receives codebook-major codes[q * n_frames + f] (the reference's
 * [n_codebooks, n_frames] layout), n_frames = mimi_frames_for_samples(model, n_samples), and
 * must hold n_codebooks * n_frames values (max_codes). n_samples = 0 is MIMI_EINVAL, as are
 * non-finite samples.
 * Returns the number of frames or a negative code. */
MIMI_API int64_t mimi_encode_offline(const struct mimi_model *model,
                                     const struct mimi_stream_params *params, const float *pcm,
                                     int64_t n_samples, int32_t *codes,
                                     int64_t max_codes) MIMI_WARN_UNUSED;

/* Decodes codebook-major codes[q * n_frames + f] of a whole signal the way the reference's
 * offline `decode` does (attention over exactly the last 250 positions) into
 * n_frames * frame_size samples. Returns the number of samples or a negative code. */
MIMI_API int64_t mimi_decode_offline(const struct mimi_model *model,
                                     const struct mimi_stream_params *params,
                                     const int32_t *codes, int64_t n_frames, float *pcm,
                                     int64_t max_samples) MIMI_WARN_UNUSED;

/* The continuous-latent variants of the offline helpers: latents are (latent_size, n_frames),
 * latents[i * n_frames + f], as the reference's encoder returns them. max_values counts floats. */
MIMI_API int64_t mimi_encode_offline_latent(const struct mimi_model *model,
                                            const struct mimi_stream_params *params,
                                            const float *pcm, int64_t n_samples, float *latents,
                                            int64_t max_values) MIMI_WARN_UNUSED;
MIMI_API int64_t mimi_decode_offline_latent(const struct mimi_model *model,
                                            const struct mimi_stream_params *params,
                                            const float *latents, int64_t n_frames, float *pcm,
                                            int64_t max_samples) MIMI_WARN_UNUSED;

/* Whole-signal encode of many signals in one call: for each i, the codes
 * mimi_encode_offline(model, params, pcm[i], n_samples[i], codes[i], max_codes[i]) gives
 * (codes[i] receives n_codebooks * mimi_frames_for_samples(model, n_samples[i]) values,
 * codebook-major). On a GPU model the signals share each step (two alternating batches whose
 * step advances up to 2048 frames in all: 32 signals x 64 frames, 8 x 256, more short ones x
 * fewer frames), which is how offline throughput is reached; on the CPU they run one after another.
 * Every signal's buffers and sizes are checked before any is encoded, and its samples before it
 * is encoded (on a GPU model just before its first step, while the device runs the steps already
 * queued); a message names the first bad one ("signal 3: ..."). params->tap must be NULL (taps
 * are per signal: MIMI_EINVAL otherwise). Returns MIMI_OK or a negative code, after which no
 * output is to be used. */
MIMI_API int mimi_encode_offline_many(const struct mimi_model *model,
                                      const struct mimi_stream_params *params, int n_signals,
                                      const float *const *pcm, const int64_t *n_samples,
                                      int32_t *const *codes, const int64_t *max_codes) MIMI_WARN_UNUSED;

/* Whole-signal decode of many signals in one call: for each i, what
 * mimi_decode_offline(model, params, codes[i], n_frames[i], pcm[i], max_samples[i]) gives, with
 * the signals sharing each step on a GPU model, as mimi_encode_offline_many. Every code is
 * checked before anything is decoded. Returns MIMI_OK or a negative code. */
MIMI_API int mimi_decode_offline_many(const struct mimi_model *model,
                                      const struct mimi_stream_params *params, int n_signals,
                                      const int32_t *const *codes, const int64_t *n_frames,
                                      float *const *pcm, const int64_t *max_samples) MIMI_WARN_UNUSED;

#ifdef __cplusplus
}
#endif

#endif /* MIMI_H */
