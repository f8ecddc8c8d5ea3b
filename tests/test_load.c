/*
 * test_load.c - checkpoint loading: the f16 and bf16 copies, and every way a model file can be
 * wrong (each must fail with MIMI_EFORMAT and a message naming the tensor, never crash).
 *
 * Broken models are made in memory from the synthetic native file: its JSON header is edited
 * (a tensor renamed away, a shape changed with the byte count kept, ...) and placed in front of
 * the unchanged data section, then loaded with mimi_model_load_memory.
 */
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "mimi.h"
#include "test.h"

static char last_log[1024];

static void capture(void *user, int level, const char *msg) {
    (void)user;
    if (level == MIMI_LOG_ERROR) snprintf(last_log, sizeof last_log, "%s", msg);
}

static struct mimi_model *load(const char *path, int *rc) {
    struct mimi_model_params mp;
    mimi_model_params_default(&mp);
    mp.log = capture;
    last_log[0] = 0;
    return mimi_model_load(path, &mp, rc);
}

// ---- the synthetic file, split into header text and data ----

static const uint8_t *image;
static size_t image_size, header_len;

static void map_native(void) {
    int fd = open(MIMI_TEST_MODELS "/native.safetensors", O_RDONLY);
    struct stat st;
    if (fd < 0 || fstat(fd, &st)) SKIP("no synthetic model (run the make_models test first)");
    image_size = (size_t)st.st_size;
    image = mmap(NULL, image_size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (image == MAP_FAILED) exit(1);
    memcpy(&header_len, image, 8);
}

// Loads the native file with `find` replaced by `replace` in its header (the replacement must
// occur, so an edit that no longer applies fails the test instead of passing vacuously).
static int load_edited(const char *find, const char *replace) {
    const char *hdr = (const char *)image + 8;
    char *text = malloc(header_len + 1);
    memcpy(text, hdr, header_len);
    text[header_len] = 0;
    char *at = strstr(text, find);
    CHECK(at != NULL);
    if (!at) {
        free(text);
        return 0;
    }
    size_t new_len = header_len - strlen(find) + strlen(replace);
    size_t padded = (new_len + 7) & ~(size_t)7, data = image_size - 8 - header_len;
    uint8_t *buf = malloc(8 + padded + data);
    uint64_t n = padded;
    memcpy(buf, &n, 8);
    size_t pre = (size_t)(at - text);
    memcpy(buf + 8, text, pre);
    memcpy(buf + 8 + pre, replace, strlen(replace));
    memcpy(buf + 8 + pre + strlen(replace), at + strlen(find), header_len - pre - strlen(find));
    memset(buf + 8 + new_len, ' ', padded - new_len);
    memcpy(buf + 8 + padded, image + 8 + header_len, data);
    struct mimi_model_params mp;
    mimi_model_params_default(&mp);
    mp.log = capture;
    last_log[0] = 0;
    int rc;
    struct mimi_model *m = mimi_model_load_memory(buf, 8 + padded + data, &mp, &rc);
    mimi_model_destroy(m);
    free(buf);
    free(text);
    return m ? MIMI_OK : rc;
}

static void expect_error(const char *what, const char *find, const char *replace, const char *must_say) {
    int rc = load_edited(find, replace);
    printf("  %-34s -> %s: %s\n", what, mimi_strerror(rc), last_log);
    CHECK_EQ(rc, MIMI_EFORMAT);
    CHECK(strstr(last_log, must_say) != NULL);
}

// ---- cases ----

static void test_dtypes(void) {
    static const char *files[] = {"native.safetensors", "hf.safetensors", "native_f16.safetensors",
                                  "native_bf16.safetensors"};
    static const char *naming[] = {"kyutai", "huggingface", "kyutai", "kyutai"};
    for (int i = 0; i < 4; i++) {
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", MIMI_TEST_MODELS, files[i]);
        int rc;
        struct mimi_model *m = load(path, &rc);
        printf("  load %-26s -> %s %s\n", files[i], mimi_strerror(rc), last_log);
        CHECK(m != NULL);
        if (!m) continue;
        CHECK_EQ(mimi_model_sample_rate(m), 24000);
        CHECK_EQ(mimi_model_frame_size(m), 1920);
        CHECK_EQ(mimi_model_max_codebooks(m), 32);
        CHECK_EQ(mimi_model_codebook_size(m), 2048);
        CHECK(strcmp(mimi_model_naming(m), naming[i]) == 0);
        // 318 native tensors hold 96,151,393 values; every one is used
        CHECK_EQ(mimi_model_parameter_count(m), 96151393);
        // one frame of silence encodes and decodes in every dtype
        float pcm[1920] = {0};
        int32_t codes[8];
        struct mimi_encoder *e = mimi_encoder_create(m, NULL, &rc);
        struct mimi_decoder *d = mimi_decoder_create(m, NULL, &rc);
        CHECK(e && d);
        if (e && d) {
            CHECK_EQ(mimi_encoder_step(e, pcm, codes), MIMI_OK);
            CHECK_EQ(mimi_decoder_step(d, codes, pcm), MIMI_OK);
        }
        mimi_encoder_destroy(e);
        mimi_decoder_destroy(d);
        mimi_model_destroy(m);
    }
}

static void test_broken_models(void) {
    expect_error("missing tensor", "\"encoder.model.14.conv.conv.bias\"",
                 "\"encoder.model.14.conv.conv.bia_\"", "missing tensor 'encoder.model.14.conv.conv.bias'");
    expect_error("missing attention weight", "\"decoder_transformer.transformer.layers.3.linear2.weight\"",
                 "\"decoder_transformer.transformer.layers.3.linear2.weighx\"",
                 "decoder_transformer.transformer.layers.3.linear2.weight");
    expect_error("missing codebook", "\"quantizer.rvq_rest.vq.layers.30._codebook.cluster_usage\"",
                 "\"quantizer.rvq_rest.vq.layers.30._codebook.cluster_usagx\"",
                 "quantizer.rvq_rest.vq.layers.30._codebook.cluster_usage");
    expect_error("wrong shape, same bytes", "\"shape\":[64,1,7]", "\"shape\":[64,7,1]",
                 "expected shape [?, 1, ?], found [64, 7, 1]");
    expect_error("wrong norm shape",
                 "\"encoder_transformer.transformer.layers.0.norm1.weight\":{\"dtype\":\"F32\",\"shape\":[512]",
                 "\"encoder_transformer.transformer.layers.0.norm1.weight\":{\"dtype\":\"F32\",\"shape\":[2,256]",
                 "expected shape [512], found [2, 256]");
    expect_error("integer weights", "\"encoder.model.0.conv.conv.bias\":{\"dtype\":\"F32\"",
                 "\"encoder.model.0.conv.conv.bias\":{\"dtype\":\"I32\"", "not a float type");
    expect_error("not a Mimi file", "\"encoder.model.0.conv.conv.weight\"", "\"something.else.weight\"",
                 "not a Mimi checkpoint");
    expect_error("unknown dtype", "\"encoder.model.0.conv.conv.bias\":{\"dtype\":\"F32\"",
                 "\"encoder.model.0.conv.conv.bias\":{\"dtype\":\"F8\"", "F8");
    expect_error("offset past the end", "\"data_offsets\":[0,1792]", "\"data_offsets\":[0,1792999999999]",
                 "encoder.model.0.conv.conv.weight");
    expect_error("overlapping tensors", "\"data_offsets\":[1792,2048]", "\"data_offsets\":[1536,1792]",
                 "overlap");
    // extra tensors are ignored
    CHECK_EQ(load_edited("\"__metadata__\"", "\"an.extra.tensor\":{\"dtype\":\"F32\",\"shape\":[0],"
                                            "\"data_offsets\":[0,0]},\"__metadata__\""),
             MIMI_OK);
}

static void test_bad_files(void) {
    int rc;
    char path[] = "/tmp/mimi-test-load-XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    // a truncated model: the first 1000 bytes of the real file
    CHECK_EQ(write(fd, image, 1000), 1000);
    close(fd);
    CHECK(load(path, &rc) == NULL);
    printf("  truncated file -> %s: %s\n", mimi_strerror(rc), last_log);
    CHECK_EQ(rc, MIMI_EFORMAT);
    // an empty file, a text file, a missing file, a directory
    fd = open(path, O_WRONLY | O_TRUNC);
    close(fd);
    CHECK(load(path, &rc) == NULL);
    CHECK_EQ(rc, MIMI_EFORMAT);
    fd = open(path, O_WRONLY | O_TRUNC);
    CHECK_EQ(write(fd, "hello, this is not a model\n", 27), 27);
    close(fd);
    CHECK(load(path, &rc) == NULL);
    CHECK_EQ(rc, MIMI_EFORMAT);
    printf("  text file -> %s: %s\n", mimi_strerror(rc), last_log);
    unlink(path);
    CHECK(load(path, &rc) == NULL);
    CHECK_EQ(rc, MIMI_EIO);
    CHECK(load("/tmp", &rc) == NULL);
    CHECK(rc == MIMI_EIO || rc == MIMI_EFORMAT);
}

int main(int argc, char **argv) {
    test_init(argc, argv);
    map_native();
    test_dtypes();
    test_broken_models();
    test_bad_files();
    munmap((void *)image, image_size);
    return test_summary();
}
