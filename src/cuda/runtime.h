/*
 * runtime.h - the CUDA backend's model object, shared by cuda_backend.cu (which creates it) and
 * cuda_batch.cu (which reads the weights through it). C-compatible; never installed.
 */
#ifndef MIMI_CUDA_RUNTIME_H
#define MIMI_CUDA_RUNTIME_H

#include "plan.h"

// A model's weights on one device, uploaded once and shared by every batch of the model.
struct mimi_cuda_model {
    int device;
    float *weights;        // one device allocation holding every tensor
    size_t n_floats;
    struct gpu_weights w;  // pointers into `weights`
    struct gemm_tuning *tuning;  // the whole-signal products' algorithms, by shape (gemm_tune.cu)
    struct offline_kept *kept;   // whole-signal lanes kept between calls (cuda_offline.cu)
};

// The model's kept whole-signal lanes (cuda_offline.cu): new, empty, listed with the other
// models' of the process; freed with the lanes.
struct offline_kept *mimi_cuda_kept_new(int device);
void mimi_cuda_kept_free(struct offline_kept *k);
// Frees the kept lanes of every model on `device`; returns how many.
int mimi_cuda_offline_trim_device(int device);

#endif
