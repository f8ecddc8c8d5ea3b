/*
 * nn.h - the codec's layers as streaming functions over per-stream memory.
 *
 * Every function advances one stream by one call's worth of input and keeps what the next call
 * needs (conv histories, transposed-conv tails, attention caches) in memory the caller laid out
 * with the matching *_layout function. Every function runs n streams ("slots") at once so that each
 * weight is read once per call for all of them: activations are (C, n, T), channel-major with the
 * slots side by side along time, and `mems` lists the n slots' memories of that layer. Inside the
 * transformer rows are time-major (n * T, d).
 */
#ifndef MIMI_NN_H
#define MIMI_NN_H

#include "internal.h"

// ---- convolutions (conv.c) ----

// Streaming memory of one conv: the history (c_in, kernel - stride) of a Conv1d, or the
// carried tail without bias (c_out, kernel - stride) of a ConvTranspose1d.
struct conv_mem {
    float *buf;
    int first;  // 1 until the first call (replicate-first padding)
};

void conv_mem_layout(struct arena *a, const struct mimi_conv *c, struct conv_mem *m);
void conv_mem_reset(const struct mimi_conv *c, struct conv_mem *m);

// Floats of scratch a call over n slots of T input steps needs.
size_t conv_work_floats(const struct mimi_conv *c, int n, int T);

// Conv1d over [history | x] per slot: x (c_in, n, T), T a multiple of stride
// -> y (c_out, n, T / stride).
void conv1d_stream(const struct mimi_conv *c, struct conv_mem **mems, int n, const float *x, int T,
                   float *y, float *work);

// ConvTranspose1d: x (c_in, n, T) -> y (c_out, n, T * stride); each slot carries its tail.
void convtr_stream(const struct mimi_conv *c, struct conv_mem **mems, int n, const float *x, int T,
                   float *y, float *work);

// ---- SEANet (seanet.c) ----

struct seanet_mem {
    struct conv_mem conv[MIMI_MAX_SEANET_LAYERS];
};

struct seanet_scratch {
    float *act[2];            // ping-pong activations, each (max C * n * T)
    float *res[2];            // resblock branch buffers
    float *work;              // conv workspace
    struct conv_mem **mems;   // (n) one layer's memories, gathered per call
};

// Lays out one slot's memory.
void seanet_mem_layout(struct arena *a, const struct seanet *s, struct seanet_mem *m);
// Lays out scratch for up to n slots of T_in input steps per call.
void seanet_scratch_layout(struct arena *a, const struct seanet *s, int n, int T_in,
                           struct seanet_scratch *sc);
void seanet_reset(const struct seanet *s, struct seanet_mem *m);

// Runs the stack over x (c_in, n, T_in) for the slots `mems`; returns a pointer (inside the
// scratch) to the output (c_out, n, T_out) and stores T_out.
float *seanet_forward(const struct seanet *s, struct seanet_mem **mems, int n,
                      struct seanet_scratch *sc, const float *x, int T_in, int *T_out);

// ---- transformer (transformer.c) ----

struct transformer_mem {
    float *keys[16], *values[16];  // per layer (capacity, d)
    int64_t *positions;            // (capacity) absolute position in each slot, -1 = empty
    int capacity;                  // slots in the ring
    int64_t next_position;         // position of the next step
};

struct transformer_scratch {
    float *x, *h, *qkv, *att, *ff, *scores;  // rows (n * steps, .), scores (capacity)
};

// Lays out one slot's cache; capacity = ring slots (context for the reference's ring,
// context + steps for an exact window).
void transformer_mem_layout(struct arena *a, const struct transformer *t, int capacity,
                            struct transformer_mem *m);
// Lays out scratch for up to n slots of `steps` steps and rings of `capacity`.
void transformer_scratch_layout(struct arena *a, const struct transformer *t, int n, int steps,
                                int capacity, struct transformer_scratch *sc);
void transformer_reset(const struct transformer *t, struct transformer_mem *m);

// Runs `steps` new positions of n slots: io (d, n, steps), updated in place.
void transformer_forward(const struct transformer *t, struct transformer_mem **mems, int n,
                         struct transformer_scratch *sc, float *io, int steps);

// ---- quantizer (quantizer.c) ----

// Floats of scratch either direction needs for n slots.
size_t quantizer_work_floats(const struct quantizer *q, int n);

// Encodes n latents (latent, n) into codes (n, n_codebooks), slot-major.
void quantizer_encode(const struct quantizer *q, const float *latent, int n, int n_codebooks,
                      int32_t *codes, float *work);

// Decodes codes (n, n_codebooks) (checked by the caller) into latents (latent, n).
void quantizer_decode(const struct quantizer *q, const int32_t *codes, int n, int n_codebooks,
                      float *latent, float *work);

#endif
