// SPDX-License-Identifier: MIT
/* Which bytes of a rendering are the variables' text (a request's messages,
 * tools, ...) and which the template wrote, for kvt_jinja_render_marked: a
 * caller tokenizes the former as plain text, so a message cannot smuggle a
 * control token into the prompt.
 *
 * Strings are marked by the memory that holds them: the variables' strings
 * are registered when they are converted, and every copy of bytes (jb_put,
 * jv_str_copy, the output) carries the marks of its source along; a slice
 * (strip, split, an index) points into its source and so is marked already.
 * Bytes a filter makes from a marked byte (a case change, an escape) are
 * marked too. Marks never drop: the arena frees nothing before the render
 * ends, so a registered range never comes to hold anything else. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "jinja_impl.h"

struct jx_range {
    uintptr_t a, b; /* [a, b) */
};

/* The first registered range that ends after address p. */
static size_t first_after(const jctx *x, uintptr_t p) {
    size_t lo = 0, hi = x->n_marked;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (x->marked[mid].b <= p) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

void jx_mark(jctx *x, const char *p, size_t n) {
    if (!x->track || !n) return;
    uintptr_t a = (uintptr_t)p, b = a + n;
    size_t i = first_after(x, a > 0 ? a - 1 : a); /* a range ending at a merges too */
    size_t j = i;
    while (j < x->n_marked && x->marked[j].a <= b) { /* overlapping or adjacent: merged into one */
        a = KVT_MIN(a, x->marked[j].a);
        b = KVT_MAX(b, x->marked[j].b);
        j++;
    }
    if (j == i) {
        if (x->n_marked == x->cap_marked) {
            x->cap_marked = x->cap_marked ? x->cap_marked * 2 : 64;
            x->marked = kvt_xrealloc(x->marked, x->cap_marked * sizeof *x->marked);
        }
        memmove(x->marked + i + 1, x->marked + i, (x->n_marked - i) * sizeof *x->marked);
        x->n_marked++;
    } else if (j > i + 1) {
        memmove(x->marked + i + 1, x->marked + j, (x->n_marked - j) * sizeof *x->marked);
        x->n_marked -= j - i - 1;
    }
    x->marked[i] = (struct jx_range){a, b};
}

void jx_marks_in(jctx *x, const char *p, size_t n, void (*fn)(void *ctx, size_t off, size_t len), void *ctx) {
    if (!x->track || !n) return;
    uintptr_t a = (uintptr_t)p, b = a + n, o = (uintptr_t)x->out;
    if (x->out && a >= o && b <= o + x->out_n) { /* a capture of the output ({% set %} blocks, macro calls) */
        const unsigned char *m = x->out_mark + (a - o);
        for (size_t i = 0; i < n;) {
            size_t k = i;
            while (k < n && m[k]) k++;
            if (k > i) fn(ctx, i, k - i);
            for (i = k; i < n && !m[i];) i++;
        }
        return;
    }
    for (size_t i = first_after(x, a); i < x->n_marked && x->marked[i].a < b; i++) {
        uintptr_t s = KVT_MAX(a, x->marked[i].a), e = KVT_MIN(b, x->marked[i].b);
        fn(ctx, (size_t)(s - a), (size_t)(e - s));
    }
}

int jx_marked(jctx *x, const char *p) {
    if (!x->track) return 0;
    size_t i = first_after(x, (uintptr_t)p);
    return i < x->n_marked && x->marked[i].a <= (uintptr_t)p;
}

typedef struct {
    jctx *x;
    const char *dst;
} copy_ctx;

static void copy_one(void *ctx, size_t off, size_t len) {
    copy_ctx *c = ctx;
    jx_mark(c->x, c->dst + off, len);
}

void jx_mark_copy(jctx *x, const char *dst, const char *src, size_t n) {
    copy_ctx c = {x, dst};
    jx_marks_in(x, src, n, copy_one, &c);
}

void jb_mark(jbuf *b, size_t off, size_t len) {
    if (!b->x->track || !len) return;
    if (b->n_marks && b->marks[2 * b->n_marks - 2] + b->marks[2 * b->n_marks - 1] == off) {
        b->marks[2 * b->n_marks - 1] += len;
        return;
    }
    if (b->n_marks == b->cap_marks) {
        size_t cap = b->cap_marks ? b->cap_marks * 2 : 8;
        size_t *m = jx_alloc(b->x, 2 * cap * sizeof *m);
        if (b->n_marks) memcpy(m, b->marks, 2 * b->n_marks * sizeof *m);
        b->marks = m, b->cap_marks = cap;
    }
    b->marks[2 * b->n_marks] = off;
    b->marks[2 * b->n_marks + 1] = len;
    b->n_marks++;
}

void jb_register(jbuf *b) {
    for (size_t i = 0; i < b->n_marks; i++) jx_mark(b->x, b->p + b->marks[2 * i], b->marks[2 * i + 1]);
}

typedef struct {
    jctx *x;
    size_t at;
} emit_ctx;

static void emit_one(void *ctx, size_t off, size_t len) {
    emit_ctx *c = ctx;
    memset(c->x->out_mark + c->at + off, 1, len);
}

void jx_emit_marks(jctx *x, const char *s, size_t n, size_t at) {
    if (!x->track) return;
    memset(x->out_mark + at, 0, n);
    emit_ctx c = {x, at};
    jx_marks_in(x, s, n, emit_one, &c);
}

void jx_marks_free(jctx *x) {
    free(x->marked);
    x->marked = NULL;
    x->n_marked = x->cap_marked = 0;
}

typedef struct {
    jbuf *b;
    size_t at;
} put_ctx;

static void put_one(void *ctx, size_t off, size_t len) {
    put_ctx *c = ctx;
    jb_mark(c->b, c->at + off, len);
}

void jb_mark_from(jbuf *b, size_t at, const char *src, size_t n) {
    put_ctx c = {b, at};
    jx_marks_in(b->x, src, n, put_one, &c);
}
