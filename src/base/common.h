// SPDX-License-Identifier: MIT
/* Internal helpers shared by every module: error reporting, checked arithmetic,
 * logging. Nothing here is part of the public API. */
#ifndef KVT_COMMON_H
#define KVT_COMMON_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "kvtier.h"
#include "log.h"

#define KVT_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))
#define KVT_MIN(a, b) ((a) < (b) ? (a) : (b))
#define KVT_MAX(a, b) ((a) > (b) ? (a) : (b))

/* Records a formatted detail for kvt_errmsg() and returns err, so callers can
 * write `return kvt_fail(KVT_EFORMAT, "bad magic %08x", m);`. */
int kvt_fail(int err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Prepends context to the current detail: "model.gguf: " + previous detail.
 * Returns err unchanged. */
int kvt_fail_prefix(int err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Overflow-checked size arithmetic: return 0 on success, -1 on overflow. */
static inline int kvt_mul_ovf(uint64_t a, uint64_t b, uint64_t *out) {
    return __builtin_mul_overflow(a, b, out) ? -1 : 0;
}
static inline int kvt_add_ovf(uint64_t a, uint64_t b, uint64_t *out) {
    return __builtin_add_overflow(a, b, out) ? -1 : 0;
}

/* Little-endian fields of a file format, byte by byte: any alignment, any host. */
static inline void kvt_wr32le(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static inline void kvt_wr64le(uint8_t *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static inline uint32_t kvt_rd32le(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static inline uint64_t kvt_rd64le(const uint8_t *p) {
    return (uint64_t)kvt_rd32le(p) | (uint64_t)kvt_rd32le(p + 4) << 32;
}

/* Logging (timestamps, levels, text or JSON, stderr or a file): log.h. */

/* Monotonic clock in seconds. */
double kvt_now(void);
/* The CLOCK_MONOTONIC time `seconds` (>= 0) from now, for a condition
 * variable created with that clock (pthread_cond_timedwait). */
struct timespec kvt_deadline_after(double seconds);

/* Writes all n bytes of buf to fd, retrying short writes and EINTR.
 * Returns 0 or -errno. */
int kvt_write_all(int fd, const void *buf, size_t n);

/* malloc that never returns NULL for n > 0: out of memory is fatal (logged). */
void *kvt_xmalloc(size_t n);
void *kvt_xcalloc(size_t n, size_t size);
void *kvt_xrealloc(void *p, size_t n);
char *kvt_xstrdup(const char *s);
/* Asks for transparent huge pages under a large allocation (the 2 MiB-aligned
 * part of [p, p + n), from n >= KVT_HUGEPAGE_MIN): tables of many MiB that
 * are touched at random spend most of their time in TLB misses and page
 * faults on 4 KiB pages. A hint: ignored where THP is off or unsupported. */
#define KVT_HUGEPAGE_MIN (4u << 20)
void kvt_hugepage_hint(void *p, size_t n);
/* The n bytes at s (which need not be NUL-terminated) as a new string. */
char *kvt_xstrndup(const char *s, size_t n);
/* n bytes as the size flags take them (--kv-ram 2G), rounded up to a whole K
 * or M ("137K"), so the figure is never below n; in out, which it returns. */
const char *kvt_size_text(uint64_t n, char out[32]);

/* A growing text: s holds len bytes and a NUL in cap allocated (s may start
 * as a malloc'd string with cap = its length + 1, or NULL with cap 0). */
typedef struct {
    char *s;
    size_t len, cap;
} kvt_strbuf;
/* Appends printf-formatted text to b, growing it (out of memory is fatal). */
void kvt_strbuf_printf(kvt_strbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
