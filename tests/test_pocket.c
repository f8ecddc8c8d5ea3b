/*
 * test_pocket.c - Pocket TTS's Mimi (spec 8.3): the same code paths at another geometry.
 *
 * The synthetic Pocket model (the reference vectors' weight rule on Pocket's 87 codec tensors,
 * checked here by sum against tests/data/pocket/pocket_manifest.tsv, inside a file that also
 * holds TTS tensors the codec must ignore) against the reference outputs in
 * tests/data/pocket/pocket_refs_seed0.safetensors: offline encode latents, offline and streaming
 * decode PCM, each within relative L2 1e-4. Also: the family is recognised, and the code API on
 * this model is a clear error.
 *
 * usage: test_pocket [CLIP] [cuda]
 * With "cuda" the same gates run on the CUDA backend (strict f32); exit 77 without a device.
 */
#include <sys/stat.h>

#include "mimi.h"
#include "refs.h"
#include "synth.h"
#include "test.h"

#define TOL 1e-4
#define MODEL MIMI_TEST_MODELS "/pocket.safetensors"

static struct st_file refs;
static int backend = MIMI_BACKEND_AUTO;  // "cuda" on the command line: MIMI_BACKEND_CUDA

static float *ref(const char *clip, const char *what, int64_t *n) { return refs_f32(&refs, clip, what, n); }

// Every codec tensor of the Pocket table against the manifest: name, shape and sum.
static void test_weights(void) {
    int n;
    const struct synth_tensor_info *tab = synth_pocket_tensors(&n);
    FILE *f = fopen(MIMI_TEST_DATA "/pocket/pocket_manifest.tsv", "r");
    CHECK(f != NULL);
    if (!f) return;
    char line[512], name[256], shape[64], want_shape[64];
    int checked = 0;
    double worst = 0;
    while (fgets(line, sizeof line, f)) {
        double sum;
        if (line[0] == '#' || sscanf(line, "%255s %63s %lf", name, want_shape, &sum) != 3) continue;
        CHECK(checked < n && strcmp(tab[checked].name, name) == 0);
        const struct synth_tensor_info *t = &tab[checked++];
        int64_t count = 1;
        size_t at = 0;
        for (int d = 0; d < t->n_dims; d++) {
            count *= t->shape[d];
            at += (size_t)snprintf(shape + at, sizeof shape - at, "%s%lld", d ? "x" : "",
                                   (long long)t->shape[d]);
        }
        CHECK(strcmp(shape, want_shape) == 0);
        float *v = malloc(sizeof(float) * count);
        synth_fill(t->name, t->shape, t->n_dims, 0, v);
        double s = 0, abs = 0;
        for (int64_t i = 0; i < count; i++) {
            s += v[i];
            abs += fabs(v[i]);
        }
        free(v);
        // float64 sums of the same float32 values in another order: relative to the abs-sum
        double dev = fabs(s - sum) / (abs > 0 ? abs : 1);
        worst = dev > worst ? dev : worst;
        CHECK(dev <= 1e-12);
    }
    fclose(f);
    printf("  pocket weights: %d/87 codec tensors match the manifest (worst |dsum|/abssum %.1e)\n",
           checked, worst);
    CHECK_EQ(checked, 87);
}

// The library's error messages, next to the failed checks they explain.
static void log_errors(void *user, int level, const char *msg) {
    (void)user;
    if (level == MIMI_LOG_ERROR) fprintf(stderr, "  library: %s\n", msg);
}

static struct mimi_model *load_model(void) {
    struct stat st;
    char err[256];
    if (stat(MODEL, &st) != 0 && synth_write_model(MODEL, 0, SYNTH_NAMING_POCKET, SYNTH_F32, err, sizeof err)) {
        fprintf(stderr, "cannot write %s: %s\n", MODEL, err);
        exit(1);
    }
    int rc;
    struct mimi_model_params mp;
    mimi_model_params_default(&mp);
    mp.backend = backend;
    mp.log = log_errors;
    struct mimi_model *m = mimi_model_load(MODEL, &mp, &rc);
    CHECK(m != NULL);
    if (m) printf("  backend: %s\n", mimi_model_backend_name(m));
    if (!m) exit(1);
    CHECK(strcmp(mimi_model_family(m), "pocket-tts") == 0);
    CHECK(strcmp(mimi_model_naming(m), "pocket-tts") == 0);
    CHECK_EQ(mimi_model_latent_size(m), 32);
    CHECK_EQ(mimi_model_frame_size(m), 1920);
    CHECK_EQ(mimi_model_max_codebooks(m), 0);
    return m;
}

static void test_wrong_api(struct mimi_model *m) {
    struct mimi_encoder *e = mimi_encoder_create(m, NULL, NULL);
    struct mimi_decoder *d = mimi_decoder_create(m, NULL, NULL);
    float pcm[1920] = {0};
    int32_t codes[8] = {0};
    CHECK_EQ(mimi_encoder_step(e, pcm, codes), MIMI_EUNSUPPORTED);
    printf("  code API on Pocket: %s\n", mimi_encoder_errmsg(e));
    CHECK(strstr(mimi_encoder_errmsg(e), "latent API") != NULL);
    CHECK_EQ(mimi_decoder_step(d, codes, pcm), MIMI_EUNSUPPORTED);
    CHECK_EQ(mimi_encode_offline(m, NULL, pcm, 1920, codes, 8), MIMI_EUNSUPPORTED);
    mimi_encoder_destroy(e);
    mimi_decoder_destroy(d);
}

static void test_clip(struct mimi_model *m, const char *clip) {
    int64_t n_pcm, n_lat, n_dec;
    float *pcm = ref(clip, "pcm_in", &n_pcm);
    float *want_lat = ref(clip, "latent_offline", &n_lat);
    const int64_t frames = n_lat / 32;
    char label[128];
    // offline encode: (32, frames)
    float *lat = calloc((size_t)n_lat, sizeof(float));
    CHECK_EQ(mimi_encode_offline_latent(m, NULL, pcm, n_pcm, lat, n_lat), frames);
    snprintf(label, sizeof label, "%s latent_offline", clip);
    CHECK_REL_L2(lat, want_lat, (size_t)n_lat, TOL, label);
    // streaming encode (push + flush) gives the same latents: the reference keeps a linear cache
    struct mimi_encoder *e = mimi_encoder_create(m, NULL, NULL);
    float *stream_lat = calloc((size_t)n_lat, sizeof(float)), *fm = calloc((size_t)n_lat, sizeof(float));
    int got = mimi_encoder_push_latent(e, pcm, (size_t)n_pcm, fm, (int)frames);
    got += mimi_encoder_flush_latent(e, fm + (size_t)got * 32, 1);
    CHECK_EQ(got, frames);
    for (int64_t f = 0; f < frames; f++)
        for (int i = 0; i < 32; i++) stream_lat[i * frames + f] = fm[f * 32 + i];
    snprintf(label, sizeof label, "%s streaming encode vs offline", clip);
    CHECK_REL_L2(stream_lat, lat, (size_t)n_lat, 1e-5, label);
    mimi_encoder_destroy(e);
    // offline decode of the reference latents
    float *want = ref(clip, "pcm_dec_offline", &n_dec);
    float *out = calloc((size_t)n_dec, sizeof(float));
    CHECK_EQ(mimi_decode_offline_latent(m, NULL, want_lat, frames, out, n_dec), n_dec);
    snprintf(label, sizeof label, "%s pcm_dec_offline", clip);
    CHECK_REL_L2(out, want, (size_t)n_dec, TOL, label);
    free(want);
    // streaming decode, one frame per call
    want = ref(clip, "pcm_dec_stream", &n_dec);
    struct mimi_decoder *d = mimi_decoder_create(m, NULL, NULL);
    for (int64_t f = 0; f < frames; f++) {
        float frame_lat[32];
        for (int i = 0; i < 32; i++) frame_lat[i] = want_lat[i * frames + f];
        CHECK_EQ(mimi_decoder_step_latent(d, frame_lat, out + f * 1920), MIMI_OK);
    }
    snprintf(label, sizeof label, "%s pcm_dec_stream", clip);
    CHECK_REL_L2(out, want, (size_t)n_dec, TOL, label);
    mimi_decoder_destroy(d);
    free(want);
    free(out);
    free(fm);
    free(stream_lat);
    free(lat);
    free(want_lat);
    free(pcm);
}

int main(int argc, char **argv) {
    test_init(argc, argv);
    const char *clip = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "cuda") == 0) {
            if (!mimi_backend_available(MIMI_BACKEND_CUDA)) SKIP("no CUDA device");
            backend = MIMI_BACKEND_CUDA;
        } else if (!clip) {
            clip = argv[i];
        }
    }
    refs_open(&refs, "pocket/pocket_refs_seed0.safetensors");
    test_weights();
    mkdir(MIMI_TEST_MODELS, 0755);
    struct mimi_model *m = load_model();
    test_wrong_api(m);
    // one clip per run (the first argument other than "cuda"), both by default
    if (!clip || strcmp(clip, "dev_sweep_noise") == 0) test_clip(m, "dev_sweep_noise");
    if (!clip || strcmp(clip, "dev_speech_en") == 0) test_clip(m, "dev_speech_en");
    mimi_model_destroy(m);
    st_close(&refs);
    return test_summary();
}
