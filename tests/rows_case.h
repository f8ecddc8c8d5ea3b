/*
 * rows_case.h - the batch's own step rows (mimi_batch_input_rows, mimi_batch_output_rows),
 * checked on whichever backend the model runs: test_batch (CPU) and test_gpu (CUDA) include it.
 */
#ifndef MIMI_TEST_ROWS_CASE_H
#define MIMI_TEST_ROWS_CASE_H

#include <math.h>
#include <string.h>

#include "mimi.h"
#include "test.h"

// Three steps of 3 of 4 slots (a bucket with a padding row on CUDA) through an encode and a
// decode batch fed from the caller's buffers, and through a pair fed in place and collected with
// output NULL: the same codes and PCM bit for bit. Between the second and third step a NaN sample
// and an out-of-range code written in place are refused, by the asynchronous and the synchronous
// calls, and nothing advances (the third step still agrees).
static void check_rows_in_place(struct mimi_model *m, const float *clip, int frame) {
    enum { CAP = 4, N = 3, NQ = 8 };
    struct mimi_batch_params bp;
    mimi_batch_params_default(&bp);
    bp.capacity = CAP;
    bp.n_codebooks = NQ;
    struct mimi_batch *ea = mimi_batch_create(m, &bp, NULL), *eb = mimi_batch_create(m, &bp, NULL);
    bp.direction = MIMI_DIRECTION_DECODE;
    struct mimi_batch *da = mimi_batch_create(m, &bp, NULL), *db = mimi_batch_create(m, &bp, NULL);
    CHECK(ea && eb && da && db);
    if (!ea || !eb || !da || !db) return;
    for (int s = 0; s < CAP; s++) {
        CHECK_EQ(mimi_batch_open(ea), s);
        CHECK_EQ(mimi_batch_open(eb), s);
        CHECK_EQ(mimi_batch_open(da), s);
        CHECK_EQ(mimi_batch_open(db), s);
    }
    const int list[N] = {3, 0, 2};
    float *in = malloc(sizeof(float) * N * frame), *pa = malloc(sizeof(float) * N * frame);
    float *junk = malloc(sizeof(float) * N * frame);
    float *rows = mimi_batch_input_rows(eb);
    int32_t *code_rows = mimi_batch_input_rows(db);
    CHECK(in && pa && junk && rows && code_rows);
    if (!in || !pa || !junk || !rows || !code_rows) return;
    size_t codes_differ = 0, pcm_differ = 0;
    for (int step = 0; step < 3; step++) {
        int32_t ca[N * NQ], bad[N * NQ];
        for (int k = 0; k < N; k++) memcpy(in + (size_t)k * frame, clip + (size_t)(4 * k + step) * frame, sizeof(float) * frame);
        CHECK_EQ(mimi_batch_encode(ea, N, list, in, ca), MIMI_OK);
        CHECK_EQ(mimi_batch_decode(da, N, list, ca, pa), MIMI_OK);
        if (step == 2) {  // bad input in place: refused, nothing advances
            memcpy(rows, in, sizeof(float) * N * frame);
            rows[(size_t)frame + 7] = NAN;
            CHECK_EQ(mimi_batch_submit_encode(eb, N, list, rows), MIMI_EINVAL);
            CHECK_EQ(mimi_batch_encode(eb, N, list, rows, bad), MIMI_EINVAL);
            memcpy(code_rows, ca, sizeof ca);
            code_rows[NQ + 1] = 1 << 20;
            CHECK_EQ(mimi_batch_submit_decode(db, N, list, code_rows), MIMI_EINVAL);
            CHECK_EQ(mimi_batch_decode(db, N, list, code_rows, junk), MIMI_EINVAL);
        }
        memcpy(rows, in, sizeof(float) * N * frame);
        CHECK_EQ(mimi_batch_submit_encode(eb, N, list, rows), MIMI_OK);
        CHECK_EQ(mimi_batch_collect(eb, NULL), MIMI_OK);
        const int32_t *cb = mimi_batch_output_rows(eb);
        codes_differ += memcmp(cb, ca, sizeof ca) != 0;
        memcpy(code_rows, cb, sizeof ca);
        CHECK_EQ(mimi_batch_submit_decode(db, N, list, code_rows), MIMI_OK);
        CHECK_EQ(mimi_batch_collect(db, NULL), MIMI_OK);
        pcm_differ += memcmp(mimi_batch_output_rows(db), pa, sizeof(float) * N * frame) != 0;
    }
    printf("  the batch's own rows (%s): %zu of 3 steps' codes differ, %zu PCM\n", mimi_model_backend_name(m),
           codes_differ, pcm_differ);
    CHECK_EQ(codes_differ, 0);
    CHECK_EQ(pcm_differ, 0);
    CHECK(mimi_batch_input_rows(NULL) == NULL && mimi_batch_output_rows(NULL) == NULL);
    free(in), free(pa), free(junk);
    mimi_batch_destroy(ea), mimi_batch_destroy(eb), mimi_batch_destroy(da), mimi_batch_destroy(db);
}

#endif
