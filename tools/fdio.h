/*
 * fdio.h - whole reads and writes on file descriptors, for pipes and temporary files.
 *
 * read() and write() on a pipe may move fewer bytes than asked and may be interrupted by a
 * signal; these helpers loop until the whole count has moved, the input ends, or a real error
 * happens. SIGPIPE is expected to be ignored by the program (the `mimi` command does), so a
 * reader that went away shows up here as EPIPE, which the caller reports.
 * Also the file helpers' shared error convention: a code returned with a message in errbuf.
 */
#ifndef MIMI_FDIO_H
#define MIMI_FDIO_H

#include <signal.h>
#include <stddef.h>
#include <sys/types.h>

// Set by the program's SIGINT/SIGTERM handler: an interrupted read or write then fails with EINTR
// instead of being retried, and long loops stop at their next step.
extern volatile sig_atomic_t fd_interrupted;

// Reads up to n bytes, stopping early only at the end of the input. Returns the number of bytes
// read (n, or fewer at the end), or -1 with errno set (EINTR only after fd_interrupted was set).
ssize_t fd_read_full(int fd, void *buf, size_t n);

// Reads what is available, at least 1 byte unless the input has ended (0) or failed (-1, errno
// set). For line-oriented input that must not wait for more than one line.
ssize_t fd_read_some(int fd, void *buf, size_t n);

// Writes all n bytes. Returns 0, or -1 with errno set (EPIPE: the reader closed the pipe).
int fd_write_full(int fd, const void *buf, size_t n);

// Makes a temporary path "<path>.tmp.<pid>.<k>" in `out` (k counts up inside the process, so
// threads of one process never share one). Returns 0, or -1 if the path does not fit.
int fd_temp_path(const char *path, char *out, size_t out_len);

// Writes the message into errbuf (when errbuf is not NULL and errlen > 0) and returns `code`.
int fd_fail(char *errbuf, size_t errlen, int code, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 4, 5)))
#endif
    ;

#endif
