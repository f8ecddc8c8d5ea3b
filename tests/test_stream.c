/*
 * test_stream.c - the stream invariants and the stream API's handling of bad input.
 *
 * - any chunking of the input gives the same codes as whole frames (bit for bit);
 * - reset gives the same output as a fresh stream (encoder and decoder);
 * - push + flush equal the offline helper on a clip shorter than 10 s;
 * - the many-signal offline helpers equal one-signal calls, and name a bad signal;
 * - decoder push equals decoder steps;
 * - out-of-range codes, NaN samples, short buffers, zero-length audio: clear errors, nothing
 *   consumed, the stream still usable.
 */
#include "mimi.h"
#include "refs.h"
#include "test.h"

#define FRAME 1920
#define N_Q 8

static struct mimi_model *model;
static float *clip;      // dev_sweep_noise, 40800 samples (21.25 frames)
static int64_t clip_len;

static char last_error[512];  // the model's last logged error

static void on_log(void *user, int level, const char *msg) {
    (void)user;
    if (level == MIMI_LOG_ERROR) snprintf(last_error, sizeof last_error, "%s", msg);
}

static void load_inputs(void) {
    int rc;
    struct mimi_model_params mp;
    mimi_model_params_default(&mp);
    mp.log = on_log;
    model = mimi_model_load(MIMI_TEST_MODELS "/native.safetensors", &mp, &rc);
    if (!model) SKIP("no synthetic model: %s", mimi_strerror(rc));
    clip = refs_clip_pcm("dev_sweep_noise", &clip_len);
}

static struct mimi_encoder *new_encoder(int n_q) {
    struct mimi_stream_params sp;
    mimi_stream_params_default(&sp);
    sp.n_codebooks = n_q;
    return mimi_encoder_create(model, &sp, NULL);
}

static struct mimi_decoder *new_decoder(int n_q) {
    struct mimi_stream_params sp;
    mimi_stream_params_default(&sp);
    sp.n_codebooks = n_q;
    return mimi_decoder_create(model, &sp, NULL);
}

// Encodes the clip through push in chunks of random size (max_chunk == 0: whole frames via
// step), then flushes. Returns the frame count; codes frame-major.
static int encode_chunked(struct mimi_encoder *e, int max_chunk, int32_t *codes) {
    int frames = 0;
    int64_t at = 0;
    if (max_chunk == 0) {
        for (; at + FRAME <= clip_len; at += FRAME, frames++)
            CHECK_EQ(mimi_encoder_step(e, clip + at, codes + frames * N_Q), MIMI_OK);
    }
    while (at < clip_len) {
        int64_t n = max_chunk ? 1 + test_rng_int(max_chunk) : clip_len - at;
        if (n > clip_len - at) n = clip_len - at;
        int got = mimi_encoder_push(e, clip + at, (size_t)n, codes + frames * N_Q, 64);
        CHECK(got >= 0);
        frames += got > 0 ? got : 0;
        at += n;
    }
    int got = mimi_encoder_flush(e, codes + frames * N_Q, 1);
    CHECK(got >= 0);
    return frames + (got > 0 ? got : 0);
}

static void test_chunking(void) {
    int32_t whole[32 * N_Q], chunked[32 * N_Q];
    struct mimi_encoder *e = new_encoder(N_Q);
    int n_whole = encode_chunked(e, 0, whole);
    CHECK_EQ(n_whole, 22);
    static const int sizes[] = {1, 7, 480, 1919, 1921, 5000, 40800};
    for (int i = 0; i < 7; i++) {
        mimi_encoder_reset(e);
        int n = encode_chunked(e, sizes[i], chunked);
        CHECK_EQ(n, n_whole);
        CHECK(memcmp(whole, chunked, sizeof(int32_t) * N_Q * n_whole) == 0);
        printf("  chunks up to %5d samples: %d frames, codes %s\n", sizes[i], n,
               memcmp(whole, chunked, sizeof(int32_t) * N_Q * n_whole) ? "DIFFER" : "identical");
    }
    mimi_encoder_destroy(e);

    // push + flush equal the offline helper (the clip is shorter than the 10 s window)
    int32_t offline[N_Q * 22];
    struct mimi_stream_params sp;
    mimi_stream_params_default(&sp);
    CHECK_EQ(mimi_encode_offline(model, &sp, clip, clip_len, offline, N_Q * 22), 22);
    int same = 1;
    for (int f = 0; f < 22; f++)
        for (int q = 0; q < N_Q; q++) same &= offline[q * 22 + f] == whole[f * N_Q + q];
    CHECK(same);
}

static void test_reset(void) {
    const int frames = 4;
    int32_t a[frames * N_Q], b[frames * N_Q];
    struct mimi_encoder *e = new_encoder(N_Q);
    CHECK_EQ(mimi_encoder_push(e, clip, frames * FRAME, a, frames), frames);
    // leave a partial frame pending, then reset: the next run must match the first
    CHECK_EQ(mimi_encoder_push(e, clip, 100, b, frames), 0);
    mimi_encoder_reset(e);
    CHECK_EQ(mimi_encoder_pending(e), 0);
    CHECK_EQ(mimi_encoder_push(e, clip, frames * FRAME, b, frames), frames);
    CHECK(memcmp(a, b, sizeof a) == 0);

    float *pa = malloc(sizeof(float) * frames * FRAME), *pb = malloc(sizeof(float) * frames * FRAME);
    struct mimi_decoder *d = new_decoder(N_Q);
    CHECK_EQ(mimi_decoder_push(d, a, frames, pa, frames * FRAME), frames * FRAME);
    mimi_decoder_reset(d);
    // decoder steps after a reset equal the first push
    for (int f = 0; f < frames; f++) CHECK_EQ(mimi_decoder_step(d, a + f * N_Q, pb + f * FRAME), MIMI_OK);
    CHECK(memcmp(pa, pb, sizeof(float) * frames * FRAME) == 0);
    // and a fresh decoder agrees too
    struct mimi_decoder *fresh = new_decoder(N_Q);
    CHECK_EQ(mimi_decoder_push(fresh, a, frames, pb, frames * FRAME), frames * FRAME);
    CHECK(memcmp(pa, pb, sizeof(float) * frames * FRAME) == 0);
    printf("  reset == fresh: encoder and decoder checked over %d frames\n", frames);
    mimi_decoder_destroy(fresh);
    mimi_decoder_destroy(d);
    mimi_encoder_destroy(e);
    free(pa);
    free(pb);
}

static void test_bad_input(void) {
    int rc;
    int32_t codes[4 * N_Q];
    float pcm[2 * FRAME];
    struct mimi_stream_params sp;
    mimi_stream_params_default(&sp);
    // codebook counts outside 1..32
    sp.n_codebooks = 0;
    CHECK(mimi_encoder_create(model, &sp, &rc) == NULL);
    CHECK_EQ(rc, MIMI_EINVAL);
    sp.n_codebooks = 33;
    CHECK(mimi_decoder_create(model, &sp, &rc) == NULL);
    CHECK_EQ(rc, MIMI_EINVAL);
    sp.n_codebooks = 1;
    sp.attention = 7;
    CHECK(mimi_encoder_create(model, &sp, &rc) == NULL);
    CHECK_EQ(rc, MIMI_EINVAL);

    // out-of-range codes: an error, the stream untouched
    struct mimi_decoder *d = new_decoder(N_Q), *fresh = new_decoder(N_Q);
    for (int i = 0; i < N_Q; i++) codes[i] = i;
    codes[3] = 2048;
    CHECK_EQ(mimi_decoder_step(d, codes, pcm), MIMI_EINVAL);
    printf("  code 2048: %s\n", mimi_decoder_errmsg(d));
    CHECK(strstr(mimi_decoder_errmsg(d), "2048") != NULL);
    codes[3] = -1;
    CHECK_EQ(mimi_decoder_push(d, codes, 1, pcm, FRAME), MIMI_EINVAL);
    codes[3] = 3;
    CHECK_EQ(mimi_decoder_push(d, codes, 1, pcm, FRAME - 1), MIMI_EBUFFER);
    CHECK_EQ(mimi_decoder_step(d, codes, pcm), MIMI_OK);
    CHECK_EQ(mimi_decoder_step(fresh, codes, pcm + FRAME), MIMI_OK);
    CHECK(memcmp(pcm, pcm + FRAME, sizeof(float) * FRAME) == 0);
    int32_t offline_codes[N_Q] = {0, 1, 2, 2048, 4, 5, 6, 7};
    CHECK_EQ(mimi_decode_offline(model, NULL, offline_codes, 1, pcm, FRAME), MIMI_EINVAL);
    mimi_decoder_destroy(d);
    mimi_decoder_destroy(fresh);

    struct mimi_encoder *e = new_encoder(N_Q);
    // NaN and infinity are refused with nothing consumed
    memcpy(pcm, clip, sizeof(float) * FRAME);
    pcm[100] = NAN;
    CHECK_EQ(mimi_encoder_step(e, pcm, codes), MIMI_EINVAL);
    CHECK_EQ(mimi_encoder_push(e, pcm, 500, codes, 4), MIMI_EINVAL);
    CHECK_EQ(mimi_encoder_pending(e), 0);
    pcm[100] = INFINITY;
    CHECK_EQ(mimi_encode_offline(model, NULL, pcm, FRAME, codes, N_Q), MIMI_EINVAL);
    // too little room: nothing consumed
    CHECK_EQ(mimi_encoder_push(e, clip, 2 * FRAME, codes, 1), MIMI_EBUFFER);
    CHECK_EQ(mimi_encoder_pending(e), 0);
    // step with samples pending is a misuse
    CHECK_EQ(mimi_encoder_push(e, clip, 10, codes, 0), 0);
    CHECK_EQ(mimi_encoder_step(e, clip, codes), MIMI_ESTATE);
    CHECK_EQ(mimi_encoder_flush(e, codes, 0), MIMI_EBUFFER);
    CHECK_EQ(mimi_encoder_flush(e, codes, 1), 1);
    // zero-length audio: no frames, offline refuses it
    CHECK_EQ(mimi_encoder_push(e, clip, 0, codes, 0), 0);
    CHECK_EQ(mimi_encoder_flush(e, codes, 1), 0);
    CHECK_EQ(mimi_encode_offline(model, NULL, clip, 0, codes, N_Q), MIMI_EINVAL);
    CHECK_EQ(mimi_encode_offline(model, NULL, clip, FRAME + 1, codes, N_Q), MIMI_EBUFFER);
    mimi_encoder_destroy(e);
}

// The whole-signal helpers check everything before any work and log why they refuse.
static void test_offline_errors(void) {
    struct mimi_stream_params sp;
    mimi_stream_params_default(&sp);
    static int32_t codes[32 * 4];
    static float pcm[4 * FRAME], latents[512 * 4];
    last_error[0] = 0;
    sp.n_codebooks = 0;
    CHECK_EQ(mimi_encode_offline(model, &sp, clip, FRAME, codes, 32), MIMI_EINVAL);
    CHECK(strstr(last_error, "n_codebooks 0") != NULL);
    sp.n_codebooks = 33;
    CHECK_EQ(mimi_decode_offline(model, &sp, codes, 1, pcm, FRAME), MIMI_EINVAL);
    CHECK(strstr(last_error, "n_codebooks 33") != NULL);
    sp.n_codebooks = N_Q;
    CHECK_EQ(mimi_encode_offline_latent(model, &sp, clip, FRAME, latents, 512), MIMI_EUNSUPPORTED);
    CHECK(strstr(last_error, "code API") != NULL);
    memcpy(pcm, clip, sizeof(float) * FRAME);
    pcm[7] = NAN;
    CHECK_EQ(mimi_encode_offline(model, &sp, pcm, FRAME, codes, N_Q), MIMI_EINVAL);
    CHECK(strstr(last_error, "sample value 7 is NaN") != NULL);
    printf("  offline refusals logged, last: %s\n", last_error);
    // and a good call after them
    CHECK_EQ(mimi_encode_offline(model, &sp, clip, 2 * FRAME, codes, 2 * N_Q), 2);
}

static void ignore_tap(void *user, const char *name, const float *data, int channels, int steps) {
    (void)user, (void)name, (void)data, (void)channels, (void)steps;
}

// The many-signal offline helpers give each signal what the one-signal helpers give (bit for bit
// on the CPU), and name the signal a refusal is about.
static void test_offline_many(void) {
    enum { N = 3 };
    const int64_t n_samples[N] = {FRAME + FRAME / 2, 3 * FRAME, 1}, n_frames[N] = {2, 3, 1};
    const float *pcm[N] = {clip, clip + 5000, clip + 20000};
    static int32_t codes[N][3 * N_Q], one[3 * N_Q];
    static float out[N][3 * FRAME], one_pcm[3 * FRAME];
    int32_t *codes_out[N] = {codes[0], codes[1], codes[2]};
    const int32_t *codes_in[N] = {codes[0], codes[1], codes[2]};
    float *pcm_out[N] = {out[0], out[1], out[2]};
    const int64_t max_codes[N] = {3 * N_Q, 3 * N_Q, 3 * N_Q}, max_samples[N] = {3 * FRAME, 3 * FRAME, 3 * FRAME};
    struct mimi_stream_params sp;
    mimi_stream_params_default(&sp);
    sp.n_codebooks = N_Q;
    CHECK_EQ(mimi_encode_offline_many(model, &sp, N, pcm, n_samples, codes_out, max_codes), MIMI_OK);
    CHECK_EQ(mimi_decode_offline_many(model, &sp, N, codes_in, n_frames, pcm_out, max_samples), MIMI_OK);
    int same = 1;
    for (int i = 0; i < N; i++) {
        CHECK_EQ(mimi_encode_offline(model, &sp, pcm[i], n_samples[i], one, 3 * N_Q), n_frames[i]);
        same &= memcmp(one, codes[i], sizeof(int32_t) * N_Q * n_frames[i]) == 0;
        CHECK_EQ(mimi_decode_offline(model, &sp, codes[i], n_frames[i], one_pcm, 3 * FRAME), n_frames[i] * FRAME);
        same &= memcmp(one_pcm, out[i], sizeof(float) * FRAME * n_frames[i]) == 0;
    }
    CHECK(same);
    printf("  offline many: %d signals equal to one-signal calls: %s\n", N, same ? "yes" : "no");
    // refusals, each naming its signal
    CHECK_EQ(mimi_encode_offline_many(model, &sp, 0, pcm, n_samples, codes_out, max_codes), MIMI_EINVAL);
    CHECK_EQ(mimi_encode_offline_many(model, &sp, N, pcm, n_samples, NULL, max_codes), MIMI_EINVAL);
    static float bad[FRAME];
    memcpy(bad, clip, sizeof bad);
    bad[9] = NAN;
    const float *with_bad[N] = {clip, bad, clip};
    const int64_t lens[N] = {FRAME, FRAME, FRAME};
    CHECK_EQ(mimi_encode_offline_many(model, &sp, N, with_bad, lens, codes_out, max_codes), MIMI_EINVAL);
    CHECK(strstr(last_error, "signal 1: sample value 9 is NaN") != NULL);
    const int64_t short_out[N] = {3 * N_Q, 3 * N_Q, N_Q};
    CHECK_EQ(mimi_encode_offline_many(model, &sp, N, pcm, (const int64_t[]){FRAME, FRAME, 2 * FRAME}, codes_out,
                                      short_out), MIMI_EBUFFER);
    CHECK(strstr(last_error, "signal 2: the output holds 8 values") != NULL);
    codes[2][0] = 5000;
    CHECK_EQ(mimi_decode_offline_many(model, &sp, N, codes_in, n_frames, pcm_out, max_samples), MIMI_EINVAL);
    CHECK(strstr(last_error, "signal 2: code 5000") != NULL);
    CHECK_EQ(mimi_decode_offline(model, &sp, codes[0], INT64_MAX / 1000, one_pcm, 3 * FRAME), MIMI_EINVAL);
    CHECK(strstr(last_error, "frames, or no input") != NULL);
    sp.tap = ignore_tap;
    CHECK_EQ(mimi_encode_offline_many(model, &sp, N, pcm, n_samples, codes_out, max_codes), MIMI_EINVAL);
    CHECK(strstr(last_error, "taps are per signal") != NULL);
    printf("  offline many refusals logged, last: %s\n", last_error);
}

int main(int argc, char **argv) {
    test_init(argc, argv);
    test_rng_seed(test_seed);
    load_inputs();
    test_chunking();
    test_reset();
    test_bad_input();
    test_offline_errors();
    test_offline_many();
    free(clip);
    mimi_model_destroy(model);
    return test_summary();
}
