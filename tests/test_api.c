/*
 * test_api.c - every public entry point with NULL and out-of-range arguments: an error code,
 * never a crash; plus the error strings and the parameter defaults.
 */
#include "mimi.h"
#include "test.h"

static void test_library(void) {
    CHECK(strcmp(mimi_version_string(), "0.1.0") == 0);
    for (int code = 0; code >= MIMI_ESTATE; code--) {
        CHECK(mimi_strerror(code) != NULL);
        CHECK(strcmp(mimi_strerror(code), "unknown error") != 0);
    }
    CHECK(strcmp(mimi_strerror(-100), "unknown error") == 0);
    CHECK(strcmp(mimi_strerror(5), "unknown error") == 0);
    struct mimi_model_params mp;
    mimi_model_params_default(&mp);
    CHECK_EQ(mp.isa, MIMI_ISA_AUTO);
    CHECK_EQ(mp.n_threads, 1);
    struct mimi_stream_params sp;
    mimi_stream_params_default(&sp);
    CHECK_EQ(sp.n_codebooks, 8);
    CHECK_EQ(sp.attention, MIMI_ATTENTION_RING);
    mimi_model_params_default(NULL);
    mimi_stream_params_default(NULL);
}

static void test_null_handles(void) {
    int rc = 0;
    float pcm[1920] = {0};
    int32_t codes[32] = {0};
    CHECK(mimi_model_load(NULL, NULL, &rc) == NULL);
    CHECK_EQ(rc, MIMI_EINVAL);
    CHECK(mimi_model_load_memory(NULL, 10, NULL, &rc) == NULL);
    CHECK_EQ(rc, MIMI_EINVAL);
    CHECK(mimi_model_load("/nonexistent/model.safetensors", NULL, NULL) == NULL);
    struct mimi_model_params mp;
    mimi_model_params_default(&mp);
    mp.n_threads = 0;
    CHECK(mimi_model_load(MIMI_TEST_MODELS "/native.safetensors", &mp, &rc) == NULL);
    CHECK_EQ(rc, MIMI_EINVAL);
    // precisions: the last one is taken (the CPU ignores it), one past it is refused
    mimi_model_params_default(&mp);
    mp.precision = MIMI_PRECISION_FAST_INT8_KV + 1;
    CHECK(mimi_model_load(MIMI_TEST_MODELS "/native.safetensors", &mp, &rc) == NULL);
    CHECK_EQ(rc, MIMI_EINVAL);
    mp.precision = MIMI_PRECISION_FAST_INT8_KV;
    struct mimi_model *m = mimi_model_load(MIMI_TEST_MODELS "/native.safetensors", &mp, &rc);
    CHECK(m != NULL);
    mimi_model_destroy(m);
    mimi_model_params_default(&mp);
    mimi_model_destroy(NULL);
    mimi_model_trim(NULL);
    mimi_encoder_destroy(NULL);
    mimi_decoder_destroy(NULL);
    mimi_encoder_reset(NULL);
    mimi_decoder_reset(NULL);
    CHECK(mimi_encoder_create(NULL, NULL, &rc) == NULL);
    CHECK_EQ(rc, MIMI_EINVAL);
    CHECK(mimi_decoder_create(NULL, NULL, &rc) == NULL);
    CHECK_EQ(rc, MIMI_EINVAL);
    CHECK_EQ(mimi_encoder_step(NULL, pcm, codes), MIMI_EINVAL);
    CHECK_EQ(mimi_encoder_push(NULL, pcm, 10, codes, 1), MIMI_EINVAL);
    CHECK_EQ(mimi_encoder_flush(NULL, codes, 1), MIMI_EINVAL);
    CHECK_EQ(mimi_encoder_pending(NULL), MIMI_EINVAL);
    CHECK_EQ(mimi_decoder_step(NULL, codes, pcm), MIMI_EINVAL);
    CHECK_EQ(mimi_decoder_push(NULL, codes, 1, pcm, 1920), MIMI_EINVAL);
    CHECK(strcmp(mimi_encoder_errmsg(NULL), "") == 0);
    CHECK(strcmp(mimi_decoder_errmsg(NULL), "") == 0);
    CHECK_EQ(mimi_model_sample_rate(NULL), MIMI_EINVAL);
    CHECK_EQ(mimi_model_frame_size(NULL), MIMI_EINVAL);
    CHECK_EQ(mimi_model_max_codebooks(NULL), MIMI_EINVAL);
    CHECK_EQ(mimi_model_codebook_size(NULL), MIMI_EINVAL);
    CHECK_EQ(mimi_frames_for_samples(NULL, 10), MIMI_EINVAL);
    CHECK_EQ(mimi_encode_offline(NULL, NULL, pcm, 1920, codes, 32), MIMI_EINVAL);
    CHECK_EQ(mimi_decode_offline(NULL, NULL, codes, 1, pcm, 1920), MIMI_EINVAL);
}

static void test_null_buffers(void) {
    int rc;
    struct mimi_model *m = mimi_model_load(MIMI_TEST_MODELS "/native.safetensors", NULL, &rc);
    if (!m) SKIP("no synthetic model: %s", mimi_strerror(rc));
    float pcm[1920] = {0};
    int32_t codes[32] = {0};
    struct mimi_encoder *e = mimi_encoder_create(m, NULL, &rc);
    struct mimi_decoder *d = mimi_decoder_create(m, NULL, &rc);
    CHECK_EQ(mimi_encoder_step(e, NULL, codes), MIMI_EINVAL);
    CHECK_EQ(mimi_encoder_step(e, pcm, NULL), MIMI_EINVAL);
    CHECK_EQ(mimi_encoder_push(e, NULL, 5, codes, 1), MIMI_EINVAL);
    CHECK_EQ(mimi_encoder_push(e, pcm, 1920, NULL, 1), MIMI_EINVAL);
    CHECK_EQ(mimi_encoder_pending(e), 0);
    CHECK_EQ(mimi_decoder_step(d, NULL, pcm), MIMI_EINVAL);
    CHECK_EQ(mimi_decoder_step(d, codes, NULL), MIMI_EINVAL);
    CHECK_EQ(mimi_decoder_push(d, codes, -1, pcm, 1920), MIMI_EINVAL);
    CHECK_EQ(mimi_decoder_push(d, codes, 0, pcm, 0), 0);
    CHECK_EQ(mimi_frames_for_samples(m, 0), 0);
    CHECK_EQ(mimi_frames_for_samples(m, 1), 1);
    CHECK_EQ(mimi_frames_for_samples(m, 1920), 1);
    CHECK_EQ(mimi_frames_for_samples(m, 1921), 2);
    CHECK_EQ(mimi_frames_for_samples(m, -1), MIMI_EINVAL);
    CHECK_EQ(mimi_encode_offline(m, NULL, NULL, 1920, codes, 32), MIMI_EINVAL);
    CHECK_EQ(mimi_decode_offline(m, NULL, codes, 0, pcm, 1920), MIMI_EINVAL);
    CHECK_EQ(mimi_decode_offline(m, NULL, codes, 1, pcm, 1919), MIMI_EBUFFER);
    mimi_encoder_destroy(e);
    mimi_decoder_destroy(d);
    mimi_model_trim(m);  // a CPU model keeps nothing
    mimi_model_destroy(m);
}

int main(int argc, char **argv) {
    test_init(argc, argv);
    test_library();
    test_null_handles();
    test_null_buffers();
    return test_summary();
}
