// SPDX-License-Identifier: MIT
/* The JSON matcher and its token mask (see json_grammar.h).
 *
 * State is a small stack of frames (an object being written, a string, a
 * number, a literal, ...), stepped one byte at a time. A token is allowed
 * when all its bytes step; the mask walks a preorder trie of the
 * vocabulary's byte strings with one state per depth, so a rejected byte
 * prunes every token that shares the prefix, and a state is a copy of its
 * parent's few live frames. Inside a string, the tokens that are plain text
 * (no quote, backslash, control byte or partial UTF-8) are all allowed at
 * once (subject to maxLength), and only the others are walked.
 *
 * The budget: min_bytes() is the length of the shortest completion, summed
 * frame by frame. Every byte on a shortest completion lowers it by exactly
 * one and every byte is a token in byte-level and byte-fallback vocabularies,
 * so keeping min_bytes(after) <= tokens left after the token always leaves
 * a way to finish. */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "json_grammar_impl.h"

#include "json_match.h"

/* ---- matching ----------------------------------------------------------------- */

static int is_ws(uint8_t c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
static int is_digit(uint8_t c) { return c >= '0' && c <= '9'; }
static int hex_val(uint8_t c) {
    return is_digit(c) ? c - '0' : (c >= 'a' && c <= 'f') ? c - 'a' + 10 : (c >= 'A' && c <= 'F') ? c - 'A' + 10 : -1;
}


/* The set a parse belongs to (forks are added there). */
static jstate *home(jstack *st) { return (jstate *)((char *)(st - st->slot) - offsetof(jstate, a)); }


static frame *push(jstack *st, uint8_t kind, int32_t node) {
    if (st->depth >= MAX_FRAMES) return NULL;
    frame *f = &st->f[st->depth++];
    memset(f, 0, sizeof *f);
    f->kind = kind;
    f->node = node;
    return f;
}

static int step(jstack *st, const kvt_jg_schema *s, uint8_t c);

/* The top frame's value is complete: pop it and advance its parent. */
static int value_done(jstack *st, const kvt_jg_schema *s) {
    st->depth--;
    if (st->depth == 0) {
        st->done = 1;
        return 1;
    }
    frame *p = &st->f[st->depth - 1];
    switch (p->kind) {
    case F_OBJ: p->sub = O_AFTER_VALUE; break;
    case F_ARR: p->sub = A_AFTER_ITEM; break;
    case F_TAG:
        p->sub = T_TAIL;
        p->count = 0;
        if (!N(s, p->node)->tlen[p->idx]) return value_done(st, s);
        break;
    default: break;
    }
    return 1;
}

/* An object key is complete; prop is the property (-1: a free key). */
static int key_done(jstack *st, int32_t prop) {
    st->depth--;
    frame *o = &st->f[st->depth - 1];
    o->sub = O_AFTER_KEY;
    o->idx = prop;
    if (prop >= 0) o->set |= 1ull << prop;
    return 1;
}

/* Candidates of texts[0..n) (of set) whose byte at pos is c. */
static uint64_t narrow(char *const *texts, const int32_t *len, uint64_t set, uint32_t pos, uint8_t c) {
    uint64_t out = 0;
    for (uint64_t m = set; m; m &= m - 1) {
        int i = __builtin_ctzll(m);
        if ((uint32_t)len[i] > pos && (uint8_t)texts[i][pos] == c) out |= 1ull << i;
    }
    return out;
}

static int single_done(uint64_t set, const int32_t *len, uint32_t pos) {
    return set && !(set & (set - 1)) && (uint32_t)len[__builtin_ctzll(set)] == pos;
}

static int first_class(uint8_t c) {
    return c == '{'                 ? JC_OBJECT
        : c == '['                  ? JC_ARRAY
        : c == '"'                  ? JC_STRING
        : c == 't'                  ? JC_TRUE
        : c == 'f'                  ? JC_FALSE
        : c == 'n'                  ? JC_NULL
        : (c == '-' || is_digit(c)) ? JC_NUMBER
                                    : -1;
}

/* Whether a value of node ni, started in the top frame, leaves room for the
 * nesting its shortest value needs (recursive schemas stop here). */
static int fits(const jstack *st, const kvt_jg_schema *s, int32_t ni) {
    const jnode *n = N(s, ni);
    if (n->kind != JN_OBJECT && n->kind != JN_ARRAY) return 1;
    return st->depth - 1 + n->nest <= KVT_JG_MAX_DEPTH + 1;
}

/* A union: the first branch c can start that fits is taken here; each other
 * one becomes a parse of its own (while there is room for it). Returns the
 * branch, or -1. */
static int32_t pick_branch(jstack *st, const kvt_jg_schema *s, const jnode *u, uint8_t c);

/* Replaces the top F_VALUE frame by the value c starts. */
static int start_value(jstack *st, const kvt_jg_schema *s, uint8_t c) {
    frame *f = &st->f[st->depth - 1];
    int32_t ni = f->node;
    const jnode *n = N(s, ni);
    if (n->kind == JN_UNION) {
        ni = pick_branch(st, s, n, c);
        if (ni < 0) return 0;
        n = N(s, ni);
    } else if (!fits(st, s, ni)) {
        return 0;
    }
    memset(f, 0, sizeof *f);
    f->node = ni;
    switch (n->kind) {
    case JN_OBJECT: f->kind = F_OBJ; return c == '{';
    case JN_ARRAY: f->kind = F_ARR; return c == '[';
    case JN_STRING: f->kind = F_STR; return c == '"';
    case JN_NUMBER:
    case JN_INTEGER:
        f->kind = F_NUM;
        f->sub = N_BEGIN;
        return step(st, s, c);
    case JN_LITS:
    case JN_TAGGED:
        f->kind = n->kind == JN_LITS ? F_LIT : F_TAG;
        f->set = n->n >= 64 ? ~0ull : (1ull << n->n) - 1;
        return step(st, s, c);
    default: break;
    }
    return 0;
}

static int32_t pick_branch(jstack *st, const kvt_jg_schema *s, const jnode *u, uint8_t c) {
    int cls = first_class(c);
    if (cls < 0) return -1;
    int32_t taken = -1;
    jstate *h = home(st);
    for (int32_t k = 0; k < u->n; k++) {
        int32_t b = u->child[k];
        if (!(N(s, b)->first >> cls & 1) || !fits(st, s, b)) continue;
        if (taken < 0) {
            taken = b;
            continue;
        }
        if (h->n >= MAX_ALTS) continue; /* fewer parses only ever allow less */
        jstack *cp = &h->a[h->n];
        stack_copy(cp, st);
        cp->slot = (int16_t)h->n++;
        cp->f[cp->depth - 1].node = b;
        if (!start_value(cp, s, c)) h->n--; /* a branch starts without forking again: it is the last */
    }
    return taken;
}

int jg_num_terminal(uint8_t sub) { return sub == N_ZERO || sub == N_INT || sub == N_FRAC || sub == N_EXP; }

/* Fewest more digits after the integer-part prefix p (k digits) that give an
 * integer part in [lo, hi], a multiple of mult; JG_INF: none. */
static int32_t reach(int64_t p, uint32_t k, int64_t lo, int64_t hi, int64_t mult) {
    int64_t scale = 1;
    for (uint32_t j = 0; k + j <= MAX_INT_DIGITS && lo <= hi; j++, scale *= 10) {
        if (p == 0 && j > 0) break; /* a leading zero is the whole integer part */
        int64_t a = p * scale, b = a + scale - 1;
        if (a > hi) break;
        int64_t x = KVT_MAX(a, lo), y = KVT_MIN(b, hi);
        if (x <= y && (x + mult - 1) / mult * mult <= y) return (int32_t)j;
    }
    return JG_INF;
}

/* Bytes still needed after an integer-part prefix of a bounded number. */
int32_t jg_int_part_cost(const jnode *n, const jmag *m, int64_t p, uint32_t k) {
    int32_t z = reach(p, k, m->za, m->zb, n->mult);
    int32_t f = m->fa <= m->fb ? reach(p, k, m->fa, m->fb, 1) : JG_INF;
    return KVT_MIN(z, f < JG_INF ? f + 2 : JG_INF);
}

static int in_range(int64_t v, int64_t lo, int64_t hi) { return v >= lo && v <= hi; }

/* A bounded number complete here (the next byte may end it). */
int jg_bnum_valid(const jnode *n, const frame *f) {
    const jmag *m = &n->mag[f->aux & NUM_NEG];
    int64_t v = (int64_t)f->set;
    if (f->sub == N_ZERO || f->sub == N_INT) return in_range(v, m->za, m->zb) && v % n->mult == 0;
    if (f->sub == N_FRAC) return (f->aux & NUM_NZ) ? in_range(v, m->fa, m->fb) : in_range(v, m->za, m->zb);
    return 0;
}

/* A number with bounds: the integer part only goes where a value in bounds
 * can still come of it; no exponent. */
static int step_bnum(jstack *st, const kvt_jg_schema *s, frame *f, uint8_t c) {
    const jnode *n = N(s, f->node);
    int d = is_digit(c);
    switch (f->sub) {
    case N_BEGIN:
        if (c == '-') return n->mag[1].ok && (f->aux |= NUM_NEG, f->sub = N_SIGN, 1);
        if (!n->mag[0].ok) return 0;
        /* fallthrough */
    case N_SIGN:
        if (!d || jg_int_part_cost(n, &n->mag[f->aux & NUM_NEG], c - '0', 1) >= JG_INF) return 0;
        f->sub = c == '0' ? N_ZERO : N_INT;
        f->count = 1;
        f->set = (uint64_t)(c - '0');
        return 1;
    case N_INT:
        if (d && f->count < MAX_INT_DIGITS) {
            int64_t p = (int64_t)f->set * 10 + (c - '0');
            if (jg_int_part_cost(n, &n->mag[f->aux & NUM_NEG], p, f->count + 1) >= JG_INF) return 0;
            f->set = (uint64_t)p;
            f->count++;
            return 1;
        }
        /* fallthrough */
    case N_ZERO: {
        const jmag *m = &n->mag[f->aux & NUM_NEG];
        int64_t v = (int64_t)f->set;
        if (c == '.' && n->kind == JN_NUMBER)
            return (in_range(v, m->fa, m->fb) || in_range(v, m->za, m->zb)) && (f->sub = N_DOT, f->count = 0, 1);
        break;
    }
    case N_DOT:
    case N_FRAC: {
        const jmag *m = &n->mag[f->aux & NUM_NEG];
        int64_t v = (int64_t)f->set;
        if (d) {
            if (f->count >= MAX_FRAC_DIGITS) return 0;
            if (c != '0' && !in_range(v, m->fa, m->fb)) return 0;
            /* zeros so far with an integer part that needs a fraction: leave room for a digit that is not 0 */
            if (c == '0' && !(f->aux & NUM_NZ) && !in_range(v, m->za, m->zb) && f->count + 1 >= MAX_FRAC_DIGITS)
                return 0;
            if (c != '0') f->aux |= NUM_NZ;
            f->sub = N_FRAC;
            f->count++;
            return 1;
        }
        if (f->sub == N_DOT) return 0;
        break;
    }
    default: return 0;
    }
    if (!jg_bnum_valid(n, f) || d) return 0;
    return value_done(st, s) && step(st, s, c);
}

static int step_num(jstack *st, const kvt_jg_schema *s, frame *f, uint8_t c) {
    const jnode *n = N(s, f->node);
    if (n->bounded) return step_bnum(st, s, f, c);
    int integer = n->kind == JN_INTEGER;
    int d = is_digit(c);
    switch (f->sub) {
    case N_BEGIN:
        if (c == '-') return f->sub = N_SIGN, 1;
        /* fallthrough */
    case N_SIGN:
        if (!d) return 0;
        f->sub = c == '0' ? N_ZERO : N_INT;
        f->count = 1;
        return 1;
    case N_INT:
        if (d && f->count < MAX_INT_DIGITS) return f->count++, 1;
        /* fallthrough */
    case N_ZERO:
        if (c == '.' && !integer) return f->sub = N_DOT, 1;
        if ((c == 'e' || c == 'E') && !integer) return f->sub = N_E, 1;
        break;
    case N_DOT:
        if (!d) return 0;
        f->sub = N_FRAC;
        f->count = 1;
        return 1;
    case N_FRAC:
        if (d && f->count < MAX_FRAC_DIGITS) return f->count++, 1;
        if (c == 'e' || c == 'E') return f->sub = N_E, 1;
        break;
    case N_E:
        if (c == '+' || c == '-') return f->sub = N_ESIGN, 1;
        /* fallthrough */
    case N_ESIGN:
        if (!d) return 0;
        f->sub = N_EXP;
        f->count = 1;
        return 1;
    case N_EXP:
        if (d && f->count < MAX_EXP_DIGITS) return f->count++, 1;
        break;
    }
    /* c does not continue the number: it ends, and c belongs to what follows */
    if (!jg_num_terminal(f->sub) || is_digit(c)) return 0;
    return value_done(st, s) && step(st, s, c);
}

/* The byte a one-letter escape stands for (0: none a patterned string takes). */
static uint8_t unescape(uint8_t c) {
    switch (c) {
    case '"':
    case '\\':
    case '/': return c;
    case 'b': return '\b';
    case 'f': return '\f';
    case 'n': return '\n';
    case 'r': return '\r';
    case 't': return '\t';
    default: return 0;
    }
}

/* Fewest bytes after a backslash in state q: the escape letter, then the
 * rest to an accepting state. */
int32_t jg_esc_best(const jdfa *d, int32_t q) {
    static const uint8_t letters[] = {'"', '\\', '/', 'b', 'f', 'n', 'r', 't'};
    int32_t best = JG_INF;
    for (size_t i = 0; i < sizeof letters; i++) {
        int32_t t = jdfa_next(d, q, unescape(letters[i]));
        if (t >= 0) best = KVT_MIN(best, 1 + d->dist[t]);
    }
    return best;
}

/* A string under a pattern: its decoded bytes step the automaton (no \u escapes). */
static int step_rx(jstack *st, const kvt_jg_schema *s, frame *f, uint8_t c) {
    const jdfa *d = N(s, f->node)->rx;
    int32_t q;
    if (f->sub == S_ESC) {
        uint8_t b = unescape(c);
        if (!b || (q = jdfa_next(d, f->idx, b)) < 0) return 0;
        f->idx = q;
        f->sub = S_NORMAL;
        return 1;
    }
    if (c == '"') {
        if (!d->accept[f->idx]) return 0;
        return (f->aux & AUX_KEY) ? key_done(st, -1) : value_done(st, s);
    }
    if (c == '\\') return jg_esc_best(d, f->idx) < JG_INF && (f->sub = S_ESC, 1);
    if (c < 0x20 || (q = jdfa_next(d, f->idx, c)) < 0) return 0;
    f->idx = q;
    return 1;
}

static int step_str(jstack *st, const kvt_jg_schema *s, frame *f, uint8_t c) {
    const jnode *n = N(s, f->node);
    if (n->rx) return step_rx(st, s, f, c);
    switch (f->sub) {
    case S_NORMAL:
        if (c == '"') {
            if (f->count < n->min_len) return 0;
            return (f->aux & AUX_KEY) ? key_done(st, -1) : value_done(st, s);
        }
        if (c < 0x20 || f->count >= n->max_len) return 0;
        f->count++;
        if (c == '\\') return f->sub = S_ESC, 1;
        if (c < 0x80) return 1;
        /* a UTF-8 lead byte; set holds the range of the next byte (no overlongs, no surrogates) */
        if (c >= 0xC2 && c <= 0xDF) f->idx = 1, f->set = 0x80BF;
        else if (c == 0xE0) f->idx = 2, f->set = 0xA0BF;
        else if (c == 0xED) f->idx = 2, f->set = 0x809F;
        else if (c >= 0xE1 && c <= 0xEF) f->idx = 2, f->set = 0x80BF;
        else if (c == 0xF0) f->idx = 3, f->set = 0x90BF;
        else if (c >= 0xF1 && c <= 0xF3) f->idx = 3, f->set = 0x80BF;
        else if (c == 0xF4) f->idx = 3, f->set = 0x808F;
        else return 0;
        f->sub = S_UTF8;
        return 1;
    case S_UTF8:
        if (c < (f->set >> 8) || c > (f->set & 0xFF)) return 0;
        f->set = 0x80BF;
        if (--f->idx == 0) f->sub = S_NORMAL;
        return 1;
    case S_ESC:
        if (c == 'u') {
            f->sub = S_HEX;
            f->idx = 0;
            f->set = 0;
            return 1;
        }
        if (!strchr("\"\\/bfnrt", c) || !c) return 0;
        f->sub = S_NORMAL;
        return 1;
    case S_HEX: {
        int h = hex_val(c);
        if (h < 0) return 0;
        f->set = f->set << 4 | (uint64_t)h;
        f->idx++;
        /* no surrogate halves (\uD800..\uDFFF) and no \u0000: refused as soon as they are certain */
        if (f->idx == 2 && f->set >= 0xD8 && f->set <= 0xDF) return 0;
        if (f->idx == HEX_DIGITS) {
            if (f->set == 0) return 0;
            f->sub = S_NORMAL;
        }
        return 1;
    }
    }
    return 0;
}

static int start_key(jstack *st, const kvt_jg_schema *s, frame *o) {
    const jnode *n = N(s, o->node);
    o->sub = O_IN_KEY;
    if (n->free_keys) {
        frame *k = push(st, F_STR, n->key_node);
        if (!k) return 0;
        k->aux = AUX_KEY;
        return 1;
    }
    uint64_t all = n->n >= 64 ? ~0ull : (1ull << n->n) - 1, cand = all & ~o->set;
    if (!cand) return 0;
    frame *k = push(st, F_KEY, o->node);
    if (!k) return 0;
    k->set = cand;
    return step(st, s, '"');
}

/* One more whitespace byte in f's gap, up to KVT_JG_MAX_WS. */
static int take_ws(frame *f) {
    if (f->ws >= KVT_JG_MAX_WS) return 0;
    f->ws++;
    return 1;
}

static int has_more_keys(const jnode *n, const frame *o) {
    uint64_t all = n->n >= 64 ? ~0ull : (1ull << n->n) - 1;
    return n->free_keys || (all & ~o->set);
}

static int step_obj(jstack *st, const kvt_jg_schema *s, frame *f, uint8_t c) {
    const jnode *n = N(s, f->node);
    if (is_ws(c)) return take_ws(f);
    f->ws = 0;
    int closable = !(n->required & ~f->set);
    switch (f->sub) {
    case O_OPEN:
        if (c == '}') return closable && value_done(st, s);
        return c == '"' && start_key(st, s, f);
    case O_COMMA: return c == '"' && start_key(st, s, f);
    case O_AFTER_KEY: {
        if (c != ':') return 0;
        f->sub = O_IN_VALUE;
        int32_t v = f->idx >= 0 ? n->child[f->idx] : n->free_value;
        return push(st, F_VALUE, v) != NULL;
    }
    case O_AFTER_VALUE:
        if (c == ',') return has_more_keys(n, f) && (f->sub = O_COMMA, 1);
        return c == '}' && closable && value_done(st, s);
    }
    return 0;
}

/* The node of item i of an array (prefixItems first). */
int32_t jg_item_node(const jnode *n, uint32_t i) { return i + 1 < (uint32_t)n->n ? n->child[1 + i] : n->child[0]; }

static int step_arr(jstack *st, const kvt_jg_schema *s, frame *f, uint8_t c) {
    const jnode *n = N(s, f->node);
    if (is_ws(c)) return take_ws(f);
    f->ws = 0;
    if (f->sub == A_AFTER_ITEM) {
        if (c == ',') return f->count < n->max_items && (f->sub = A_COMMA, 1);
        return c == ']' && f->count >= n->min_items && value_done(st, s);
    }
    if (f->sub == A_OPEN && c == ']') return n->min_items == 0 && value_done(st, s);
    if (f->count >= n->max_items || jg_item_node(n, f->count) < 0) return 0;
    int32_t it = jg_item_node(n, f->count++);
    f->sub = A_IN_ITEM;
    return push(st, F_VALUE, it) && step(st, s, c);
}

/* Literals (F_LIT), declared keys (F_KEY) and tagged heads (F_TAG): the byte
 * narrows the candidate texts. */
static int step_texts(jstack *st, const kvt_jg_schema *s, frame *f, uint8_t c) {
    const jnode *n = N(s, f->node);
    uint64_t next = narrow(n->s, n->slen, f->set, f->count, c);
    if (!next) {
        /* a complete literal ("1" of enum [1, 12]) ends here, and c belongs to what follows */
        if (f->kind != F_LIT) return 0;
        for (uint64_t m = f->set; m; m &= m - 1)
            if ((uint32_t)n->slen[__builtin_ctzll(m)] == f->count) return value_done(st, s) && step(st, s, c);
        return 0;
    }
    f->set = next;
    f->count++;
    if (f->kind == F_KEY) return single_done(next, n->slen, f->count) ? key_done(st, __builtin_ctzll(next)) : 1;
    if (f->kind == F_TAG) {
        if (!single_done(next, n->slen, f->count)) return 1;
        f->sub = T_VALUE;
        f->idx = __builtin_ctzll(next);
        return push(st, F_VALUE, n->child[f->idx]) != NULL;
    }
    /* a literal ends when no candidate goes on */
    for (uint64_t m = next; m; m &= m - 1)
        if ((uint32_t)n->slen[__builtin_ctzll(m)] > f->count) return 1;
    return value_done(st, s);
}

static int step(jstack *st, const kvt_jg_schema *s, uint8_t c) {
    if (st->done || st->depth == 0) return 0;
    frame *f = &st->f[st->depth - 1];
    switch (f->kind) {
    case F_VALUE:
        /* a tagged choice starts with its head, exactly (whitespace there is the head's, if anything) */
        if (is_ws(c) && N(s, f->node)->kind != JN_TAGGED) return take_ws(f);
        return start_value(st, s, c);
    case F_OBJ: return step_obj(st, s, f, c);
    case F_ARR: return step_arr(st, s, f, c);
    case F_STR: return step_str(st, s, f, c);
    case F_NUM: return step_num(st, s, f, c);
    case F_TAG:
        if (f->sub == T_TAIL) {
            const jnode *n = N(s, f->node);
            if ((uint8_t)n->t[f->idx][f->count] != c) return 0;
            if ((int32_t)++f->count == n->tlen[f->idx]) return value_done(st, s);
            return 1;
        }
        return step_texts(st, s, f, c);
    case F_LIT:
    case F_KEY: return step_texts(st, s, f, c);
    }
    return 0;
}

/* Steps every parse by c; the ones that refuse it go. 0 when none is left. */
int jg_step_all(jstate *st, const kvt_jg_schema *s, uint8_t c) {
    int32_t n0 = st->n, m = 0;
    uint8_t ok[MAX_ALTS];
    for (int32_t i = 0; i < n0; i++) ok[i] = (uint8_t)step(&st->a[i], s, c);
    for (int32_t i = 0; i < st->n; i++) {
        if (i < n0 && !ok[i]) continue;
        int dup = 0;
        for (int32_t j = 0; j < m && !dup; j++)
            dup = st->a[j].depth == st->a[i].depth && st->a[j].done == st->a[i].done &&
                !memcmp(st->a[j].f, st->a[i].f, (size_t)st->a[i].depth * sizeof(frame));
        if (dup) continue;
        if (m != i) stack_copy(&st->a[m], &st->a[i]);
        st->a[m].slot = (int16_t)m;
        m++;
    }
    st->n = m;
    return m > 0;
}
