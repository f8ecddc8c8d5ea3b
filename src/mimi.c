/*
 * mimi.c - library-level entry points: version, error strings, parameter defaults, model
 * loading and geometry queries. The streams live in stream.c, the binding in model.c.
 */
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "gpu.h"

// ---- library ----

const char *mimi_version_string(void) { return "0.1.0"; }

const char *mimi_strerror(int code) {
    switch (code) {
    case MIMI_OK: return "success";
    case MIMI_EINVAL: return "invalid argument";
    case MIMI_ENOMEM: return "out of memory";
    case MIMI_EIO: return "input/output error";
    case MIMI_EFORMAT: return "malformed or unsupported model file";
    case MIMI_EUNSUPPORTED: return "not supported";
    case MIMI_EBUFFER: return "output buffer too small";
    case MIMI_EFULL: return "no free slot";
    case MIMI_EDEVICE: return "compute device failure";
    case MIMI_ESTATE: return "object in a failed or wrong state";
    default: return "unknown error";
    }
}

// ---- model ----

void mimi_model_params_default(struct mimi_model_params *params) {
    if (!params) return;
    memset(params, 0, sizeof *params);
    params->isa = MIMI_ISA_AUTO;
    params->n_threads = 1;
    params->backend = MIMI_BACKEND_AUTO;
    params->device = 0;
    params->precision = MIMI_PRECISION_STRICT;
}

static struct mimi_model *model_new(const struct mimi_model_params *params, int *err) {
    struct mimi_model_params defaults;
    if (!params) {
        mimi_model_params_default(&defaults);
        params = &defaults;
    }
    if (params->n_threads < 1 || params->n_threads > 256 || params->isa < MIMI_ISA_AUTO ||
        params->isa > MIMI_ISA_NEON ||
        (params->weights != MIMI_WEIGHTS_F32 && params->weights != MIMI_WEIGHTS_BF16)) {
        if (err) *err = MIMI_EINVAL;
        return NULL;
    }
    if (params->backend < MIMI_BACKEND_AUTO || params->backend > MIMI_BACKEND_CUDA ||
        params->device < 0 ||
        params->precision < MIMI_PRECISION_STRICT || params->precision > MIMI_PRECISION_FAST_INT8_KV) {
        if (err) *err = MIMI_EINVAL;
        return NULL;
    }
    struct mimi_model *m = calloc(1, sizeof *m);
    if (!m) {
        if (err) *err = MIMI_ENOMEM;
        return NULL;
    }
    m->log = params->log;
    m->log_user = params->log_user;
    m->isa = params->isa;
    m->n_threads = params->n_threads;
    m->backend = params->backend == MIMI_BACKEND_CUDA ? MIMI_BACKEND_CUDA : MIMI_BACKEND_CPU;
    m->device = params->device;
    m->precision = params->precision;
    m->weights = params->weights;
    return m;
}

// Binds an opened file; frees the model and reports on failure.
static struct mimi_model *model_finish(struct mimi_model *m, int rc, const char *what,
                                       const char *why, int *err) {
    if (rc == 0) rc = mimi_model_bind(m);
    else mimi_log(m, MIMI_LOG_ERROR, "%s: %s", what, why);
    if (rc == 0 && m->backend == MIMI_BACKEND_CUDA) rc = mimi_cuda_model_init(m);
    if (rc != 0) {
        mimi_model_free(m);
        if (err) *err = rc;
        return NULL;
    }
    mimi_log(m, MIMI_LOG_INFO, "%s: %s naming, %d codebooks, %lld parameters", what, m->naming,
             m->quantizer.n_q, (long long)m->n_params);
    if (err) *err = MIMI_OK;
    return m;
}

struct mimi_model *mimi_model_load(const char *path, const struct mimi_model_params *params,
                                   int *err) {
    if (!path) {
        if (err) *err = MIMI_EINVAL;
        return NULL;
    }
    struct mimi_model *m = model_new(params, err);
    if (!m) return NULL;
    char why[MIMI_ERRMSG_LEN] = "";
    int rc = st_open(&m->file, path, why, sizeof why);
    return model_finish(m, rc, path, why, err);
}

struct mimi_model *mimi_model_load_memory(const void *data, size_t size,
                                          const struct mimi_model_params *params, int *err) {
    if (!data) {
        if (err) *err = MIMI_EINVAL;
        return NULL;
    }
    struct mimi_model *m = model_new(params, err);
    if (!m) return NULL;
    char why[MIMI_ERRMSG_LEN] = "";
    int rc = st_open_memory(&m->file, data, size, why, sizeof why);
    return model_finish(m, rc, "model image", why, err);
}

void mimi_model_destroy(struct mimi_model *model) { mimi_model_free(model); }

void mimi_model_trim(struct mimi_model *model) {
    if (model && model->cuda) mimi_cuda_offline_trim(model);
}

int mimi_model_sample_rate(const struct mimi_model *m) { return m ? m->sample_rate : MIMI_EINVAL; }
int mimi_model_frame_size(const struct mimi_model *m) { return m ? m->frame_size : MIMI_EINVAL; }
int mimi_model_max_codebooks(const struct mimi_model *m) { return m ? m->quantizer.n_q : MIMI_EINVAL; }
int mimi_model_codebook_size(const struct mimi_model *m) { return m ? m->quantizer.bins : MIMI_EINVAL; }
const char *mimi_model_naming(const struct mimi_model *m) { return m ? m->naming : ""; }
const char *mimi_model_family(const struct mimi_model *m) { return m ? m->family : ""; }
int mimi_model_latent_size(const struct mimi_model *m) {
    return !m ? MIMI_EINVAL : m->quantizer.n_q ? 0 : m->frame_dim;
}
int64_t mimi_model_parameter_count(const struct mimi_model *m) { return m ? m->n_params : MIMI_EINVAL; }

int64_t mimi_frames_for_samples(const struct mimi_model *m, int64_t n_samples) {
    if (!m || n_samples < 0) return MIMI_EINVAL;
    return (n_samples + m->frame_size - 1) / m->frame_size;
}
