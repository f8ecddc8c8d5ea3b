/*
 * safetensors.c - the bounded safetensors reader and the small writer declared in safetensors.h.
 *
 * Contains: opening (mmap or a caller's buffer), a hand-written JSON parser for the header with
 * hard limits (depth, name length, header size), validation of every tensor against the data
 * section (dtype, shape product, byte count, range, overlaps), lookup by name, dtype conversion
 * to float32 / int32, and an atomic writer.
 * Does not contain: anything Mimi-specific, or big-endian support: the host is assumed to be
 * little-endian like the format, so element bytes are copied as they are.
 *
 * A file mapped by st_open must not be truncated by someone else while it is open (the kernel
 * would deliver SIGBUS on access); that is outside what a reader can check.
 */
#include "safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "mimi.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "safetensors.c assumes a little-endian host"
#endif

#if defined(__GNUC__)
#define ST_PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#define ST_PRINTF(f, a)
#endif

// Hard limits of the parser, beyond those in safetensors.h. A real header nests 3 levels deep
// (object, entry, shape array); the margin is for unknown keys some writers add.
#define ST_JSON_MAX_DEPTH 32  // nesting of objects/arrays anywhere in the header
#define ST_SHOWN 72           // bytes of a name or dtype quoted in an error message
// The smallest possible tensor entry, `"":{"dtype":"U8","shape":[],"data_offsets":[0,0]}`, is 49
// bytes plus a comma, so a header of N bytes holds at most N / 50 + 1 tensors.
#define ST_MIN_ENTRY 50

// ---- errors ----

// Formats a one-line reason into errbuf and returns `code`.
ST_PRINTF(4, 5)
static int st_fail(char *errbuf, size_t errlen, int code, const char *fmt, ...) {
    if (errbuf && errlen > 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(errbuf, errlen, fmt, ap);
        va_end(ap);
    }
    return code;
}

// Copies untrusted text into `out` for an error message: control bytes become '?', and long
// text is cut with "...". `out` holds ST_SHOWN + 4 bytes.
static const char *shown(const char *s, char *out) {
    size_t i = 0;
    for (; s[i] && i < ST_SHOWN; i++) {
        unsigned char c = (unsigned char)s[i];
        out[i] = (c < 0x20 || c == 0x7f) ? '?' : (char)c;
    }
    if (s[i]) {
        memcpy(out + i, "...", 3);
        i += 3;
    }
    out[i] = '\0';
    return out;
}

// ---- dtypes ----

// Name and element size of each st_dtype, indexed by the enum.
static const struct {
    const char *name;
    size_t size;
} dtype_info[] = {
    [ST_F32] = {"F32", 4}, [ST_F16] = {"F16", 2},   [ST_BF16] = {"BF16", 2}, [ST_F64] = {"F64", 8},
    [ST_I64] = {"I64", 8}, [ST_I32] = {"I32", 4},   [ST_I16] = {"I16", 2},   [ST_I8] = {"I8", 1},
    [ST_U8] = {"U8", 1},   [ST_BOOL] = {"BOOL", 1},
};
#define ST_N_DTYPES ((int)(sizeof dtype_info / sizeof dtype_info[0]))

// Both lookups tolerate a value outside the enum, which a caller could have cast in.
size_t st_dtype_size(enum st_dtype dtype) {
    return (int)dtype >= 0 && (int)dtype < ST_N_DTYPES ? dtype_info[dtype].size : 0;
}

const char *st_dtype_name(enum st_dtype dtype) {
    return (int)dtype >= 0 && (int)dtype < ST_N_DTYPES ? dtype_info[dtype].name : "?";
}

// Maps a dtype name to its enum; -1 if unknown.
static int dtype_from_name(const char *s) {
    for (int i = 0; i < ST_N_DTYPES; i++)
        if (strcmp(s, dtype_info[i].name) == 0) return i;
    return -1;
}

// Writes "[3,4]" into out (at least 8 * 21 + 3 bytes).
static const char *shape_text(const int64_t *shape, int n_dims, char *out, size_t cap) {
    size_t k = (size_t)snprintf(out, cap, "[");
    for (int i = 0; i < n_dims && k < cap; i++)
        k += (size_t)snprintf(out + k, cap - k, "%s%lld", i ? "," : "", (long long)shape[i]);
    if (k < cap) snprintf(out + k, cap - k, "]");
    return out;
}

// Product of the dims into *n, or -1 when it overflows int64 (a zero dim always gives 0).
static int shape_product(const int64_t *shape, int n_dims, int64_t *n) {
    int64_t p = 1;
    // A zero anywhere makes an empty tensor, even after dims whose product alone would overflow.
    for (int i = 0; i < n_dims; i++)
        if (shape[i] == 0) return *n = 0, 0;
    for (int i = 0; i < n_dims; i++) {
        if (shape[i] < 0 || p > INT64_MAX / shape[i]) return -1;
        p *= shape[i];
    }
    *n = p;
    return 0;
}

// ---- JSON parser ----
//
// A cursor over the header bytes (not NUL-terminated). Every function skips leading whitespace,
// consumes one construct, and returns 0 or MIMI_EFORMAT with the reason already in errbuf.

struct jp {
    const uint8_t *s;    // the text; never read at or past s + n
    size_t n, pos;       // its length, and the cursor (also the byte offset quoted in messages)
    int depth;           // objects/arrays currently open
    const char *what;    // "header JSON" or "metadata JSON", for messages
    const char *tensor;  // the entry being parsed, for messages; NULL outside entries
    char *errbuf;
    size_t errlen;
};

// Fails with MIMI_EFORMAT, locating the problem by byte offset and, inside an entry, tensor name.
ST_PRINTF(2, 3)
static int jp_fail(struct jp *p, const char *fmt, ...) {
    char msg[200], name[ST_SHOWN + 4];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (p->tensor)
        return st_fail(p->errbuf, p->errlen, MIMI_EFORMAT, "tensor '%s': %s at byte %zu: %s",
                       shown(p->tensor, name), p->what, p->pos, msg);
    return st_fail(p->errbuf, p->errlen, MIMI_EFORMAT, "%s at byte %zu: %s", p->what, p->pos, msg);
}

// Skips JSON whitespace. Writers pad the header with spaces, so this also eats the padding.
static void jp_ws(struct jp *p) {
    while (p->pos < p->n) {
        uint8_t c = p->s[p->pos];
        if (c != ' ' && c != '\t' && c != '\n' && c != '\r') break;
        p->pos++;
    }
}

// The next non-space byte, or -1 at the end.
static int jp_peek(struct jp *p) {
    jp_ws(p);
    return p->pos < p->n ? p->s[p->pos] : -1;
}

// Describes the byte at the cursor for "expected X but found Y".
static const char *jp_found(struct jp *p, char *buf, size_t cap) {
    if (p->pos >= p->n) return "the end of the text";
    uint8_t c = p->s[p->pos];
    if (c > 0x20 && c < 0x7f) snprintf(buf, cap, "'%c'", c);
    else snprintf(buf, cap, "byte 0x%02x", c);
    return buf;
}

// Consumes the punctuation byte `c` (after whitespace) or fails naming what is there instead.
static int jp_expect(struct jp *p, char c) {
    char buf[16];
    if (jp_peek(p) != (uint8_t)c)
        return jp_fail(p, "expected '%c' but found %s", c, jp_found(p, buf, sizeof buf));
    p->pos++;
    return 0;
}

// Opens an object or array ('{' or '['), enforcing the depth limit.
static int jp_open(struct jp *p, char c) {
    int rc = jp_expect(p, c);
    if (rc) return rc;
    if (++p->depth > ST_JSON_MAX_DEPTH)
        return jp_fail(p, "nesting deeper than %d levels", ST_JSON_MAX_DEPTH);
    return 0;
}

// After a member or element: 1 if another follows (',' consumed), 0 at `close` (consumed).
static int jp_next(struct jp *p, char close, int *more) {
    char buf[16];
    int c = jp_peek(p);
    if (c == ',' || c == close) {
        p->pos++;
        *more = c == ',';
        if (c == close) p->depth--;
        return 0;
    }
    return jp_fail(p, "expected ',' or '%c' but found %s", close, jp_found(p, buf, sizeof buf));
}

// Value of a hex digit, or -1.
static int hexval(uint8_t c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

// Reads the 4 hex digits after "\u".
static int jp_hex4(struct jp *p, unsigned *v) {
    *v = 0;
    for (int i = 0; i < 4; i++) {
        int h = p->pos < p->n ? hexval(p->s[p->pos]) : -1;
        if (h < 0) return jp_fail(p, "\\u escape needs 4 hex digits");
        *v = *v << 4 | (unsigned)h;
        p->pos++;
    }
    return 0;
}

// Decodes a \uXXXX escape (the "\u" already consumed), joining surrogate pairs, into a code point.
static int jp_unicode(struct jp *p, unsigned *cp) {
    int rc = jp_hex4(p, cp);
    if (rc) return rc;
    if (*cp >= 0xDC00 && *cp <= 0xDFFF) return jp_fail(p, "unpaired low surrogate \\u%04X", *cp);
    if (*cp < 0xD800 || *cp > 0xDBFF) return 0;
    // A high surrogate is half a character: the escape right after it must be the low half.
    unsigned lo;
    if (p->pos + 2 > p->n || p->s[p->pos] != '\\' || p->s[p->pos + 1] != 'u')
        return jp_fail(p, "high surrogate \\u%04X not followed by a low surrogate", *cp);
    p->pos += 2;
    if ((rc = jp_hex4(p, &lo))) return rc;
    if (lo < 0xDC00 || lo > 0xDFFF)
        return jp_fail(p, "high surrogate \\u%04X followed by \\u%04X, not a low surrogate", *cp,
                       lo);
    *cp = 0x10000 + ((*cp - 0xD800) << 10) + (lo - 0xDC00);
    return 0;
}

// Encodes a code point as UTF-8 into u (4 bytes); returns the length.
static size_t utf8_encode(unsigned cp, uint8_t *u) {
    if (cp < 0x80) return u[0] = (uint8_t)cp, 1;
    if (cp < 0x800) {
        u[0] = (uint8_t)(0xC0 | cp >> 6), u[1] = (uint8_t)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        u[0] = (uint8_t)(0xE0 | cp >> 12), u[1] = (uint8_t)(0x80 | (cp >> 6 & 0x3F));
        u[2] = (uint8_t)(0x80 | (cp & 0x3F));
        return 3;
    }
    u[0] = (uint8_t)(0xF0 | cp >> 18), u[1] = (uint8_t)(0x80 | (cp >> 12 & 0x3F));
    u[2] = (uint8_t)(0x80 | (cp >> 6 & 0x3F)), u[3] = (uint8_t)(0x80 | (cp & 0x3F));
    return 4;
}

// Decodes one escape sequence (the backslash already consumed) into u; *k gets its length.
static int jp_escape(struct jp *p, uint8_t *u, size_t *k) {
    if (p->pos >= p->n) return jp_fail(p, "unterminated string");
    uint8_t e = p->s[p->pos++];
    // The single-character escapes, and the bytes they stand for, position by position.
    static const char from[] = "\"\\/bfnrt", to[] = "\"\\/\b\f\n\r\t";
    const char *hit = e ? strchr(from, e) : NULL;
    if (hit) return u[0] = (uint8_t)to[hit - from], *k = 1, 0;
    if (e != 'u') {
        p->pos--;
        return jp_fail(p, "invalid escape '\\%c'", e > 0x20 && e < 0x7f ? e : '?');
    }
    unsigned cp;
    int rc = jp_unicode(p, &cp);
    if (rc) return rc;
    *k = utf8_encode(cp, u);
    return 0;
}

// Parses a string. When `out` is not NULL, up to `cap` decoded bytes go there, NUL-terminated
// (out holds cap + 1 bytes), and "\u0000" is refused since the text becomes a C string. *len
// gets the full decoded length, so len > cap means the text was cut.
static int jp_string(struct jp *p, char *out, size_t cap, size_t *len) {
    int rc = jp_expect(p, '"');
    if (rc) return rc;
    size_t n = 0, written = 0;
    for (;;) {
        if (p->pos >= p->n) return jp_fail(p, "unterminated string");
        uint8_t c = p->s[p->pos++], u[4];
        size_t k = 1;
        if (c == '"') break;
        if (c < 0x20) {
            p->pos--;
            return jp_fail(p, "control byte 0x%02x inside a string", c);
        }
        // Raw bytes (UTF-8 included) pass through; escapes decode to 1-4 bytes.
        u[0] = c;
        if (c == '\\' && (rc = jp_escape(p, u, &k))) return rc;
        if (out && k == 1 && u[0] == 0) return jp_fail(p, "\\u0000 is not allowed in a name");
        // Store only while everything so far fit, so a cut never splits a UTF-8 sequence.
        if (out && written == n && n + k <= cap) memcpy(out + n, u, k), written += k;
        n += k;
    }
    if (out) out[written] = '\0';
    if (len) *len = n;
    return 0;
}

// Parses a non-negative integer that fits int64 (no sign, fraction, exponent or leading zero).
static int jp_uint(struct jp *p, int64_t *v) {
    char buf[16];
    int c = jp_peek(p);
    if (c == '-') return jp_fail(p, "expected a non-negative integer but found a negative number");
    if (c < '0' || c > '9')
        return jp_fail(p, "expected a non-negative integer but found %s",
                       jp_found(p, buf, sizeof buf));
    if (c == '0' && p->pos + 1 < p->n && p->s[p->pos + 1] >= '0' && p->s[p->pos + 1] <= '9')
        return jp_fail(p, "integer with a leading zero");
    // Accumulate digit by digit, refusing the digit that would pass INT64_MAX.
    int64_t x = 0;
    while (p->pos < p->n && p->s[p->pos] >= '0' && p->s[p->pos] <= '9') {
        int d = p->s[p->pos] - '0';
        if (x > (INT64_MAX - d) / 10) return jp_fail(p, "integer does not fit in int64");
        x = x * 10 + d;
        p->pos++;
    }
    // "4.0" or "4e0" is a JSON number but not an integer; refuse rather than guess.
    if (p->pos < p->n && (p->s[p->pos] == '.' || p->s[p->pos] == 'e' || p->s[p->pos] == 'E'))
        return jp_fail(p, "expected an integer but found a fraction or exponent");
    *v = x;
    return 0;
}

// ---- JSON skipping (values nobody reads) ----

// One or more decimal digits.
static int jp_digits(struct jp *p) {
    size_t start = p->pos;
    while (p->pos < p->n && p->s[p->pos] >= '0' && p->s[p->pos] <= '9') p->pos++;
    return p->pos > start ? 0 : jp_fail(p, "malformed number");
}

// Validates a number: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?
static int jp_skip_number(struct jp *p) {
    if (p->s[p->pos] == '-') p->pos++;
    if (p->pos < p->n && p->s[p->pos] == '0') p->pos++;
    else if (jp_digits(p)) return MIMI_EFORMAT;
    if (p->pos < p->n && p->s[p->pos] == '.' && (p->pos++, jp_digits(p))) return MIMI_EFORMAT;
    if (p->pos < p->n && (p->s[p->pos] == 'e' || p->s[p->pos] == 'E')) {
        p->pos++;
        if (p->pos < p->n && (p->s[p->pos] == '+' || p->s[p->pos] == '-')) p->pos++;
        if (jp_digits(p)) return MIMI_EFORMAT;
    }
    return 0;
}

static int jp_skip_value(struct jp *p);  // the two recurse into each other

// Skips the rest of an object or array after its opening bracket.
static int jp_skip_members(struct jp *p, char close, int keyed) {
    int more = 1, rc;
    if (jp_peek(p) == (uint8_t)close) return p->pos++, p->depth--, 0;
    while (more) {
        if (keyed && ((rc = jp_string(p, NULL, 0, NULL)) || (rc = jp_expect(p, ':')))) return rc;
        if ((rc = jp_skip_value(p)) || (rc = jp_next(p, close, &more))) return rc;
    }
    return 0;
}

// Skips any JSON value, recursing at most ST_JSON_MAX_DEPTH levels.
static int jp_skip_value(struct jp *p) {
    char buf[16];
    int c = jp_peek(p), rc;
    if (c == '"') return jp_string(p, NULL, 0, NULL);
    if (c == '{' || c == '[') {
        if ((rc = jp_open(p, (char)c))) return rc;
        return jp_skip_members(p, c == '{' ? '}' : ']', c == '{');
    }
    if (c == '-' || (c >= '0' && c <= '9')) return jp_skip_number(p);
    static const char *const words[] = {"true", "false", "null"};
    for (int i = 0; i < 3; i++) {
        size_t k = strlen(words[i]);
        if (p->n - p->pos >= k && memcmp(p->s + p->pos, words[i], k) == 0) return p->pos += k, 0;
    }
    return jp_fail(p, "expected a value but found %s", jp_found(p, buf, sizeof buf));
}

// ---- header: metadata ----

// Parses the "__metadata__" object: string keys to string values.
static int parse_metadata(struct jp *p) {
    int more = 1, rc;
    if ((rc = jp_open(p, '{'))) return rc;
    if (jp_peek(p) == '}') return p->pos++, p->depth--, 0;
    while (more) {
        if ((rc = jp_string(p, NULL, 0, NULL)) || (rc = jp_expect(p, ':'))) return rc;
        if (jp_peek(p) != '"') return jp_fail(p, "__metadata__ values must be strings");
        if ((rc = jp_string(p, NULL, 0, NULL)) || (rc = jp_next(p, '}', &more))) return rc;
    }
    return 0;
}

// Parses the metadata object at the cursor and keeps a copy of its raw text in *out. The text is
// kept verbatim (escapes and spacing included) for callers that want to parse it themselves.
static int take_metadata(struct jp *p, char **out) {
    if (*out) return jp_fail(p, "duplicate \"__metadata__\"");
    jp_ws(p);
    size_t start = p->pos;
    int rc = parse_metadata(p);
    if (rc) return rc;
    size_t len = p->pos - start;
    if (!(*out = malloc(len + 1)))
        return st_fail(p->errbuf, p->errlen, MIMI_ENOMEM,
                       "out of memory copying %zu bytes of metadata", len);
    memcpy(*out, p->s + start, len);
    (*out)[len] = '\0';
    return 0;
}

// ---- header: one tensor entry ----

// What an entry's JSON gives, before it is checked against the data section.
struct entry {
    int dtype;
    int n_dims;
    int64_t shape[ST_MAX_DIMS];
    int64_t begin, end;
};

// "shape": [d0, d1, ...] with at most ST_MAX_DIMS non-negative dims.
static int parse_shape(struct jp *p, struct entry *e) {
    int more = 1, rc;
    if ((rc = jp_open(p, '['))) return rc;
    if (jp_peek(p) == ']') return p->pos++, p->depth--, 0;
    while (more) {
        if (e->n_dims == ST_MAX_DIMS)
            return jp_fail(p, "shape has more than %d dimensions", ST_MAX_DIMS);
        if ((rc = jp_uint(p, &e->shape[e->n_dims++])) || (rc = jp_next(p, ']', &more))) return rc;
    }
    return 0;
}

// "data_offsets": [begin, end].
static int parse_offsets(struct jp *p, struct entry *e) {
    int rc, more;
    if ((rc = jp_open(p, '[')) || (rc = jp_uint(p, &e->begin)) || (rc = jp_expect(p, ',')))
        return rc;
    if ((rc = jp_uint(p, &e->end)) || (rc = jp_next(p, ']', &more))) return rc;
    return more ? jp_fail(p, "data_offsets must hold exactly 2 integers") : 0;
}

// "dtype": "F32" and friends.
static int parse_dtype(struct jp *p, struct entry *e) {
    char s[16], name[ST_SHOWN + 4], dt[ST_SHOWN + 4];
    size_t len;
    int rc = jp_string(p, s, sizeof s - 1, &len);
    if (rc) return rc;
    e->dtype = len < sizeof s ? dtype_from_name(s) : -1;
    if (e->dtype < 0)
        return st_fail(p->errbuf, p->errlen, MIMI_EFORMAT, "tensor '%s': unknown dtype '%s%s'",
                       shown(p->tensor, name), shown(s, dt), len < sizeof s ? "" : "...");
    return 0;
}

// Parses `{"dtype": .., "shape": [..], "data_offsets": [b, e]}`; other keys are skipped.
static int parse_entry(struct jp *p, struct entry *e) {
    static const char *const keys[3] = {"dtype", "shape", "data_offsets"};
    int seen[3] = {0, 0, 0}, more = 1, rc;
    memset(e, 0, sizeof *e);
    if ((rc = jp_open(p, '{'))) return rc;
    if (jp_peek(p) == '}') p->pos++, p->depth--, more = 0;
    while (more) {
        char key[16];
        size_t len;
        int k = 0;
        if ((rc = jp_string(p, key, sizeof key - 1, &len)) || (rc = jp_expect(p, ':'))) return rc;
        // k: index of the known key, or 3 for anything else (a cut-off key is never known).
        while (k < 3 && (len >= sizeof key || strcmp(key, keys[k]) != 0)) k++;
        if (k < 3 && seen[k]++) return jp_fail(p, "duplicate key \"%s\"", keys[k]);
        switch (k) {
        case 0: rc = parse_dtype(p, e); break;
        case 1: rc = parse_shape(p, e); break;
        case 2: rc = parse_offsets(p, e); break;
        default: rc = jp_skip_value(p); break;  // unknown keys are ignored
        }
        if (rc || (rc = jp_next(p, '}', &more))) return rc;
    }
    for (int k = 0; k < 3; k++)
        if (!seen[k]) return jp_fail(p, "missing \"%s\"", keys[k]);
    return 0;
}

// Checks an entry against the data section and fills the tensor. The order matters for the
// messages: the shape must be computable, the range sane and inside the data, and only then is
// the byte count compared, so each message names the first thing wrong.
static int check_entry(struct jp *p, const struct entry *e, const uint8_t *data, size_t data_size,
                       struct st_tensor *t) {
    char name[ST_SHOWN + 4], shp[8 * 21 + 3];
    shown(t->name, name);
    shape_text(e->shape, e->n_dims, shp, sizeof shp);
    size_t esize = dtype_info[e->dtype].size;
    int64_t n;
    if (shape_product(e->shape, e->n_dims, &n) || n > INT64_MAX / (int64_t)esize)
        return st_fail(p->errbuf, p->errlen, MIMI_EFORMAT,
                       "tensor '%s': shape %s overflows int64 bytes of %s", name, shp,
                       dtype_info[e->dtype].name);
    if (e->end < e->begin)
        return st_fail(p->errbuf, p->errlen, MIMI_EFORMAT,
                       "tensor '%s': data_offsets [%lld, %lld] end before they begin", name,
                       (long long)e->begin, (long long)e->end);
    if ((uint64_t)e->end > data_size)
        return st_fail(p->errbuf, p->errlen, MIMI_EFORMAT,
                       "tensor '%s': data_offsets [%lld, %lld] run past the %zu-byte data section",
                       name, (long long)e->begin, (long long)e->end, data_size);
    if (n * (int64_t)esize != e->end - e->begin)
        return st_fail(p->errbuf, p->errlen, MIMI_EFORMAT,
                       "tensor '%s': shape %s needs %lld bytes of %s but data_offsets span %lld",
                       name, shp, (long long)(n * (int64_t)esize), dtype_info[e->dtype].name,
                       (long long)(e->end - e->begin));
    // begin <= end <= data_size here, so data + begin stays inside (or one past) the image.
    t->dtype = (enum st_dtype)e->dtype;
    t->n_dims = e->n_dims;
    memcpy(t->shape, e->shape, sizeof t->shape);
    t->n_elements = n;
    t->data = data + e->begin;
    t->n_bytes = (size_t)(e->end - e->begin);
    return 0;
}

// ---- header: the whole object ----

// Appends a zeroed slot to the table, growing it geometrically up to `max` entries. Growth is
// driven by entries actually parsed, so memory stays proportional to the header's real content.
static struct st_tensor *table_push(struct st_file *f, int *cap, int max) {
    if (f->n_tensors == *cap) {
        int ncap = *cap ? *cap * 2 : 16;
        if (ncap > max) ncap = max;
        if (ncap <= f->n_tensors) return NULL;
        struct st_tensor *v = realloc(f->tensors, (size_t)ncap * sizeof *v);
        if (!v) return NULL;
        f->tensors = v, *cap = ncap;
    }
    struct st_tensor *t = &f->tensors[f->n_tensors++];
    memset(t, 0, sizeof *t);
    return t;
}

// One "name": value member of the top-level object.
static int parse_member(struct jp *p, struct st_file *f, int *cap, const uint8_t *data,
                        size_t data_size) {
    char name[ST_MAX_NAME + 1];
    size_t len;
    int rc = jp_string(p, name, ST_MAX_NAME, &len);
    if (rc) return rc;
    if (len > ST_MAX_NAME)
        return jp_fail(p, "tensor name of %zu bytes is longer than %d", len, ST_MAX_NAME);
    if ((rc = jp_expect(p, ':'))) return rc;
    // "__metadata__" is the one member that is not a tensor.
    if (strcmp(name, "__metadata__") == 0) return take_metadata(p, &f->metadata_json);
    if (f->n_tensors >= ST_MAX_TENSORS)
        return st_fail(p->errbuf, p->errlen, MIMI_EFORMAT, "more than %d tensors", ST_MAX_TENSORS);
    struct st_tensor *t = table_push(f, cap, (int)(p->n / ST_MIN_ENTRY + 1));
    if (!t)
        return st_fail(p->errbuf, p->errlen, MIMI_ENOMEM, "out of memory for %d tensors",
                       f->n_tensors + 1);
    memcpy(t->name, name, len + 1);
    struct entry e;
    p->tensor = t->name;
    rc = parse_entry(p, &e);
    if (!rc) rc = check_entry(p, &e, data, data_size, t);
    p->tensor = NULL;
    return rc;
}

// Parses the header object and fills f->tensors (unsorted) and f->metadata_json.
static int parse_header(struct jp *p, struct st_file *f, const uint8_t *data, size_t data_size) {
    int more = 1, cap = 0, rc;
    char buf[16];
    if ((rc = jp_open(p, '{'))) return rc;
    if (jp_peek(p) == '}') p->pos++, p->depth--, more = 0;
    while (more)
        if ((rc = parse_member(p, f, &cap, data, data_size)) || (rc = jp_next(p, '}', &more)))
            return rc;
    // The format pads the header with spaces; anything else after the object is garbage.
    if (jp_peek(p) >= 0)
        return jp_fail(p, "unexpected %s after the header object", jp_found(p, buf, sizeof buf));
    return 0;
}

// ---- validation across tensors ----

// qsort order of the tensor table: by name, bytewise (the order st_find searches in).
static int cmp_name(const void *a, const void *b) {
    return strcmp(((const struct st_tensor *)a)->name, ((const struct st_tensor *)b)->name);
}

// Orders tensor pointers by where their data starts, then ends.
static int cmp_offset(const void *a, const void *b) {
    const struct st_tensor *x = *(const struct st_tensor *const *)a,
                           *y = *(const struct st_tensor *const *)b;
    if (x->data != y->data) return x->data < y->data ? -1 : 1;
    return (x->n_bytes > y->n_bytes) - (x->n_bytes < y->n_bytes);
}

// Rejects two non-empty tensors sharing a byte. Walks them by start, tracking the furthest end.
static int check_overlaps(struct st_file *f, char *errbuf, size_t errlen) {
    if (f->n_tensors < 2) return 0;
    const struct st_tensor **v = malloc((size_t)f->n_tensors * sizeof *v);
    if (!v)
        return st_fail(errbuf, errlen, MIMI_ENOMEM, "out of memory checking %d tensors",
                       f->n_tensors);
    for (int i = 0; i < f->n_tensors; i++) v[i] = &f->tensors[i];
    qsort(v, (size_t)f->n_tensors, sizeof *v, cmp_offset);
    const struct st_tensor *last = NULL;  // the non-empty tensor reaching furthest so far
    int rc = 0;
    for (int i = 0; i < f->n_tensors && !rc; i++) {
        if (v[i]->n_bytes == 0) continue;
        if (last && v[i]->data < last->data + last->n_bytes) {
            char a[ST_SHOWN + 4], b[ST_SHOWN + 4];
            rc = st_fail(errbuf, errlen, MIMI_EFORMAT, "tensors '%s' and '%s' overlap",
                         shown(last->name, a), shown(v[i]->name, b));
        }
        if (!last || v[i]->data + v[i]->n_bytes > last->data + last->n_bytes) last = v[i];
    }
    free(v);
    return rc;
}

// Sorts by name (for st_find) and rejects duplicate names.
static int sort_names(struct st_file *f, char *errbuf, size_t errlen) {
    if (f->n_tensors > 1) qsort(f->tensors, (size_t)f->n_tensors, sizeof *f->tensors, cmp_name);
    for (int i = 1; i < f->n_tensors; i++)
        if (strcmp(f->tensors[i - 1].name, f->tensors[i].name) == 0) {
            char a[ST_SHOWN + 4];
            return st_fail(errbuf, errlen, MIMI_EFORMAT, "duplicate tensor name '%s'",
                           shown(f->tensors[i].name, a));
        }
    return 0;
}

// ---- parsing a whole image ----

// Parses and checks the image in f->base / f->size. On failure the table is freed (not the image).
static int parse_image(struct st_file *f, const char *what, char *errbuf, size_t errlen) {
    if (f->size < 8)
        return st_fail(errbuf, errlen, MIMI_EFORMAT,
                       "%s is %zu bytes, too short for a safetensors header", what, f->size);
    // The length is compared with the image before it is used for anything: it is untrusted,
    // and 8 + hlen must not wrap.
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = hlen << 8 | f->base[i];
    if (hlen > f->size - 8)
        return st_fail(errbuf, errlen, MIMI_EFORMAT, "header length %llu exceeds %s size %zu",
                       (unsigned long long)hlen, what, f->size);
    if (hlen > ST_MAX_HEADER)
        return st_fail(errbuf, errlen, MIMI_EFORMAT, "header length %llu exceeds the %d-byte limit",
                       (unsigned long long)hlen, ST_MAX_HEADER);
    struct jp p = {.s = f->base + 8,
                   .n = (size_t)hlen,
                   .what = "header JSON",
                   .errbuf = errbuf,
                   .errlen = errlen};
    const uint8_t *data = f->base + 8 + hlen;
    int rc = parse_header(&p, f, data, f->size - 8 - (size_t)hlen);
    // Duplicates first: two entries with one name would otherwise be reported as overlapping.
    if (!rc) rc = sort_names(f, errbuf, errlen);
    if (!rc) rc = check_overlaps(f, errbuf, errlen);
    if (rc) {
        free(f->tensors);
        free(f->metadata_json);
        f->tensors = NULL;
        f->metadata_json = NULL;
        f->n_tensors = 0;
    }
    return rc;
}

// ---- public entry points: open, close, find ----

int st_open_memory(struct st_file *f, const void *data, size_t size, char *errbuf, size_t errlen) {
    if (errbuf && errlen > 0) errbuf[0] = '\0';
    if (!f) return st_fail(errbuf, errlen, MIMI_EINVAL, "st_open_memory: NULL st_file");
    memset(f, 0, sizeof *f);  // a failed open leaves a zeroed st_file, safe to st_close
    if (!data && size > 0)
        return st_fail(errbuf, errlen, MIMI_EINVAL, "st_open_memory: NULL data of %zu bytes", size);
    f->base = data;
    f->size = size;
    int rc = parse_image(f, "buffer", errbuf, errlen);
    if (rc) memset(f, 0, sizeof *f);
    return rc;
}

// Maps `path` read-only into f->base / f->size.
static int map_file(struct st_file *f, const char *path, char *errbuf, size_t errlen) {
    // O_NONBLOCK keeps a FIFO from hanging the open; it is refused below as not a regular file.
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0)
        return st_fail(errbuf, errlen, MIMI_EIO, "cannot open '%s': %s", path, strerror(errno));
    struct stat sb;
    int rc = 0;
    if (fstat(fd, &sb) != 0)
        rc = st_fail(errbuf, errlen, MIMI_EIO, "cannot stat '%s': %s", path, strerror(errno));
    else if (!S_ISREG(sb.st_mode))
        rc = st_fail(errbuf, errlen, MIMI_EIO, "'%s' is not a regular file", path);
    else if (sb.st_size < 8)
        rc = st_fail(errbuf, errlen, MIMI_EFORMAT,
                     "file is %lld bytes, too short for a safetensors header",
                     (long long)sb.st_size);
    else if ((uint64_t)sb.st_size > SIZE_MAX)
        rc = st_fail(errbuf, errlen, MIMI_EIO, "'%s' is too large to map", path);
    // MAP_PRIVATE + PROT_READ: the mapping can never write back to the file.
    if (!rc) {
        void *m = mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (m == MAP_FAILED)
            rc = st_fail(errbuf, errlen, MIMI_EIO, "cannot map '%s': %s", path, strerror(errno));
        else {
            f->base = m;
            f->size = (size_t)sb.st_size;
            f->mapped = 1;
        }
    }
    close(fd);  // the mapping stays valid without the descriptor
    return rc;
}

int st_open(struct st_file *f, const char *path, char *errbuf, size_t errlen) {
    if (errbuf && errlen > 0) errbuf[0] = '\0';
    if (!f || !path)
        return st_fail(errbuf, errlen, MIMI_EINVAL, "st_open: NULL %s", f ? "path" : "st_file");
    memset(f, 0, sizeof *f);
    int rc = map_file(f, path, errbuf, errlen);
    if (!rc) rc = parse_image(f, "file", errbuf, errlen);
    if (rc) st_close(f);  // unmaps whatever map_file managed to map
    return rc;
}

void st_close(struct st_file *f) {
    if (!f) return;
    // Only a mapping is ours to release; a st_open_memory image belongs to the caller.
    if (f->mapped && f->base) munmap((void *)f->base, f->size);
    free(f->tensors);
    free(f->metadata_json);
    memset(f, 0, sizeof *f);
}

// bsearch order: a name against a table entry, matching cmp_name.
static int cmp_key(const void *key, const void *elem) {
    return strcmp((const char *)key, ((const struct st_tensor *)elem)->name);
}

const struct st_tensor *st_find(const struct st_file *f, const char *name) {
    if (!f || !name || f->n_tensors <= 0) return NULL;
    return bsearch(name, f->tensors, (size_t)f->n_tensors, sizeof *f->tensors, cmp_key);
}

// ---- conversion ----

// IEEE binary16 bits to float, exactly (subnormals, infinities and NaN payloads kept).
static float half_to_float(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = h >> 10 & 0x1F, mant = h & 0x3FF, bits;
    float f;
    if (exp == 0) {  // zero or subnormal: every one is a normal float32
        f = (float)mant * (1.0f / 16777216.0f);  // mant * 2^-24, exact
        memcpy(&bits, &f, 4);
        bits |= sign;
    } else if (exp == 31) {  // infinity, or NaN with its payload moved up
        bits = sign | 0x7F800000u | mant << 13;
    } else {
        bits = sign | (exp + 112) << 23 | mant << 13;  // rebias 15 -> 127
    }
    memcpy(&f, &bits, 4);
    return f;
}

// Every element is read through memcpy or byte by byte: tensor data has no alignment guarantee.
int st_to_f32(const struct st_tensor *t, float *out) {
    if (!t || t->n_elements < 0 || (!out && t->n_elements > 0)) return MIMI_EINVAL;
    size_t n = (size_t)t->n_elements;
    const uint8_t *d = t->data;
    switch (t->dtype) {
    case ST_F32:
        if (n) memcpy(out, d, n * 4);
        return 0;
    case ST_F16:
        for (size_t i = 0; i < n; i++)
            out[i] = half_to_float((uint16_t)(d[2 * i] | d[2 * i + 1] << 8));
        return 0;
    case ST_BF16:  // the upper half of a float32, so widening is a shift
        for (size_t i = 0; i < n; i++) {
            uint32_t bits = (uint32_t)(d[2 * i] | d[2 * i + 1] << 8) << 16;
            memcpy(&out[i], &bits, 4);
        }
        return 0;
    case ST_F64:  // rounded to nearest; out-of-range values become infinities
        for (size_t i = 0; i < n; i++) {
            double x;
            memcpy(&x, d + 8 * i, 8);
            out[i] = (float)x;
        }
        return 0;
    default: return MIMI_EFORMAT;
    }
}

// The dtypes st_to_i32 accepts.
static int is_int_dtype(enum st_dtype d) {
    return d == ST_I64 || d == ST_I32 || d == ST_I16 || d == ST_I8 || d == ST_U8 || d == ST_BOOL;
}

// Element i of an integer tensor, widened to int64.
static int64_t read_int(const struct st_tensor *t, size_t i) {
    const uint8_t *d = t->data;
    int64_t v64;
    int32_t v32;
    int16_t v16;
    switch (t->dtype) {
    case ST_I64: memcpy(&v64, d + 8 * i, 8); return v64;
    case ST_I32: memcpy(&v32, d + 4 * i, 4); return v32;
    case ST_I16: memcpy(&v16, d + 2 * i, 2); return v16;
    case ST_I8: return (int8_t)d[i];
    default: return d[i];  // U8, BOOL
    }
}

int st_to_i32(const struct st_tensor *t, int32_t *out) {
    if (!t || t->n_elements < 0 || (!out && t->n_elements > 0)) return MIMI_EINVAL;
    if (!is_int_dtype(t->dtype)) return MIMI_EFORMAT;
    size_t n = (size_t)t->n_elements;
    if (t->dtype == ST_I32) {
        if (n) memcpy(out, t->data, n * 4);
        return 0;
    }
    // A BOOL byte other than 0 or 1 is as invalid as an I64 outside int32.
    int64_t lo = INT32_MIN, hi = t->dtype == ST_BOOL ? 1 : INT32_MAX;
    for (size_t i = 0; i < n; i++) {
        int64_t v = read_int(t, i);
        if (v < lo || v > hi) return MIMI_EFORMAT;
        out[i] = (int32_t)v;
    }
    return 0;
}

// ---- writing: a growable header buffer ----
//
// Appends never fail individually; an allocation failure is remembered and reported once when
// the header is complete, which keeps build_header a straight sequence of appends.

struct sbuf {
    char *p;
    size_t n, cap;
    int oom;  // sticky: an allocation failed, the content is incomplete
};

// Appends k bytes, keeping the buffer NUL-terminated.
static void sb_put(struct sbuf *b, const char *s, size_t k) {
    if (b->oom) return;
    if (b->n + k + 1 > b->cap) {
        size_t ncap = b->cap ? b->cap : 256;
        while (ncap < b->n + k + 1) ncap *= 2;
        char *np = realloc(b->p, ncap);
        if (!np) {
            b->oom = 1;
            return;
        }
        b->p = np, b->cap = ncap;
    }
    memcpy(b->p + b->n, s, k);
    b->n += k;
    b->p[b->n] = '\0';
}

static void sb_str(struct sbuf *b, const char *s) { sb_put(b, s, strlen(s)); }

// Appends s as a JSON string literal: quotes, backslashes and control bytes escaped.
static void sb_json_string(struct sbuf *b, const char *s) {
    sb_put(b, "\"", 1);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        char esc[8];
        size_t k = 1;
        if (c == '"' || c == '\\') k = (size_t)snprintf(esc, sizeof esc, "\\%c", c);
        else if (c < 0x20) k = (size_t)snprintf(esc, sizeof esc, "\\u%04x", c);
        sb_put(b, k > 1 ? esc : s, k);
    }
    sb_put(b, "\"", 1);
}

// ---- writing: validation and the header ----

// qsort order for an array of name pointers.
static int cmp_str_ptr(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

// Checks one tensor description and computes its byte count.
static int check_write_tensor(const struct st_write_tensor *w, int i, size_t *n_bytes, char *errbuf,
                              size_t errlen) {
    char name[ST_SHOWN + 4];
    if (!w->name) return st_fail(errbuf, errlen, MIMI_EINVAL, "tensor %d: NULL name", i);
    shown(w->name, name);
    if (strlen(w->name) > ST_MAX_NAME)
        return st_fail(errbuf, errlen, MIMI_EINVAL, "tensor '%s': name longer than %d bytes", name,
                       ST_MAX_NAME);
    if (strcmp(w->name, "__metadata__") == 0)
        return st_fail(errbuf, errlen, MIMI_EINVAL, "tensor '%s': reserved name", name);
    if ((int)w->dtype < 0 || (int)w->dtype >= ST_N_DTYPES)
        return st_fail(errbuf, errlen, MIMI_EINVAL, "tensor '%s': invalid dtype %d", name,
                       (int)w->dtype);
    if (w->n_dims < 0 || w->n_dims > ST_MAX_DIMS)
        return st_fail(errbuf, errlen, MIMI_EINVAL, "tensor '%s': %d dimensions", name, w->n_dims);
    for (int d = 0; d < w->n_dims; d++)
        if (w->shape[d] < 0)
            return st_fail(errbuf, errlen, MIMI_EINVAL, "tensor '%s': negative dimension", name);
    int64_t n;
    size_t esize = dtype_info[w->dtype].size;
    if (shape_product(w->shape, w->n_dims, &n) || n > INT64_MAX / (int64_t)esize ||
        (uint64_t)n > SIZE_MAX / esize)
        return st_fail(errbuf, errlen, MIMI_EINVAL, "tensor '%s': shape overflows int64 bytes",
                       name);
    *n_bytes = (size_t)n * esize;
    if (*n_bytes > 0 && !w->data)
        return st_fail(errbuf, errlen, MIMI_EINVAL, "tensor '%s': NULL data", name);
    return 0;
}

// Rejects duplicate tensor names (the reader would refuse the file).
static int check_unique_names(const struct st_write_tensor *w, int n, char *errbuf, size_t errlen) {
    if (n < 2) return 0;
    const char **v = malloc((size_t)n * sizeof *v);
    if (!v) return st_fail(errbuf, errlen, MIMI_ENOMEM, "out of memory checking %d names", n);
    for (int i = 0; i < n; i++) v[i] = w[i].name;
    qsort(v, (size_t)n, sizeof *v, cmp_str_ptr);
    int rc = 0;
    for (int i = 1; i < n && !rc; i++)
        if (strcmp(v[i - 1], v[i]) == 0) {
            char name[ST_SHOWN + 4];
            rc = st_fail(errbuf, errlen, MIMI_EINVAL, "duplicate tensor name '%s'",
                         shown(v[i], name));
        }
    free(v);
    return rc;
}

// Checks that metadata text is one {"string": "string", ...} object, as the reader requires.
static int check_metadata(const char *text, char *errbuf, size_t errlen) {
    struct jp p = {.s = (const uint8_t *)text,
                   .n = strlen(text),
                   .what = "metadata JSON",
                   .errbuf = errbuf,
                   .errlen = errlen};
    int rc = parse_metadata(&p);
    if (!rc && jp_peek(&p) >= 0) rc = jp_fail(&p, "unexpected text after the metadata object");
    return rc ? MIMI_EINVAL : 0;
}

// Builds the header JSON, padded with spaces to a multiple of 8 bytes.
static int build_header(struct sbuf *b, const struct st_write_tensor *w, const size_t *n_bytes,
                        int n, const char *metadata_json, char *errbuf, size_t errlen) {
    char num[64], shp[8 * 21 + 3];
    uint64_t off = 0;  // tensors are laid out back to back, in the caller's order
    sb_str(b, "{");
    if (metadata_json) {
        sb_str(b, "\"__metadata__\":");
        sb_str(b, metadata_json);
    }
    for (int i = 0; i < n; i++) {
        if (i || metadata_json) sb_str(b, ",");
        sb_json_string(b, w[i].name);
        sb_str(b, ":{\"dtype\":\"");
        sb_str(b, dtype_info[w[i].dtype].name);
        sb_str(b, "\",\"shape\":");
        sb_str(b, shape_text(w[i].shape, w[i].n_dims, shp, sizeof shp));
        if (n_bytes[i] > INT64_MAX - off)
            return st_fail(errbuf, errlen, MIMI_EINVAL, "data section would exceed int64 bytes");
        snprintf(num, sizeof num, ",\"data_offsets\":[%llu,%llu]}", (unsigned long long)off,
                 (unsigned long long)(off + n_bytes[i]));
        sb_str(b, num);
        off += n_bytes[i];
    }
    sb_str(b, "}");
    while (b->n % 8) sb_str(b, " ");
    if (b->oom) return st_fail(errbuf, errlen, MIMI_ENOMEM, "out of memory building the header");
    if (b->n > ST_MAX_HEADER)
        return st_fail(errbuf, errlen, MIMI_EINVAL, "header of %zu bytes exceeds the %d-byte limit",
                       b->n, ST_MAX_HEADER);
    return 0;
}

// ---- writing: the file ----

// write(2) until done: short writes are resumed, EINTR retried, chunks kept under 1 GiB.
static int write_all(int fd, const void *buf, size_t n) {
    const uint8_t *p = buf;
    while (n > 0) {
        ssize_t k = write(fd, p, n > (1u << 30) ? (1u << 30) : n);
        if (k < 0 && errno == EINTR) continue;
        if (k == 0) errno = EIO;  // no progress and no reason given
        if (k <= 0) return -1;
        p += k, n -= (size_t)k;
    }
    return 0;
}

// Writes length, header and data to `tmp`; on failure the caller removes it.
static int write_image(const char *tmp, const struct sbuf *hdr, const struct st_write_tensor *w,
                       const size_t *n_bytes, int n, char *errbuf, size_t errlen) {
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
    if (fd < 0)
        return st_fail(errbuf, errlen, MIMI_EIO, "cannot create '%s': %s", tmp, strerror(errno));
    uint8_t len8[8];
    for (int i = 0; i < 8; i++) len8[i] = (uint8_t)((uint64_t)hdr->n >> (8 * i));
    int bad = write_all(fd, len8, 8) || write_all(fd, hdr->p, hdr->n);
    for (int i = 0; i < n && !bad; i++) bad = write_all(fd, w[i].data, n_bytes[i]);
    // close() can report a deferred write error (NFS, quotas), so it counts as part of writing.
    int saved = errno;
    if (close(fd) != 0 && !bad) bad = 1, saved = errno;
    if (bad)
        return st_fail(errbuf, errlen, MIMI_EIO, "cannot write '%s': %s", tmp, strerror(saved));
    return 0;
}

int st_write(const char *path, const struct st_write_tensor *tensors, int n_tensors,
             const char *metadata_json, char *errbuf, size_t errlen) {
    if (errbuf && errlen > 0) errbuf[0] = '\0';
    if (!path || n_tensors < 0 || (n_tensors > 0 && !tensors))
        return st_fail(errbuf, errlen, MIMI_EINVAL, "st_write: NULL path or bad tensor list");
    // Everything is validated and the header built before a file is created, so a bad argument
    // leaves nothing behind; the temporary name includes the pid so writers never collide.
    size_t *n_bytes = malloc(((size_t)n_tensors + 1) * sizeof *n_bytes);
    size_t tmp_cap = strlen(path) + 32;
    char *tmp = malloc(tmp_cap);
    struct sbuf hdr = {0};
    int rc = 0;
    if (!n_bytes || !tmp)
        rc = st_fail(errbuf, errlen, MIMI_ENOMEM, "out of memory writing '%s'", path);
    for (int i = 0; i < n_tensors && !rc; i++)
        rc = check_write_tensor(&tensors[i], i, &n_bytes[i], errbuf, errlen);
    if (!rc) rc = check_unique_names(tensors, n_tensors, errbuf, errlen);
    if (!rc && metadata_json) rc = check_metadata(metadata_json, errbuf, errlen);
    if (!rc) rc = build_header(&hdr, tensors, n_bytes, n_tensors, metadata_json, errbuf, errlen);
    if (!rc) {
        snprintf(tmp, tmp_cap, "%s.tmp.%ld", path, (long)getpid());
        rc = write_image(tmp, &hdr, tensors, n_bytes, n_tensors, errbuf, errlen);
        if (!rc && rename(tmp, path) != 0)
            rc = st_fail(errbuf, errlen, MIMI_EIO, "cannot rename '%s' to '%s': %s", tmp, path,
                         strerror(errno));
        if (rc) unlink(tmp);
    }
    free(hdr.p);
    free(tmp);
    free(n_bytes);
    return rc;
}
