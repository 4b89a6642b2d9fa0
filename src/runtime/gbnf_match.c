// SPDX-License-Identifier: MIT
/* The GBNF matcher (gbnf.h): a set of parse stacks stepped byte by byte,
 * and the per-step token mask over the vocabulary trie of json_vocab.c. */
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "gbnf_impl.h"
#include "json_grammar_impl.h"

#define INF (INT32_MAX / 4)
#define MAX_EXPAND 100000 /* expansion calls for one step of one stack: a safety net, not a real limit */
#define MEMO_MAX 2048     /* distinct parse sets one matcher remembers before it forgets them all */
#define MEMO_UNKNOWN (-2) /* a transition not stepped yet */
#define MEMO_DEAD (-1)    /* no parse takes the byte */
#define MEMO_FULL (-3)    /* no room for another parse set */

/* One parse: positions pool[off..off+len), the top last (always a class),
 * and the character begun so far (need more bytes of it). */
typedef struct {
    int32_t off, len;
    uint32_t cp;
    uint8_t need;
} gstk;

typedef struct {
    gstk *s;
    int32_t n, cap;
    int32_t *pool;
    int32_t pn, pcap;
} gstate;

/* The parse sets met so far, each with its transitions by byte: a lazily
 * built automaton. A mask over a grammar whose state barely changes (free
 * text inside a repeated class) then costs one table look-up per trie node
 * rather than a step through every parse. The result is the same, as a
 * step depends only on the parse set it starts from. */
typedef struct {
    gstate *st;     /* the distinct parse sets, each its own copy */
    int32_t *minb;  /* min_bytes of each */
    int32_t *next;  /* 256 per set: the set a byte leads to, MEMO_DEAD, or MEMO_UNKNOWN */
    uint64_t *hash; /* of each set */
    int32_t *slot;  /* open-addressed table of set ids, -1 where empty */
    int32_t n, cap, nslot;
} memo;

struct kvt_gbnf_m {
    const kvt_gbnf *g;
    const kvt_jg_vocab *v;
    gstate st, tmp;
    gstate *walk; /* (KVT_JG_MAX_TOKEN + 1) states, one per trie depth; made by the first mask */
    int32_t buf[KVT_GBNF_MAX_DEPTH + 1];
    int32_t calls;
    int over;         /* the step under way went past a limit */
    int overflowed;   /* some step did */
    int32_t memo_max; /* sets the memo may hold; 0: walk stepping every parse at every trie node */
    memo mo;
};

static void state_free(gstate *s) {
    free(s->s);
    free(s->pool);
}

static void state_add(kvt_gbnf_m *m, gstate *st, const int32_t *pos, int32_t len, uint32_t cp, uint8_t need) {
    for (int32_t i = 0; i < st->n; i++) {
        const gstk *o = &st->s[i];
        if (o->len == len && o->cp == cp && o->need == need && !memcmp(st->pool + o->off, pos, (size_t)len * 4))
            return; /* the same parse reached twice */
    }
    if (st->n >= KVT_GBNF_MAX_STACKS) {
        m->over = 1;
        return;
    }
    if (st->n == st->cap) {
        st->cap = st->cap ? 2 * st->cap : 8;
        st->s = kvt_xrealloc(st->s, (size_t)st->cap * sizeof *st->s);
    }
    if (st->pn + len > st->pcap) {
        st->pcap = KVT_MAX(2 * st->pcap, st->pn + len + 64);
        st->pool = kvt_xrealloc(st->pool, (size_t)st->pcap * sizeof *st->pool);
    }
    if (len) memcpy(st->pool + st->pn, pos, (size_t)len * sizeof *pos);
    st->s[st->n++] = (gstk){st->pn, len, cp, need};
    st->pn += len;
}

static void state_copy(gstate *dst, const gstate *src) {
    if (dst->cap < src->n) {
        dst->cap = src->n;
        dst->s = kvt_xrealloc(dst->s, (size_t)dst->cap * sizeof *dst->s);
    }
    if (dst->pcap < src->pn) {
        dst->pcap = src->pn;
        dst->pool = kvt_xrealloc(dst->pool, (size_t)dst->pcap * sizeof *dst->pool);
    }
    dst->n = src->n, dst->pn = src->pn;
    if (src->n) memcpy(dst->s, src->s, (size_t)src->n * sizeof *src->s);
    if (src->pn) memcpy(dst->pool, src->pool, (size_t)src->pn * sizeof *src->pool);
}

/* Adds to st every parse that m->buf[0..len) leads to with a class on top
 * (or nothing left: the text may end), through rule references and ends of
 * alternatives. Every change to buf is undone before returning. */
static void expand(kvt_gbnf_m *m, gstate *st, int32_t len) {
    const kvt_gbnf *g = m->g;
    if (++m->calls > MAX_EXPAND) {
        m->over = 1;
        return;
    }
    if (!len) {
        state_add(m, st, m->buf, 0, 0, 0);
        return;
    }
    int32_t pos = m->buf[len - 1];
    const gsym *s = &g->sym[pos];
    if (s->kind == GS_END) {
        expand(m, st, len - 1);
        return;
    }
    if (s->kind == GS_CLASS) {
        state_add(m, st, m->buf, len, 0, 0);
        return;
    }
    int32_t old = m->buf[len - 1];
    int32_t base = g->sym[pos + 1].kind == GS_END ? len - 1 : len; /* nothing after the reference: no return */
    m->buf[len - 1] = pos + 1;
    if (base >= KVT_GBNF_MAX_DEPTH) m->over = 1;
    else
        for (int32_t a = 0; a < g->rule_na[s->arg]; a++) {
            m->buf[base] = g->alt[g->rule_alt[s->arg] + a];
            expand(m, st, base + 1);
        }
    m->buf[len - 1] = old;
}

/* dst = src stepped by byte c. 0 when no parse takes it, or one would go
 * past a limit (then the byte is refused rather than parses dropped). */
static int step(kvt_gbnf_m *m, gstate *dst, const gstate *src, uint8_t c) {
    const kvt_gbnf *g = m->g;
    dst->n = dst->pn = 0;
    m->over = 0;
    for (int32_t i = 0; i < src->n && !m->over; i++) {
        const gstk *s = &src->s[i];
        if (!s->len) continue;
        int32_t top = src->pool[s->off + s->len - 1], k = g->sym[top].arg;
        uint32_t cp;
        uint8_t need;
        if (s->need) {
            if ((c & 0xC0) != 0x80) continue;
            cp = s->cp << 6 | (c & 0x3F), need = (uint8_t)(s->need - 1);
        } else if (c < 0x80) cp = c, need = 0;
        else if (c >= 0xC2 && c <= 0xDF) cp = c & 0x1F, need = 1;
        else if ((c & 0xF0) == 0xE0) cp = c & 0x0F, need = 2;
        else if (c >= 0xF0 && c <= 0xF4) cp = c & 0x07, need = 3;
        else continue;
        if (need) {
            uint32_t lo = cp << (6 * need), hi = lo | ((1u << (6 * need)) - 1);
            if (need == 2 && lo < 0x800) lo = 0x800; /* no overlong forms */
            if (need == 3 && lo < 0x10000) lo = 0x10000;
            hi = KVT_MIN(hi, 0x10FFFF);
            if (lo <= hi && kvt_gbnf_class_may(g, k, lo, hi)) state_add(m, dst, src->pool + s->off, s->len, cp, need);
            continue;
        }
        if ((cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF || !kvt_gbnf_class_has(g, k, cp)) continue;
        memcpy(m->buf, src->pool + s->off, (size_t)s->len * sizeof *m->buf);
        m->buf[s->len - 1] = top + 1;
        m->calls = 0;
        expand(m, dst, s->len);
    }
    if (m->over) m->overflowed = 1;
    return dst->n > 0 && !m->over;
}

static int32_t min_bytes(const kvt_gbnf *g, const gstate *st) {
    int32_t best = INF;
    for (int32_t i = 0; i < st->n; i++) {
        const gstk *s = &st->s[i];
        int64_t c = s->need;
        for (int32_t k = 0; k < s->len; k++) {
            int32_t pos = st->pool[s->off + k];
            c += s->need && k == s->len - 1 ? g->suffix_min[pos + 1] : g->suffix_min[pos];
        }
        if (c < best) best = (int32_t)c;
    }
    return best;
}

static int can_end(const gstate *st) {
    for (int32_t i = 0; i < st->n; i++)
        if (!st->s[i].len) return 1;
    return 0;
}

static int all_done(const gstate *st) {
    for (int32_t i = 0; i < st->n; i++)
        if (st->s[i].len) return 0;
    return st->n > 0;
}

static uint64_t state_hash(const gstate *s) {
    uint64_t h = 1469598103934665603ULL;
    for (int32_t i = 0; i < s->n; i++) {
        const gstk *k = &s->s[i];
        h = (h ^ (uint64_t)k->len) * 1099511628211ULL;
        h = (h ^ ((uint64_t)k->cp << 8 | k->need)) * 1099511628211ULL;
        for (int32_t j = 0; j < k->len; j++) h = (h ^ (uint32_t)s->pool[k->off + j]) * 1099511628211ULL;
    }
    return h ^ (uint64_t)s->n;
}

static int state_eq(const gstate *a, const gstate *b) {
    if (a->n != b->n) return 0;
    for (int32_t i = 0; i < a->n; i++) {
        const gstk *x = &a->s[i], *y = &b->s[i];
        if (x->len != y->len || x->cp != y->cp || x->need != y->need ||
            (x->len && memcmp(a->pool + x->off, b->pool + y->off, (size_t)x->len * sizeof *a->pool)))
            return 0;
    }
    return 1;
}

static void memo_clear(memo *mo) {
    mo->n = 0;
    for (int32_t i = 0; i < mo->nslot; i++) mo->slot[i] = -1;
}

static void memo_free(memo *mo) {
    for (int32_t i = 0; i < mo->cap && mo->st; i++) state_free(&mo->st[i]);
    free(mo->st);
    free(mo->minb);
    free(mo->next);
    free(mo->hash);
    free(mo->slot);
}

/* The id of parse set s, added when new; MEMO_FULL when there is no room. */
static int32_t memo_id(kvt_gbnf_m *m, const gstate *s) {
    memo *mo = &m->mo;
    if (!mo->st) {
        /* room for a whole token's path through the trie and one more set, so a walk that starts over goes on */
        int32_t deep = 0;
        for (int32_t i = 0; i < m->v->all.n; i++) deep = KVT_MAX(deep, m->v->all.depth[i]);
        mo->cap = KVT_MAX(m->memo_max, deep + 2);
        mo->st = kvt_xcalloc((size_t)mo->cap, sizeof *mo->st);
        mo->minb = kvt_xcalloc((size_t)mo->cap, sizeof *mo->minb);
        mo->next = kvt_xcalloc((size_t)mo->cap * 256, sizeof *mo->next);
        mo->hash = kvt_xcalloc((size_t)mo->cap, sizeof *mo->hash);
        for (mo->nslot = 64; mo->nslot < 2 * mo->cap;) mo->nslot *= 2;
        mo->slot = kvt_xcalloc((size_t)mo->nslot, sizeof *mo->slot);
        memo_clear(mo);
    }
    uint64_t h = state_hash(s);
    int32_t i = (int32_t)(h & (uint64_t)(mo->nslot - 1));
    for (; mo->slot[i] >= 0; i = (i + 1) & (mo->nslot - 1))
        if (mo->hash[mo->slot[i]] == h && state_eq(&mo->st[mo->slot[i]], s)) return mo->slot[i];
    if (mo->n == mo->cap) return MEMO_FULL;
    int32_t id = mo->n++;
    state_copy(&mo->st[id], s);
    mo->minb[id] = min_bytes(m->g, s);
    mo->hash[id] = h;
    for (int32_t c = 0; c < 256; c++) mo->next[(size_t)id * 256 + (size_t)c] = MEMO_UNKNOWN;
    mo->slot[i] = id;
    return id;
}

/* The set that byte c leads to from set id: MEMO_DEAD or MEMO_FULL too. */
static int32_t memo_step(kvt_gbnf_m *m, int32_t id, uint8_t c) {
    int32_t r = m->mo.next[(size_t)id * 256 + c];
    if (r != MEMO_UNKNOWN) return r;
    r = step(m, &m->tmp, &m->mo.st[id], c) ? memo_id(m, &m->tmp) : MEMO_DEAD;
    if (r != MEMO_FULL) m->mo.next[(size_t)id * 256 + c] = r;
    return r;
}

/* Forgets every set but the d on the walk's path ids[0..d), which get new ids. */
static void memo_restart(kvt_gbnf_m *m, int32_t *ids, int32_t d) {
    for (int32_t k = 0; k < d; k++) state_copy(&m->walk[k], &m->mo.st[ids[k]]);
    memo_clear(&m->mo);
    for (int32_t k = 0; k < d; k++) ids[k] = memo_id(m, &m->walk[k]);
}

kvt_gbnf_m *kvt_gbnf_m_new(const kvt_gbnf *g, const kvt_jg_vocab *v) {
    kvt_gbnf_m *m = kvt_xcalloc(1, sizeof *m);
    m->g = g, m->v = v;
    m->memo_max = MEMO_MAX;
    m->buf[0] = 0;
    for (int32_t a = 0; a < g->rule_na[g->root] && !m->over; a++) {
        m->buf[0] = g->alt[g->rule_alt[g->root] + a];
        m->calls = 0;
        expand(m, &m->st, 1);
    }
    if (m->over) m->overflowed = 1;
    return m;
}

void kvt_gbnf_m_free(kvt_gbnf_m *m) {
    if (!m) return;
    state_free(&m->st);
    state_free(&m->tmp);
    if (m->walk)
        for (int32_t i = 0; i <= KVT_JG_MAX_TOKEN; i++) state_free(&m->walk[i]);
    free(m->walk);
    memo_free(&m->mo);
    free(m);
}

/* Marks the tokens of trie t whose bytes step from m's state and leave the
 * shortest completion within left bytes. Returns how many it marked. */
static int32_t walk(kvt_gbnf_m *m, const trie *t, int32_t left, uint8_t *mask) {
    int32_t count = 0;
    if (!m->walk) m->walk = kvt_xcalloc(KVT_JG_MAX_TOKEN + 1, sizeof *m->walk); /* on first use */
    state_copy(&m->walk[0], &m->st);
    for (int32_t i = 0; i < t->n;) {
        int32_t d = t->depth[i];
        if (!step(m, &m->walk[d], &m->walk[d - 1], t->byte[i])) {
            i = t->skip[i];
            continue;
        }
        if (t->tok[i] >= 0 && min_bytes(m->g, &m->walk[d]) <= left)
            for (int32_t id = t->tok[i]; id >= 0; id = t->next[id])
                if (!mask[id]) mask[id] = 1, count++;
        i++;
    }
    return count;
}

/* walk through the memo: the same marks. */
static int32_t walk_memo(kvt_gbnf_m *m, const trie *t, int32_t left, uint8_t *mask) {
    int32_t count = 0, ids[KVT_JG_MAX_TOKEN + 1];
    if (!m->walk) m->walk = kvt_xcalloc(KVT_JG_MAX_TOKEN + 1, sizeof *m->walk);
    ids[0] = memo_id(m, &m->st);
    if (ids[0] == MEMO_FULL) memo_clear(&m->mo), ids[0] = memo_id(m, &m->st);
    for (int32_t i = 0; i < t->n;) {
        int32_t d = t->depth[i], r = memo_step(m, ids[d - 1], t->byte[i]);
        if (r == MEMO_FULL) {
            memo_restart(m, ids, d);
            r = memo_step(m, ids[d - 1], t->byte[i]);
        }
        if (r < 0) {
            i = t->skip[i];
            continue;
        }
        ids[d] = r;
        if (t->tok[i] >= 0 && m->mo.minb[r] <= left)
            for (int32_t id = t->tok[i]; id >= 0; id = t->next[id])
                if (!mask[id]) mask[id] = 1, count++;
        i++;
    }
    return count;
}

void kvt_gbnf_m_set_memo(kvt_gbnf_m *m, int32_t max_sets) {
    memo_free(&m->mo);
    memset(&m->mo, 0, sizeof m->mo);
    m->memo_max = KVT_MAX(max_sets, 0);
}

int32_t kvt_gbnf_m_mask(kvt_gbnf_m *m, int32_t budget, uint8_t *mask) {
    const kvt_jg_vocab *v = m->v;
    memset(mask, 0, (size_t)v->n_vocab);
    if (all_done(&m->st) || budget < 1) return 0;
    int32_t count = 0, left = budget - 1;
    if (can_end(&m->st))
        for (int32_t id = 0; id < v->n_vocab; id++)
            if (v->eog[id]) mask[id] = 1, count++;
    int32_t (*w)(kvt_gbnf_m *, const trie *, int32_t, uint8_t *) = m->memo_max ? walk_memo : walk;
    int32_t n = w(m, &v->all, left, mask);
    /* past the budget already (it counts bytes; tokens are often longer):
     * only tokens that bring the end nearer */
    int32_t need = min_bytes(m->g, &m->st);
    if (!n && need > left) n = w(m, &v->all, need - 1, mask);
    return count + n;
}

int kvt_gbnf_m_feed(kvt_gbnf_m *m, const char *bytes, size_t n) {
    for (size_t i = 0; i < n; i++) {
        if (!step(m, &m->tmp, &m->st, (uint8_t)bytes[i])) return KVT_EARG;
        gstate t = m->st;
        m->st = m->tmp, m->tmp = t;
    }
    return 0;
}

int kvt_gbnf_m_accept(kvt_gbnf_m *m, int32_t tok) {
    const kvt_jg_vocab *v = m->v;
    if (!v || tok < 0 || tok >= v->n_vocab) return KVT_EARG;
    if (v->eog[tok] && !v->len[tok]) {
        if (!can_end(&m->st)) return KVT_EARG;
        m->st.n = m->st.pn = 0;
        state_add(m, &m->st, m->buf, 0, 0, 0); /* only the finished parse */
        return 0;
    }
    if (!v->len[tok]) return KVT_EARG;
    gstate save = {0};
    state_copy(&save, &m->st);
    int rc = kvt_gbnf_m_feed(m, (const char *)v->blob + v->off[tok], v->len[tok]);
    if (rc) state_copy(&m->st, &save);
    state_free(&save);
    return rc;
}

int kvt_gbnf_m_done(const kvt_gbnf_m *m) { return all_done(&m->st); }
int kvt_gbnf_m_can_end(const kvt_gbnf_m *m) { return can_end(&m->st); }
int32_t kvt_gbnf_m_min_bytes(const kvt_gbnf_m *m) { return all_done(&m->st) ? 0 : min_bytes(m->g, &m->st); }
int kvt_gbnf_m_overflowed(const kvt_gbnf_m *m) { return m->overflowed; }
