/*
 * test_golden.c - parity with the reference implementation's outputs (tests/data/refs_seed0).
 *
 * For one clip and one checkpoint spelling: offline encode (32 codebooks) with its taps,
 * streaming encode (8 codebooks), offline decode of 8 and 32 codebooks with taps, and streaming
 * decode of 8. Gates (from the project's parity requirements): >= 99.5% of codes equal and the
 * semantic codebook 100% equal; PCM and every tap within relative L2 1e-4. Taps are checked in
 * pipeline order and the first stage that diverges is named.
 *
 * usage: test_golden CLIP [MODEL_FILE_NAME] [encode|all] [reference]
 * ("reference" loads with MIMI_ISA_REFERENCE: the scalar reference path instead of the default,
 * fastest kernels)
 */
#include "mimi.h"
#include "refs.h"
#include "test.h"

#define PCM_TOL 1e-4
#define TAP_TOL 1e-4
#define CODE_AGREEMENT 0.995

static struct st_file refs;
static const char *clip;

// ---- reference data ----

static float *ref_f32(const char *what, int64_t *n) { return refs_f32(&refs, clip, what, n); }

static int32_t *ref_i32(const char *what, int64_t *rows, int64_t *cols) {
    const struct st_tensor *t = refs_find(&refs, clip, what);
    int32_t *out = malloc(sizeof(int32_t) * t->n_elements);
    if (!out || st_to_i32(t, out)) exit(1);
    *rows = t->shape[0];
    *cols = t->shape[1];
    return out;
}

// ---- taps: each named stage accumulated over frames as (channels, total steps) ----

#define N_TAPS 6
static const char *tap_names[N_TAPS] = {"enc_seanet", "enc_transformer", "latent",
                                        "dec_latent", "dec_upsample",    "dec_transformer"};
static const char *tap_refs[N_TAPS] = {"tap_enc_seanet", "tap_enc_tr", "tap_latent",
                                       "tap_dec_latent", "tap_dec_up", "tap_dec_tr"};

struct tap_store {
    float *data[N_TAPS];  // (channels, cap)
    int steps[N_TAPS], cap[N_TAPS], channels[N_TAPS];
};

static void on_tap(void *user, const char *name, const float *data, int channels, int steps) {
    struct tap_store *s = user;
    for (int i = 0; i < N_TAPS; i++) {
        if (strcmp(name, tap_names[i]) || !s->data[i]) continue;
        s->channels[i] = channels;
        for (int c = 0; c < channels; c++)
            for (int t = 0; t < steps && s->steps[i] + t < s->cap[i]; t++)
                s->data[i][(size_t)c * s->cap[i] + s->steps[i] + t] = data[(size_t)c * steps + t];
        s->steps[i] += steps;
    }
}

// Compares the taps with indices [first, last] in pipeline order; names the first divergence.
static void check_taps(struct tap_store *s, int first, int last) {
    for (int i = first; i <= last; i++) {
        int64_t n;
        float *want = ref_f32(tap_refs[i], &n);
        char label[128];
        snprintf(label, sizeof label, "%s tap %s", clip, tap_refs[i]);
        double e = test_rel_l2(s->data[i], want, (size_t)n);
        CHECK(s->steps[i] == s->cap[i]);
        CHECK_REL_L2(s->data[i], want, (size_t)n, TAP_TOL, label);
        free(want);
        if (!(e <= TAP_TOL)) {
            fprintf(stderr, "  first divergent stage: %s\n", tap_refs[i]);
            return;
        }
    }
}

static void tap_alloc(struct tap_store *s, int i, int channels, int steps) {
    s->cap[i] = steps;
    s->data[i] = calloc((size_t)channels * steps, sizeof(float));
}

static void tap_free(struct tap_store *s) {
    for (int i = 0; i < N_TAPS; i++) free(s->data[i]);
    memset(s, 0, sizeof *s);
}

// ---- gates ----

// codes and want are (n_q, frames) codebook-major.
static void check_codes(const char *what, const int32_t *codes, const int32_t *want, int n_q,
                        int64_t frames) {
    int64_t equal = 0, sem_equal = 0;
    for (int q = 0; q < n_q; q++)
        for (int64_t f = 0; f < frames; f++) {
            int same = codes[q * frames + f] == want[q * frames + f];
            equal += same;
            if (q == 0) sem_equal += same;
        }
    double agree = (double)equal / ((double)n_q * frames);
    printf("  %s %-28s codes equal %.4f%% (%lld/%lld), semantic %lld/%lld\n", clip, what,
           100 * agree, (long long)equal, (long long)(n_q * frames), (long long)sem_equal,
           (long long)frames);
    CHECK(agree >= CODE_AGREEMENT);
    CHECK_EQ(sem_equal, frames);
}

static void run_encode(const struct mimi_model *model, const float *pcm, int64_t n_samples) {
    int64_t rows, frames;
    // offline, 32 codebooks, with taps
    int32_t *want = ref_i32("codes_q32_offline", &rows, &frames);
    struct tap_store taps = {0};
    const int d = 512, steps = 2;
    tap_alloc(&taps, 0, d, (int)frames * steps);
    tap_alloc(&taps, 1, d, (int)frames * steps);
    tap_alloc(&taps, 2, d, (int)frames);
    struct mimi_stream_params sp;
    mimi_stream_params_default(&sp);
    sp.n_codebooks = (int)rows;
    sp.tap = on_tap;
    sp.tap_user = &taps;
    int32_t *codes = calloc((size_t)(rows * frames), sizeof(int32_t));
    int64_t got = mimi_encode_offline(model, &sp, pcm, n_samples, codes, rows * frames);
    CHECK_EQ(got, frames);
    check_taps(&taps, 0, 2);
    check_codes("offline encode q32", codes, want, (int)rows, frames);
    tap_free(&taps);
    free(codes);
    free(want);

    // streaming, 8 codebooks, whole frames only (the reference streams whole frames)
    want = ref_i32("codes_q8_stream", &rows, &frames);
    mimi_stream_params_default(&sp);
    sp.n_codebooks = (int)rows;
    struct mimi_encoder *enc = mimi_encoder_create(model, &sp, NULL);
    int32_t *fm = calloc((size_t)(rows * frames), sizeof(int32_t));
    codes = calloc((size_t)(rows * frames), sizeof(int32_t));
    int n = mimi_encoder_push(enc, pcm, (size_t)(frames * 1920), fm, (int)frames);
    CHECK_EQ(n, frames);
    for (int64_t f = 0; f < frames; f++)
        for (int q = 0; q < rows; q++) codes[q * frames + f] = fm[f * rows + q];
    check_codes("streaming encode q8", codes, want, (int)rows, frames);
    mimi_encoder_destroy(enc);
    free(fm);
    free(codes);
    free(want);
}

// Decodes the first n_q reference offline codebooks, offline or streaming, against `what`.
static void run_decode(const struct mimi_model *model, int n_q, int streaming, const char *what,
                       int with_taps) {
    int64_t rows, frames, n_want;
    int32_t *all = ref_i32("codes_q32_offline", &rows, &frames);
    float *want = ref_f32(what, &n_want);
    float *pcm = calloc((size_t)n_want, sizeof(float));
    struct tap_store taps = {0};
    struct mimi_stream_params sp;
    mimi_stream_params_default(&sp);
    sp.n_codebooks = n_q;
    if (with_taps) {
        tap_alloc(&taps, 3, 512, (int)frames);
        tap_alloc(&taps, 4, 512, (int)frames * 2);
        tap_alloc(&taps, 5, 512, (int)frames * 2);
        sp.tap = on_tap;
        sp.tap_user = &taps;
    }
    CHECK_EQ(n_want, frames * 1920);
    if (streaming) {
        // frame-major codes, one frame per call
        struct mimi_decoder *dec = mimi_decoder_create(model, &sp, NULL);
        int32_t fc[32];
        for (int64_t f = 0; f < frames; f++) {
            for (int q = 0; q < n_q; q++) fc[q] = all[q * frames + f];
            CHECK_EQ(mimi_decoder_step(dec, fc, pcm + f * 1920), MIMI_OK);
        }
        mimi_decoder_destroy(dec);
    } else {
        // the first n_q rows of the codebook-major array are its first n_q codebooks
        CHECK_EQ(mimi_decode_offline(model, &sp, all, frames, pcm, n_want), n_want);
    }
    if (with_taps) check_taps(&taps, 3, 5);
    char label[128];
    snprintf(label, sizeof label, "%s %s", clip, what);
    CHECK_REL_L2(pcm, want, (size_t)n_want, PCM_TOL, label);
    tap_free(&taps);
    free(pcm);
    free(want);
    free(all);
}

static void log_line(void *user, int level, const char *msg) {
    (void)user;
    if (level <= MIMI_LOG_WARN) fprintf(stderr, "mimi: %s\n", msg);
}

int main(int argc, char **argv) {
    test_init(argc, argv);
    if (argc < 2) {
        fprintf(stderr, "usage: %s CLIP [MODEL_FILE_NAME] [encode|all] [reference]\n", argv[0]);
        return 2;
    }
    clip = argv[1];
    const char *model_name = argc > 2 ? argv[2] : "native.safetensors";
    int encode_only = argc > 3 && strcmp(argv[3], "encode") == 0;
    char path[1024];
    refs_open(&refs, "refs_seed0.safetensors");
    snprintf(path, sizeof path, "%s/%s", MIMI_TEST_MODELS, model_name);
    struct mimi_model_params mp;
    mimi_model_params_default(&mp);
    mp.log = log_line;
    // an extra argument "cuda" runs the same gates on the CUDA backend (strict f32)
    for (int i = 4; i < argc; i++)
        if (strcmp(argv[i], "cuda") == 0) {
            if (!mimi_backend_available(MIMI_BACKEND_CUDA)) SKIP("no CUDA device");
            mp.backend = MIMI_BACKEND_CUDA;
        }
    if (argc > 4 && strcmp(argv[4], "reference") == 0) mp.isa = MIMI_ISA_REFERENCE;
    int rc;
    struct mimi_model *model = mimi_model_load(path, &mp, &rc);
    if (!model) {
        fprintf(stderr, "cannot load %s: %s\n", path, mimi_strerror(rc));
        return 1;
    }
    int64_t n_samples;
    float *pcm = ref_f32("pcm_in", &n_samples);
    printf("# clip %s (%lld samples), model %s (%s naming)\n", clip, (long long)n_samples,
           model_name, mimi_model_naming(model));
    run_encode(model, pcm, n_samples);
    if (!encode_only) {
        run_decode(model, 8, 0, "pcm_dec_q8_offline", 1);
        run_decode(model, 32, 0, "pcm_dec_q32_offline", 0);
        run_decode(model, 8, 1, "pcm_dec_q8_stream", 0);
    }
    free(pcm);
    mimi_model_destroy(model);
    st_close(&refs);
    return test_summary();
}
