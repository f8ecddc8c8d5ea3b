/*
 * fdio.c - whole reads and writes on file descriptors (see fdio.h).
 */
#include "fdio.h"

#include <errno.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <unistd.h>

volatile sig_atomic_t fd_interrupted;

ssize_t fd_read_full(int fd, void *buf, size_t n) {
    size_t done = 0;
    while (done < n) {
        ssize_t r = read(fd, (char *)buf + done, n - done);
        if (r < 0 && errno == EINTR && !fd_interrupted) continue;
        if (r < 0) return -1;
        if (r == 0) break;
        done += (size_t)r;
    }
    return (ssize_t)done;
}

ssize_t fd_read_some(int fd, void *buf, size_t n) {
    for (;;) {
        ssize_t r = read(fd, buf, n);
        if (r < 0 && errno == EINTR && !fd_interrupted) continue;
        return r;
    }
}

int fd_write_full(int fd, const void *buf, size_t n) {
    size_t done = 0;
    while (done < n) {
        ssize_t r = write(fd, (const char *)buf + done, n - done);
        if (r < 0 && errno == EINTR && !fd_interrupted) continue;
        if (r < 0) return -1;
        done += (size_t)r;
    }
    return 0;
}

int fd_temp_path(const char *path, char *out, size_t out_len) {
    static atomic_uint counter;
    unsigned k = atomic_fetch_add(&counter, 1u);
    int n = snprintf(out, out_len, "%s.tmp.%ld.%u", path, (long)getpid(), k);
    return n < 0 || (size_t)n >= out_len ? -1 : 0;
}

int fd_fail(char *errbuf, size_t errlen, int code, const char *fmt, ...) {
    if (errbuf && errlen > 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(errbuf, errlen, fmt, ap);
        va_end(ap);
    }
    return code;
}
