/*
 * codes_file.c - codes and latents files (.npy, .safetensors with metadata), frame streams and
 * the model file hash (see codes_file.h).
 *
 * The safetensors reader is src/safetensors.c (bounded, distrusting); it has already checked that
 * the metadata is one flat {"string": "string"} object when the small parser here walks it.
 */
#include "codes_file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fdio.h"
#include "mimi.h"
#include "npy.h"
#include "safetensors.h"


// ---- XXH64 ----

#define P1 0x9E3779B185EBCA87ULL
#define P2 0xC2B2AE3D27D4EB4FULL
#define P3 0x165667B19E3779F9ULL
#define P4 0x85EBCA77C2B2AE63ULL
#define P5 0x27D4EB2F165667C5ULL

static uint64_t rotl64(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }

static uint64_t rd64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

static uint32_t rd32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t xxh_round(uint64_t acc, uint64_t input) {
    acc += input * P2;
    return rotl64(acc, 31) * P1;
}

static uint64_t xxh_merge(uint64_t acc, uint64_t v) {
    acc ^= xxh_round(0, v);
    return acc * P1 + P4;
}

uint64_t xxh64(const void *data, size_t n, uint64_t seed) {
    const uint8_t *p = data, *end = p + n;
    uint64_t h;
    if (n >= 32) {
        uint64_t v1 = seed + P1 + P2, v2 = seed + P2, v3 = seed, v4 = seed - P1;
        for (; end - p >= 32; p += 32) {
            v1 = xxh_round(v1, rd64(p));
            v2 = xxh_round(v2, rd64(p + 8));
            v3 = xxh_round(v3, rd64(p + 16));
            v4 = xxh_round(v4, rd64(p + 24));
        }
        h = rotl64(v1, 1) + rotl64(v2, 7) + rotl64(v3, 12) + rotl64(v4, 18);
        h = xxh_merge(xxh_merge(xxh_merge(xxh_merge(h, v1), v2), v3), v4);
    } else {
        h = seed + P5;
    }
    h += (uint64_t)n;
    for (; end - p >= 8; p += 8) h = rotl64(h ^ xxh_round(0, rd64(p)), 27) * P1 + P4;
    if (end - p >= 4) {
        h = rotl64(h ^ (uint64_t)rd32(p) * P1, 23) * P2 + P3;
        p += 4;
    }
    for (; p < end; p++) h = rotl64(h ^ *p * P5, 11) * P1;
    h ^= h >> 33;
    h *= P2;
    h ^= h >> 29;
    h *= P3;
    return h ^ (h >> 32);
}

int file_xxh64(const char *path, char hex[17], char *errbuf, size_t errlen) {
    hex[0] = '\0';
    int fd = open(path, O_RDONLY);
    if (fd < 0) return fd_fail(errbuf, errlen, MIMI_EIO, "%s: cannot open (%s)", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return fd_fail(errbuf, errlen, MIMI_EIO, "%s: not a regular file", path);
    }
    uint64_t h;
    if (st.st_size == 0) {
        h = xxh64("", 0, 0);
    } else {
        void *m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (m == MAP_FAILED) {
            close(fd);
            return fd_fail(errbuf, errlen, MIMI_EIO, "%s: cannot map (%s)", path, strerror(errno));
        }
        h = xxh64(m, (size_t)st.st_size, 0);
        munmap(m, (size_t)st.st_size);
    }
    close(fd);
    snprintf(hex, 17, "%016llx", (unsigned long long)h);
    return 0;
}

// ---- metadata ----

const char *codes_meta_get(const struct codes_meta *m, const char *key) {
    for (int i = 0; i < m->n; i++)
        if (strcmp(m->key[i], key) == 0) return m->value[i];
    return NULL;
}

void codes_meta_set(struct codes_meta *m, const char *key, const char *value) {
    int i = 0;
    while (i < m->n && strcmp(m->key[i], key) != 0) i++;
    if (i == CODES_MAX_META) return;
    if (i == m->n) m->n++;
    snprintf(m->key[i], sizeof m->key[i], "%s", key);
    snprintf(m->value[i], sizeof m->value[i], "%s", value);
}

// Reads a JSON string at *p into out (cut to len - 1 bytes; \u escapes outside ASCII become
// '?'). Returns 0, or -1 on malformed text.
static int json_string(const char **p, char *out, size_t len) {
    const char *s = *p;
    size_t k = 0;
    if (*s++ != '"') return -1;
    while (*s && *s != '"') {
        char c = *s++;
        if (c == '\\') {
            c = *s++;
            switch (c) {
            case 'n': c = '\n'; break;
            case 't': c = '\t'; break;
            case 'r': c = '\r'; break;
            case 'b': c = '\b'; break;
            case 'f': c = '\f'; break;
            case 'u': {
                unsigned v = 0;
                for (int i = 0; i < 4; i++) {
                    char h = *s++;
                    v = v * 16 + (unsigned)(h >= '0' && h <= '9' ? h - '0' : (h | 32) - 'a' + 10);
                    if (!h) return -1;
                }
                c = v < 0x80 ? (char)v : '?';
                break;
            }
            case '\0': return -1;
            default: break;  // \" \\ \/
            }
        }
        if (k + 1 < len) out[k++] = c;
    }
    if (*s != '"') return -1;
    out[k] = '\0';
    *p = s + 1;
    return 0;
}

static void skip_ws(const char **p) {
    while (**p == ' ' || **p == '\t' || **p == '\n' || **p == '\r') (*p)++;
}

static int parse_meta(const char *json, struct codes_meta *m) {
    const char *p = json;
    char key[64], value[256];
    skip_ws(&p);
    if (*p++ != '{') return -1;
    skip_ws(&p);
    if (*p == '}') return 0;
    for (;;) {
        skip_ws(&p);
        if (json_string(&p, key, sizeof key)) return -1;
        skip_ws(&p);
        if (*p++ != ':') return -1;
        skip_ws(&p);
        if (json_string(&p, value, sizeof value)) return -1;
        codes_meta_set(m, key, value);
        skip_ws(&p);
        if (*p == '}') return 0;
        if (*p++ != ',') return -1;
    }
}

// Appends `s` to out as a JSON string.
static void json_put(char *out, size_t len, const char *s) {
    size_t k = strlen(out);
    if (k + 1 < len) out[k++] = '"';
    for (; *s && k + 8 < len; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') {
            out[k++] = '\\';
            out[k++] = (char)c;
        } else if (c < 0x20) {
            k += (size_t)snprintf(out + k, len - k, "\\u%04x", c);
        } else {
            out[k++] = (char)c;
        }
    }
    if (k + 1 < len) out[k++] = '"';
    out[k] = '\0';
}

// ---- codes and latents files ----

const char *frame_type_name(enum frame_type type) {
    return type == FRAME_LATENTS ? "latents" : "codes";
}

enum codes_kind codes_kind_from_path(const char *path) {
    size_t n = strlen(path);
    if (n > 4 && strcasecmp(path + n - 4, ".npy") == 0) return CODES_NPY;
    if (n > 12 && strcasecmp(path + n - 12, ".safetensors") == 0) return CODES_SAFETENSORS;
    return CODES_NONE;
}

const int32_t *codes_i32(const struct codes *c) {
    return c->type == FRAME_CODES ? (const int32_t *)c->data : NULL;
}

const float *codes_f32(const struct codes *c) {
    return c->type == FRAME_LATENTS ? (const float *)c->data : NULL;
}

void codes_frame(const struct codes *c, int64_t f, int rows, void *frame) {
    const char *src = c->data;
    for (int q = 0; q < rows; q++)
        memcpy((char *)frame + 4 * q, src + 4 * ((int64_t)q * c->n_frames + f), 4);
}

void codes_free(struct codes *c) {
    free(c->data);
    c->data = NULL;
}

// The dtype of a .npy file, from its header text ("" when it names none of those read here).
static void npy_dtype(const char *path, char out[8]) {
    char head[256] = "";
    FILE *f = fopen(path, "rb");
    if (f) {
        size_t n = fread(head, 1, sizeof head - 1, f);
        head[n] = '\0';
        for (size_t i = 0; i < n; i++)
            if (!head[i]) head[i] = ' ';
        fclose(f);
    }
    static const char *const names[][2] = {{"<i2", "int16"}, {"<i4", "int32"}, {"<i8", "int64"},
                                           {"<f4", "float32"}, {"<f8", "float64"}};
    out[0] = '\0';
    for (int i = 0; i < 5; i++)
        if (strstr(head, names[i][0])) snprintf(out, 8, "%s", names[i][1]);
}

static int read_npy(const char *path, struct codes *c, char *errbuf, size_t errlen) {
    int64_t shape[NPY_MAX_DIMS] = {0};
    int rc;
    npy_dtype(path, c->dtype);
    if (c->dtype[0] == 'f') {
        int n_dims = 0;
        float *data = NULL;
        if ((rc = npy_read_f32(path, &data, &n_dims, shape, errbuf, errlen))) return rc;
        c->data = data;
        c->type = FRAME_LATENTS;
        if (n_dims != 2) {
            codes_free(c);
            return fd_fail(errbuf, errlen, MIMI_EFORMAT, "%s: a %d-D float array, expected latents "
                        "of shape [latent size, frames]", path, n_dims);
        }
    } else {
        int32_t *data = NULL;
        if ((rc = npy_read_i32_2d(path, &data, shape, errbuf, errlen))) return rc;
        c->data = data;
        c->type = FRAME_CODES;
    }
    if (shape[0] > 1 << 20) {
        codes_free(c);
        return fd_fail(errbuf, errlen, MIMI_EFORMAT, "%s: %lld rows is not a %s array", path,
                    (long long)shape[0], frame_type_name(c->type));
    }
    c->rows = (int)shape[0];
    c->n_frames = shape[1];
    c->kind = CODES_NPY;
    return 0;
}

static int read_st(const char *path, struct codes *c, char *errbuf, size_t errlen) {
    struct st_file f;
    memset(&f, 0, sizeof f);
    char why[1024];
    int rc = st_open(&f, path, why, sizeof why);
    if (rc) {
        if (strncmp(why, path, strlen(path)) == 0) return fd_fail(errbuf, errlen, rc, "%s", why);
        return fd_fail(errbuf, errlen, rc, "%s: %s", path, why);
    }
    const struct st_tensor *t = st_find(&f, "codes");
    c->type = FRAME_CODES;
    if (!t && (t = st_find(&f, "latents"))) c->type = FRAME_LATENTS;
    const char *name = frame_type_name(c->type);
    int is_float = t && (t->dtype == ST_F32 || t->dtype == ST_F16 || t->dtype == ST_BF16 ||
                         t->dtype == ST_F64);
    int is_int = t && (t->dtype == ST_I16 || t->dtype == ST_I32 || t->dtype == ST_I64);
    if (!t) {
        rc = fd_fail(errbuf, errlen, MIMI_EFORMAT, "%s: not a codes file (no tensor \"codes\" or "
                  "\"latents\"; %d other tensors: a model?)", path, f.n_tensors);
    } else if (t->n_dims != 2) {
        rc = fd_fail(errbuf, errlen, MIMI_EFORMAT, "%s: tensor \"%s\" has %d dimensions, expected 2",
                  path, name, t->n_dims);
    } else if (c->type == FRAME_CODES ? !is_int : !is_float) {
        rc = fd_fail(errbuf, errlen, MIMI_EFORMAT, "%s: tensor \"%s\" is %s, expected %s", path,
                  name, st_dtype_name(t->dtype), c->type == FRAME_CODES ? "I16 or I32" : "F32");
    } else if (!(c->data = malloc(t->n_elements ? (size_t)t->n_elements * 4 : 1))) {
        rc = fd_fail(errbuf, errlen, MIMI_ENOMEM, "%s: out of memory", path);
    } else if (c->type == FRAME_CODES ? st_to_i32(t, c->data) : st_to_f32(t, c->data)) {
        rc = fd_fail(errbuf, errlen, MIMI_EFORMAT, "%s: a code does not fit in 32 bits", path);
    } else if (t->shape[0] > 1 << 20) {
        rc = fd_fail(errbuf, errlen, MIMI_EFORMAT, "%s: %lld rows is not a %s array", path,
                  (long long)t->shape[0], name);
    } else if (f.metadata_json && parse_meta(f.metadata_json, &c->meta)) {
        rc = fd_fail(errbuf, errlen, MIMI_EFORMAT, "%s: unreadable metadata", path);
    } else {
        c->rows = (int)t->shape[0];
        c->n_frames = t->shape[1];
        c->kind = CODES_SAFETENSORS;
        static const char *const names[] = {[ST_I16] = "int16", [ST_I32] = "int32",
                                            [ST_I64] = "int64", [ST_F32] = "float32",
                                            [ST_F16] = "float16", [ST_BF16] = "bfloat16",
                                            [ST_F64] = "float64"};
        snprintf(c->dtype, sizeof c->dtype, "%s", names[t->dtype] ? names[t->dtype] : "?");
    }
    if (rc) codes_free(c);
    st_close(&f);
    return rc;
}

int codes_read(const char *path, struct codes *c, char *errbuf, size_t errlen) {
    memset(c, 0, sizeof *c);
    unsigned char magic[16] = {0};
    FILE *fp = fopen(path, "rb");
    if (!fp) return fd_fail(errbuf, errlen, MIMI_EIO, "%s: cannot open (%s)", path, strerror(errno));
    size_t got = fread(magic, 1, sizeof magic, fp);
    fclose(fp);
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode))
        return fd_fail(errbuf, errlen, MIMI_EIO, "%s: is a directory", path);
    if (got >= 6 && memcmp(magic, "\x93NUMPY", 6) == 0) return read_npy(path, c, errbuf, errlen);
    // safetensors: an 8-byte little-endian header length, then a JSON object
    if (got >= 9 && magic[8] == '{' && rd64(magic) < (uint64_t)st.st_size)
        return read_st(path, c, errbuf, errlen);
    return fd_fail(errbuf, errlen, MIMI_EFORMAT, "%s: not a codes file (expected .npy or .safetensors)",
                path);
}

int codes_write(const char *path, enum frame_type type, const void *data, int rows,
                int64_t n_frames, const struct codes_meta *meta, char *errbuf, size_t errlen) {
    enum codes_kind kind = codes_kind_from_path(path);
    if (kind == CODES_NPY) {
        if (type == FRAME_CODES)
            return npy_write_i32_2d(path, data, rows, n_frames, errbuf, errlen);
        int64_t shape[2] = {rows, n_frames};
        return npy_write_f32(path, data, 2, shape, errbuf, errlen);
    }
    if (kind != CODES_SAFETENSORS)
        return fd_fail(errbuf, errlen, MIMI_EINVAL, "%s: name %s files .npy or .safetensors", path,
                    frame_type_name(type));
    size_t n = (size_t)rows * (size_t)n_frames;
    uint8_t *le = malloc(n ? n * 4 : 1);
    char *json = malloc(CODES_MAX_META * 700 + 8);
    if (!le || !json) {
        free(le);
        free(json);
        return fd_fail(errbuf, errlen, MIMI_ENOMEM, "%s: out of memory", path);
    }
    for (size_t i = 0; i < n; i++) {  // int32 or float32: 4 bytes, little-endian
        uint32_t u;
        memcpy(&u, (const char *)data + 4 * i, 4);
        for (int b = 0; b < 4; b++) le[4 * i + (size_t)b] = (uint8_t)(u >> (8 * b));
    }
    strcpy(json, "{");
    for (int i = 0; meta && i < meta->n; i++) {
        if (i) strcat(json, ",");
        json_put(json, CODES_MAX_META * 700, meta->key[i]);
        strcat(json, ":");
        json_put(json, CODES_MAX_META * 700, meta->value[i]);
    }
    strcat(json, "}");
    struct st_write_tensor t = {.name = frame_type_name(type),
                                .dtype = type == FRAME_CODES ? ST_I32 : ST_F32, .n_dims = 2,
                                .shape = {rows, n_frames}, .data = le};
    char why[1024];
    int rc = st_write(path, &t, 1, json, why, sizeof why);
    if (rc) {
        size_t k = strlen(path);
        if (strncmp(why, path, k) == 0) fd_fail(errbuf, errlen, rc, "%s", why);
        else fd_fail(errbuf, errlen, rc, "%s: %s", path, why);
    }
    free(le);
    free(json);
    return rc;
}

// ---- frame streams ----

int codes_stream_put(int fd, int text, enum frame_type type, const void *frame, int n,
                     const char *name, char *errbuf, size_t errlen) {
    char buf[64 * 1024];
    size_t k = 0;
    for (int q = 0; q < n && k + 32 <= sizeof buf; q++) {
        if (text && type == FRAME_CODES) {
            k += (size_t)snprintf(buf + k, sizeof buf - k, q ? " %ld" : "%ld",
                                  (long)((const int32_t *)frame)[q]);
        } else if (text) {  // 9 significant digits read back as the same float
            k += (size_t)snprintf(buf + k, sizeof buf - k, q ? " %.9g" : "%.9g",
                                  (double)((const float *)frame)[q]);
        } else {  // int32 or float32: 4 bytes, little-endian
            uint32_t u;
            memcpy(&u, (const char *)frame + 4 * q, 4);
            for (int b = 0; b < 4; b++) buf[k++] = (char)(uint8_t)(u >> (8 * b));
        }
    }
    if (text) buf[k++] = '\n';
    if (fd_write_full(fd, buf, k) != 0)
        return fd_fail(errbuf, errlen, MIMI_EIO, "%s: write failed (%s)", name,
                    errno == EPIPE ? "broken pipe: the reader went away" : strerror(errno));
    return 0;
}

void codes_reader_init(struct codes_reader *r, int fd, int text, enum frame_type type, int n,
                       const char *name) {
    memset(r, 0, offsetof(struct codes_reader, buf));
    r->fd = fd;
    r->text = text;
    r->type = type;
    r->n = n;
    snprintf(r->name, sizeof r->name, "%s", name);
}

// The next line of text (without '\n') in *line, or NULL at the end. Returns 0 or a code.
static int next_line(struct codes_reader *r, char **line, char *errbuf, size_t errlen) {
    for (;;) {
        char *nl = memchr(r->buf + r->pos, '\n', r->len - r->pos);
        if (nl || (r->eof && r->pos < r->len)) {
            char *start = r->buf + r->pos;
            if (nl) *nl = '\0';
            else r->buf[r->len] = '\0';  // the last line without '\n' (len < sizeof buf)
            r->pos = nl ? (size_t)(nl - r->buf) + 1 : r->len;
            r->line++;
            *line = start;
            return 0;
        }
        if (r->eof) {
            *line = NULL;
            return 0;
        }
        memmove(r->buf, r->buf + r->pos, r->len - r->pos);
        r->len -= r->pos;
        r->pos = 0;
        if (r->len >= sizeof r->buf - 1)
            return fd_fail(errbuf, errlen, MIMI_EFORMAT, "%s: line %lld is too long", r->name,
                        (long long)r->line + 1);
        ssize_t got = fd_read_some(r->fd, r->buf + r->len, sizeof r->buf - 1 - r->len);
        if (got < 0)
            return fd_fail(errbuf, errlen, MIMI_EIO, "%s: %s", r->name,
                        errno == EINTR ? "interrupted" : strerror(errno));
        if (got == 0) r->eof = 1;
        r->len += (size_t)got;
    }
}

int codes_reader_next(struct codes_reader *r, void *frame, char *errbuf, size_t errlen) {
    int latents = r->type == FRAME_LATENTS;
    if (!r->text) {
        uint8_t bytes[4096 * 4];
        size_t want = (size_t)r->n * 4;
        if (want > sizeof bytes)
            return fd_fail(errbuf, errlen, MIMI_EINVAL, "%s: too many values per frame", r->name);
        ssize_t got = fd_read_full(r->fd, bytes, want);
        if (got < 0)
            return fd_fail(errbuf, errlen, MIMI_EIO, "%s: %s", r->name,
                        errno == EINTR ? "interrupted" : strerror(errno));
        if (got == 0) return 0;
        if ((size_t)got < want)
            return fd_fail(errbuf, errlen, MIMI_EFORMAT,
                        "%s: the input ends inside frame %lld (%zd of its %zu bytes; %d %s per "
                        "frame)", r->name, (long long)r->frame, got, want, r->n,
                        latents ? "float32 latent values" : "int32 codes");
        for (int q = 0; q < r->n; q++) {
            uint32_t u = rd32(bytes + 4 * q);
            memcpy((char *)frame + 4 * q, &u, 4);
        }
        r->frame++;
        return 1;
    }
    for (;;) {
        char *line;
        int rc = next_line(r, &line, errbuf, errlen);
        if (rc) return rc;
        if (!line) return 0;
        int k = 0;
        char *p = line, *end;
        for (;;) {
            while (*p == ' ' || *p == '\t' || *p == ',' || *p == '\r') p++;
            if (!*p) break;
            errno = 0;
            if (latents) {
                float v = strtof(p, &end);
                if (end == p)
                    return fd_fail(errbuf, errlen, MIMI_EFORMAT, "%s: line %lld: '%.20s' is not a "
                                "number", r->name, (long long)r->line, p);
                if (k < r->n) ((float *)frame)[k] = v;
            } else {
                long v = strtol(p, &end, 10);
                if (end == p || errno || v < INT32_MIN || v > INT32_MAX)
                    return fd_fail(errbuf, errlen, MIMI_EFORMAT, "%s: line %lld: '%.20s' is not a "
                                "code", r->name, (long long)r->line, p);
                if (k < r->n) ((int32_t *)frame)[k] = (int32_t)v;
            }
            k++;
            p = end;
        }
        if (k == 0) continue;  // blank line
        if (k != r->n) {
            if (latents)
                return fd_fail(errbuf, errlen, MIMI_EFORMAT, "%s: line %lld has %d values, expected "
                            "%d (the model's latent size)", r->name, (long long)r->line, k, r->n);
            return fd_fail(errbuf, errlen, MIMI_EFORMAT, "%s: line %lld has %d codes, expected %d "
                        "(--codebooks)", r->name, (long long)r->line, k, r->n);
        }
        r->frame++;
        return 1;
    }
}
