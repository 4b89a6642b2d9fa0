// SPDX-License-Identifier: MIT
/* Lazy grammars (json_lazy.h): a trigger scan over free text, then the
 * documents of the spec's schemas, each followed by its own matcher. */
#include "json_lazy.h"

#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "json_grammar_impl.h"

enum { L_FREE, L_DOC, L_AFTER, L_DONE };

struct kvt_jg_lazy {
    const kvt_jg_lazy_spec *sp;
    const kvt_jg_vocab *v;
    int32_t trigger_tok;
    int32_t tlen;
    int32_t fail[KVT_JG_LAZY_MAX_TRIGGER + 1]; /* the trigger's borders (unanchored scan) */
    int state;
    int32_t k;     /* L_FREE: trigger bytes the text ends with (anchored: from its start); -1: never now */
    int32_t *cand; /* tokens holding the trigger's last byte: the only ones that can complete it */
    int32_t n_cand;
    int32_t *refused0; /* the tokens refused where k is 0 */
    int32_t n_refused0;
    kvt_jg *g;     /* L_DOC: the document's matcher */
    kvt_jg *gn;    /* L_AFTER: a fresh matcher of next, made on first use */
    size_t end_at; /* L_AFTER: bytes of end written */
};

static int is_ws(uint8_t c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

static const uint8_t *tok_bytes(const kvt_jg_lazy *l, int32_t id, size_t *n) {
    *n = l->v->len[id];
    return l->v->blob + l->v->off[id];
}

/* Scans b[0..n) for the trigger from state *k: the index just past the byte
 * that completes it (*k is then the whole trigger), or -1 with *k the state
 * after all the bytes. */
static long trig_scan(const kvt_jg_lazy *l, int32_t *k, const uint8_t *b, size_t n) {
    const uint8_t *t = (const uint8_t *)l->sp->trigger;
    int32_t q = *k;
    for (size_t i = 0; i < n && q >= 0; i++) {
        uint8_t c = b[i];
        if (l->sp->anchored) {
            if (q == 0 && is_ws(c)) continue;
            q = t[q] == c ? q + 1 : -1;
        } else {
            while (q > 0 && t[q] != c) q = l->fail[q];
            if (t[q] == c) q++;
        }
        if (q == l->tlen) {
            *k = q;
            return (long)i + 1;
        }
    }
    *k = q;
    return -1;
}

/* 1 when a document of first can begin with b[0..n). */
static int first_takes(const kvt_jg_lazy *l, const uint8_t *b, size_t n) {
    kvt_jg *g = kvt_jg_new(l->sp->first, l->v);
    int ok = kvt_jg_feed(g, (const char *)b, n) == 0;
    kvt_jg_free(g);
    return ok;
}

/* Token id, from trigger state k, completes the trigger and goes on with text first refuses. */
static int refuses(const kvt_jg_lazy *l, int32_t id, int32_t k) {
    size_t n;
    const uint8_t *b = tok_bytes(l, id, &n);
    long at = trig_scan(l, &k, b, n);
    return at >= 0 && (size_t)at < n && !first_takes(l, b + at, n - (size_t)at);
}

kvt_jg_lazy *kvt_jg_lazy_new(const kvt_jg_lazy_spec *s, const kvt_jg_vocab *v, int32_t trigger_tok) {
    size_t tl = s->trigger ? strlen(s->trigger) : 0;
    if (!tl || tl > KVT_JG_LAZY_MAX_TRIGGER || !s->first) return NULL;
    kvt_jg_lazy *l = kvt_xcalloc(1, sizeof *l);
    l->sp = s;
    l->v = v;
    l->trigger_tok = trigger_tok >= 0 && trigger_tok < v->n_vocab ? trigger_tok : -1;
    l->tlen = (int32_t)tl;
    const uint8_t *t = (const uint8_t *)s->trigger;
    for (int32_t q = 1; q < l->tlen; q++) { /* fail[q+1]: the longest proper border of t[0..q] */
        int32_t j = l->fail[q];
        while (j > 0 && t[q] != t[j]) j = l->fail[j];
        l->fail[q + 1] = t[q] == t[j] ? j + 1 : 0;
    }
    l->cand = kvt_xmalloc((size_t)v->n_vocab * sizeof *l->cand);
    l->refused0 = kvt_xmalloc((size_t)v->n_vocab * sizeof *l->refused0);
    for (int32_t id = 0; id < v->n_vocab; id++) {
        size_t n;
        const uint8_t *b = tok_bytes(l, id, &n);
        if (!n || !memchr(b, t[l->tlen - 1], n)) continue;
        l->cand[l->n_cand++] = id;
        if (refuses(l, id, 0)) l->refused0[l->n_refused0++] = id;
    }
    return l;
}

void kvt_jg_lazy_free(kvt_jg_lazy *l) {
    if (!l) return;
    kvt_jg_free(l->g);
    kvt_jg_free(l->gn);
    free(l->cand);
    free(l->refused0);
    free(l);
}

int kvt_jg_lazy_on(const kvt_jg_lazy *l) { return l->state != L_FREE; }

int kvt_jg_lazy_done(const kvt_jg_lazy *l) { return l->state == L_DONE; }

int kvt_jg_lazy_can_end(const kvt_jg_lazy *l) {
    return l->state == L_FREE || l->state == L_DONE || (l->state == L_AFTER && !l->sp->end[l->end_at]);
}

int32_t kvt_jg_lazy_refused(kvt_jg_lazy *l, int32_t *out, int32_t cap) {
    if (l->state != L_FREE || l->k < 0) return 0;
    int32_t n = 0;
    if (l->k == 0) {
        for (int32_t i = 0; i < l->n_refused0 && n < cap; i++) out[n++] = l->refused0[i];
        return n;
    }
    for (int32_t i = 0; i < l->n_cand && n < cap; i++)
        if (refuses(l, l->cand[i], l->k)) out[n++] = l->cand[i];
    return n;
}

static kvt_jg *fresh_next(kvt_jg_lazy *l) {
    if (!l->gn) l->gn = kvt_jg_new(l->sp->next, l->v);
    return l->gn;
}

/* After a token of text end[end_at..]: the tokens that go on with end, or the end of generation once it is written. */
static int32_t mask_end(const kvt_jg_lazy *l, uint8_t *mask) {
    const char *rest = l->sp->end + l->end_at;
    size_t rem = strlen(rest);
    int32_t n = 0;
    for (int32_t id = 0; id < l->v->n_vocab; id++) {
        size_t len = l->v->len[id];
        int ok = rem ? len && len <= rem && !memcmp(l->v->blob + l->v->off[id], rest, len) : l->v->eog[id];
        if (ok && !mask[id]) {
            mask[id] = 1;
            n++;
        }
    }
    return n;
}

int32_t kvt_jg_lazy_mask(kvt_jg_lazy *l, int32_t budget, uint8_t *mask) {
    const int32_t nv = l->v->n_vocab;
    if (l->state == L_DOC) return kvt_jg_mask(l->g, budget, mask);
    if (l->state == L_FREE) {
        memset(mask, 1, (size_t)nv);
        int32_t n = nv;
        if (l->k < 0) return n;
        const int32_t *list = l->k == 0 ? l->refused0 : l->cand;
        int32_t cnt = l->k == 0 ? l->n_refused0 : l->n_cand;
        for (int32_t i = 0; i < cnt; i++)
            if (l->k == 0 || refuses(l, list[i], l->k)) {
                mask[list[i]] = 0;
                n--;
            }
        return n;
    }
    memset(mask, 0, (size_t)nv);
    if (l->state == L_DONE) return mask_end(l, mask);
    int32_t n = 0, rem = (int32_t)strlen(l->sp->end + l->end_at);
    if (l->sp->next && l->end_at == 0) { /* another document, where its shortest form and end still fit */
        kvt_jg *gn = fresh_next(l);
        if (kvt_jg_min_bytes(gn) + rem < budget) n = kvt_jg_mask(gn, budget - rem, mask);
    }
    return n + mask_end(l, mask);
}

/* The document in l->g is complete: more may follow, or end, or nothing. */
static void doc_done(kvt_jg_lazy *l) {
    kvt_jg_free(l->g);
    l->g = NULL;
    l->end_at = 0;
    l->state = l->sp->next || *l->sp->end ? L_AFTER : L_DONE;
}

/* Before the trigger: tok's bytes scanned; from the byte after the trigger on, they go to a new document. */
static int accept_free(kvt_jg_lazy *l, int32_t tok) {
    int32_t k = l->k;
    size_t n;
    const uint8_t *b = tok_bytes(l, tok, &n);
    /* the control token that stands for the trigger has no bytes: the document starts after it */
    long at = tok == l->trigger_tok && k >= 0 ? 0 : trig_scan(l, &k, b, n);
    if (at < 0) {
        l->k = k;
        return 0;
    }
    kvt_jg *g = kvt_jg_new(l->sp->first, l->v);
    if ((size_t)at < n && kvt_jg_feed(g, (const char *)b + at, n - (size_t)at)) {
        kvt_jg_free(g);
        return kvt_fail(KVT_EARG, "the text after the trigger cannot begin the grammar's document");
    }
    l->k = k;
    l->g = g;
    l->state = L_DOC;
    if (kvt_jg_done(g)) doc_done(l);
    return 0;
}

int kvt_jg_lazy_accept(kvt_jg_lazy *l, int32_t tok) {
    if (tok < 0 || tok >= l->v->n_vocab) return kvt_fail(KVT_EARG, "token %d is not in the vocabulary", tok);
    switch (l->state) {
    case L_FREE: return accept_free(l, tok);
    case L_DOC: {
        int rc = kvt_jg_accept(l->g, tok);
        if (!rc && kvt_jg_done(l->g)) doc_done(l);
        return rc;
    }
    case L_AFTER: {
        const char *rest = l->sp->end + l->end_at;
        size_t len = l->v->len[tok], rem = strlen(rest);
        if (!rem && l->v->eog[tok]) return 0;
        if (len && len <= rem && !memcmp(l->v->blob + l->v->off[tok], rest, len)) {
            l->end_at += len;
            if (len == rem) l->state = L_DONE;
            return 0;
        }
        if (!l->sp->next || l->end_at) break;
        kvt_jg *gn = fresh_next(l);
        if (kvt_jg_accept(gn, tok)) return KVT_EARG;
        l->g = gn;
        l->gn = NULL;
        l->state = L_DOC;
        if (kvt_jg_done(l->g)) doc_done(l);
        return 0;
    }
    default:
        if (l->v->eog[tok]) return 0;
        break;
    }
    return kvt_fail(KVT_EARG, "token %d does not follow the grammar here", tok);
}
