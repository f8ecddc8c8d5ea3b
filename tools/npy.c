/*
 * npy.c - a bounded reader and an atomic writer for numpy .npy files.
 *
 * The format (numpy/lib/format.py): the magic "\x93NUMPY", a major and a minor version byte, the
 * header length (2 bytes little-endian in version 1.0, 4 bytes in 2.0), then the header: a Python
 * dict literal such as {'descr': '<i4', 'fortran_order': False, 'shape': (8, 22), } padded with
 * spaces and ended by '\n'; then the raw array data.
 *
 * Nothing in a file is trusted. The header is parsed by a small recursive-descent reader that
 * accepts only what numpy writes for plain arrays; every count is checked against the file size
 * before memory is allocated. Data is converted from little-endian bytes one element at a time,
 * so the code does not depend on the host's byte order.
 */
#include "npy.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fdio.h"
#include "mimi.h"

#define NPY_CHUNK 65536  // bytes converted per read or write call

// ---- little-endian bytes ----

static uint32_t get_u32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t get_u64(const uint8_t *p) {
    return (uint64_t)get_u32(p) | (uint64_t)get_u32(p + 4) << 32;
}

static void put_u32(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
}

// ---- header dict parser ----

enum npy_type { NPY_I2, NPY_I4, NPY_I8, NPY_F4, NPY_F8 };

struct npy_header {
    enum npy_type type;
    size_t item_size;
    int fortran_order;
    int n_dims;
    int64_t shape[NPY_MAX_DIMS];
    int64_t n_elements;
};

struct cursor {
    const char *s;
    size_t n, pos;
    const char *path;
    char *errbuf;
    size_t errlen;
};

static int syntax(struct cursor *c, const char *what) {
    return fd_fail(c->errbuf, c->errlen, MIMI_EFORMAT, "%s: malformed .npy header: %s at byte %zu",
                c->path, what, c->pos);
}

static void skip_ws(struct cursor *c) {
    while (c->pos < c->n && (c->s[c->pos] == ' ' || c->s[c->pos] == '\t' ||
                             c->s[c->pos] == '\n' || c->s[c->pos] == '\r'))
        c->pos++;
}

static int peek(struct cursor *c) { return c->pos < c->n ? (unsigned char)c->s[c->pos] : -1; }

// A quoted Python string without escapes, of at most cap - 1 printable characters.
static int parse_string(struct cursor *c, char *out, size_t cap) {
    int q = peek(c);
    if (q != '\'' && q != '"') return syntax(c, "expected a quoted string");
    c->pos++;
    size_t len = 0;
    for (;;) {
        int ch = peek(c);
        if (ch < 0) return syntax(c, "unterminated string");
        c->pos++;
        if (ch == q) break;
        if (ch == '\\' || ch < 0x20 || ch > 0x7e)
            return syntax(c, "unexpected character in string");
        if (len + 1 >= cap) return syntax(c, "string too long");
        out[len++] = (char)ch;
    }
    out[len] = '\0';
    return 0;
}

static int parse_bool(struct cursor *c, int *out) {
    if (c->n - c->pos >= 4 && memcmp(c->s + c->pos, "True", 4) == 0) {
        c->pos += 4;
        *out = 1;
    } else if (c->n - c->pos >= 5 && memcmp(c->s + c->pos, "False", 5) == 0) {
        c->pos += 5;
        *out = 0;
    } else {
        return syntax(c, "expected True or False");
    }
    return 0;
}

// A non-negative decimal integer, optionally followed by the Python 2 long suffix 'L'.
static int parse_dim(struct cursor *c, int64_t *out) {
    int ch = peek(c);
    if (ch == '-') return syntax(c, "negative dimension");
    if (ch < '0' || ch > '9') return syntax(c, "expected a dimension");
    int64_t v = 0;
    while ((ch = peek(c)) >= '0' && ch <= '9') {
        if (v > (INT64_MAX - (ch - '0')) / 10) return syntax(c, "dimension too large");
        v = v * 10 + (ch - '0');
        c->pos++;
    }
    if (peek(c) == 'L') c->pos++;
    *out = v;
    return 0;
}

// A tuple of dimensions: (), (5,), (8, 22), with an optional trailing comma.
static int parse_shape(struct cursor *c, struct npy_header *h) {
    if (peek(c) != '(') return syntax(c, "expected '(' to start the shape");
    c->pos++;
    h->n_dims = 0;
    skip_ws(c);
    while (peek(c) != ')') {
        if (h->n_dims == NPY_MAX_DIMS) return syntax(c, "too many dimensions");
        int rc = parse_dim(c, &h->shape[h->n_dims++]);
        if (rc) return rc;
        skip_ws(c);
        if (peek(c) == ',') {
            c->pos++;
            skip_ws(c);
        } else if (peek(c) != ')') {
            return syntax(c, "expected ',' or ')' in the shape");
        }
    }
    c->pos++;
    return 0;
}

static int parse_descr(struct cursor *c, struct npy_header *h) {
    static const struct { const char *name; enum npy_type type; size_t size; } known[] = {
        {"<i2", NPY_I2, 2}, {"<i4", NPY_I4, 4}, {"<i8", NPY_I8, 8},
        {"<f4", NPY_F4, 4}, {"<f8", NPY_F8, 8},
    };
    char d[32];
    if (peek(c) == '[') return fd_fail(c->errbuf, c->errlen, MIMI_EFORMAT,
                                    "%s: structured arrays are not supported", c->path);
    int rc = parse_string(c, d, sizeof d);
    if (rc) return rc;
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++) {
        if (strcmp(d, known[i].name) == 0) {
            h->type = known[i].type;
            h->item_size = known[i].size;
            return 0;
        }
    }
    return fd_fail(c->errbuf, c->errlen, MIMI_EFORMAT,
                "%s: unsupported dtype '%s' (supported: little-endian '<i2', '<i4', '<i8', "
                "'<f4', '<f8')", c->path, d);
}

static int parse_header(struct cursor *c, struct npy_header *h) {
    int have_descr = 0, have_fortran = 0, have_shape = 0, rc;
    skip_ws(c);
    if (peek(c) != '{') return syntax(c, "expected '{'");
    c->pos++;
    skip_ws(c);
    while (peek(c) != '}') {
        char key[32];
        if ((rc = parse_string(c, key, sizeof key))) return rc;
        skip_ws(c);
        if (peek(c) != ':') return syntax(c, "expected ':' after a key");
        c->pos++;
        skip_ws(c);
        int *seen;
        if (strcmp(key, "descr") == 0) {
            seen = &have_descr;
            rc = have_descr ? 0 : parse_descr(c, h);
        } else if (strcmp(key, "fortran_order") == 0) {
            seen = &have_fortran;
            rc = have_fortran ? 0 : parse_bool(c, &h->fortran_order);
        } else if (strcmp(key, "shape") == 0) {
            seen = &have_shape;
            rc = have_shape ? 0 : parse_shape(c, h);
        } else {
            return fd_fail(c->errbuf, c->errlen, MIMI_EFORMAT,
                        "%s: malformed .npy header: unexpected key '%s'", c->path, key);
        }
        if (*seen) return fd_fail(c->errbuf, c->errlen, MIMI_EFORMAT,
                               "%s: malformed .npy header: key '%s' appears twice", c->path, key);
        if (rc) return rc;
        *seen = 1;
        skip_ws(c);
        if (peek(c) == ',') {
            c->pos++;
            skip_ws(c);
        } else if (peek(c) != '}') {
            return syntax(c, "expected ',' or '}'");
        }
    }
    c->pos++;
    skip_ws(c);
    if (c->pos != c->n) return syntax(c, "unexpected text after the dict");
    if (!have_descr || !have_fortran || !have_shape)
        return fd_fail(c->errbuf, c->errlen, MIMI_EFORMAT,
                    "%s: malformed .npy header: missing key '%s'", c->path,
                    !have_descr ? "descr" : !have_fortran ? "fortran_order" : "shape");
    return 0;
}

// ---- reading ----

static void format_shape(const struct npy_header *h, char *out, size_t cap) {
    size_t len = (size_t)snprintf(out, cap, "(");
    for (int i = 0; i < h->n_dims && len < cap; i++)
        len += (size_t)snprintf(out + len, cap - len, "%s%lld", i ? ", " : "",
                                (long long)h->shape[i]);
    if (len < cap) snprintf(out + len, cap - len, h->n_dims == 1 ? ",)" : ")");
}

// Opens `path`, validates the preamble and header against the file size. On success *fp is
// positioned at the first data byte.
static int open_npy(const char *path, FILE **fp, struct npy_header *h, char *errbuf,
                    size_t errlen) {
    *fp = NULL;
    memset(h, 0, sizeof *h);
    FILE *f = fopen(path, "rb");
    if (!f) return fd_fail(errbuf, errlen, MIMI_EIO, "%s: cannot open (%s)", path, strerror(errno));
    struct stat st;
    if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
        fclose(f);
        return fd_fail(errbuf, errlen, MIMI_EIO, "%s: not a regular file", path);
    }
    uint64_t file_size = (uint64_t)st.st_size;
    uint8_t pre[12];
    int rc = MIMI_EFORMAT;
    if (file_size < 10 || fread(pre, 1, 10, f) != 10) {
        rc = fd_fail(errbuf, errlen, MIMI_EFORMAT, "%s: not a .npy file (only %llu bytes)", path,
                  (unsigned long long)file_size);
        goto out;
    }
    if (memcmp(pre, "\x93NUMPY", 6) != 0) {
        rc = fd_fail(errbuf, errlen, MIMI_EFORMAT, "%s: not a .npy file (bad magic)", path);
        goto out;
    }
    if ((pre[6] != 1 && pre[6] != 2) || pre[7] != 0) {
        rc = fd_fail(errbuf, errlen, MIMI_EUNSUPPORTED,
                  "%s: unsupported .npy format version %d.%d (1.0 and 2.0 are read)", path,
                  pre[6], pre[7]);
        goto out;
    }
    uint64_t pre_len = pre[6] == 1 ? 10 : 12, hlen;
    if (pre[6] == 1) {
        hlen = (uint64_t)pre[8] | (uint64_t)pre[9] << 8;
    } else {
        if (fread(pre + 10, 1, 2, f) != 2) {
            rc = fd_fail(errbuf, errlen, MIMI_EFORMAT, "%s: truncated .npy preamble", path);
            goto out;
        }
        hlen = get_u32(pre + 8);
    }
    if (hlen > file_size - pre_len) {
        rc = fd_fail(errbuf, errlen, MIMI_EFORMAT,
                  "%s: header length %llu runs past the end of the file (%llu bytes)", path,
                  (unsigned long long)hlen, (unsigned long long)file_size);
        goto out;
    }
    if (hlen > NPY_MAX_HEADER) {
        rc = fd_fail(errbuf, errlen, MIMI_EFORMAT, "%s: header of %llu bytes is too long", path,
                  (unsigned long long)hlen);
        goto out;
    }
    char *text = malloc((size_t)hlen + 1);
    if (!text) {
        rc = fd_fail(errbuf, errlen, MIMI_ENOMEM, "%s: out of memory", path);
        goto out;
    }
    if (fread(text, 1, (size_t)hlen, f) != (size_t)hlen) {
        free(text);
        rc = fd_fail(errbuf, errlen, MIMI_EIO, "%s: read error in the header", path);
        goto out;
    }
    struct cursor c = {text, (size_t)hlen, 0, path, errbuf, errlen};
    rc = parse_header(&c, h);
    free(text);
    if (rc) goto out;

    if (h->fortran_order) {
        rc = fd_fail(errbuf, errlen, MIMI_EUNSUPPORTED,
                  "%s: array is in Fortran order (fortran_order: True); save it in C order "
                  "(numpy.ascontiguousarray)", path);
        goto out;
    }
    if (h->item_size == 0) {  // unreachable: parse_header requires 'descr'
        rc = fd_fail(errbuf, errlen, MIMI_EFORMAT, "%s: malformed .npy header", path);
        goto out;
    }
    uint64_t n = 1, limit = (uint64_t)INT64_MAX / h->item_size;
    for (int i = 0; i < h->n_dims; i++) {
        uint64_t d = (uint64_t)h->shape[i];
        if (d != 0 && n > limit / d) {
            char s[256];
            format_shape(h, s, sizeof s);
            rc = fd_fail(errbuf, errlen, MIMI_EFORMAT, "%s: shape %s is too large", path, s);
            goto out;
        }
        n *= d;
    }
    h->n_elements = (int64_t)n;
    uint64_t want = n * h->item_size, have = file_size - pre_len - hlen;
    if (want != have) {
        rc = fd_fail(errbuf, errlen, MIMI_EFORMAT, "%s: expected %llu bytes of data, found %llu",
                  path, (unsigned long long)want, (unsigned long long)have);
        goto out;
    }
    if (want > SIZE_MAX / 2) {
        rc = fd_fail(errbuf, errlen, MIMI_ENOMEM, "%s: array too large for this machine", path);
        goto out;
    }
    *fp = f;
    return 0;
out:
    fclose(f);
    return rc;
}

// Reads h->n_elements elements and converts each with `store(out, index, bytes)`. Returns 0 or
// the first nonzero value of `store` (a negative code, with the message already written).
typedef int (*store_fn)(void *out, int64_t i, const uint8_t *p, const struct npy_header *h,
                        const char *path, char *errbuf, size_t errlen);

static int read_data(FILE *f, const char *path, const struct npy_header *h, void *out,
                     store_fn store, char *errbuf, size_t errlen) {
    uint8_t *chunk = malloc(NPY_CHUNK);
    if (!chunk) return fd_fail(errbuf, errlen, MIMI_ENOMEM, "%s: out of memory", path);
    int64_t per = (int64_t)(NPY_CHUNK / h->item_size), done = 0;
    int rc = 0;
    while (done < h->n_elements && rc == 0) {
        int64_t k = h->n_elements - done < per ? h->n_elements - done : per;
        if (fread(chunk, h->item_size, (size_t)k, f) != (size_t)k) {
            rc = fd_fail(errbuf, errlen, MIMI_EIO, "%s: read error in the data (file changed?)", path);
            break;
        }
        for (int64_t i = 0; i < k && rc == 0; i++)
            rc = store(out, done + i, chunk + i * (int64_t)h->item_size, h, path, errbuf, errlen);
        done += k;
    }
    free(chunk);
    return rc;
}

static int store_i32(void *out, int64_t i, const uint8_t *p, const struct npy_header *h,
                     const char *path, char *errbuf, size_t errlen) {
    int64_t v;
    if (h->type == NPY_I2) v = (int16_t)(uint16_t)(p[0] | p[1] << 8);
    else if (h->type == NPY_I4) v = (int32_t)get_u32(p);
    else v = (int64_t)get_u64(p);
    if (v < INT32_MIN || v > INT32_MAX) {
        int64_t cols = h->shape[1];
        return fd_fail(errbuf, errlen, MIMI_EFORMAT,
                    "%s: value %lld at [%lld, %lld] does not fit in int32", path, (long long)v,
                    (long long)(i / cols), (long long)(i % cols));
    }
    ((int32_t *)out)[i] = (int32_t)v;
    return 0;
}

static int store_f32(void *out, int64_t i, const uint8_t *p, const struct npy_header *h,
                     const char *path, char *errbuf, size_t errlen) {
    (void)path, (void)errbuf, (void)errlen;
    if (h->type == NPY_F4) {
        uint32_t u = get_u32(p);
        float v;
        memcpy(&v, &u, sizeof v);
        ((float *)out)[i] = v;
    } else {
        uint64_t u = get_u64(p);
        double v;
        memcpy(&v, &u, sizeof v);
        ((float *)out)[i] = (float)v;
    }
    return 0;
}

int npy_read_i32_2d(const char *path, int32_t **data, int64_t shape[2], char *errbuf,
                    size_t errlen) {
    if (errbuf && errlen) errbuf[0] = '\0';
    *data = NULL;
    shape[0] = shape[1] = 0;
    FILE *f;
    struct npy_header h;
    int rc = open_npy(path, &f, &h, errbuf, errlen);
    if (rc) return rc;
    if (h.type != NPY_I2 && h.type != NPY_I4 && h.type != NPY_I8) {
        fclose(f);
        return fd_fail(errbuf, errlen, MIMI_EFORMAT,
                    "%s: expected an integer array ('<i4', '<i2' or '<i8'), found a float array",
                    path);
    }
    if (h.n_dims != 2) {
        char s[256];
        format_shape(&h, s, sizeof s);
        fclose(f);
        return fd_fail(errbuf, errlen, MIMI_EFORMAT, "%s: expected a 2-D array, found shape %s",
                    path, s);
    }
    int32_t *buf = malloc(h.n_elements ? (size_t)h.n_elements * sizeof *buf : 1);
    if (!buf) {
        fclose(f);
        return fd_fail(errbuf, errlen, MIMI_ENOMEM, "%s: out of memory", path);
    }
    rc = read_data(f, path, &h, buf, store_i32, errbuf, errlen);
    fclose(f);
    if (rc) {
        free(buf);
        return rc;
    }
    *data = buf;
    shape[0] = h.shape[0];
    shape[1] = h.shape[1];
    return 0;
}

int npy_read_f32(const char *path, float **data, int *n_dims, int64_t shape[NPY_MAX_DIMS],
                 char *errbuf, size_t errlen) {
    if (errbuf && errlen) errbuf[0] = '\0';
    *data = NULL;
    *n_dims = 0;
    FILE *f;
    struct npy_header h;
    int rc = open_npy(path, &f, &h, errbuf, errlen);
    if (rc) return rc;
    if (h.type != NPY_F4 && h.type != NPY_F8) {
        fclose(f);
        return fd_fail(errbuf, errlen, MIMI_EFORMAT,
                    "%s: expected a float array ('<f4' or '<f8'), found an integer array", path);
    }
    if (h.n_dims == 0) {
        fclose(f);
        return fd_fail(errbuf, errlen, MIMI_EFORMAT, "%s: scalar arrays (shape ()) are not supported",
                    path);
    }
    float *buf = malloc(h.n_elements ? (size_t)h.n_elements * sizeof *buf : 1);
    if (!buf) {
        fclose(f);
        return fd_fail(errbuf, errlen, MIMI_ENOMEM, "%s: out of memory", path);
    }
    rc = read_data(f, path, &h, buf, store_f32, errbuf, errlen);
    fclose(f);
    if (rc) {
        free(buf);
        return rc;
    }
    *data = buf;
    *n_dims = h.n_dims;
    memcpy(shape, h.shape, sizeof h.shape[0] * (size_t)h.n_dims);
    return 0;
}

// ---- writing ----

// Writes a version 1.0 file of n_dims dims; elements are 4 bytes (int32 or float32).
static int write_npy(const char *path, const char *descr, const void *data, int n_dims,
                     const int64_t *shape, char *errbuf, size_t errlen) {
    if (errbuf && errlen) errbuf[0] = '\0';
    if (n_dims < 1 || n_dims > 2)
        return fd_fail(errbuf, errlen, MIMI_EINVAL, "%s: cannot write %d-D arrays", path, n_dims);
    uint64_t n = 1;
    for (int i = 0; i < n_dims; i++) {
        if (shape[i] < 0 || (shape[i] != 0 && n > (uint64_t)(INT64_MAX / 4) / (uint64_t)shape[i]))
            return fd_fail(errbuf, errlen, MIMI_EINVAL, "%s: invalid shape", path);
        n *= (uint64_t)shape[i];
    }
    if (n > 0 && !data) return fd_fail(errbuf, errlen, MIMI_EINVAL, "%s: no data", path);

    // Header: the dict, spaces, '\n', so that 10 + length is a multiple of 64.
    char dict[200];
    int len = n_dims == 1
        ? snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': (%lld,), }",
                   descr, (long long)shape[0])
        : snprintf(dict, sizeof dict,
                   "{'descr': '%s', 'fortran_order': False, 'shape': (%lld, %lld), }", descr,
                   (long long)shape[0], (long long)shape[1]);
    size_t total = ((size_t)(10 + len + 1) + 63) / 64 * 64;
    size_t hlen = total - 10;
    uint8_t head[320];
    memcpy(head, "\x93NUMPY\x01\x00", 8);
    head[8] = (uint8_t)(hlen & 0xff);
    head[9] = (uint8_t)(hlen >> 8);
    memcpy(head + 10, dict, (size_t)len);
    memset(head + 10 + len, ' ', hlen - (size_t)len - 1);
    head[total - 1] = '\n';

    char tmp[4096];
    if ((size_t)snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid()) >= sizeof tmp)
        return fd_fail(errbuf, errlen, MIMI_EINVAL, "%s: path too long", path);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW, 0666);
    FILE *f = fd >= 0 ? fdopen(fd, "wb") : NULL;
    if (!f) {
        int e = errno;
        if (fd >= 0) {
            close(fd);
            unlink(tmp);
        }
        return fd_fail(errbuf, errlen, MIMI_EIO, "%s: cannot create file (%s)", path, strerror(e));
    }
    int ok = fwrite(head, 1, total, f) == total;
    uint8_t *chunk = malloc(NPY_CHUNK);
    ok = ok && chunk;
    const uint8_t *src = data;
    for (uint64_t done = 0; ok && done < n;) {
        uint64_t k = n - done < NPY_CHUNK / 4 ? n - done : NPY_CHUNK / 4;
        for (uint64_t i = 0; i < k; i++) {
            uint32_t u;  // the bit pattern of an int32 or a float
            memcpy(&u, src + 4 * (done + i), sizeof u);
            put_u32(chunk + 4 * i, u);
        }
        ok = fwrite(chunk, 4, (size_t)k, f) == (size_t)k;
        done += k;
    }
    free(chunk);
    int e = errno;
    ok = ok && fflush(f) == 0 && (fsync(fileno(f)) == 0 || errno == EINVAL);
    if (!ok) e = errno;
    if (fclose(f) != 0 && ok) {
        ok = 0;
        e = errno;
    }
    if (ok && rename(tmp, path) != 0) {
        ok = 0;
        e = errno;
    }
    if (!ok) {
        unlink(tmp);
        return fd_fail(errbuf, errlen, MIMI_EIO, "%s: write failed (%s)", path, strerror(e));
    }
    return 0;
}

int npy_write_i32_2d(const char *path, const int32_t *data, int64_t rows, int64_t cols,
                     char *errbuf, size_t errlen) {
    int64_t shape[2] = {rows, cols};
    return write_npy(path, "<i4", data, 2, shape, errbuf, errlen);
}

int npy_write_f32(const char *path, const float *data, int n_dims, const int64_t *shape,
                  char *errbuf, size_t errlen) {
    return write_npy(path, "<f4", data, n_dims, shape, errbuf, errlen);
}
