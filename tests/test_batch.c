/*
 * test_batch.c - many streams in one batch: a slot gives bit for bit what a lone stream fed the
 * same frames gives, slots not listed in a step do not advance, and open / close / reset and
 * the slot-list checks behave as documented.
 */
#include <time.h>

#include "mimi.h"
#include "refs.h"
#include "rows_case.h"
#include "test.h"

#define FRAME 1920
#define N_Q 8
#define SLOTS 3
#define FRAMES 6

static struct mimi_model *model;
static float *clip;  // dev_speech_en

static void load_inputs(void) {
    int rc;
    model = mimi_model_load(MIMI_TEST_MODELS "/native.safetensors", NULL, &rc);
    if (!model) SKIP("no synthetic model: %s", mimi_strerror(rc));
    clip = refs_clip_pcm("dev_speech_en", NULL);
}

// Slot s reads the clip from offset s * 7 frames, so every slot sees different audio.
static const float *slot_frame(int s, int f) { return clip + ((size_t)s * 7 + f) * FRAME; }

static void test_encode_decode(void) {
    struct mimi_batch_params bp;
    mimi_batch_params_default(&bp);
    bp.capacity = SLOTS;
    bp.n_codebooks = N_Q;
    struct mimi_batch *enc = mimi_batch_create(model, &bp, NULL);
    bp.direction = MIMI_DIRECTION_DECODE;
    struct mimi_batch *dec = mimi_batch_create(model, &bp, NULL);
    int ids[SLOTS];
    for (int s = 0; s < SLOTS; s++) {
        ids[s] = mimi_batch_open(enc);
        CHECK_EQ(ids[s], s);
        CHECK_EQ(mimi_batch_open(dec), s);
    }
    CHECK_EQ(mimi_batch_open(enc), MIMI_EFULL);
    // batch codes and pcm per slot and frame; slot 1 skips frame 2 (it must not advance)
    int32_t codes[SLOTS][FRAMES][N_Q];
    static float pcm[SLOTS][FRAMES][FRAME];
    int done[SLOTS] = {0};
    for (int step = 0; step < FRAMES + 1; step++) {
        int list[SLOTS], n = 0;
        float in[SLOTS * FRAME];
        int32_t out[SLOTS * N_Q];
        for (int s = SLOTS - 1; s >= 0; s--) {  // listed in reverse order on purpose
            if (done[s] == FRAMES || (s == 1 && step == 2)) continue;
            memcpy(in + n * FRAME, slot_frame(s, done[s]), sizeof(float) * FRAME);
            list[n++] = s;
        }
        CHECK_EQ(mimi_batch_encode(enc, n, list, in, out), MIMI_OK);
        float pout[SLOTS * FRAME];
        CHECK_EQ(mimi_batch_decode(dec, n, list, out, pout), MIMI_OK);
        for (int k = 0; k < n; k++) {
            memcpy(codes[list[k]][done[list[k]]], out + k * N_Q, sizeof(int32_t) * N_Q);
            memcpy(pcm[list[k]][done[list[k]]], pout + k * FRAME, sizeof(float) * FRAME);
            done[list[k]]++;
        }
    }
    // each slot against a lone encoder and decoder
    struct mimi_stream_params sp;
    mimi_stream_params_default(&sp);
    sp.n_codebooks = N_Q;
    for (int s = 0; s < SLOTS; s++) {
        CHECK_EQ(done[s], FRAMES);
        struct mimi_encoder *e = mimi_encoder_create(model, &sp, NULL);
        struct mimi_decoder *d = mimi_decoder_create(model, &sp, NULL);
        int same_codes = 1, same_pcm = 1;
        for (int f = 0; f < FRAMES; f++) {
            int32_t c[N_Q];
            float p[FRAME];
            CHECK_EQ(mimi_encoder_step(e, slot_frame(s, f), c), MIMI_OK);
            CHECK_EQ(mimi_decoder_step(d, c, p), MIMI_OK);
            same_codes &= memcmp(c, codes[s][f], sizeof c) == 0;
            same_pcm &= memcmp(p, pcm[s][f], sizeof p) == 0;
        }
        printf("  slot %d: codes %s, pcm %s (bit for bit) vs a lone stream\n", s,
               same_codes ? "equal" : "DIFFER", same_pcm ? "equal" : "DIFFER");
        CHECK(same_codes);
        CHECK(same_pcm);
        mimi_encoder_destroy(e);
        mimi_decoder_destroy(d);
    }
    // close, reopen: the slot starts fresh and gives the first frame's codes again
    CHECK_EQ(mimi_batch_close(enc, 0), MIMI_OK);
    CHECK_EQ(mimi_batch_close(enc, 0), MIMI_EINVAL);
    CHECK_EQ(mimi_batch_open(enc), 0);
    int32_t again[N_Q];
    int zero = 0;
    CHECK_EQ(mimi_batch_encode(enc, 1, &zero, slot_frame(0, 0), again), MIMI_OK);
    CHECK(memcmp(again, codes[0][0], sizeof again) == 0);
    CHECK_EQ(mimi_batch_reset(enc, 0), MIMI_OK);
    CHECK_EQ(mimi_batch_encode(enc, 1, &zero, slot_frame(0, 0), again), MIMI_OK);
    CHECK(memcmp(again, codes[0][0], sizeof again) == 0);
    mimi_batch_destroy(enc);
    mimi_batch_destroy(dec);
}

static void test_bad_lists(void) {
    struct mimi_batch_params bp;
    mimi_batch_params_default(&bp);
    bp.capacity = 2;
    int rc;
    struct mimi_batch *b = mimi_batch_create(model, &bp, &rc);
    CHECK(b != NULL);
    static float pcm[2 * FRAME];
    int32_t codes[2 * N_Q];
    int list[2] = {0, 0};
    CHECK_EQ(mimi_batch_encode(b, 1, list, pcm, codes), MIMI_EINVAL);  // not open
    CHECK_EQ(mimi_batch_open(b), 0);
    CHECK_EQ(mimi_batch_open(b), 1);
    CHECK_EQ(mimi_batch_encode(b, 2, list, pcm, codes), MIMI_EINVAL);  // listed twice
    printf("  duplicate slot: %s\n", mimi_batch_errmsg(b));
    list[1] = 5;
    CHECK_EQ(mimi_batch_encode(b, 2, list, pcm, codes), MIMI_EINVAL);  // out of range
    CHECK_EQ(mimi_batch_encode(b, 3, list, pcm, codes), MIMI_EINVAL);  // over capacity
    CHECK_EQ(mimi_batch_encode(b, 0, NULL, NULL, NULL), MIMI_OK);
    CHECK_EQ(mimi_batch_decode(b, 1, list, codes, pcm), MIMI_ESTATE);  // wrong direction
    pcm[7] = NAN;
    CHECK_EQ(mimi_batch_encode(b, 1, list, pcm, codes), MIMI_EINVAL);
    pcm[7] = 0.0f;
    // the first non-finite sample is named, wherever it falls in the blocks the check tests at once
    static const size_t at[] = {0, 255, 256, 257, FRAME - 1, FRAME, 2 * FRAME - 1};
    static const float bad[] = {NAN, INFINITY, -INFINITY};
    list[1] = 1;
    for (size_t i = 0; i < sizeof at / sizeof at[0]; i++) {
        char want[64];
        pcm[at[i]] = bad[i % 3];
        if (i + 1 < sizeof at / sizeof at[0]) pcm[at[i + 1]] = NAN;  // a later one is not the one named
        snprintf(want, sizeof want, "sample value %zu is NaN or infinite", at[i]);
        CHECK_EQ(mimi_batch_encode(b, 2, list, pcm, codes), MIMI_EINVAL);
        CHECK(strstr(mimi_batch_errmsg(b), want) != NULL);
        pcm[at[i]] = 0.0f;
        if (i + 1 < sizeof at / sizeof at[0]) pcm[at[i + 1]] = 0.0f;
    }
    CHECK_EQ(mimi_batch_reset(b, 9), MIMI_EINVAL);
    CHECK_EQ(mimi_batch_close(b, -1), MIMI_EINVAL);
    mimi_batch_destroy(b);
    bp.capacity = 0;
    CHECK(mimi_batch_create(model, &bp, &rc) == NULL);
    CHECK_EQ(rc, MIMI_EINVAL);
    bp.capacity = 1;
    bp.direction = 5;
    CHECK(mimi_batch_create(model, &bp, &rc) == NULL);
    // a decode batch refuses out-of-range codes before anything advances
    bp.direction = MIMI_DIRECTION_DECODE;
    b = mimi_batch_create(model, &bp, &rc);
    CHECK_EQ(mimi_batch_open(b), 0);
    for (int q = 0; q < N_Q; q++) codes[q] = q;
    codes[5] = 4096;
    CHECK_EQ(mimi_batch_decode(b, 1, list, codes, pcm), MIMI_EINVAL);
    mimi_batch_destroy(b);
    mimi_batch_destroy(NULL);
}

// ---- profile ----

struct prof {
    int ops, stages_seen, named;  // stages_seen: bit per stage of `stages`
    double us;
    const char *const *stages;
    int n_stages;
};

static void on_op(void *user, const char *op, const char *stage, double us) {
    struct prof *p = user;
    p->ops++;
    p->us += us;
    p->named += strcmp(op, "other") != 0;
    for (int i = 0; i < p->n_stages; i++)
        if (strcmp(stage, p->stages[i]) == 0) p->stages_seen |= 1 << i;
}

static double now_us(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return 1e6 * (double)t.tv_sec + 1e-3 * (double)t.tv_nsec;
}

// A profiled CPU step is an ordinary step (same outputs, the slots advance), and it reports its
// kernel calls under every stage of the codec, adding up to about the call's own time.
static void test_profile(void) {
    static const char *const enc_stages[] = {"enc.seanet", "enc.transformer", "enc.downsample", "enc.quantizer"};
    static const char *const dec_stages[] = {"dec.quantizer", "dec.upsample", "dec.transformer", "dec.seanet"};
    struct mimi_batch_params bp;
    mimi_batch_params_default(&bp);
    bp.capacity = 1;
    bp.n_codebooks = N_Q;
    struct mimi_batch *a = mimi_batch_create(model, &bp, NULL), *b = mimi_batch_create(model, &bp, NULL);
    bp.direction = MIMI_DIRECTION_DECODE;
    struct mimi_batch *da = mimi_batch_create(model, &bp, NULL), *db = mimi_batch_create(model, &bp, NULL);
    CHECK_EQ(mimi_batch_open(a), 0);
    CHECK_EQ(mimi_batch_open(b), 0);
    CHECK_EQ(mimi_batch_open(da), 0);
    CHECK_EQ(mimi_batch_open(db), 0);
    const int slot = 0;
    for (int f = 0; f < 2; f++) {
        int32_t ca[N_Q], cb[N_Q];
        static float pa[FRAME], pb[FRAME];
        struct prof pe = {.stages = enc_stages, .n_stages = 4}, pd = {.stages = dec_stages, .n_stages = 4};
        CHECK_EQ(mimi_batch_encode(a, 1, &slot, slot_frame(0, f), ca), MIMI_OK);
        double t0 = now_us();
        CHECK_EQ(mimi_batch_profile(b, 1, &slot, slot_frame(0, f), cb, on_op, &pe), MIMI_OK);
        const double enc_us = now_us() - t0;
        CHECK(memcmp(ca, cb, sizeof ca) == 0);
        CHECK_EQ(mimi_batch_decode(da, 1, &slot, ca, pa), MIMI_OK);
        t0 = now_us();
        CHECK_EQ(mimi_batch_profile(db, 1, &slot, ca, pb, on_op, &pd), MIMI_OK);
        const double dec_us = now_us() - t0;
        CHECK(memcmp(pa, pb, sizeof pa) == 0);
        printf("  cpu profile, frame %d: encode %d ops %.0f us of %.0f, decode %d ops %.0f us of %.0f\n", f,
               pe.ops, pe.us, enc_us, pd.ops, pd.us, dec_us);
        CHECK(pe.stages_seen == 15 && pd.stages_seen == 15);
        CHECK(pe.named > 20 && pd.named > 20);
        CHECK(pe.us <= enc_us * 1.01 && pe.us >= enc_us * 0.5);
        CHECK(pd.us <= dec_us * 1.01 && pd.us >= dec_us * 0.5);
    }
    mimi_batch_destroy(a);
    mimi_batch_destroy(b);
    mimi_batch_destroy(da);
    mimi_batch_destroy(db);
}

int main(int argc, char **argv) {
    test_init(argc, argv);
    load_inputs();
    test_encode_decode();
    test_bad_lists();
    test_profile();
    check_rows_in_place(model, clip, FRAME);
    free(clip);
    mimi_model_destroy(model);
    return test_summary();
}
