// SPDX-License-Identifier: MIT
/* Log lines (log.h): the timestamp, the level and the message, formatted into
 * one buffer and written with one write(2) to stderr or the log file. */
#include "log.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common.h"

#define LOG_FILE_MODE 0600
#define LINE_STACK_BYTES 1024 /* most lines fit; longer ones are built on the heap */

static atomic_int g_level = -1; /* -1: not yet read from KVT_LOG */
static atomic_int g_format = KVT_LOG_TEXT;
static atomic_int g_fd = -1; /* -1: stderr */
static pthread_once_t env_once = PTHREAD_ONCE_INIT;

static void read_env(void) {
    const char *e = getenv("KVT_LOG");
    int expected = -1;
    atomic_compare_exchange_strong(&g_level, &expected, e && *e ? KVT_MAX(0, KVT_MIN(atoi(e), 3)) : KVT_LOG_INFO);
}

int kvt_log_level(void) {
    pthread_once(&env_once, read_env);
    return atomic_load_explicit(&g_level, memory_order_relaxed);
}

void kvt_log_set_level(int level) {
    pthread_once(&env_once, read_env);
    atomic_store(&g_level, KVT_MAX(0, KVT_MIN(level, 3)));
}

int kvt_log_enabled(int level) { return level <= kvt_log_level(); }

const char *kvt_log_level_name(int level) {
    static const char *const names[] = {"error", "warn", "info", "debug"};
    return names[level < 0 ? 0 : level > 3 ? 3 : level];
}

void kvt_log_set_format(kvt_log_format f) { atomic_store(&g_format, (int)f); }

kvt_log_format kvt_log_get_format(void) {
    return (kvt_log_format)atomic_load_explicit(&g_format, memory_order_relaxed);
}

int kvt_log_set_format_name(const char *name) {
    if (!strcmp(name, "text")) kvt_log_set_format(KVT_LOG_TEXT);
    else if (!strcmp(name, "json")) kvt_log_set_format(KVT_LOG_JSON);
    else return kvt_fail(KVT_EARG, "log format must be text or json, got '%s'", name);
    return 0;
}

int kvt_log_open_file(const char *path) {
    int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, LOG_FILE_MODE);
    if (fd < 0) {
        int e = errno;
        return kvt_fail(-e, "log file %s: %s", path, e == ELOOP ? "is a symbolic link (not followed)" : strerror(e));
    }
    struct stat sb;
    if (fstat(fd, &sb) || !S_ISREG(sb.st_mode)) {
        close(fd);
        return kvt_fail(-EINVAL, "log file %s: not a regular file", path);
    }
    /* another name for the same file (a hard link, which O_NOFOLLOW cannot
     * see) would have our lines appended to whatever file it names */
    if (sb.st_nlink > 1) {
        close(fd);
        return kvt_fail(-EMLINK,
                        "log file %s has %lu hard links: refusing to write into a file that is also known "
                        "by another name; give a file of its own",
                        path, (unsigned long)sb.st_nlink);
    }
    int flags = fcntl(fd, F_GETFL);
    if (flags >= 0) fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
    int old = atomic_exchange(&g_fd, fd);
    if (old >= 0) close(old);
    return 0;
}

void kvt_log_close_file(void) {
    int old = atomic_exchange(&g_fd, -1);
    if (old >= 0) close(old);
}

void kvt_log_timestamp(char *out, size_t cap) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    snprintf(out, cap, "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour,
             tm.tm_min, tm.tm_sec, ts.tv_nsec / 1000000);
}

/* A growable line buffer: starts on the caller's stack, moves to the heap. */
typedef struct {
    char *s;
    size_t len, cap;
    int heap;
} line_buf;

static void lb_reserve(line_buf *b, size_t more) {
    if (b->len + more + 1 <= b->cap) return;
    size_t cap = KVT_MAX(b->cap * 2, b->len + more + 1);
    char *s = malloc(cap);
    if (!s) return; /* keep the truncated line rather than lose it */
    memcpy(s, b->s, b->len);
    if (b->heap) free(b->s);
    b->s = s;
    b->cap = cap;
    b->heap = 1;
}

static void lb_putc(line_buf *b, char c) {
    lb_reserve(b, 1);
    if (b->len + 1 < b->cap) b->s[b->len++] = c;
}

static void lb_puts(line_buf *b, const char *s) {
    for (; *s; s++) lb_putc(b, *s);
}

/* Length of the well-formed UTF-8 sequence at p (2-4), or 0. */
static int utf8_len(const unsigned char *p) {
    int n = *p >= 0xF0 && *p <= 0xF4 ? 4 : *p >= 0xE0 ? 3 : *p >= 0xC2 && *p < 0xE0 ? 2 : 0;
    if (*p >= 0xF8) n = 0;
    for (int i = 1; i < n; i++)
        if ((p[i] & 0xC0) != 0x80) return 0;
    if (n == 3 && ((*p == 0xE0 && p[1] < 0xA0) || (*p == 0xED && p[1] >= 0xA0))) return 0; /* overlong, surrogate */
    if (n == 4 && ((*p == 0xF0 && p[1] < 0x90) || (*p == 0xF4 && p[1] >= 0x90))) return 0; /* overlong, > U+10FFFF */
    return n;
}

/* s as the inside of a JSON string: quotes, backslashes and control bytes
 * escaped, a byte that is not part of well-formed UTF-8 replaced by U+FFFD, so
 * every line parses whatever a message carries (a path, a peer's text). */
static void lb_put_json(line_buf *b, const char *s) {
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p >= 0x80) {
            int n = utf8_len(p);
            if (!n) {
                lb_puts(b, "\\ufffd");
                continue;
            }
            for (int i = 0; i < n; i++) lb_putc(b, (char)p[i]);
            p += n - 1;
        } else if (*p == '"' || *p == '\\') {
            lb_putc(b, '\\');
            lb_putc(b, (char)*p);
        } else if (*p < 0x20 || *p == 0x7f) {
            char esc[8];
            snprintf(esc, sizeof esc, "\\u%04x", *p);
            lb_puts(b, esc);
        } else {
            lb_putc(b, (char)*p);
        }
    }
}

static void write_all(int fd, const char *s, size_t n) {
    while (n) {
        ssize_t w = write(fd, s, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return;
        s += w;
        n -= (size_t)w;
    }
}

/* d as a JSON float with up to 6 significant digits: a '.0' added where %g
 * would write an integer, so a reader always gets a float for a float key. */
static void put_real(char *out, size_t cap, double d) {
    int n = snprintf(out, cap, "%.6g", d);
    if (n > 0 && (size_t)n + 2 < cap && !strpbrk(out, ".e")) memcpy(out + n, ".0", 3);
}

/* Writes one line: ts, level and msg, then (JSON only) each field as its own key. */
static void write_line(int level, const char *msg, const kvt_log_field *f, size_t n) {
    char ts[KVT_LOG_TS_BYTES];
    kvt_log_timestamp(ts, sizeof ts);
    char line_stack[LINE_STACK_BYTES + 128];
    line_buf b = {line_stack, 0, sizeof line_stack, 0};
    if (kvt_log_get_format() == KVT_LOG_JSON) {
        lb_puts(&b, "{\"ts\":\"");
        lb_puts(&b, ts);
        lb_puts(&b, "\",\"level\":\"");
        lb_puts(&b, kvt_log_level_name(level));
        lb_puts(&b, "\",\"msg\":\"");
        lb_put_json(&b, msg);
        lb_putc(&b, '"');
        for (size_t i = 0; i < n; i++) {
            char num[64];
            lb_puts(&b, ",\"");
            lb_puts(&b, f[i].key);
            lb_puts(&b, "\":");
            if (f[i].type == KVT_LOG_STR && f[i].s) {
                lb_putc(&b, '"');
                lb_put_json(&b, f[i].s);
                lb_putc(&b, '"');
                continue;
            }
            if (f[i].type == KVT_LOG_INT) snprintf(num, sizeof num, "%lld", f[i].i);
            else if (f[i].type == KVT_LOG_BOOL) snprintf(num, sizeof num, "%s", f[i].i ? "true" : "false");
            else if (f[i].type == KVT_LOG_UINT) snprintf(num, sizeof num, "%llu", (unsigned long long)f[i].i);
            else if (f[i].type == KVT_LOG_NUM && isfinite(f[i].d)) snprintf(num, sizeof num, "%.3f", f[i].d);
            else if (f[i].type == KVT_LOG_REAL && isfinite(f[i].d)) put_real(num, sizeof num, f[i].d);
            else snprintf(num, sizeof num, "null");
            lb_puts(&b, num);
        }
        lb_putc(&b, '}');
    } else {
        lb_puts(&b, ts);
        lb_puts(&b, " kvtier: ");
        lb_puts(&b, kvt_log_level_name(level));
        lb_puts(&b, ": ");
        lb_puts(&b, msg);
    }
    lb_putc(&b, '\n');
    int fd = atomic_load_explicit(&g_fd, memory_order_relaxed);
    write_all(fd >= 0 ? fd : STDERR_FILENO, b.s, b.len);
    if (b.heap) free(b.s);
}

/* fmt with ap into stack (cap bytes), or into a malloc'd buffer when it does
 * not fit (the truncated message if that fails); the caller frees a result
 * that is not stack. NULL if fmt cannot be rendered. */
static char *render(char *stack, size_t cap, const char *fmt, va_list ap) {
    va_list ap2;
    va_copy(ap2, ap);
    int n = vsnprintf(stack, cap, fmt, ap);
    char *msg = stack;
    if (n >= 0 && (size_t)n >= cap && (msg = malloc((size_t)n + 1))) vsnprintf(msg, (size_t)n + 1, fmt, ap2);
    else if (!msg) msg = stack; /* out of memory: the truncated message */
    va_end(ap2);
    return n < 0 ? NULL : msg;
}

void kvt_log_fields(int level, const char *msg, const kvt_log_field *f, size_t n, const char *text_msg) {
    if (!kvt_log_enabled(level)) return;
    if (kvt_log_get_format() == KVT_LOG_JSON) write_line(level, msg, f, n);
    else write_line(level, text_msg ? text_msg : msg, NULL, 0);
}

/* ---- kvt_logk: printf conversions as typed keys ---------------------------------------------- */

/* One conversion of a printf format: what it takes from the arguments. */
typedef struct {
    char flags[8];
    int width, prec; /* from digits or '*'; -1: none */
    char len[3];     /* "", "hh", "h", "l", "ll", "j", "z", "t", "L" */
    char conv;       /* 0: the end of the format */
} conv_spec;

/* Moves *p past the next conversion (skipping "%%") and describes it in c;
 * c->conv is 0 at the end of the format. A '*' width or precision takes its
 * int from ap. */
static void next_conv(const char **p, conv_spec *c, va_list *ap) {
    const char *s = *p;
    memset(c, 0, sizeof *c);
    c->width = c->prec = -1;
    for (;;) {
        while (*s && *s != '%') s++;
        if (!*s) break;
        if (s[1] == '%') {
            s += 2;
            continue;
        }
        s++;
        for (size_t n = 0; *s && strchr("-+ #0'", *s); s++)
            if (n + 1 < sizeof c->flags) c->flags[n++] = *s;
        if (*s == '*') c->width = va_arg(*ap, int), s++;
        else
            for (c->width = *s >= '0' && *s <= '9' ? 0 : -1; *s >= '0' && *s <= '9'; s++)
                c->width = c->width * 10 + (*s - '0');
        if (*s == '.') {
            s++;
            if (*s == '*') c->prec = va_arg(*ap, int), s++;
            else
                for (c->prec = 0; *s >= '0' && *s <= '9'; s++) c->prec = c->prec * 10 + (*s - '0');
        }
        for (size_t n = 0; *s && strchr("hljztLq", *s) && n < 2; s++) c->len[n++] = *s;
        c->conv = *s ? *s++ : 0;
        break;
    }
    *p = s;
}

/* Takes the conversion's argument from ap into the field f (buf, of cap
 * bytes, holds a rendered string value). */
static void take_arg(const conv_spec *c, va_list *ap, kvt_log_field *f, char *buf, size_t cap) {
    const char *l = c->len;
    int ll = !strcmp(l, "ll") || !strcmp(l, "q"), lo = !strcmp(l, "l");
    if (strchr("di", c->conv)) {
        f->type = KVT_LOG_INT;
        f->i = ll       ? va_arg(*ap, long long)
            : lo        ? va_arg(*ap, long)
            : *l == 'j' ? va_arg(*ap, intmax_t)
            : *l == 'z' ? va_arg(*ap, ssize_t)
            : *l == 't' ? va_arg(*ap, ptrdiff_t)
                        : va_arg(*ap, int);
    } else if (strchr("uxXo", c->conv)) {
        unsigned long long u = ll ? va_arg(*ap, unsigned long long)
            : lo                  ? va_arg(*ap, unsigned long)
            : *l == 'j'           ? va_arg(*ap, uintmax_t)
            : *l == 'z'           ? va_arg(*ap, size_t)
            : *l == 't'           ? (unsigned long long)va_arg(*ap, ptrdiff_t)
                                  : va_arg(*ap, unsigned);
        if (*l == 'h') u = *(l + 1) == 'h' ? (unsigned char)u : (unsigned short)u;
        f->type = c->conv == 'u' ? KVT_LOG_UINT : KVT_LOG_STR;
        f->i = (long long)u;
        if (c->conv != 'u') {
            char spec[24];
            snprintf(spec, sizeof spec, "%%%s*.*ll%c", c->flags, c->conv);
            snprintf(buf, cap, spec, c->width < 0 ? 0 : c->width, c->prec, u);
            f->s = buf;
        }
    } else if (strchr("fFeEgGaA", c->conv)) {
        f->type = KVT_LOG_REAL;
        f->d = *l == 'L' ? (double)va_arg(*ap, long double) : va_arg(*ap, double);
    } else if (c->conv == 'c') {
        snprintf(buf, cap, "%c", va_arg(*ap, int));
        f->s = buf;
    } else if (c->conv == 's') {
        f->s = va_arg(*ap, const char *);
    } else { /* %p, and anything else takes a pointer */
        snprintf(buf, cap, "%p", va_arg(*ap, void *));
        f->s = buf;
    }
}

/* The next name in the comma-separated *keys into out; "" when none is left. */
static void next_key(const char **keys, char *out, size_t cap) {
    const char *k = *keys, *e = strchr(k, ',');
    size_t n = e ? (size_t)(e - k) : strlen(k);
    snprintf(out, cap, "%.*s", (int)KVT_MIN(n, cap - 1), k);
    *keys = e ? e + 1 : k + n;
}

/* One line of fmt with ap; in JSON, keys (NULL: none) name its conversions. */
static void vlogk(int level, const char *keys, const char *fmt, va_list ap) {
    char msg_stack[LINE_STACK_BYTES];
    va_list walk;
    va_copy(walk, ap);
    char *msg = render(msg_stack, sizeof msg_stack, fmt, ap);
    kvt_log_field f[KVT_LOG_MAX_KEYS];
    char names[KVT_LOG_MAX_KEYS][32], vals[KVT_LOG_MAX_KEYS][40];
    size_t n = 0;
    const char *p = fmt, *k = keys;
    for (conv_spec c; msg && k && kvt_log_get_format() == KVT_LOG_JSON && n < KVT_LOG_MAX_KEYS;) {
        next_conv(&p, &c, &walk);
        if (!c.conv) break;
        kvt_log_field *x = &f[n];
        memset(x, 0, sizeof *x);
        take_arg(&c, &walk, x, vals[n], sizeof vals[n]);
        next_key(&k, names[n], sizeof names[n]);
        x->key = names[n];
        if (names[n][0]) n++; /* unnamed: the argument is taken, no key */
    }
    va_end(walk);
    if (!msg) return;
    write_line(level, msg, f, n);
    if (msg != msg_stack) free(msg);
}

void kvt_logk(int level, const char *keys, const char *fmt, ...) {
    if (!kvt_log_enabled(level)) return;
    va_list ap;
    va_start(ap, fmt);
    vlogk(level, keys ? keys : "", fmt, ap);
    va_end(ap);
}

void kvt_log(int level, const char *fmt, ...) {
    if (!kvt_log_enabled(level)) return;
    va_list ap;
    va_start(ap, fmt);
    vlogk(level, NULL, fmt, ap);
    va_end(ap);
}
