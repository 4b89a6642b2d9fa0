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
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "json_grammar_impl.h"

#define MAX_FRAMES (2 * KVT_JG_MAX_DEPTH + 6)
#define MAX_INT_DIGITS 15 /* KVT_JG_NUMBER_LIMIT */
#define MAX_FRAC_DIGITS 16
#define MAX_EXP_DIGITS 3
#define HEX_DIGITS 4

enum { F_VALUE, F_OBJ, F_ARR, F_STR, F_NUM, F_LIT, F_KEY, F_TAG };
enum { O_OPEN, O_COMMA, O_IN_KEY, O_AFTER_KEY, O_IN_VALUE, O_AFTER_VALUE };
enum { A_OPEN, A_COMMA, A_IN_ITEM, A_AFTER_ITEM };
enum { S_NORMAL, S_ESC, S_HEX, S_UTF8 };
enum { N_BEGIN, N_SIGN, N_ZERO, N_INT, N_DOT, N_FRAC, N_E, N_ESIGN, N_EXP };
enum { T_HEAD, T_VALUE, T_TAIL };
#define AUX_KEY 1 /* F_STR: an object key (free keys) */

typedef struct {
    uint8_t kind, sub, ws, aux;
    int32_t node;
    uint32_t count; /* string: characters; array: items started; literal/key/tag: bytes matched */
    int32_t idx;    /* object: property after its key (-1 free); tag: alternative; string: pending bytes */
    uint64_t set;   /* candidates (literal/key/tag head), used properties (object), \u value (string) */
} frame;

typedef struct {
    int32_t depth;
    int32_t done;
    frame f[MAX_FRAMES];
} jstate;

typedef struct {
    int32_t n;
    uint8_t *byte;
    uint8_t *depth; /* 1-based */
    int32_t *skip;  /* the node after this one's subtree (preorder) */
    int32_t *tok;   /* first token ending here, -1: none; the rest via next */
    int32_t *next;  /* (n_vocab) */
} trie;

struct kvt_jg_vocab {
    int32_t n_vocab;
    uint32_t *off; /* (n_vocab) token bytes in blob */
    uint8_t *len;  /* (n_vocab) 0: never allowed */
    uint8_t *blob;
    trie all, special; /* every token; the tokens that are not plain string text */
    int32_t *plain;    /* tokens that are plain string text, and their characters */
    uint32_t *plain_chars;
    int32_t n_plain;
    uint8_t *plain_mask; /* (n_vocab) 1 for the plain ones, copied whole where no maxLength is near */
    uint32_t max_plain_chars;
    uint8_t *eog; /* (n_vocab) end-of-generation tokens */
};

struct kvt_jg {
    const kvt_jg_schema *s;
    const kvt_jg_vocab *v;
    jstate st;
    jstate *walk; /* (KVT_JG_MAX_TOKEN + 1) states, one per trie depth; made by the first mask */
};

/* ---- matching ----------------------------------------------------------------- */

static int is_ws(uint8_t c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
static int is_digit(uint8_t c) { return c >= '0' && c <= '9'; }
static int hex_val(uint8_t c) {
    return is_digit(c) ? c - '0' : (c >= 'a' && c <= 'f') ? c - 'a' + 10 : (c >= 'A' && c <= 'F') ? c - 'A' + 10 : -1;
}

static const jnode *N(const kvt_jg_schema *s, int32_t i) { return &s->nodes[i]; }

static frame *push(jstate *st, uint8_t kind, int32_t node) {
    if (st->depth >= MAX_FRAMES) return NULL;
    frame *f = &st->f[st->depth++];
    memset(f, 0, sizeof *f);
    f->kind = kind;
    f->node = node;
    return f;
}

static int step(jstate *st, const kvt_jg_schema *s, uint8_t c);

/* The top frame's value is complete: pop it and advance its parent. */
static int value_done(jstate *st, const kvt_jg_schema *s) {
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
static int key_done(jstate *st, int32_t prop) {
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

/* Replaces the top F_VALUE frame by the value c starts. */
static int start_value(jstate *st, const kvt_jg_schema *s, uint8_t c) {
    frame *f = &st->f[st->depth - 1];
    int32_t ni = f->node;
    const jnode *n = N(s, ni);
    if (n->kind == JN_UNION) {
        int cls = c == '{'              ? JC_OBJECT
            : c == '['                  ? JC_ARRAY
            : c == '"'                  ? JC_STRING
            : c == 't'                  ? JC_TRUE
            : c == 'f'                  ? JC_FALSE
            : c == 'n'                  ? JC_NULL
            : (c == '-' || is_digit(c)) ? JC_NUMBER
                                        : -1;
        if (cls < 0 || n->branch[cls] < 0) return 0;
        ni = n->branch[cls];
        n = N(s, ni);
    }
    /* an object or array nested past the limit could not hold its value */
    if ((n->kind == JN_OBJECT || n->kind == JN_ARRAY) && st->depth + 3 > MAX_FRAMES) return 0;
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
    case JN_UNION: break;
    }
    return 0;
}

static int num_terminal(uint8_t sub) { return sub == N_ZERO || sub == N_INT || sub == N_FRAC || sub == N_EXP; }

static int step_num(jstate *st, const kvt_jg_schema *s, frame *f, uint8_t c) {
    const jnode *n = N(s, f->node);
    int integer = n->kind == JN_INTEGER;
    int d = is_digit(c);
    switch (f->sub) {
    case N_BEGIN:
        if (c == '-') return !n->nonneg && (f->sub = N_SIGN, 1);
        /* fallthrough */
    case N_SIGN:
        if (!d || (c == '0' && n->positive)) return 0;
        f->sub = c == '0' ? N_ZERO : N_INT;
        f->count = 1;
        return 1;
    case N_INT:
        if (d && f->count < MAX_INT_DIGITS) return f->count++, 1;
        /* fallthrough */
    case N_ZERO:
        if (c == '.' && !integer) return f->sub = N_DOT, 1;
        if ((c == 'e' || c == 'E') && !integer && !n->no_exp) return f->sub = N_E, 1;
        break;
    case N_DOT:
        if (!d) return 0;
        f->sub = N_FRAC;
        f->count = 1;
        return 1;
    case N_FRAC:
        if (d && f->count < MAX_FRAC_DIGITS) return f->count++, 1;
        if ((c == 'e' || c == 'E') && !n->no_exp) return f->sub = N_E, 1;
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
    if (!num_terminal(f->sub) || is_digit(c)) return 0;
    return value_done(st, s) && step(st, s, c);
}

static int step_str(jstate *st, const kvt_jg_schema *s, frame *f, uint8_t c) {
    const jnode *n = N(s, f->node);
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

static int start_key(jstate *st, const kvt_jg_schema *s, frame *o) {
    const jnode *n = N(s, o->node);
    o->sub = O_IN_KEY;
    if (n->free_keys) {
        frame *k = push(st, F_STR, s->any_string);
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

static int step_obj(jstate *st, const kvt_jg_schema *s, frame *f, uint8_t c) {
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

static int step_arr(jstate *st, const kvt_jg_schema *s, frame *f, uint8_t c) {
    const jnode *n = N(s, f->node);
    if (is_ws(c)) return take_ws(f);
    f->ws = 0;
    if (f->sub == A_AFTER_ITEM) {
        if (c == ',') return f->count < n->max_items && (f->sub = A_COMMA, 1);
        return c == ']' && f->count >= n->min_items && value_done(st, s);
    }
    if (f->sub == A_OPEN && c == ']') return n->min_items == 0 && value_done(st, s);
    if (f->count >= n->max_items) return 0;
    f->count++;
    f->sub = A_IN_ITEM;
    return push(st, F_VALUE, n->child[0]) && step(st, s, c);
}

/* Literals (F_LIT), declared keys (F_KEY) and tagged heads (F_TAG): the byte
 * narrows the candidate texts. */
static int step_texts(jstate *st, const kvt_jg_schema *s, frame *f, uint8_t c) {
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

static int step(jstate *st, const kvt_jg_schema *s, uint8_t c) {
    if (st->done || st->depth == 0) return 0;
    frame *f = &st->f[st->depth - 1];
    switch (f->kind) {
    case F_VALUE:
        /* a tagged choice starts with its head, exactly */
        if (is_ws(c)) return N(s, f->node)->kind != JN_TAGGED && take_ws(f);
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

/* ---- the shortest completion ---------------------------------------------------- */

/* Bytes of ",KEY:VALUE" for each required property not yet written. */
static int32_t required_rest(const jnode *n, const kvt_jg_schema *s, uint64_t used) {
    int32_t r = 0;
    for (uint64_t m = n->required & ~used; m; m &= m - 1) {
        int q = __builtin_ctzll(m);
        r += 1 + n->slen[q] + 1 + N(s, n->child[q])->min_bytes;
    }
    return r;
}

static int32_t obj_cost(const kvt_jg_schema *s, const frame *f) {
    const jnode *n = N(s, f->node);
    int32_t rest = required_rest(n, s, f->set);
    int any_req = (n->required & ~f->set) != 0;
    switch (f->sub) {
    case O_OPEN: return any_req ? rest : 1; /* the first property has no comma before it */
    case O_COMMA: {
        if (any_req) return rest;
        if (n->free_keys) return 2 + 1 + N(s, n->free_value)->min_bytes + 1; /* "":V} */
        int32_t best = INT32_MAX;
        for (int32_t q = 0; q < n->n; q++)
            if (!(f->set >> q & 1)) best = KVT_MIN(best, n->slen[q] + 1 + N(s, n->child[q])->min_bytes);
        return best + 1;
    }
    case O_IN_KEY: return rest + 1 + (n->free_keys ? 1 + N(s, n->free_value)->min_bytes : 0);
    case O_AFTER_KEY: return 1 + N(s, f->idx >= 0 ? n->child[f->idx] : n->free_value)->min_bytes + rest + 1;
    default: return rest + 1;
    }
}

static int32_t arr_cost(const kvt_jg_schema *s, const frame *f) {
    const jnode *n = N(s, f->node);
    int32_t item = N(s, n->child[0])->min_bytes;
    int64_t more = (int64_t)n->min_items - f->count;
    switch (f->sub) {
    case A_OPEN: return n->min_items ? (int32_t)n->min_items * item + (int32_t)n->min_items - 1 + 1 : 1;
    case A_COMMA: return item + (int32_t)KVT_MAX(more - 1, 0) * (1 + item) + 1;
    default: return (int32_t)KVT_MAX(more, 0) * (1 + item) + 1;
    }
}

/* A declared key being written: the rest of the key, ':', its value, less
 * what its parent counts for it when it is a required one. */
static int32_t key_cost(const kvt_jg_schema *s, const frame *k) {
    const jnode *n = N(s, k->node);
    int32_t best = INT32_MAX;
    for (uint64_t m = k->set; m; m &= m - 1) {
        int q = __builtin_ctzll(m);
        int32_t v = N(s, n->child[q])->min_bytes;
        int32_t c = n->slen[q] - (int32_t)k->count + 1 + v;
        if (n->required >> q & 1) c -= 1 + n->slen[q] + 1 + v;
        best = KVT_MIN(best, c);
    }
    return best;
}

static int32_t frame_cost(const kvt_jg_schema *s, const frame *f) {
    const jnode *n = N(s, f->node);
    switch (f->kind) {
    case F_VALUE: return n->min_bytes;
    case F_OBJ: return obj_cost(s, f);
    case F_ARR: return arr_cost(s, f);
    case F_STR: {
        int32_t pend = f->sub == S_ESC ? 1 : f->sub == S_HEX ? HEX_DIGITS - f->idx : f->sub == S_UTF8 ? f->idx : 0;
        return pend + (int32_t)(n->min_len > f->count ? n->min_len - f->count : 0) + 1;
    }
    case F_NUM: return num_terminal(f->sub) ? 0 : 1;
    case F_KEY: return key_cost(s, f);
    case F_LIT:
    case F_TAG: {
        if (f->kind == F_TAG && f->sub == T_TAIL) return n->tlen[f->idx] - (int32_t)f->count;
        if (f->kind == F_TAG && f->sub == T_VALUE) return n->tlen[f->idx];
        int32_t best = INT32_MAX;
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

static int32_t min_bytes(const jstate *st, const kvt_jg_schema *s) {
    int64_t sum = 0;
    for (int32_t i = 0; i < st->depth; i++) sum += frame_cost(s, &st->f[i]);
    return (int32_t)KVT_MIN(sum, INT32_MAX);
}

static int can_end(const jstate *st, const kvt_jg_schema *s) {
    if (st->done) return 1;
    if (st->depth != 1) return 0;
    const frame *f = &st->f[0];
    if (f->kind == F_NUM) return num_terminal(f->sub);
    if (f->kind != F_LIT) return 0;
    const jnode *n = N(s, f->node);
    for (uint64_t m = f->set; m; m &= m - 1)
        if ((uint32_t)n->slen[__builtin_ctzll(m)] == f->count) return 1;
    return 0;
}

/* ---- the vocabulary --------------------------------------------------------------- */

/* Characters of b[0..n) if it is plain string text: whole valid UTF-8
 * characters, none of them a control character, '"' or '\\'; else -1. */
static int32_t plain_chars(const uint8_t *b, size_t n) {
    jstate st = {.depth = 1};
    kvt_jg_schema one = {0};
    jnode str = {.kind = JN_STRING, .max_len = UINT32_MAX};
    one.nodes = &str;
    st.f[0].kind = F_STR;
    for (size_t i = 0; i < n; i++)
        if (b[i] == '"' || b[i] == '\\' || !step(&st, &one, b[i])) return -1;
    return st.f[0].sub == S_NORMAL ? (int32_t)st.f[0].count : -1;
}

static const kvt_jg_vocab *sort_vocab; /* qsort has no context argument; building is single-threaded per call */

static int by_bytes(const void *a, const void *b) {
    const kvt_jg_vocab *v = sort_vocab;
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    size_t lx = v->len[x], ly = v->len[y];
    int c = memcmp(v->blob + v->off[x], v->blob + v->off[y], KVT_MIN(lx, ly));
    if (c) return c;
    if (lx != ly) return lx < ly ? -1 : 1;
    return x < y ? -1 : x > y;
}

/* A preorder trie of ids[0..n), sorted by their bytes. */
static void trie_build(trie *t, const kvt_jg_vocab *v, const int32_t *ids, int32_t n) {
    size_t cap = 0;
    for (int32_t i = 0; i < n; i++) cap += v->len[ids[i]];
    cap = KVT_MAX(cap, 1);
    t->byte = kvt_xmalloc(cap);
    t->depth = kvt_xmalloc(cap);
    t->skip = kvt_xmalloc(cap * sizeof *t->skip);
    t->tok = kvt_xmalloc(cap * sizeof *t->tok);
    t->next = kvt_xmalloc((size_t)v->n_vocab * sizeof *t->next);
    t->n = 0;
    int32_t path[KVT_JG_MAX_TOKEN + 1];
    int32_t open = 0, prev = -1; /* path[0..open) are the nodes of the previous token */
    for (int32_t i = 0; i < n; i++) {
        int32_t id = ids[i], len = v->len[id];
        const uint8_t *b = v->blob + v->off[id];
        int32_t common = 0;
        if (prev >= 0) {
            const uint8_t *pb = v->blob + v->off[prev];
            int32_t pl = v->len[prev];
            while (common < len && common < pl && pb[common] == b[common]) common++;
        }
        for (int32_t d = common; d < open; d++) t->skip[path[d]] = t->n; /* close the previous path below the fork */
        for (int32_t d = common; d < len; d++) {
            int32_t k = t->n++;
            t->byte[k] = b[d];
            t->depth[k] = (uint8_t)(d + 1);
            t->tok[k] = -1;
            path[d] = k;
        }
        open = len;
        int32_t end = path[len - 1];
        t->next[id] = t->tok[end];
        t->tok[end] = id;
        prev = id;
    }
    for (int32_t d = 0; d < open; d++) t->skip[path[d]] = t->n;
}

static void trie_free(trie *t) {
    free(t->byte);
    free(t->depth);
    free(t->skip);
    free(t->tok);
    free(t->next);
}

kvt_jg_vocab *kvt_jg_vocab_new(const kvt_tokenizer *tk) {
    int32_t nv = kvt_tokenizer_n_vocab(tk);
    if (nv < 1) return NULL;
    kvt_jg_vocab *v = kvt_xcalloc(1, sizeof *v);
    v->n_vocab = nv;
    v->off = kvt_xmalloc((size_t)nv * sizeof *v->off);
    v->len = kvt_xcalloc((size_t)nv, 1);
    v->eog = kvt_xcalloc((size_t)nv, 1);
    size_t cap = 1024, used = 0;
    v->blob = kvt_xmalloc(cap);
    char buf[KVT_JG_MAX_TOKEN + 1];
    for (int32_t id = 0; id < nv; id++) {
        v->eog[id] = kvt_tokenizer_is_eog(tk, id) || id == kvt_tokenizer_eos(tk);
        int len = kvt_token_piece(tk, id, buf, sizeof buf, 0);
        v->off[id] = (uint32_t)used;
        if (len <= 0 || len > KVT_JG_MAX_TOKEN) continue; /* control tokens, and the few very long ones */
        if (used + (size_t)len > cap) {
            cap = KVT_MAX(cap * 2, used + (size_t)len);
            v->blob = kvt_xrealloc(v->blob, cap);
        }
        memcpy(v->blob + used, buf, (size_t)len);
        v->len[id] = (uint8_t)len;
        used += (size_t)len;
    }
    int32_t *ids = kvt_xmalloc((size_t)nv * sizeof *ids), n = 0;
    for (int32_t id = 0; id < nv; id++)
        if (v->len[id]) ids[n++] = id;
    sort_vocab = v;
    qsort(ids, (size_t)n, sizeof *ids, by_bytes);
    trie_build(&v->all, v, ids, n);
    /* split: plain string text apart, the rest in the second trie (still in byte order) */
    v->plain = kvt_xmalloc((size_t)(n ? n : 1) * sizeof *v->plain);
    v->plain_chars = kvt_xmalloc((size_t)(n ? n : 1) * sizeof *v->plain_chars);
    int32_t *other = kvt_xmalloc((size_t)(n ? n : 1) * sizeof *other), n_other = 0;
    v->plain_mask = kvt_xcalloc((size_t)nv, 1);
    for (int32_t i = 0; i < n; i++) {
        int32_t ch = plain_chars(v->blob + v->off[ids[i]], v->len[ids[i]]);
        if (ch > 0) {
            v->plain[v->n_plain] = ids[i];
            v->plain_chars[v->n_plain++] = (uint32_t)ch;
            v->plain_mask[ids[i]] = 1;
            v->max_plain_chars = KVT_MAX(v->max_plain_chars, (uint32_t)ch);
        } else {
            other[n_other++] = ids[i];
        }
    }
    trie_build(&v->special, v, other, n_other);
    free(other);
    free(ids);
    return v;
}

void kvt_jg_vocab_free(kvt_jg_vocab *v) {
    if (!v) return;
    trie_free(&v->all);
    trie_free(&v->special);
    free(v->off);
    free(v->len);
    free(v->blob);
    free(v->plain);
    free(v->plain_chars);
    free(v->plain_mask);
    free(v->eog);
    free(v);
}

int32_t kvt_jg_vocab_size(const kvt_jg_vocab *v) { return v->n_vocab; }

/* ---- the matcher ------------------------------------------------------------------------ */

kvt_jg *kvt_jg_new(const kvt_jg_schema *s, const kvt_jg_vocab *v) {
    kvt_jg *g = kvt_xcalloc(1, sizeof *g);
    g->s = s;
    g->v = v;
    g->st.depth = 1;
    g->st.f[0].kind = F_VALUE;
    g->st.f[0].node = s->root;
    return g;
}

void kvt_jg_free(kvt_jg *g) {
    if (!g) return;
    free(g->walk);
    free(g);
}

static void state_copy(jstate *dst, const jstate *src) {
    dst->depth = src->depth;
    dst->done = src->done;
    memcpy(dst->f, src->f, (size_t)src->depth * sizeof *src->f);
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
        if (!step(st, g->s, t->byte[i])) {
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

int32_t kvt_jg_mask(kvt_jg *g, int32_t budget, uint8_t *mask) {
    const kvt_jg_vocab *v = g->v;
    int32_t left = budget - 1;
    const frame *top = g->st.depth ? &g->st.f[g->st.depth - 1] : NULL;
    if (!g->st.done && budget >= 1 && top->kind == F_STR && top->sub == S_NORMAL && min_bytes(&g->st, g->s) <= left) {
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
    if (g->st.done || budget < 1) return 0;
    int32_t count = 0;
    if (can_end(&g->st, g->s))
        for (int32_t id = 0; id < v->n_vocab; id++)
            if (v->eog[id]) mask[id] = 1, count++;
    int32_t n = walk(g, &v->all, left, mask);
    /* Past the budget already (it counts bytes, and tokens are often longer):
     * only tokens that bring the end nearer, so the document still finishes
     * as soon as it can. */
    int32_t need = min_bytes(&g->st, g->s);
    if (!n && need > left) n = walk(g, &v->all, need - 1, mask);
    return count + n;
}

int kvt_jg_feed(kvt_jg *g, const char *bytes, size_t n) {
    jstate st;
    state_copy(&st, &g->st);
    for (size_t i = 0; i < n; i++) {
        jstate before;
        state_copy(&before, &st);
        if (!step(&st, g->s, (uint8_t)bytes[i])) {
            state_copy(&g->st, &before);
            return KVT_EARG;
        }
    }
    state_copy(&g->st, &st);
    return 0;
}

int kvt_jg_accept(kvt_jg *g, int32_t tok) {
    const kvt_jg_vocab *v = g->v;
    if (tok < 0 || tok >= v->n_vocab) return KVT_EARG;
    if (v->eog[tok] && !v->len[tok]) {
        if (!can_end(&g->st, g->s)) return KVT_EARG;
        g->st.done = 1;
        return 0;
    }
    if (!v->len[tok]) return KVT_EARG;
    jstate st;
    state_copy(&st, &g->st);
    for (uint32_t i = 0; i < v->len[tok]; i++)
        if (!step(&st, g->s, v->blob[v->off[tok] + i])) return KVT_EARG;
    state_copy(&g->st, &st);
    return 0;
}

int kvt_jg_done(const kvt_jg *g) { return g->st.done; }
int kvt_jg_can_end(const kvt_jg *g) { return can_end(&g->st, g->s); }
int32_t kvt_jg_min_bytes(const kvt_jg *g) { return g->st.done ? 0 : min_bytes(&g->st, g->s); }
