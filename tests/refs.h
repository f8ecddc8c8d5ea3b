/*
 * refs.h - reading the reference vectors (the safetensors files in tests/data) in tests: a named tensor of
 * one clip as floats or int32, exiting the test with a message when it is missing.
 */
#ifndef MIMI_TEST_REFS_H
#define MIMI_TEST_REFS_H

#include <stdio.h>
#include <stdlib.h>

#include "safetensors.h"

// Opens a reference file under tests/data (exits on failure).
static inline void refs_open(struct st_file *refs, const char *file) {
    char path[1024], err[256];
    snprintf(path, sizeof path, "%s/%s", MIMI_TEST_DATA, file);
    if (st_open(refs, path, err, sizeof err)) {
        fprintf(stderr, "%s: %s\n", path, err);
        exit(1);
    }
}

static inline const struct st_tensor *refs_find(const struct st_file *refs, const char *clip,
                                                const char *what) {
    char name[256];
    snprintf(name, sizeof name, "%s.%s", clip, what);
    const struct st_tensor *t = st_find(refs, name);
    if (!t) {
        fprintf(stderr, "missing reference tensor %s\n", name);
        exit(1);
    }
    return t;
}

// `clip`.`what` as a new float array of *n values (caller frees).
static inline float *refs_f32(const struct st_file *refs, const char *clip, const char *what,
                              int64_t *n) {
    const struct st_tensor *t = refs_find(refs, clip, what);
    float *out = malloc(sizeof(float) * (size_t)t->n_elements);
    if (!out || st_to_f32(t, out)) exit(1);
    if (n) *n = t->n_elements;
    return out;
}

// The input PCM of a clip of the default reference file (caller frees).
static inline float *refs_clip_pcm(const char *clip, int64_t *n) {
    struct st_file refs;
    refs_open(&refs, "refs_seed0.safetensors");
    float *pcm = refs_f32(&refs, clip, "pcm_in", n);
    st_close(&refs);
    return pcm;
}

#endif
