// SPDX-License-Identifier: MIT
/* A bounded ring of recent prompts by tenant salt (see prompt_ring.h). */
#include "prompt_ring.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"

typedef struct {
    uint8_t *salt;
    size_t salt_len;
    int32_t *tokens;
    int32_t n;
} entry;

struct kvt_prompt_ring {
    pthread_mutex_t mu;
    entry *e; /* [cap] */
    int32_t cap, next, count;
};

kvt_prompt_ring *kvt_prompt_ring_new(int32_t cap) {
    kvt_prompt_ring *r = kvt_xcalloc(1, sizeof *r);
    pthread_mutex_init(&r->mu, NULL);
    r->cap = cap > 0 ? cap : 1;
    r->e = kvt_xcalloc((size_t)r->cap, sizeof *r->e);
    return r;
}

void kvt_prompt_ring_free(kvt_prompt_ring *r) {
    if (!r) return;
    for (int32_t i = 0; i < r->cap; i++) {
        free(r->e[i].salt);
        free(r->e[i].tokens);
    }
    free(r->e);
    pthread_mutex_destroy(&r->mu);
    free(r);
}

void kvt_prompt_ring_put(kvt_prompt_ring *r, const void *salt, size_t salt_len, const int32_t *tokens, int32_t n) {
    if (n <= 0) return;
    /* copy outside the lock; swap in under it */
    entry fresh = {kvt_xmalloc(salt_len ? salt_len : 1), salt_len, kvt_xmalloc((size_t)n * sizeof *tokens), n};
    if (salt_len) memcpy(fresh.salt, salt, salt_len);
    memcpy(fresh.tokens, tokens, (size_t)n * sizeof *tokens);
    pthread_mutex_lock(&r->mu);
    entry old = r->e[r->next];
    r->e[r->next] = fresh;
    r->next = (r->next + 1) % r->cap;
    if (r->count < r->cap) r->count++;
    pthread_mutex_unlock(&r->mu);
    free(old.salt);
    free(old.tokens);
}

int32_t kvt_prompt_ring_take(kvt_prompt_ring *r, const void *salt, size_t salt_len, int32_t max, kvt_lint_prompt **out) {
    *out = NULL;
    int32_t n = 0;
    pthread_mutex_lock(&r->mu);
    kvt_lint_prompt *v = kvt_xmalloc((size_t)r->cap * sizeof *v);
    /* newest first, so the last `max` are kept; reversed below */
    for (int32_t k = 0; k < r->count && n < max; k++) {
        const entry *e = &r->e[(r->next - 1 - k + 2 * r->cap) % r->cap];
        if (salt && (e->salt_len != salt_len || (salt_len && memcmp(e->salt, salt, salt_len)))) continue;
        int32_t *t = kvt_xmalloc((size_t)e->n * sizeof *t);
        memcpy(t, e->tokens, (size_t)e->n * sizeof *t);
        v[n++] = (kvt_lint_prompt){t, e->n};
    }
    pthread_mutex_unlock(&r->mu);
    for (int32_t i = 0; i < n / 2; i++) {
        kvt_lint_prompt x = v[i];
        v[i] = v[n - 1 - i];
        v[n - 1 - i] = x;
    }
    if (!n) free(v);
    else *out = v;
    return n;
}

void kvt_prompt_ring_release(kvt_lint_prompt *p, int32_t n) {
    for (int32_t i = 0; i < n; i++) free((void *)p[i].tokens);
    free(p);
}
