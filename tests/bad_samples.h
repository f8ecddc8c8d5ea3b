/*
 * bad_samples.h - a check shared by the tests of large batch steps (test_gpu, test_kernels):
 * NaN and infinity planted in a step wide enough that the model's threads split the check of
 * its samples are refused, naming the first bad sample whichever thread's share it falls in.
 * Include after test.h and mimi.h.
 */
#ifndef MIMI_TEST_BAD_SAMPLES_H
#define MIMI_TEST_BAD_SAMPLES_H

#define BAD_SAMPLES_SLOTS 160  // 160 frames of 1920 floats: over the 1 MB a copy is split from

// Encode steps of slots 0 .. BAD_SAMPLES_SLOTS - 1 (open in `enc`) over finite `pcm`
// (BAD_SAMPLES_SLOTS frames, restored on return), each with bad values planted; `codes` is the
// step's output room.
static inline void check_bad_samples(struct mimi_batch *enc, float *pcm, int32_t *codes) {
    enum { N = BAD_SAMPLES_SLOTS, FRAME_SIZE = 1920 };
    int list[N];
    for (int s = 0; s < N; s++) list[s] = s;
    // the one named, and a later one in another share that is not
    static const size_t at[][2] = {{100 * FRAME_SIZE + 3, 0}, {10 * FRAME_SIZE + 1, 100 * FRAME_SIZE + 3},
                                   {N * FRAME_SIZE - 1, 0}};
    for (size_t k = 0; k < sizeof at / sizeof at[0]; k++) {
        char want[64];
        const float keep0 = pcm[at[k][0]], keep1 = pcm[at[k][1]];
        pcm[at[k][0]] = NAN;
        if (at[k][1]) pcm[at[k][1]] = INFINITY;
        snprintf(want, sizeof want, "sample value %zu is NaN or infinite", at[k][0]);
        CHECK_EQ(mimi_batch_encode(enc, N, list, pcm, codes), MIMI_EINVAL);
        CHECK(strstr(mimi_batch_errmsg(enc), want) != NULL);
        pcm[at[k][0]] = keep0;
        if (at[k][1]) pcm[at[k][1]] = keep1;
    }
}

#endif
