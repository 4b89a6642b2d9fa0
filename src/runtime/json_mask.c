// SPDX-License-Identifier: MIT
/* The token mask over a matcher's state (see json_grammar.h): the shortest
 * completion of each parse, summed frame by frame, and the walk over the
 * vocabulary's tries. */
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "gbnf.h"
#include "json_match.h"

/* ---- the shortest completion ---------------------------------------------------- */

/* Bytes of ",KEY:VALUE" for each required property not yet written. */
static int32_t required_rest(const jnode *n, const kvt_jg_schema *s, uint64_t used) {
    int64_t r = 0;
    for (uint64_t m = n->required & ~used; m; m &= m - 1) {
        int q = __builtin_ctzll(m);
        r += 1 + n->slen[q] + 1 + N(s, n->child[q])->min_bytes;
    }
    return (int32_t)KVT_MIN(r, JG_INF);
}

static int32_t obj_cost(const kvt_jg_schema *s, const frame *f) {
    const jnode *n = N(s, f->node);
    int32_t rest = required_rest(n, s, f->set);
    int any_req = (n->required & ~f->set) != 0;
    int32_t key = n->free_keys ? N(s, n->key_node)->min_bytes : 0;
    switch (f->sub) {
    case O_OPEN: return any_req ? rest : 1; /* the first property has no comma before it */
    case O_COMMA: {
        if (any_req) return rest;
        if (n->free_keys) return key + 1 + N(s, n->free_value)->min_bytes + 1; /* "":V} */
        int32_t best = JG_INF;
        for (int32_t q = 0; q < n->n; q++)
            if (!(f->set >> q & 1)) best = KVT_MIN(best, n->slen[q] + 1 + N(s, n->child[q])->min_bytes);
        return best + 1;
    }
    case O_IN_KEY: return rest + 1 + (n->free_keys ? 1 + N(s, n->free_value)->min_bytes : 0);
    case O_AFTER_KEY: return 1 + N(s, f->idx >= 0 ? n->child[f->idx] : n->free_value)->min_bytes + rest + 1;
    default: return rest + 1;
    }
}

/* Bytes of ",ITEM" for items from..min_items-1. */
static int64_t rest_items(const kvt_jg_schema *s, const jnode *n, uint32_t from) {
    int64_t r = 0;
    uint32_t np = (uint32_t)n->n - 1, i = from;
    for (; i < n->min_items && i < np; i++) r += 1 + N(s, n->child[1 + i])->min_bytes;
    if (i < n->min_items) r += (int64_t)(n->min_items - i) * (1 + N(s, n->child[0])->min_bytes);
    return r;
}

static int32_t arr_cost(const kvt_jg_schema *s, const frame *f) {
    const jnode *n = N(s, f->node);
    int64_t c;
    switch (f->sub) {
    case A_OPEN: c = n->min_items ? N(s, jg_item_node(n, 0))->min_bytes + rest_items(s, n, 1) + 1 : 1; break;
    case A_COMMA: c = N(s, jg_item_node(n, f->count))->min_bytes + rest_items(s, n, f->count + 1) + 1; break;
    default: c = rest_items(s, n, f->count) + 1; break;
    }
    return (int32_t)KVT_MIN(c, JG_INF);
}

/* A declared key being written: the rest of the key, ':', its value, less
 * what its parent counts for it when it is a required one. */
static int32_t key_cost(const kvt_jg_schema *s, const frame *k) {
    const jnode *n = N(s, k->node);
    int32_t best = JG_INF;
    for (uint64_t m = k->set; m; m &= m - 1) {
        int q = __builtin_ctzll(m);
        int32_t v = N(s, n->child[q])->min_bytes;
        int32_t c = n->slen[q] - (int32_t)k->count + 1 + v;
        if (n->required >> q & 1) c -= 1 + n->slen[q] + 1 + v;
        best = KVT_MIN(best, c);
    }
    return best;
}

static int32_t str_cost(const jnode *n, const frame *f) {
    if (n->rx) return (f->sub == S_ESC ? jg_esc_best(n->rx, f->idx) : n->rx->dist[f->idx]) + 1;
    int32_t pend = f->sub == S_ESC ? 1 : f->sub == S_HEX ? HEX_DIGITS - f->idx : f->sub == S_UTF8 ? f->idx : 0;
    return pend + (int32_t)(n->min_len > f->count ? n->min_len - f->count : 0) + 1;
}

static int32_t num_cost(const jnode *n, const frame *f) {
    if (!n->bounded) return jg_num_terminal(f->sub) ? 0 : 1;
    switch (f->sub) {
    case N_BEGIN: return n->min_bytes;
    case N_SIGN: return n->mag[1].min_bytes;
    case N_ZERO:
    case N_INT: return jg_int_part_cost(n, &n->mag[f->aux & NUM_NEG], (int64_t)f->set, f->count);
    case N_DOT: return 1;
    default: return jg_bnum_valid(n, f) ? 0 : 1;
    }
}

static int32_t frame_cost(const kvt_jg_schema *s, const frame *f) {
    const jnode *n = N(s, f->node);
    switch (f->kind) {
    case F_VALUE: return n->min_bytes;
    case F_OBJ: return obj_cost(s, f);
    case F_ARR: return arr_cost(s, f);
    case F_STR: return str_cost(n, f);
    case F_NUM: return num_cost(n, f);
    case F_KEY: return key_cost(s, f);
    case F_LIT:
    case F_TAG: {
        if (f->kind == F_TAG && f->sub == T_TAIL) return n->tlen[f->idx] - (int32_t)f->count;
        if (f->kind == F_TAG && f->sub == T_VALUE) return n->tlen[f->idx];
        int32_t best = JG_INF;
        for (uint64_t m = f->set; m; m &= m - 1) {
            int q = __builtin_ctzll(m);
            int32_t c = n->slen[q] - (int32_t)f->count;
            if (f->kind == F_TAG) c += N(s, n->child[q])->min_bytes + n->tlen[q];
            best = KVT_MIN(best, c);
        }
        return best;
    }
    }
    return 0;
}

static int32_t stack_min_bytes(const jstack *st, const kvt_jg_schema *s) {
    if (st->done) return 0;
    int64_t sum = 0;
    for (int32_t i = 0; i < st->depth; i++) sum += frame_cost(s, &st->f[i]);
    return (int32_t)KVT_MIN(sum, JG_INF);
}

static int32_t min_bytes(const jstate *st, const kvt_jg_schema *s) {
    int32_t best = JG_INF;
    for (int32_t i = 0; i < st->n; i++) best = KVT_MIN(best, stack_min_bytes(&st->a[i], s));
    return best;
}

static int stack_can_end(const jstack *st, const kvt_jg_schema *s) {
    if (st->done) return 1;
    if (st->depth != 1) return 0;
    const frame *f = &st->f[0];
    const jnode *n = N(s, f->node);
    if (f->kind == F_NUM) return n->bounded ? jg_bnum_valid(n, f) : jg_num_terminal(f->sub);
    if (f->kind != F_LIT) return 0;
    for (uint64_t m = f->set; m; m &= m - 1)
        if ((uint32_t)n->slen[__builtin_ctzll(m)] == f->count) return 1;
    return 0;
}

static int can_end(const jstate *st, const kvt_jg_schema *s) {
    for (int32_t i = 0; i < st->n; i++)
        if (stack_can_end(&st->a[i], s)) return 1;
    return 0;
}

static int all_done(const jstate *st) {
    for (int32_t i = 0; i < st->n; i++)
        if (!st->a[i].done) return 0;
    return st->n > 0;
}

/* ---- the matcher ------------------------------------------------------------------------ */

kvt_jg *kvt_jg_new(const kvt_jg_schema *s, const kvt_jg_vocab *v) {
    kvt_jg *g = kvt_xcalloc(1, sizeof *g);
    g->s = s;
    g->v = v;
    if (s->gbnf) {
        g->gm = kvt_gbnf_m_new(s->gbnf, v);
        return g;
    }
    g->st.n = 1;
    g->st.a[0].depth = 1;
    g->st.a[0].f[0].kind = F_VALUE;
    g->st.a[0].f[0].node = s->root;
    return g;
}

void kvt_jg_free(kvt_jg *g) {
    if (!g) return;
    kvt_gbnf_m_free(g->gm);
    free(g->walk);
    free(g);
}

static void state_copy(jstate *dst, const jstate *src) {
    dst->n = src->n;
    for (int32_t i = 0; i < src->n; i++) {
        stack_copy(&dst->a[i], &src->a[i]);
        dst->a[i].slot = (int16_t)i;
    }
}

/* Marks the tokens of trie t whose bytes step from g's state and leave the
 * shortest completion within left bytes. Returns how many it marked. */
static int32_t walk(kvt_jg *g, const trie *t, int32_t left, uint8_t *mask) {
    int32_t count = 0;
    if (!g->walk) g->walk = kvt_xmalloc((KVT_JG_MAX_TOKEN + 1) * sizeof *g->walk); /* on first use */
    state_copy(&g->walk[0], &g->st);
    for (int32_t i = 0; i < t->n;) {
        int32_t d = t->depth[i];
        jstate *st = &g->walk[d];
        state_copy(st, &g->walk[d - 1]);
        if (!jg_step_all(st, g->s, t->byte[i])) {
            i = t->skip[i];
            continue;
        }
        if (t->tok[i] >= 0 && min_bytes(st, g->s) <= left)
            for (int32_t id = t->tok[i]; id >= 0; id = t->next[id]) {
                mask[id] = 1;
                count++;
            }
        i++;
    }
    return count;
}

/* The top frame when it is a patterned string with no escape pending, in
 * the only parse; else NULL. */
static const frame *rx_top(const kvt_jg *g) {
    const jstack *one = &g->st.a[0];
    if (g->st.n != 1 || one->done) return NULL;
    const frame *top = &one->f[one->depth - 1];
    return top->kind == F_STR && top->sub == S_NORMAL && N(g->s, top->node)->rx ? top : NULL;
}

/* walk() inside a patterned string: plain bytes only move the automaton, so
 * the walk keeps one automaton state per depth, and steps whole states only
 * under a quote, a backslash or a control byte (from depth full on). */
static int32_t walk_rx(kvt_jg *g, const frame *top, const trie *t, int32_t left, uint8_t *mask) {
    const jdfa *d = N(g->s, top->node)->rx;
    int32_t q[KVT_JG_MAX_TOKEN + 1], count = 0, full = INT32_MAX;
    int32_t base = min_bytes(&g->st, g->s) - (d->dist[top->idx] + 1); /* the frames below the string */
    q[0] = top->idx;
    for (int32_t i = 0; i < t->n;) {
        int32_t dep = t->depth[i], cost;
        uint8_t b = t->byte[i];
        if (dep <= full) full = INT32_MAX; /* out of the subtree stepped whole */
        if (full == INT32_MAX && (b == '"' || b == '\\' || b < 0x20)) {
            jstate *p = &g->walk[dep - 1];
            state_copy(p, &g->st);
            p->a[0].f[p->a[0].depth - 1].idx = q[dep - 1];
            full = dep;
        }
        if (full != INT32_MAX) {
            jstate *st = &g->walk[dep];
            state_copy(st, &g->walk[dep - 1]);
            if (!jg_step_all(st, g->s, b)) {
                i = t->skip[i];
                continue;
            }
            cost = min_bytes(st, g->s);
        } else {
            if ((q[dep] = jdfa_next(d, q[dep - 1], b)) < 0) {
                i = t->skip[i];
                continue;
            }
            cost = base + d->dist[q[dep]] + 1;
        }
        if (t->tok[i] >= 0 && cost <= left)
            for (int32_t id = t->tok[i]; id >= 0; id = t->next[id]) {
                mask[id] = 1;
                count++;
            }
        i++;
    }
    return count;
}

static int32_t walk_any(kvt_jg *g, const trie *t, int32_t left, uint8_t *mask) {
    if (!g->walk) g->walk = kvt_xmalloc((KVT_JG_MAX_TOKEN + 1) * sizeof *g->walk); /* on first use */
    const frame *top = rx_top(g);
    return top ? walk_rx(g, top, t, left, mask) : walk(g, t, left, mask);
}

/* Only the end-of-generation tokens in mask; how many (0 when the vocabulary has none). */
static int32_t only_eog(const kvt_jg_vocab *v, uint8_t *mask) {
    int32_t count = 0;
    for (int32_t id = 0; id < v->n_vocab; id++) {
        mask[id] = v->eog[id] != 0;
        count += mask[id];
    }
    return count;
}

int32_t kvt_jg_mask(kvt_jg *g, int32_t budget, uint8_t *mask) {
    /* The last token of the budget where the text may already end (and may
     * also go on): only the end of generation, so the reply finishes with
     * "stop" and a text known to be complete, rather than spending the token
     * on more text that may leave it unfinished and ending with "length". */
    if (budget == 1 && kvt_jg_can_end(g) && !kvt_jg_done(g)) {
        int32_t n = only_eog(g->v, mask);
        if (n) return n;
    }
    if (g->gm) return kvt_gbnf_m_mask(g->gm, budget, mask);
    const kvt_jg_vocab *v = g->v;
    int32_t left = budget - 1;
    const jstack *one = &g->st.a[0];
    const frame *top = g->st.n == 1 && !one->done ? &one->f[one->depth - 1] : NULL;
    if (top && budget >= 1 && top->kind == F_STR && top->sub == S_NORMAL && !N(g->s, top->node)->rx &&
        min_bytes(&g->st, g->s) <= left) {
        /* inside a string: plain text never lengthens the shortest completion (no end-of-generation here) */
        uint32_t room = N(g->s, top->node)->max_len - top->count;
        int32_t count = 0;
        if (room >= v->max_plain_chars) {
            memcpy(mask, v->plain_mask, (size_t)v->n_vocab);
            count = v->n_plain;
        } else {
            memset(mask, 0, (size_t)v->n_vocab);
            for (int32_t i = 0; i < v->n_plain; i++)
                if (v->plain_chars[i] <= room) mask[v->plain[i]] = 1, count++;
        }
        return count + walk(g, &v->special, left, mask);
    }
    memset(mask, 0, (size_t)v->n_vocab);
    if (all_done(&g->st) || budget < 1) return 0;
    int32_t count = 0;
    if (can_end(&g->st, g->s))
        for (int32_t id = 0; id < v->n_vocab; id++)
            if (v->eog[id]) mask[id] = 1, count++;
    int32_t n = walk_any(g, &v->all, left, mask);
    /* Past the budget already (it counts bytes, and tokens are often longer):
     * only tokens that bring the end nearer, so the document still finishes
     * as soon as it can. */
    int32_t need = min_bytes(&g->st, g->s);
    if (!n && need > left) n = walk_any(g, &v->all, need - 1, mask);
    return count + n;
}

int kvt_jg_feed(kvt_jg *g, const char *bytes, size_t n) {
    if (g->gm) return kvt_gbnf_m_feed(g->gm, bytes, n);
    jstate *st = kvt_xmalloc(sizeof *st);
    state_copy(st, &g->st);
    int rc = 0;
    for (size_t i = 0; i < n && !rc; i++) {
        if (jg_step_all(st, g->s, (uint8_t)bytes[i])) state_copy(&g->st, st);
        else rc = KVT_EARG;
    }
    free(st);
    return rc;
}

int kvt_jg_accept(kvt_jg *g, int32_t tok) {
    if (g->gm) return kvt_gbnf_m_accept(g->gm, tok);
    const kvt_jg_vocab *v = g->v;
    if (tok < 0 || tok >= v->n_vocab) return KVT_EARG;
    if (v->eog[tok] && !v->len[tok]) {
        if (!can_end(&g->st, g->s)) return KVT_EARG;
        g->st.n = 1;
        g->st.a[0].done = 1;
        return 0;
    }
    if (!v->len[tok]) return KVT_EARG;
    jstate *st = kvt_xmalloc(sizeof *st);
    state_copy(st, &g->st);
    int rc = 0;
    for (uint32_t i = 0; i < v->len[tok] && !rc; i++)
        if (!jg_step_all(st, g->s, v->blob[v->off[tok] + i])) rc = KVT_EARG;
    if (!rc) state_copy(&g->st, st);
    free(st);
    return rc;
}

int kvt_jg_done(const kvt_jg *g) { return g->gm ? kvt_gbnf_m_done(g->gm) : all_done(&g->st); }
int kvt_jg_can_end(const kvt_jg *g) { return g->gm ? kvt_gbnf_m_can_end(g->gm) : can_end(&g->st, g->s); }
int32_t kvt_jg_min_bytes(const kvt_jg *g) {
    if (g->gm) return kvt_gbnf_m_min_bytes(g->gm);
    return all_done(&g->st) ? 0 : min_bytes(&g->st, g->s);
}
