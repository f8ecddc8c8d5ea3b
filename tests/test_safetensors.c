/*
 * test_safetensors.c - the safetensors reader and writer on valid, hostile and mutated images.
 *
 * Images are built in memory (8-byte length, JSON, data) or written to /tmp through st_write.
 * Every malformed case must fail with the right code and a reason naming the problem; a valid
 * file must round-trip exactly. A seeded random-mutation loop checks that nothing a corrupt
 * header says can make the reader crash or point outside the image.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "mimi.h"
#include "safetensors.h"
#include "test.h"

static char err[256];  // the reason of the latest call, printed by every case

// ---- helpers ----

// Stores the little-endian header length field.
static void put_u64(uint8_t *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}

// An exact-size image: length, `json` (hlen bytes), then `data_len` bytes of `data` (zeros when
// NULL). Exact size lets AddressSanitizer catch any read past the end.
static uint8_t *make_image(const char *json, size_t hlen, const void *data, size_t data_len,
                           size_t *size) {
    *size = 8 + hlen + data_len;
    uint8_t *img = calloc(1, *size);
    put_u64(img, hlen);
    memcpy(img + 8, json, hlen);
    if (data) memcpy(img + 8 + hlen, data, data_len);
    return img;
}

// Expects the image to be refused with `code` and a one-line reason containing `needle`.
static void expect_fail_image(const char *label, const uint8_t *img, size_t size, int code,
                              const char *needle) {
    struct st_file f;
    int rc = st_open_memory(&f, img, size, err, sizeof err);
    printf("  %-30s %s\n", label, err);
    CHECK_EQ(rc, code);
    CHECK(strstr(err, needle) != NULL);
    CHECK(strchr(err, '\n') == NULL);
    CHECK(f.tensors == NULL && f.n_tensors == 0 && f.base == NULL);
    st_close(&f);
}

// Same, for a header given as JSON text followed by `data_len` zero bytes.
static void expect_fail(const char *label, const char *json, size_t data_len, const char *needle) {
    size_t size;
    uint8_t *img = make_image(json, strlen(json), NULL, data_len, &size);
    expect_fail_image(label, img, size, MIMI_EFORMAT, needle);
    free(img);
}

// Expects the header to be accepted with `n_tensors` tensors.
static void expect_ok(const char *label, const char *json, size_t data_len, int n_tensors) {
    size_t size;
    uint8_t *img = make_image(json, strlen(json), NULL, data_len, &size);
    struct st_file f;
    int rc = st_open_memory(&f, img, size, err, sizeof err);
    printf("  %-30s %s\n", label, rc ? err : "ok");
    CHECK_EQ(rc, 0);
    CHECK_EQ(f.n_tensors, n_tensors);
    st_close(&f);
    free(img);
}

// The whole file in a malloc'd buffer (NULL if it cannot be opened).
static uint8_t *read_file(const char *path, size_t *size) {
    FILE *fp = fopen(path, "rb");
    if (!fp) return NULL;
    fseek(fp, 0, SEEK_END);
    *size = (size_t)ftell(fp);
    fseek(fp, 0, SEEK_SET);
    uint8_t *buf = malloc(*size ? *size : 1);
    if (fread(buf, 1, *size, fp) != *size) *size = 0;
    fclose(fp);
    return buf;
}

// Writes raw bytes, for files st_write would never produce.
static void write_bytes(const char *path, const void *data, size_t n) {
    FILE *fp = fopen(path, "wb");
    CHECK(fp != NULL);
    if (!fp) return;
    if (n) CHECK_EQ(fwrite(data, 1, n, fp), n);
    fclose(fp);
}

static int file_exists(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0;
}

// The float with the given IEEE bits (to name subnormals exactly).
static float bits_f32(uint32_t b) {
    float f;
    memcpy(&f, &b, 4);
    return f;
}

// ---- a valid file through st_write and st_open ----

static const float rt_f32[6] = {1.0f, -2.0f, 3.5f, 0.0f, 1e-3f, -1e30f};
static const uint16_t rt_f16[3] = {0x3C00, 0xC100, 0x7BFF};  // 1, -2.5, 65504
static const uint16_t rt_bf16[2] = {0x3F80, 0xC020};         // 1, -2.5
static const int32_t rt_i32[4] = {0, -1, INT32_MAX, INT32_MIN};
static const float rt_scalar = 42.0f;
static float rt_rand[64];  // filled from the seeded generator before writing
static const char rt_odd_name[] = "we\"ird\\name\n\xc3\xa9";
static const char rt_meta[] = "{\"seed\":\"0\", \"note\":\"a \\\"quoted\\\" value\"}";

static const struct st_write_tensor rt_tensors[] = {
    {"enc.conv.weight", ST_F32, 2, {2, 3}, rt_f32},
    {"half", ST_F16, 1, {3}, rt_f16},
    {"brain", ST_BF16, 1, {2}, rt_bf16},
    {"empty", ST_F32, 2, {0, 5}, NULL},
    {"codes", ST_I32, 2, {2, 2}, rt_i32},
    {"scalar", ST_F32, 0, {0}, &rt_scalar},
    {"random", ST_F32, 3, {4, 4, 4}, rt_rand},
    {rt_odd_name, ST_U8, 1, {1}, "x"},  // last and non-empty: every truncation cuts data
};
#define RT_N ((int)(sizeof rt_tensors / sizeof rt_tensors[0]))

// Every tensor written by test_round_trip comes back with its dtype, shape and exact values.
static void check_round_trip_contents(const struct st_file *f) {
    float out[8];
    int32_t iout[4];
    CHECK_EQ(f->n_tensors, RT_N);
    CHECK(f->metadata_json && strcmp(f->metadata_json, rt_meta) == 0);
    for (int i = 1; i < f->n_tensors; i++)
        CHECK(strcmp(f->tensors[i - 1].name, f->tensors[i].name) < 0);

    const struct st_tensor *t = st_find(f, "enc.conv.weight");
    CHECK(t && t->dtype == ST_F32 && t->n_dims == 2 && t->shape[0] == 2 && t->shape[1] == 3);
    CHECK(t && t->n_elements == 6 && t->n_bytes == 24 && st_to_f32(t, out) == 0);
    CHECK(t && memcmp(out, rt_f32, sizeof rt_f32) == 0);
    CHECK(t && st_to_i32(t, iout) == MIMI_EFORMAT);

    t = st_find(f, "half");
    CHECK(t && t->dtype == ST_F16 && st_to_f32(t, out) == 0);
    CHECK(t && out[0] == 1.0f && out[1] == -2.5f && out[2] == 65504.0f);
    t = st_find(f, "brain");
    CHECK(t && t->dtype == ST_BF16 && st_to_f32(t, out) == 0 && out[0] == 1.0f && out[1] == -2.5f);
    t = st_find(f, "codes");
    CHECK(t && t->dtype == ST_I32 && st_to_i32(t, iout) == 0);
    CHECK(t && memcmp(iout, rt_i32, sizeof rt_i32) == 0);
    CHECK(t && st_to_f32(t, out) == MIMI_EFORMAT);
    t = st_find(f, "scalar");
    CHECK(t && t->n_dims == 0 && t->n_elements == 1 && st_to_f32(t, out) == 0 && out[0] == 42.0f);
    t = st_find(f, "empty");
    CHECK(t && t->n_elements == 0 && t->n_bytes == 0 && st_to_f32(t, NULL) == 0);
    t = st_find(f, rt_odd_name);
    CHECK(t && t->dtype == ST_U8 && t->n_bytes == 1 && t->data[0] == 'x');
    t = st_find(f, "random");
    float rnd[64];
    CHECK(t && t->n_elements == 64 && st_to_f32(t, rnd) == 0);
    if (t) CHECK_REL_L2(rnd, rt_rand, 64, 0.0, "random F32 values");
    CHECK(st_find(f, "missing") == NULL && st_find(f, "") == NULL);
}

// Writes the round-trip file to `path`, reads it back, and returns its bytes.
static uint8_t *test_round_trip(const char *path, size_t *size) {
    printf("round trip through %s\n", path);
    char tmp[600];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    for (int i = 0; i < 64; i++) rt_rand[i] = test_rng_float();
    int rc = st_write(path, rt_tensors, RT_N, rt_meta, err, sizeof err);
    printf("  %-30s %s\n", "st_write", rc ? err : "ok");
    CHECK_EQ(rc, 0);
    CHECK(!file_exists(tmp));

    struct st_file f;
    rc = st_open(&f, path, err, sizeof err);
    printf("  %-30s %s\n", "st_open", rc ? err : "ok");
    CHECK_EQ(rc, 0);
    CHECK_EQ(f.mapped, 1);
    if (!rc) check_round_trip_contents(&f);
    st_close(&f);
    st_close(&f);  // twice is harmless
    CHECK(f.base == NULL && f.tensors == NULL && f.metadata_json == NULL);

    uint8_t *img = read_file(path, size);
    CHECK(img != NULL && *size > 8);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = hlen << 8 | img[i];
    CHECK_EQ(hlen % 8, 0);  // padded so the data section is 8-aligned
    CHECK(img[8 + hlen - 1] == ' ' || img[8 + hlen - 1] == '}');
    return img;
}

// ---- conversions ----

static void test_conversions(void) {
    printf("conversions\n");
    static const uint16_t h[] = {0x3C00, 0xC100, 0x7BFF, 0x0001, 0x03FF,
                                 0x0400, 0x7C00, 0xFC00, 0x7E00, 0x8000};
    static const uint16_t b[] = {0x3F80, 0xC020, 0x7F80, 0x0001, 0x477F};
    static const double d[] = {0.1, -1e300};
    static const int64_t i64[] = {5, INT32_MIN, INT32_MAX, (int64_t)INT32_MAX + 1};
    static const int8_t i8[] = {-128, 127};
    static const int16_t i16[] = {-32768, 32767};
    static const uint8_t u8[] = {255, 0}, bl[] = {0, 1, 2};
    // Pack all element arrays back to back; the offsets in the JSON below follow this order.
    uint8_t data[128];
    size_t k = 0;
#define PUT(x) (memcpy(data + k, x, sizeof x), k += sizeof x)
    PUT(h), PUT(b), PUT(d), PUT(i64), PUT(i8), PUT(i16), PUT(u8), PUT(bl);
#undef PUT
    // A header length of 1 + 8k leaves the data section, and every tensor, misaligned.
    char json[1024];
    int n = snprintf(json, sizeof json,
                     "{\"h\":{\"dtype\":\"F16\",\"shape\":[10],\"data_offsets\":[0,20]},"
                     "\"b\":{\"dtype\":\"BF16\",\"shape\":[5],\"data_offsets\":[20,30]},"
                     "\"d\":{\"dtype\":\"F64\",\"shape\":[2],\"data_offsets\":[30,46]},"
                     "\"i64\":{\"dtype\":\"I64\",\"shape\":[3],\"data_offsets\":[46,70]},"
                     "\"i64big\":{\"dtype\":\"I64\",\"shape\":[1],\"data_offsets\":[70,78]},"
                     "\"i8\":{\"dtype\":\"I8\",\"shape\":[2],\"data_offsets\":[78,80]},"
                     "\"i16\":{\"dtype\":\"I16\",\"shape\":[2],\"data_offsets\":[80,84]},"
                     "\"u8\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[84,86]},"
                     "\"bool\":{\"dtype\":\"BOOL\",\"shape\":[2],\"data_offsets\":[86,88]},"
                     "\"bool2\":{\"dtype\":\"BOOL\",\"shape\":[1],\"data_offsets\":[88,89]}}");
    while (n % 8 != 1) json[n++] = ' ';
    json[n] = '\0';
    size_t size;
    uint8_t *img = make_image(json, (size_t)n, data, k, &size);
    struct st_file f;
    int rc = st_open_memory(&f, img, size, err, sizeof err);
    CHECK_EQ(rc, 0);
    if (rc) {
        printf("  open failed: %s\n", err);
        free(img);
        return;
    }
    float o[10];
    int32_t io[4];
    // F16: normals, the largest finite, subnormals, the smallest normal, inf, nan, -0.
    CHECK(st_to_f32(st_find(&f, "h"), o) == 0);
    CHECK(o[0] == 1.0f && o[1] == -2.5f && o[2] == 65504.0f);
    CHECK(o[3] == bits_f32(0x33800000) && o[4] == 1023.0f / 16777216.0f);  // subnormals
    CHECK(o[5] == bits_f32(0x38800000));                                   // 2^-14
    CHECK(isinf(o[6]) && o[6] > 0 && isinf(o[7]) && o[7] < 0 && isnan(o[8]));
    CHECK(o[9] == 0.0f && signbit(o[9]));
    printf("  %-30s 1 -2.5 65504 %g %g inf -inf nan -0\n", "F16", (double)o[3], (double)o[4]);
    // BF16 keeps float32's exponent range, so its smallest subnormal is a float32 subnormal.
    CHECK(st_to_f32(st_find(&f, "b"), o) == 0);
    CHECK(o[0] == 1.0f && o[1] == -2.5f && isinf(o[2]) && o[3] == bits_f32(0x00010000) &&
          o[4] == 65280.0f);
    printf("  %-30s 1 -2.5 inf %g 65280\n", "BF16", (double)o[3]);
    CHECK(st_to_f32(st_find(&f, "d"), o) == 0 && o[0] == 0.1f && isinf(o[1]) && o[1] < 0);
    // Integers: the int32 limits pass, one past them fails; BOOL accepts only 0 and 1.
    CHECK(st_to_i32(st_find(&f, "i64"), io) == 0 && io[0] == 5 && io[1] == INT32_MIN &&
          io[2] == INT32_MAX);
    CHECK(st_to_i32(st_find(&f, "i64big"), io) == MIMI_EFORMAT);
    CHECK(st_to_i32(st_find(&f, "i8"), io) == 0 && io[0] == -128 && io[1] == 127);
    CHECK(st_to_i32(st_find(&f, "i16"), io) == 0 && io[0] == -32768 && io[1] == 32767);
    CHECK(st_to_i32(st_find(&f, "u8"), io) == 0 && io[0] == 255 && io[1] == 0);
    CHECK(st_to_i32(st_find(&f, "bool"), io) == 0 && io[0] == 0 && io[1] == 1);
    CHECK(st_to_i32(st_find(&f, "bool2"), io) == MIMI_EFORMAT);
    CHECK(st_to_f32(st_find(&f, "i8"), o) == MIMI_EFORMAT);
    printf("  %-30s I64/I16/I8/U8/BOOL ranges checked, unaligned data read\n", "integers");
    CHECK(st_dtype_size(ST_BF16) == 2 && st_dtype_size(ST_F64) == 8 && st_dtype_size(ST_BOOL) == 1);
    CHECK(strcmp(st_dtype_name(ST_BF16), "BF16") == 0 && strcmp(st_dtype_name(ST_I64), "I64") == 0);
    st_close(&f);
    free(img);
}

// ---- truncation ----

// Every proper prefix of a valid image must be refused; the full image accepted.
static void test_truncation(const uint8_t *img, size_t size) {
    int accepted = 0;
    for (size_t len = 0; len < size; len++) {
        uint8_t *cut = malloc(len ? len : 1);
        memcpy(cut, img, len);
        struct st_file f;
        err[0] = '\0';
        int rc = st_open_memory(&f, cut, len, err, sizeof err);
        if (rc == 0) accepted++;
        CHECK(rc < 0 && err[0] != '\0');
        st_close(&f);
        free(cut);
    }
    struct st_file f;
    CHECK_EQ(st_open_memory(&f, img, size, err, sizeof err), 0);
    st_close(&f);
    printf("  %-30s %zu proper prefixes, %d accepted; full image accepted\n", "truncation", size,
           accepted);
}

// ---- malformed headers ----

// The 8-byte length field: past the end, absurd, zero, over the limit; images under 8 bytes.
static void test_header_length(void) {
    size_t size;
    uint8_t *img = make_image("{}", 2, NULL, 16, &size);
    put_u64(img, size - 8 + 1);
    expect_fail_image("header length past the end", img, size, MIMI_EFORMAT, "exceeds buffer size");
    put_u64(img, (uint64_t)1 << 63);
    expect_fail_image("header length 2^63", img, size, MIMI_EFORMAT,
                      "header length 9223372036854775808");
    put_u64(img, UINT64_MAX);
    expect_fail_image("header length 2^64-1", img, size, MIMI_EFORMAT, "exceeds buffer size");
    put_u64(img, 0);
    expect_fail_image("header length 0", img, size, MIMI_EFORMAT, "expected '{'");
    free(img);
    // Over the header limit but inside the buffer (calloc leaves the pages untouched).
    size = (size_t)ST_MAX_HEADER + 64;
    img = calloc(1, size);
    put_u64(img, (uint64_t)ST_MAX_HEADER + 1);
    expect_fail_image("header over ST_MAX_HEADER", img, size, MIMI_EFORMAT, "limit");
    free(img);
    img = calloc(1, 8);
    expect_fail_image("7-byte buffer", img, 7, MIMI_EFORMAT, "buffer is 7 bytes, too short");
    expect_fail_image("empty buffer", img, 0, MIMI_EFORMAT, "buffer is 0 bytes");
    free(img);
}

// One tensor entry as JSON text, to keep the cases below readable.
#define T(name, dtype, shape, offs)                                                                \
    "\"" name "\":{\"dtype\":\"" dtype "\",\"shape\":" shape ",\"data_offsets\":" offs "}"

// Entries whose JSON is fine but whose numbers do not fit the data section or each other.
static void test_ranges(void) {
    expect_fail("offsets out of range", "{" T("x", "F32", "[1250]", "[10,5000]") "}", 4096,
                "tensor 'x': data_offsets [10, 5000] run past the 4096-byte data section");
    expect_fail("end before begin", "{" T("x", "U8", "[4]", "[8,4]") "}", 16, "end before");
    expect_fail("byte count vs shape", "{" T("x", "F32", "[3,4]", "[0,40]") "}", 48,
                "tensor 'x': shape [3,4] needs 48 bytes of F32 but data_offsets span 40");
    expect_fail("overlap", "{" T("a", "F32", "[2]", "[0,8]") "," T("b", "F32", "[2]", "[4,12]") "}",
                16, "tensors 'a' and 'b' overlap");
    const char *nested = "{" T("big", "U8", "[16]", "[0,16]") ","  //
                         T("c", "U8", "[2]", "[12,14]") ","         //
                         T("a", "U8", "[1]", "[3,4]") "}";
    expect_fail("overlap, nested", nested, 16, "overlap");
    expect_fail("overlap, identical",
                "{" T("a", "U8", "[4]", "[0,4]") "," T("b", "U8", "[4]", "[0,4]") "}", 4,
                "overlap");
    const char *adjacent = "{" T("a", "F32", "[2]", "[0,8]") ","  //
                           T("b", "F32", "[2]", "[8,16]") ","     //
                           T("z", "F32", "[0]", "[4,4]") ","      //
                           T("e", "F32", "[0]", "[16,16]") "}";
    expect_ok("adjacent and zero-size", adjacent, 16, 4);
    expect_fail("shape overflow", "{" T("x", "F32", "[1099511627776,1099511627776]", "[0,4]") "}",
                4, "overflows");
    expect_fail("shape overflow in bytes", "{" T("x", "F64", "[2305843009213693952]", "[0,8]") "}",
                8, "overflows");
    expect_ok("huge dims times zero",
              "{" T("x", "F32", "[1099511627776,1099511627776,0]", "[0,0]") "}", 0, 1);
    expect_fail("huge offsets",
                "{" T("x", "U8", "[9223372036854775807]", "[0,9223372036854775807]") "}", 8,
                "run past");
    expect_fail("unknown dtype", "{" T("x", "F8_E4M3", "[1]", "[0,1]") "}", 1,
                "tensor 'x': unknown dtype 'F8_E4M3'");
    expect_fail("lowercase dtype", "{" T("x", "f32", "[1]", "[0,4]") "}", 4, "unknown dtype 'f32'");
    expect_fail("nine dims", "{" T("x", "U8", "[1,1,1,1,1,1,1,1,1]", "[0,1]") "}", 1,
                "more than 8 dimensions");
    expect_ok("eight dims", "{" T("x", "U8", "[1,1,1,1,1,1,1,2]", "[0,2]") "}", 2, 1);
    expect_fail("three offsets", "{" T("x", "U8", "[1]", "[0,1,2]") "}", 2, "exactly 2");
    expect_fail("one offset", "{" T("x", "U8", "[1]", "[0]") "}", 2, "expected ','");
}

// Syntax: the parser must refuse malformed JSON, with the byte offset, and accept valid oddities.
static void test_json(void) {
    expect_fail("unterminated string", "{\"x", 0, "unterminated string");
    expect_fail("unterminated object", "{" T("x", "U8", "[1]", "[0,1]"), 1, "expected ',' or '}'");
    expect_fail("missing colon", "{\"x\" {\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}",
                1, "expected ':'");
    expect_fail("trailing comma", "{" T("x", "U8", "[1]", "[0,1]") ",}", 1, "expected '\"'");
    expect_fail("trailing garbage", "{" T("x", "U8", "[1]", "[0,1]") "} x", 1,
                "unexpected 'x' after the header object");
    expect_fail("two objects", "{}{}", 0, "after the header object");
    expect_ok("trailing spaces", "{" T("x", "U8", "[1]", "[0,1]") "}      ", 1, 1);
    expect_ok(
        "whitespace everywhere",
        " { \"x\" : { \"dtype\" : \"U8\" ,\n\"shape\" : [ 1 ] ,\t\"data_offsets\" : [ 0 , 1 ] } }",
        1, 1);
    expect_fail("header is an array", "[]", 0, "expected '{'");
    expect_fail("entry not an object", "{\"x\":5}", 0, "tensor 'x'");
    // 100 nested arrays in an ignored key: refused at the depth limit, not by running out of stack.
    char deep[512];
    int k = snprintf(deep, sizeof deep,
                     "{\"x\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1],\"junk\":");
    for (int i = 0; i < 100; i++) deep[k++] = '[';
    for (int i = 0; i < 100; i++) deep[k++] = ']';
    snprintf(deep + k, sizeof deep - (size_t)k, "}}");
    expect_fail("deep nesting", deep, 1, "nesting deeper than");
    expect_ok("unknown keys ignored",
              "{\"x\":{\"dtype\":\"U8\",\"extra\":{\"k\":[1,-2.5e3,{\"z\":null}],\"t\":true},"
              "\"shape\":[1],\"data_offsets\":[0,1],\"w\":\"\\u00e9\"}}",
              1, 1);
    expect_fail("bad literal in unknown key",
                "{\"x\":{\"dtype\":\"U8\",\"extra\":nul,\"shape\":[1],\"data_offsets\":[0,1]}}", 1,
                "expected a value");
    expect_fail("bad number in unknown key",
                "{\"x\":{\"dtype\":\"U8\",\"extra\":1.,\"shape\":[1],\"data_offsets\":[0,1]}}", 1,
                "malformed number");
    expect_fail("float shape", "{" T("x", "U8", "[1.5]", "[0,1]") "}", 1, "fraction");
    expect_fail("exponent offset", "{" T("x", "U8", "[1]", "[0,1e0]") "}", 1,
                "fraction or exponent");
    expect_fail("negative offset", "{" T("x", "U8", "[1]", "[-1,0]") "}", 1, "negative");
    expect_fail("negative dim", "{" T("x", "U8", "[-1]", "[0,0]") "}", 1, "negative");
    expect_fail("int64 overflow", "{" T("x", "U8", "[9223372036854775808]", "[0,1]") "}", 1,
                "does not fit in int64");
    expect_fail("leading zero", "{" T("x", "U8", "[01]", "[0,1]") "}", 1, "leading zero");
    expect_fail("string dim", "{" T("x", "U8", "[\"1\"]", "[0,1]") "}", 1, "non-negative integer");
    expect_fail("missing offsets", "{\"x\":{\"dtype\":\"U8\",\"shape\":[1]}}", 1,
                "tensor 'x': header JSON at byte 31: missing \"data_offsets\"");
    expect_fail("duplicate key",
                "{\"x\":{\"dtype\":\"U8\",\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}",
                1, "duplicate key \"dtype\"");
    expect_fail("duplicate names",
                "{" T("a", "U8", "[1]", "[0,1]") "," T("a", "U8", "[1]", "[1,2]") "}", 2,
                "duplicate tensor name 'a'");
    expect_fail("duplicate metadata", "{\"__metadata__\":{},\"__metadata__\":{}}", 0, "duplicate");
    expect_fail("metadata value not a string", "{\"__metadata__\":{\"a\":1}}", 0,
                "must be strings");
    expect_fail("control byte in name", "{\"a\tb\":{}}", 0, "control byte 0x09");
    expect_fail("invalid escape", "{\"a\\qb\":{}}", 0, "invalid escape '\\q'");
    expect_fail("short \\u escape", "{\"a\\u12\":{}}", 0, "4 hex digits");
    expect_fail("lone high surrogate", "{\"\\ud800x\":{}}", 0, "not followed by a low surrogate");
    expect_fail("surrogate then non-surrogate", "{\"\\ud800\\u0041\":{}}", 0,
                "not a low surrogate");
    expect_fail("lone low surrogate", "{\"\\udc00\":{}}", 0, "unpaired low surrogate");
    expect_fail("\\u0000 in a name", "{\"a\\u0000\":{}}", 0, "not allowed");
    expect_ok("empty header", "{}", 0, 0);
    expect_ok("empty header, stray data", "{}", 100, 0);
}

// Names: escapes decode to UTF-8, the length limit is exact, and a name comes back verbatim.
static void test_names(void) {
    size_t size;
    const char *json = "{\"__metadata__\":{\"k\":\"v\"},"
                       "\"a\\/b\\u00e9\\ud83d\\ude00\\t\\\"\":{\"dtype\":\"U8\",\"shape\":[],"
                       "\"data_offsets\":[0,1]}}";
    uint8_t *img = make_image(json, strlen(json), "z", 1, &size);
    struct st_file f;
    int rc = st_open_memory(&f, img, size, err, sizeof err);
    CHECK_EQ(rc, 0);
    const struct st_tensor *t = st_find(&f, "a/b\xc3\xa9\xf0\x9f\x98\x80\t\"");
    CHECK(t != NULL && t->n_elements == 1 && t->data == img + size - 1);
    CHECK(f.metadata_json && strcmp(f.metadata_json, "{\"k\":\"v\"}") == 0);
    printf("  %-30s %s\n", "escaped name", t ? "decoded" : "NOT FOUND");
    st_close(&f);
    free(img);

    char name[ST_MAX_NAME + 2], hdr[700];
    memset(name, 'n', sizeof name - 1);
    name[ST_MAX_NAME] = '\0';  // 512 bytes: accepted
    snprintf(hdr, sizeof hdr, "{\"%s\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[0,0]}}",
             name);
    expect_ok("512-byte name", hdr, 0, 1);
    name[ST_MAX_NAME] = 'n';  // 513 bytes: refused
    name[ST_MAX_NAME + 1] = '\0';
    snprintf(hdr, sizeof hdr, "{\"%s\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[0,0]}}",
             name);
    expect_fail("513-byte name", hdr, 0, "longer than 512");
}

// ---- files ----

// Expects st_open on `path` to fail with `code` and a reason containing `needle`.
static void expect_open_fail(const char *label, const char *path, int code, const char *needle) {
    struct st_file f;
    int rc = st_open(&f, path, err, sizeof err);
    printf("  %-30s %s\n", label, err);
    CHECK_EQ(rc, code);
    CHECK(strstr(err, needle) != NULL);
    CHECK(f.base == NULL && f.tensors == NULL);
    st_close(&f);
}

// Every bad tensor description is refused with MIMI_EINVAL before anything is written.
static void test_write_args(const char *path) {
    static const float v[4] = {0};
    static char long_name[ST_MAX_NAME + 2];
    memset(long_name, 'n', ST_MAX_NAME + 1);
    const struct st_write_tensor bad[] = {
        {NULL, ST_F32, 1, {1}, v},
        {long_name, ST_F32, 1, {1}, v},
        {"__metadata__", ST_F32, 1, {1}, v},
        {"x", (enum st_dtype)42, 1, {1}, v},
        {"x", ST_F32, ST_MAX_DIMS + 1, {1}, v},
        {"x", ST_F32, 2, {(int64_t)1 << 40, (int64_t)1 << 40}, v},
        {"x", ST_F32, 1, {4}, NULL},
    };
    int n_bad = (int)(sizeof bad / sizeof bad[0]), refused = 0;
    for (int i = 0; i < n_bad; i++)
        refused += st_write(path, &bad[i], 1, NULL, err, sizeof err) == MIMI_EINVAL;
    CHECK_EQ(refused, n_bad);
    CHECK_EQ(st_write(NULL, bad, 1, NULL, err, sizeof err), MIMI_EINVAL);
    CHECK_EQ(st_write(path, NULL, 1, NULL, err, sizeof err), MIMI_EINVAL);
    CHECK(!file_exists(path));
    printf("  %-30s %d of %d refused with MIMI_EINVAL\n", "write argument errors", refused, n_bad);
    struct st_file f;
    CHECK_EQ(st_open(&f, NULL, err, sizeof err), MIMI_EINVAL);
    CHECK_EQ(st_open_memory(&f, NULL, 16, err, sizeof err), MIMI_EINVAL);
    CHECK_EQ(st_open_memory(NULL, v, 16, err, sizeof err), MIMI_EINVAL);
    CHECK(st_find(NULL, "x") == NULL);
    st_close(NULL);
}

// Real files: missing, not regular, too short; and st_write's failures, which leave no file.
static void test_files(const char *dir) {
    char path[512];
    snprintf(path, sizeof path, "%s/does-not-exist.safetensors", dir);
    expect_open_fail("non-existent path", path, MIMI_EIO, "cannot open");
    expect_open_fail("a directory", dir, MIMI_EIO, "not a regular file");
    snprintf(path, sizeof path, "%s/fifo", dir);
    if (mkfifo(path, 0600) == 0) {  // must be refused at once, not wait for a writer
        expect_open_fail("a FIFO", path, MIMI_EIO, "not a regular file");
        unlink(path);
    }
    snprintf(path, sizeof path, "%s/empty.safetensors", dir);
    write_bytes(path, "", 0);
    expect_open_fail("zero-length file", path, MIMI_EFORMAT, "file is 0 bytes, too short");
    write_bytes(path, "abc", 3);
    expect_open_fail("3-byte file", path, MIMI_EFORMAT,
                     "file is 3 bytes, too short for a safetensors header");
    write_bytes(path, "\x02\0\0\0\0\0\0\0{", 9);
    expect_open_fail("header cut short", path, MIMI_EFORMAT, "header length 2 exceeds file size 9");
    unlink(path);

    // Writer failures: a missing directory, a target that cannot be replaced, bad arguments.
    static const float one = 1.0f;
    struct st_write_tensor w[2] = {{"a", ST_F32, 1, {1}, &one}, {"a", ST_F32, 1, {1}, &one}};
    snprintf(path, sizeof path, "%s/no/such/dir/x.safetensors", dir);
    CHECK_EQ(st_write(path, w, 1, NULL, err, sizeof err), MIMI_EIO);
    printf("  %-30s %s\n", "write into missing dir", err);
    snprintf(path, sizeof path, "%s/target-is-a-dir", dir);
    mkdir(path, 0700);
    CHECK_EQ(st_write(path, w, 1, NULL, err, sizeof err), MIMI_EIO);
    printf("  %-30s %s\n", "rename over a directory", err);
    char tmp[600];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    CHECK(!file_exists(tmp));  // the temporary file is removed on failure
    rmdir(path);
    snprintf(path, sizeof path, "%s/w.safetensors", dir);
    CHECK_EQ(st_write(path, w, 2, NULL, err, sizeof err), MIMI_EINVAL);
    printf("  %-30s %s\n", "write duplicate names", err);
    CHECK_EQ(st_write(path, w, 1, "{\"a\":1}", err, sizeof err), MIMI_EINVAL);
    printf("  %-30s %s\n", "write bad metadata", err);
    w[1].shape[0] = -1;
    w[1].name = "b";
    CHECK_EQ(st_write(path, w, 2, NULL, err, sizeof err), MIMI_EINVAL);
    printf("  %-30s %s\n", "write negative dim", err);
    CHECK(!file_exists(path));
    test_write_args(path);
    // No tensors at all is still a valid file.
    CHECK_EQ(st_write(path, NULL, 0, NULL, err, sizeof err), 0);
    struct st_file f;
    CHECK_EQ(st_open(&f, path, err, sizeof err), 0);
    CHECK_EQ(f.n_tensors, 0);
    st_close(&f);
    unlink(path);
}

// ---- random mutation ----

// Flips a few bytes of a valid image (mostly in the header, often to JSON punctuation), and
// sometimes truncates it. Whatever is accepted must lie inside the image.
static void test_mutation(const uint8_t *img, size_t size, int iterations) {
    static const char interesting[] = "{}[]\",:0123456789-.eE\\u \x00\xff";
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = hlen << 8 | img[i];
    int accepted = 0;
    uint8_t *buf = malloc(size);
    for (int it = 0; it < iterations; it++) {
        size_t n = size;
        memcpy(buf, img, size);
        // Three flips in four land in the length field or the JSON, where the parsing happens.
        int flips = 1 + test_rng_int(4);
        for (int j = 0; j < flips; j++) {
            size_t at = test_rng_int(4) ? (size_t)test_rng_int((int)(8 + hlen))
                                        : (size_t)test_rng_int((int)size);
            buf[at] = test_rng_int(2)
                          ? (uint8_t)interesting[test_rng_int((int)sizeof interesting - 1)]
                          : (uint8_t)test_rng_int(256);
        }
        if (test_rng_int(10) == 0) n = (size_t)test_rng_int((int)size);
        uint8_t *cut = malloc(n ? n : 1);  // exact size, so overreads are caught
        memcpy(cut, buf, n);
        struct st_file f;
        int rc = st_open_memory(&f, cut, n, err, sizeof err);
        if (rc == 0) {
            // A mutant that still parses (a changed digit in the data, say) must be fully usable.
            accepted++;
            for (int i = 0; i < f.n_tensors; i++) {
                const struct st_tensor *t = &f.tensors[i];
                CHECK(t->data >= cut + 8 && t->data + t->n_bytes <= cut + n);
                CHECK(st_find(&f, t->name) == t);
                CHECK((size_t)t->n_elements * st_dtype_size(t->dtype) == t->n_bytes);
                float fo[64];
                int32_t io[64];
                if (t->n_elements <= 64) {
                    st_to_f32(t, fo);
                    st_to_i32(t, io);
                }
            }
        } else {
            CHECK(err[0] != '\0' && strchr(err, '\n') == NULL);
        }
        st_close(&f);
        free(cut);
    }
    free(buf);
    printf("  %-30s %d mutants, %d accepted, all in bounds\n", "random mutation", iterations,
           accepted);
}

// The round-trip image, written once, also feeds the truncation and mutation cases.
int main(int argc, char **argv) {
    test_init(argc, argv);
    test_rng_seed(test_seed);
    char dir[256];
    snprintf(dir, sizeof dir, "/tmp/test_safetensors.%ld", (long)getpid());
    if (mkdir(dir, 0700) != 0 && errno != EEXIST) SKIP("cannot create %s", dir);
    char path[512];
    snprintf(path, sizeof path, "%s/round_trip.safetensors", dir);

    size_t size = 0;
    uint8_t *img = test_round_trip(path, &size);
    test_conversions();
    printf("malformed images\n");
    if (img) test_truncation(img, size);
    test_header_length();
    test_ranges();
    test_json();
    test_names();
    printf("files\n");
    test_files(dir);
    printf("fuzz\n");
    if (img) test_mutation(img, size, 5000);

    free(img);
    unlink(path);
    rmdir(dir);
    return test_summary();
}
