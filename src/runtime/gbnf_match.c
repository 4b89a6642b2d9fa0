// SPDX-License-Identifier: MIT
/* The GBNF matcher (gbnf.h): a set of parse stacks stepped byte by byte,
 * and the per-step token mask over the vocabulary trie of json_vocab.c. */
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "gbnf_impl.h"
#include "json_grammar_impl.h"

#define INF (INT32_MAX / 4)
#define MAX_EXPAND 100000  /* expansion calls for one step of one stack: a safety net, not a real limit */
#define MEMO_MAX 2048      /* distinct parse sets one matcher remembers before it forgets them all */
#define MEMO_UNKNOWN (-2)  /* a transition not stepped yet */
#define MEMO_DEAD (-1)     /* no parse takes the byte */
#define MEMO_FULL (-3)     /* no room for another parse set */
#define LOOP_CACHE 8       /* code-point sets, with their token masks, one matcher keeps */
#define LOOP_MAX_CUTS 1024 /* class bounds around one parse set beyond which no loop is looked for */
#define LOOP_UNKNOWN (-2)  /* a parse set not checked for a loop yet */
#define LOOP_NONE (-1)     /* no character leads the set back to itself (or too few tokens to pay) */

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
    int32_t *loop;  /* the loopset of each set (an index of kvt_gbnf_m.loops), LOOP_NONE or LOOP_UNKNOWN */
    int32_t n, cap, nslot;
} memo;

/* The code points a parse set steps back to itself on (as intervals), and
 * the tokens made only of such characters: from that set each of them
 * leads back to it, so the mask takes them all in one pass when the set's
 * shortest completion fits, and its walk skips the trie's subtrees that
 * hold nothing else. Free text (a class repeated without bound) is such a
 * set, with nearly the whole vocabulary in it. */
typedef struct {
    uint32_t *lo, *hi; /* sorted, disjoint, not adjacent */
    int32_t n;
    uint8_t *in;   /* (n_vocab) 1: whole canonical UTF-8 characters, all in the set; NULL: too few to pay */
    uint8_t *keep; /* (nodes of the vocabulary's trie) 1: a token at or under the node is not in `in` */
} loopset;

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
    int loops_on;  /* take the tokens of a loopset at once (the default) */
    int32_t taken; /* tokens the last mask took that way */
    loopset loops[LOOP_CACHE];
    int32_t n_loops, loop_evict;
    gstate la, lb; /* scratch for the loop checks */
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

/* 1 when continuation byte c may follow the bytes of parse s's unfinished
 * character and still lead to a valid one. The first byte after E0 or F0 is
 * where an overlong form (a shorter one exists) would begin, after ED a
 * surrogate (D800-DFFF: UTF-16 halves, no characters), after F4 a code point
 * past U+10FFFF; the later bytes only have to be continuations. So a parse
 * inside a character can always finish it, and no invalid UTF-8 gets
 * through. s->cp holds the lead's bits: after a three-byte lead it is below
 * 0x10 with two bytes to come, after a four-byte lead and a continuation it
 * is 0x10 or more. */
static int cont_ok(const gstk *s, uint8_t c) {
    if ((c & 0xC0) != 0x80) return 0;
    if (s->need == 3) return s->cp == 0 ? c >= 0x90 : s->cp == 4 ? c <= 0x8F : 1;
    if (s->need == 2 && s->cp < 0x10) return s->cp == 0 ? c >= 0xA0 : s->cp == 0xD ? c <= 0x9F : 1;
    return 1;
}

/* 1 when class k holds a character (a code point that is not a surrogate) in [a, b]. */
static int class_may_char(const kvt_gbnf *g, int32_t k, uint32_t a, uint32_t b) {
    if (b < 0xD800 || a > 0xDFFF) return kvt_gbnf_class_may(g, k, a, b);
    return (a < 0xD800 && kvt_gbnf_class_may(g, k, a, 0xD7FF)) || (b > 0xDFFF && kvt_gbnf_class_may(g, k, 0xE000, b));
}

/* dst = src stepped by byte c. 0 when no parse takes it, or one would go
 * past a limit (then the byte is refused rather than parses dropped). A NUL
 * byte is never taken, whatever the grammar says: replies are C strings,
 * and the server would write it as U+FFFD, text the grammar may refuse. */
static int step(kvt_gbnf_m *m, gstate *dst, const gstate *src, uint8_t c) {
    const kvt_gbnf *g = m->g;
    dst->n = dst->pn = 0;
    m->over = 0;
    if (!c) return 0;
    for (int32_t i = 0; i < src->n && !m->over; i++) {
        const gstk *s = &src->s[i];
        if (!s->len) continue;
        int32_t top = src->pool[s->off + s->len - 1], k = g->sym[top].arg;
        uint32_t cp;
        uint8_t need;
        if (s->need) {
            if (!cont_ok(s, c)) continue;
            cp = s->cp << 6 | (c & 0x3F), need = (uint8_t)(s->need - 1);
        } else if (c < 0x80) cp = c, need = 0;
        else if (c >= 0xC2 && c <= 0xDF) cp = c & 0x1F, need = 1;
        else if ((c & 0xF0) == 0xE0) cp = c & 0x0F, need = 2;
        else if (c >= 0xF0 && c <= 0xF4) cp = c & 0x07, need = 3;
        else continue;
        if (need) {
            uint32_t lo = cp << (6 * need), hi = lo | ((1u << (6 * need)) - 1);
            if (!s->need && need == 2 && lo < 0x800) lo = 0x800; /* a lead byte: no overlong forms */
            if (!s->need && need == 3 && lo < 0x10000) lo = 0x10000;
            hi = KVT_MIN(hi, 0x10FFFF);
            if (lo <= hi && class_may_char(g, k, lo, hi)) state_add(m, dst, src->pool + s->off, s->len, cp, need);
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
    free(mo->loop);
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
        mo->loop = kvt_xcalloc((size_t)mo->cap, sizeof *mo->loop);
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
    mo->loop[id] = LOOP_UNKNOWN;
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

/* ---- loopsets: the parse sets that whole characters lead back to ---- */

static int utf8_put(uint32_t c, uint8_t *b) {
    if (c < 0x80) return b[0] = (uint8_t)c, 1;
    int n = c < 0x800 ? 2 : c < 0x10000 ? 3 : 4;
    for (int k = n - 1; k > 0; k--, c >>= 6) b[k] = (uint8_t)(0x80 | (c & 0x3F));
    b[0] = (uint8_t)((0xF00u >> n) | c); /* 0xC0, 0xE0 or 0xF0 and the top bits */
    return n;
}

static int loop_has(const loopset *l, uint32_t c) {
    int32_t a = 0, b = l->n;
    while (a < b) {
        int32_t mid = (a + b) / 2;
        if (l->hi[mid] < c) a = mid + 1;
        else b = mid;
    }
    return a < l->n && l->lo[a] <= c;
}

/* 1 when b[0..n) is whole UTF-8 characters in their shortest form (no
 * surrogates, nothing past U+10FFFF), every one in l. Only these are taken
 * at once: the matcher's byte steps decode them to the same code points. */
static int loop_token(const loopset *l, const uint8_t *b, size_t n) {
    for (size_t i = 0; i < n;) {
        uint32_t c = b[i];
        int more = 0;
        uint8_t lo = 0x80, hi = 0xBF;
        if (c < 0x80) more = 0;
        else if (c >= 0xC2 && c <= 0xDF) more = 1;
        else if (c >= 0xE0 && c <= 0xEF) more = 2, lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
        else if (c >= 0xF0 && c <= 0xF4) more = 3, lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
        else return 0;
        if (more) c &= 0x7Fu >> (more + 1);
        for (int k = 1; k <= more; k++) {
            if (i + (size_t)k >= n || b[i + k] < lo || b[i + k] > hi) return 0;
            c = c << 6 | (b[i + k] & 0x3F);
            lo = 0x80, hi = 0xBF;
        }
        if (!loop_has(l, c)) return 0;
        i += (size_t)more + 1;
    }
    return n > 0;
}

static void loop_free(loopset *l) {
    free(l->lo);
    free(l->hi);
    free(l->in);
    free(l->keep);
    memset(l, 0, sizeof *l);
}

/* The tokens of l and the trie nodes to keep walking. When fewer than an
 * eighth of the vocabulary is in l, taking them at once saves too little
 * of the walk to pay for building this; in stays NULL. */
static void loop_build(kvt_gbnf_m *m, loopset *l) {
    const kvt_jg_vocab *v = m->v;
    const trie *t = &v->all;
    int32_t n_in = 0;
    l->in = kvt_xcalloc((size_t)v->n_vocab, 1);
    for (int32_t id = 0; id < v->n_vocab; id++)
        if (v->len[id] && loop_token(l, v->blob + v->off[id], v->len[id])) l->in[id] = 1, n_in++;
    if (n_in < v->n_vocab / 8) {
        free(l->in);
        l->in = NULL;
        return;
    }
    l->keep = kvt_xcalloc((size_t)KVT_MAX(t->n, 1), 1);
    int32_t path[KVT_JG_MAX_TOKEN + 1];
    for (int32_t i = 0; i < t->n; i++) {
        int32_t d = t->depth[i];
        path[d] = i;
        /* the tokens ending at a node share its bytes: the first one says for all */
        if (t->tok[i] >= 0 && !l->in[t->tok[i]])
            for (int32_t k = d; k >= 1 && !l->keep[path[k]]; k--) l->keep[path[k]] = 1;
    }
}

/* The index in m->loops of the set lo/hi[0..n), made when new (the oldest
 * made is dropped when the cache is full). */
static int32_t loop_get(kvt_gbnf_m *m, const uint32_t *lo, const uint32_t *hi, int32_t n) {
    for (int32_t i = 0; i < m->n_loops; i++) {
        const loopset *l = &m->loops[i];
        if (l->n == n && !memcmp(l->lo, lo, (size_t)n * sizeof *lo) && !memcmp(l->hi, hi, (size_t)n * sizeof *hi))
            return i;
    }
    int32_t i = m->n_loops < LOOP_CACHE ? m->n_loops++ : m->loop_evict++ % LOOP_CACHE;
    loop_free(&m->loops[i]);
    for (int32_t k = 0; k < m->mo.n; k++) /* sets that pointed at the dropped one look again */
        if (m->mo.loop[k] == i) m->mo.loop[k] = LOOP_UNKNOWN;
    loopset *l = &m->loops[i];
    l->n = n;
    l->lo = kvt_xmalloc((size_t)n * sizeof *lo);
    l->hi = kvt_xmalloc((size_t)n * sizeof *hi);
    memcpy(l->lo, lo, (size_t)n * sizeof *lo);
    memcpy(l->hi, hi, (size_t)n * sizeof *hi);
    loop_build(m, l);
    return i;
}

/* 1 when the bytes of code point c step s to s itself. */
static int loop_steps_back(kvt_gbnf_m *m, const gstate *s, uint32_t c) {
    uint8_t b[4];
    int nb = utf8_put(c, b);
    const gstate *cur = s;
    for (int k = 0; k < nb; k++) {
        gstate *dst = k % 2 ? &m->lb : &m->la;
        if (!step(m, dst, cur, b[k])) return 0;
        cur = dst;
    }
    return state_eq(cur, s);
}

static int by_u32(const void *a, const void *b) {
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

/* The loopset of parse set s, or LOOP_NONE. A whole character's step from s
 * depends only on which of s's parses have a class on top that holds it (the
 * bytes before the last keep every parse whose class may hold the
 * character, and then only those whose class does hold it go on); so
 * between two bounds of those classes every code point leads to the same
 * set, and one representative per interval decides for it. The interval
 * bounds also split at NUL, the lengths of UTF-8 encodings and the surrogates. */
static int32_t loop_find(kvt_gbnf_m *m, const gstate *s) {
    const kvt_gbnf *g = m->g;
    static const uint32_t fixed[] = {0, 1, 0x80, 0x800, 0xD800, 0xE000, 0x10000, 0x110000}; /* 0: NUL, never taken */
    uint32_t cut[LOOP_MAX_CUTS + 8], lo[LOOP_MAX_CUTS + 8], hi[LOOP_MAX_CUTS + 8];
    int32_t nc = 0, n = 0;
    for (size_t i = 0; i < KVT_ARRAY_LEN(fixed); i++) cut[nc++] = fixed[i];
    for (int32_t i = 0; i < s->n; i++) {
        const gstk *k = &s->s[i];
        if (k->need) return LOOP_NONE; /* inside a character: a whole one cannot lead back here */
        if (!k->len) continue;
        const gclass *c = &g->cls[g->sym[s->pool[k->off + k->len - 1]].arg];
        if (nc + 2 * c->n > LOOP_MAX_CUTS) return LOOP_NONE;
        for (int32_t j = 0; j < c->n; j++) {
            cut[nc++] = KVT_MIN(g->lo[c->off + j], 0x110000u);
            cut[nc++] = KVT_MIN(g->hi[c->off + j], 0x10FFFFu) + 1;
        }
    }
    qsort(cut, (size_t)nc, sizeof *cut, by_u32);
    int saved = m->overflowed; /* a refused check is no step of the text */
    for (int32_t i = 0; i + 1 < nc; i++) {
        uint32_t a = cut[i], b = cut[i + 1] - 1;
        if (cut[i + 1] == a || a >= 0x110000 || (a >= 0xD800 && a < 0xE000)) continue;
        if (!loop_steps_back(m, s, a)) continue;
        if (n && hi[n - 1] + 1 == a) hi[n - 1] = b;
        else lo[n] = a, hi[n] = b, n++;
    }
    m->overflowed = saved;
    return n ? loop_get(m, lo, hi, n) : LOOP_NONE;
}

/* The loopset of m's state when it has tokens to take at once, else NULL. */
static const loopset *loop_here(kvt_gbnf_m *m) {
    int32_t li;
    if (!m->loops_on) return NULL;
    if (m->memo_max) {
        int32_t id = memo_id(m, &m->st);
        if (id == MEMO_FULL) memo_clear(&m->mo), id = memo_id(m, &m->st);
        if (m->mo.loop[id] == LOOP_UNKNOWN) m->mo.loop[id] = loop_find(m, &m->st);
        li = m->mo.loop[id];
    } else {
        li = loop_find(m, &m->st);
    }
    return li >= 0 && m->loops[li].in ? &m->loops[li] : NULL;
}

/* Marks the tokens of in (0/1 per token) in mask; how many were new. */
static int32_t loop_take(const uint8_t *in, uint8_t *mask, int32_t nv) {
    int32_t count = 0;
    for (int32_t id = 0; id < nv; id++) {
        count += in[id] & (mask[id] ^ 1);
        mask[id] |= in[id];
    }
    return count;
}

kvt_gbnf_m *kvt_gbnf_m_new(const kvt_gbnf *g, const kvt_jg_vocab *v) {
    kvt_gbnf_m *m = kvt_xcalloc(1, sizeof *m);
    m->g = g, m->v = v;
    m->memo_max = MEMO_MAX;
    m->loops_on = 1;
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
    for (int32_t i = 0; i < m->n_loops; i++) loop_free(&m->loops[i]);
    state_free(&m->la);
    state_free(&m->lb);
    free(m);
}

/* Marks the tokens of trie t whose bytes step from m's state and leave the
 * shortest completion within left bytes. Returns how many it marked. With
 * keep, only the nodes it marks are visited (the rest were taken at once). */
static int32_t walk(kvt_gbnf_m *m, const trie *t, int32_t left, uint8_t *mask, const uint8_t *keep) {
    int32_t count = 0;
    if (!m->walk) m->walk = kvt_xcalloc(KVT_JG_MAX_TOKEN + 1, sizeof *m->walk); /* on first use */
    state_copy(&m->walk[0], &m->st);
    for (int32_t i = 0; i < t->n;) {
        int32_t d = t->depth[i];
        if (keep && !keep[i]) {
            i = t->skip[i];
            continue;
        }
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
static int32_t walk_memo(kvt_gbnf_m *m, const trie *t, int32_t left, uint8_t *mask, const uint8_t *keep) {
    int32_t count = 0, ids[KVT_JG_MAX_TOKEN + 1];
    if (!m->walk) m->walk = kvt_xcalloc(KVT_JG_MAX_TOKEN + 1, sizeof *m->walk);
    ids[0] = memo_id(m, &m->st);
    if (ids[0] == MEMO_FULL) memo_clear(&m->mo), ids[0] = memo_id(m, &m->st);
    for (int32_t i = 0; i < t->n;) {
        if (keep && !keep[i]) {
            i = t->skip[i];
            continue;
        }
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

void kvt_gbnf_m_set_loops(kvt_gbnf_m *m, int on) { m->loops_on = on != 0; }

void kvt_gbnf_m_set_memo(kvt_gbnf_m *m, int32_t max_sets) {
    memo_free(&m->mo);
    memset(&m->mo, 0, sizeof m->mo);
    m->memo_max = KVT_MAX(max_sets, 0);
}

int32_t kvt_gbnf_m_mask(kvt_gbnf_m *m, int32_t budget, uint8_t *mask) {
    const kvt_jg_vocab *v = m->v;
    memset(mask, 0, (size_t)v->n_vocab);
    m->taken = 0;
    if (all_done(&m->st) || budget < 1) return 0;
    int32_t count = 0, left = budget - 1;
    if (can_end(&m->st))
        for (int32_t id = 0; id < v->n_vocab; id++)
            if (v->eog[id]) mask[id] = 1, count++;
    int32_t (*w)(kvt_gbnf_m *, const trie *, int32_t, uint8_t *, const uint8_t *) = m->memo_max ? walk_memo : walk;
    /* the tokens of a loopset end where the text stands now, so they fit when its shortest completion does */
    const loopset *l = loop_here(m);
    int32_t need = min_bytes(m->g, &m->st), n = 0;
    if (l && need <= left) n = loop_take(l->in, mask, v->n_vocab);
    m->taken = n;
    n += w(m, &v->all, left, mask, l ? l->keep : NULL);
    /* past the budget already (it counts bytes; tokens are often longer):
     * only tokens that bring the end nearer (a loopset's tokens do not) */
    if (!n && need > left) n = w(m, &v->all, need - 1, mask, l ? l->keep : NULL);
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
int32_t kvt_gbnf_m_loop_taken(const kvt_gbnf_m *m) { return m->taken; }
