// SPDX-License-Identifier: MIT
/* Error details, logging, clock and allocation helpers (see common.h). */
#include "common.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define KVT_ERRMSG_MAX 1024

static _Thread_local char errmsg[KVT_ERRMSG_MAX];

const char *kvt_strerror(int err) {
    switch (err) {
    case 0: return "success";
    case KVT_EFORMAT: return "malformed input";
    case KVT_EUNSUPPORTED: return "unsupported";
    case KVT_ENOTFOUND: return "not found";
    case KVT_ETYPE: return "wrong type";
    case KVT_ELIMIT: return "over a limit";
    case KVT_EARG: return "invalid argument";
    case KVT_EPAGE: return "KV page over the device's binding limit";
    default: break;
    }
    if (err < 0 && err > KVT_ERR_FIRST) return strerror(-err);
    return "unknown error";
}

const char *kvt_errmsg(void) { return errmsg; }

int kvt_fail(int err, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(errmsg, sizeof errmsg, fmt, ap);
    va_end(ap);
    return err;
}

int kvt_fail_prefix(int err, const char *fmt, ...) {
    char prev[KVT_ERRMSG_MAX];
    memcpy(prev, errmsg, sizeof prev);
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(errmsg, sizeof errmsg, fmt, ap);
    va_end(ap);
    if (n >= 0 && (size_t)n < sizeof errmsg) snprintf(errmsg + n, sizeof errmsg - (size_t)n, "%s", prev);
    return err;
}

void kvt_strbuf_printf(kvt_strbuf *b, const char *fmt, ...) {
    if (!b->s) {
        b->cap = KVT_MAX(b->cap, 256);
        b->s = kvt_xmalloc(b->cap);
        b->len = 0;
        b->s[0] = 0;
    }
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(b->s + b->len, b->cap - b->len, fmt, ap);
        va_end(ap);
        if (n < 0) return;
        if ((size_t)n < b->cap - b->len) {
            b->len += (size_t)n;
            return;
        }
        b->cap = b->cap * 2 + (size_t)n + 1;
        b->s = kvt_xrealloc(b->s, b->cap);
    }
}

double kvt_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

struct timespec kvt_deadline_after(double seconds) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    time_t whole = (time_t)seconds;
    ts.tv_sec += whole;
    ts.tv_nsec += (long)((seconds - (double)whole) * 1e9);
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    return ts;
}

int kvt_write_all(int fd, const void *buf, size_t n) {
    const unsigned char *p = buf;
    while (n) {
        ssize_t k = write(fd, p, n);
        if (k < 0) {
            if (errno == EINTR) continue;
            return -errno;
        }
        p += k;
        n -= (size_t)k;
    }
    return 0;
}

static void oom(size_t n) {
    kvt_logk(KVT_LOG_ERROR, "bytes", "out of memory allocating %zu bytes", n);
    abort();
}

void *kvt_xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) oom(n);
    return p;
}
void *kvt_xcalloc(size_t n, size_t size) {
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (!p) oom(n * size);
    return p;
}
void *kvt_xrealloc(void *p, size_t n) {
    void *q = realloc(p, n ? n : 1);
    if (!q) oom(n);
    return q;
}
void kvt_hugepage_hint(void *p, size_t n) {
#ifdef MADV_HUGEPAGE
    const uintptr_t huge = 2u << 20;
    uintptr_t a = ((uintptr_t)p + huge - 1) & ~(huge - 1), e = ((uintptr_t)p + n) & ~(huge - 1);
    if (n >= KVT_HUGEPAGE_MIN && e > a) (void)madvise((void *)a, e - a, MADV_HUGEPAGE);
#else
    (void)p;
    (void)n;
#endif
}

char *kvt_xstrdup(const char *s) { return kvt_xstrndup(s, strlen(s)); }

char *kvt_xstrndup(const char *s, size_t n) {
    char *p = kvt_xmalloc(n + 1);
    memcpy(p, s, n);
    p[n] = 0;
    return p;
}

const char *kvt_size_text(uint64_t n, char out[32]) {
    if (n >= 1ull << 20) snprintf(out, 32, "%lluM", (unsigned long long)((n + (1ull << 20) - 1) >> 20));
    else if (n >= 1024) snprintf(out, 32, "%lluK", (unsigned long long)((n + 1023) >> 10));
    else snprintf(out, 32, "%llu", (unsigned long long)n);
    return out;
}
