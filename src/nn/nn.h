/*
 * nn.h - the codec's layers as streaming functions over per-stream memory.
 *
 * Every function advances one stream by one call's worth of input and keeps what the next call
 * needs (conv histories, transposed-conv tails, attention caches) in memory the caller laid out
 * with the matching *_layout function. Activations are channel-major (C, T) except inside the
 * transformer, which works time-major (T, d).
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

// Floats of scratch a call with T input steps needs.
size_t conv_work_floats(const struct mimi_conv *c, int T);

// Conv1d over [history | x]: x (c_in, T), T a multiple of stride -> y (c_out, T / stride).
void conv1d_stream(const struct mimi_conv *c, struct conv_mem *m, const float *x, int T, float *y,
                   float *work);

// ConvTranspose1d: x (c_in, T) -> y (c_out, T * stride); the tail past T * stride is carried.
void convtr_stream(const struct mimi_conv *c, struct conv_mem *m, const float *x, int T, float *y,
                   float *work);

// ---- SEANet (seanet.c) ----

struct seanet_mem {
    struct conv_mem conv[MIMI_MAX_SEANET_LAYERS];
};

struct seanet_scratch {
    float *act[2];  // ping-pong activations, each (max C*T)
    float *res[2];  // resblock branch buffers
    float *work;    // conv workspace
};

// Lays out the stream memory and scratch for T_in input steps per call.
void seanet_layout(struct arena *a, const struct seanet *s, int T_in, struct seanet_mem *m,
                   struct seanet_scratch *sc);
void seanet_reset(const struct seanet *s, struct seanet_mem *m);

// Runs the stack over x (c_in, T_in); returns a pointer (inside the scratch) to the output
// (c_out, T_out) and stores T_out.
float *seanet_forward(const struct seanet *s, struct seanet_mem *m, struct seanet_scratch *sc,
                      const float *x, int T_in, int *T_out);

// ---- transformer (transformer.c) ----

struct transformer_mem {
    float *keys[16], *values[16];  // per layer (capacity, d)
    int64_t *positions;            // (capacity) absolute position in each slot, -1 = empty
    int capacity;                  // slots in the ring
    int64_t next_position;         // position of the next step
};

struct transformer_scratch {
    float *x, *h, *qkv, *att, *ff, *scores;
};

// capacity: ring slots (context for the reference's ring, context + steps for an exact window).
void transformer_layout(struct arena *a, const struct transformer *t, int steps, int capacity,
                        struct transformer_mem *m, struct transformer_scratch *sc);
void transformer_reset(const struct transformer *t, struct transformer_mem *m);

// Runs `steps` new positions: io (d, steps) channel-major, updated in place.
void transformer_forward(const struct transformer *t, struct transformer_mem *m,
                         struct transformer_scratch *sc, float *io, int steps);

// ---- quantizer (quantizer.c) ----

// Encodes one latent (latent) into n codes. scratch: (2*dim + bins) floats.
void quantizer_encode(const struct quantizer *q, const float *latent, int n, int32_t *codes,
                      float *scratch);

// Decodes n codes (checked by the caller) into one latent (latent). scratch: (dim + latent) floats.
void quantizer_decode(const struct quantizer *q, const int32_t *codes, int n, float *latent,
                      float *scratch);

#endif
