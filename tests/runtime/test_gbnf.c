// SPDX-License-Identifier: MIT
/* GBNF grammars: valid grammars compiled and each kind of error refused with
 * its line and column; texts accepted and refused byte by byte (a JSON-like
 * grammar, arithmetic, repetition bounds, UTF-8 classes); the token mask
 * equal to a brute-force check of every token of a real vocabulary, and
 * random walks through the mask that always end in a text the grammar
 * accepts; the memoised mask equal to the plain one, step by step, for
 * grammars with repeated character classes; the mask that takes a free-text
 * loop's tokens at once equal to brute force and to the walk without it;
 * classes that take only well-formed UTF-8 (no surrogates, overlong forms or
 * code points past U+10FFFF, refused at the first byte that departs), so
 * walks of byte tokens never get stuck inside a character; only the end of
 * generation on the last token where the text may end but need not. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "gbnf.h"
#include "jg_test.h"

static kvt_jg_schema *compile(const char *text) {
    char err[256];
    kvt_jg_schema *s = NULL;
    int rc = kvt_jg_schema_gbnf(text, strlen(text), &s, err, sizeof err);
    CHECKF(rc == 0 && s, "%s: %s", text, err);
    return s;
}

/* 1 if text is accepted whole and the grammar may end there. */
static int accepts(const kvt_jg_schema *s, const char *text) {
    kvt_jg *g = kvt_jg_new(s, NULL);
    int ok = kvt_jg_feed(g, text, strlen(text)) == 0 && kvt_jg_can_end(g);
    kvt_jg_free(g);
    return ok;
}

static void expect(const char *grammar, const char *const *good, size_t n_good, const char *const *bad, size_t n_bad) {
    kvt_jg_schema *s = compile(grammar);
    if (!s) return;
    for (size_t i = 0; i < n_good; i++) CHECKF(accepts(s, good[i]), "'%s' should match %s", good[i], grammar);
    for (size_t i = 0; i < n_bad; i++) CHECKF(!accepts(s, bad[i]), "'%s' should not match %s", bad[i], grammar);
    kvt_jg_schema_free(s);
}

#define EXPECT(g, good, bad) expect(g, good, KVT_ARRAY_LEN(good), bad, KVT_ARRAY_LEN(bad))

static const char JSONISH[] = "# a small JSON\n"
                              "root ::= value\n"
                              "value ::= object | array | string | number | (\"true\" | \"false\" | \"null\")\n"
                              "object ::=\n"
                              "  \"{\" ws ( string \":\" ws value (\",\" ws string \":\" ws value)* )? \"}\"\n"
                              "array ::= \"[\" ws ( value (\",\" ws value)* )? \"]\"\n"
                              "string ::= \"\\\"\" ( [^\"\\\\\\x00-\\x1f] | \"\\\\\" [\"\\\\nt] )* \"\\\"\" ws\n"
                              "number ::= \"-\"? ([0-9] | [1-9] [0-9]*) ws\n"
                              "ws ::= [ \\t\\n]{0,4}\n";

static const char ARITH[] = "root ::= expr\n"
                            "expr ::= term ((\"+\" | \"-\") term)*\n"
                            "term ::= factor ((\"*\" | \"/\") factor)*\n"
                            "factor ::= [0-9]+ | \"(\" expr \")\"\n";

static void test_match(void) {
    static const char *const yn_good[] = {"yes 1", "no 999", "yes 05"};
    static const char *const yn_bad[] = {"yes", "maybe 1", "no 1000", "yes  1", "no a", ""};
    EXPECT("root ::= (\"yes\" | \"no\") \" \" [0-9]{1,3}", yn_good, yn_bad);

    static const char *const js_good[] = {"{}", "[1,2,[]]", "{\"a\": [true, null, \"x\\n\"], \"b\": -12}", "\"\""};
    static const char *const js_bad[] = {"{", "[1,]", "{\"a\" 1}", "01", "\"a\nb\"", "tru"};
    EXPECT(JSONISH, js_good, js_bad);

    static const char *const ar_good[] = {"1", "1+2*3", "(1+2)*(3-4)/5", "((7))"};
    static const char *const ar_bad[] = {"", "1+", "(1", "1)", "+1", "1**2"};
    EXPECT(ARITH, ar_good, ar_bad);

    static const char *const rep_good[] = {"ab", "aab", "aaab", "abbb", "aaabbbc"};
    static const char *const rep_bad[] = {"b", "aaaab", "a", "abcc", "aaabbbcb"};
    EXPECT("root ::= \"a\"{1,3} \"b\"{1,} \"c\"?", rep_good, rep_bad);
    static const char *const ex_good[] = {"xyxyxy"};
    static const char *const ex_bad[] = {"xyxy", "xyxyxyxy"};
    EXPECT("root ::= \"xy\"{3}", ex_good, ex_bad);
    static const char *const min_good[] = {"aa", "aaaaaaa"};
    static const char *const min_bad[] = {"a", ""};
    EXPECT("root ::= [a]{2,}  # at least two", min_good, min_bad);

    /* UTF-8: classes match whole characters, ranges beyond ASCII, negation, any */
    static const char *const u_good[] = {"\xc3\xa9", "\xce\xb1\xce\xbb", "\xe6\x97\xa5", "\xf0\x9f\x98\x80", "z"};
    static const char *const u_bad[] = {"\xc3", "\xe6\x97", "a", "\xc3\xa9\xc3", "\x80"};
    EXPECT("root ::= ([\\u00e0-\\u00ff] | [\\u03b1-\\u03c9]+ | [日本] | [\\U0001F600-\\U0001F64F] | [^a-y])", u_good,
           u_bad);
    static const char *const any_good[] = {"<\xe2\x82\xac>", "<x>"};
    static const char *const any_bad[] = {"<>", "<xy>"};
    EXPECT("root ::= \"<\" . \">\"", any_good, any_bad);

    /* an empty first alternative, alternatives on the next lines */
    static const char *const ws_good[] = {"[]", "[ ]", "[\n\t\t]", "[x,x]"};
    static const char *const ws_bad[] = {"[  ]", "[\n\n]", "[x,]"};
    EXPECT("root ::= \"[\" ws ( \"x\" (\",\" \"x\")* )? \"]\"\n"
           "ws ::= | \" \"\n"
           "     | \"\\n\" [ \\t]{0,2}\n",
           ws_good, ws_bad);

    /* a byte that cannot begin an allowed character is refused at once */
    kvt_jg_schema *s = compile("root ::= [\\u00e0-\\u00ff]");
    kvt_jg *g = kvt_jg_new(s, NULL);
    CHECK(kvt_jg_feed(g, "\xce", 1) != 0);
    CHECK(kvt_jg_feed(g, "\xc3", 1) == 0 && !kvt_jg_can_end(g) && kvt_jg_min_bytes(g) == 1);
    CHECK(kvt_jg_feed(g, "\x80", 1) != 0 && kvt_jg_feed(g, "\xa0", 1) == 0 && kvt_jg_done(g));
    kvt_jg_free(g);
    kvt_jg_schema_free(s);
}

/* An item that matches only the empty string is the empty string however it
 * is repeated; a bounded repetition of an item that may be empty is a
 * choice of copies. */
static void test_empty_items(void) {
    static const char *const e_good[] = {""};
    static const char *const e_bad[] = {"a", " "};
    EXPECT("root ::= (\"\")+", e_good, e_bad);
    EXPECT("root ::= ((\"\"))*", e_good, e_bad);
    EXPECT("root ::= (\"\" | (\"\" \"\")){2,}", e_good, e_bad);
    EXPECT("root ::= \"\"+ (\"\")? ()*", e_good, e_bad);
    static const char *const ab_good[] = {"ab"};
    static const char *const ab_bad[] = {"a", "b", "aab"};
    EXPECT("root ::= \"a\" (\"\")+ \"b\"", ab_good, ab_bad);
    static const char *const opt_good[] = {"", "a", "aa", "aaa"};
    static const char *const opt_bad[] = {"aaaa", "b"};
    EXPECT("root ::= (\"a\"?){0,3}", opt_good, opt_bad);
    EXPECT("root ::= (\"a\"?)? \"a\"? (\"a\" | \"\")?", opt_good, opt_bad);
}

/* Each error names where and what. */
static void test_errors(void) {
    static const struct {
        const char *grammar, *want;
    } bad[] = {
        {"root ::= value", "line 1, column 10: undefined rule 'value'"},
        {"item ::= \"a\"", "no 'root' rule"},
        {"root ::= (\"a\" | \"b\"", "line 1, column 10: '(' is not closed"},
        {"root ::= \"a\" )", "line 1, column 14: ')' without a matching '('"},
        {"root ::= \"abc", "line 1, column 10: a string literal is not closed"},
        {"root ::= [a-z", "line 1, column 10: '[' is never closed"},
        {"root ::= [z-a]", "below its start"},
        {"root ::= \"a\"{3,1}", "n below m"},
        {"root ::= \"a\"{999}", "above 256"},
        {"root ::= \"\\q\"", "line 1, column 11: unknown escape '\\q'"},
        {"root ::= \"\\xZ1\"", "needs hex digits"},
        {"root ::= expr\nexpr ::= expr \"+\" \"1\" | \"1\"", "rule 'expr' is left-recursive"},
        {"root ::= a\na ::= b? a \"x\" | \"y\"\nb ::= \"z\"", "rule 'a' is left-recursive"},
        {"root ::= \"a\" root", "rule 'root' never finishes"},
        /* characters the matcher never takes: the grammar could never finish */
        {"root ::= \"\\x00\"", "rule 'root' never finishes"},
        {"root ::= [\\x00]", "no reply holds: NUL"},
        {"root ::= \"a\" [\\uD800-\\uDFFF]", "rule 'root' never finishes"},
        {"root ::= [^\\x01-\\uD7FF\\uE000-\\U0010FFFF]", "rule 'root' never finishes"},
        {"root ::= x\nx ::= [\\x00] | \"b\" x", "never finishes"},
        {"root ::= \"a\"\nroot ::= \"b\"", "line 2, column 1: rule 'root' is defined twice"},
        {"root \"a\"", "line 1, column 6: expected '::='"},
        {"root ::= \"a\" @", "line 1, column 14: unexpected '@'"},
        {"root ::= []", "an empty class"},
        /* an unbounded repetition of an item that can be empty, named as written with its rule */
        {"root ::= (\"a\"?)*", "line 1, column 10: rule 'root': '(\"a\"?)*' repeats an item that can match the empty"},
        {"root ::= \"b\" x+\nx ::= \"a\"*", "line 1, column 14: rule 'root': 'x+' repeats an item"},
        {"root ::= y\ny ::= \"(\" ((\"a\" | \"\") | \"\"){2,} \")\"", "rule 'y': '((\"a\" | \"\") | \"\"){2,}' repeats"},
        {"root ::= \"a\" | (\"b\" [\\x00])", "a group or repetition in rule 'root' never finishes"},
    };
    /* a start that already needs more parse stacks than the limit */
    size_t cap = 16 * KVT_GBNF_MAX_STACKS + 64, at;
    char *big = malloc(cap), berr[256] = "", want[64];
    at = (size_t)snprintf(big, cap, "root ::= \"a\" [0-9]");
    for (int i = 0; i < KVT_GBNF_MAX_STACKS; i++) at += (size_t)snprintf(big + at, cap - at, " | \"ab%d\"", i);
    kvt_jg_schema *bs = NULL;
    CHECK(kvt_jg_schema_gbnf(big, strlen(big), &bs, berr, sizeof berr) == KVT_EARG && !bs);
    snprintf(want, sizeof want, "more than %d parse stacks", KVT_GBNF_MAX_STACKS);
    CHECKF(strstr(berr, want), "got '%s'", berr);
    free(big);
    for (size_t i = 0; i < KVT_ARRAY_LEN(bad); i++) {
        char err[256] = "";
        kvt_jg_schema *s = NULL;
        int rc = kvt_jg_schema_gbnf(bad[i].grammar, strlen(bad[i].grammar), &s, err, sizeof err);
        CHECKF(rc == KVT_EARG && !s && strstr(err, bad[i].want), "'%s': got '%s', want '%s'", bad[i].grammar, err,
               bad[i].want);
        kvt_jg_schema_free(s);
    }
}

/* ---- over a real vocabulary --------------------------------------------------------------- */

/* The mask equals stepping every token's bytes one by one, with the budget. */
static void check_mask(const kvt_jg_schema *s, const kvt_jg_vocab *v, const kvt_tokenizer *t, const char *prefix,
                       int32_t budget) {
    uint8_t *mask = malloc((size_t)kvt_tokenizer_n_vocab(t));
    kvt_jg *g = kvt_jg_new(s, v);
    CHECK(kvt_jg_feed(g, prefix, strlen(prefix)) == 0);
    jg_check_mask(g, s, t, budget, prefix, mask);
    kvt_jg_free(g);
    free(mask);
}

/* Random walks: any allowed token until the end or the budget; the text matches. */
static void random_walks(const kvt_jg_schema *s, const kvt_jg_vocab *v, const kvt_tokenizer *t, int walks) {
    int32_t nv = kvt_tokenizer_n_vocab(t);
    uint8_t *mask = malloc((size_t)nv);
    uint64_t rng = 42;
    for (int w = 0; w < walks; w++) {
        kvt_jg *g = kvt_jg_new(s, v);
        char text[4096];
        size_t len = 0;
        int ended = 0;
        for (int step = 0; step < 200 && !ended; step++) {
            int32_t n = kvt_jg_mask(g, 200 - step, mask);
            if (!n) break;
            int32_t pick = jg_pick(mask, nv, n, &rng);
            CHECK(kvt_jg_accept(g, pick) == 0);
            int pl = kvt_token_piece(t, pick, text + len, sizeof text - len, 0);
            if (pl > 0) len += (size_t)pl;
            ended = kvt_jg_done(g);
        }
        text[len] = 0;
        /* where the grammar never has to stop, the budget still leaves it where it may end */
        CHECKF(ended || kvt_jg_can_end(g), "walk %d stopped where the grammar cannot end: '%s'", w, text);
        CHECKF(accepts(s, text), "walk %d produced '%s', which the grammar refuses", w, text);
        kvt_jg_free(g);
    }
    free(mask);
}

/* Two matchers fed the same random tokens, one with the memo of parse sets
 * and one without: their masks agree at every step, tight budgets included. */
static void memo_walks(const char *grammar, const kvt_jg_vocab *v, int walks, int steps, int32_t memo_max) {
    char err[256];
    kvt_gbnf *gb = NULL;
    CHECKF(kvt_gbnf_parse(grammar, strlen(grammar), &gb, err, sizeof err) == 0, "%s: %s", grammar, err);
    if (!gb) return;
    int32_t nv = kvt_jg_vocab_size(v);
    uint8_t *fast = malloc((size_t)nv), *slow = malloc((size_t)nv);
    uint64_t rng = 7;
    for (int w = 0; w < walks; w++) {
        kvt_gbnf_m *a = kvt_gbnf_m_new(gb, v), *b = kvt_gbnf_m_new(gb, v);
        kvt_gbnf_m_set_memo(a, memo_max);
        kvt_gbnf_m_set_memo(b, 0);
        for (int step = 0; step < steps && !kvt_gbnf_m_done(a); step++) {
            int32_t budget = w % 2 ? steps - step : 400; /* odd walks end on a tight budget */
            int32_t n = kvt_gbnf_m_mask(a, budget, fast);
            CHECKF(n == kvt_gbnf_m_mask(b, budget, slow) && !memcmp(fast, slow, (size_t)nv),
                   "%s: walk %d step %d: the memoised mask differs from the plain one", grammar, w, step);
            if (!n) break;
            int32_t pick = jg_pick(fast, nv, n, &rng);
            CHECK(kvt_gbnf_m_accept(a, pick) == 0 && kvt_gbnf_m_accept(b, pick) == 0);
        }
        kvt_gbnf_m_free(a);
        kvt_gbnf_m_free(b);
    }
    free(fast);
    free(slow);
    kvt_gbnf_free(gb);
}

static void test_memo(const kvt_tokenizer *t) {
    kvt_jg_vocab *v = kvt_jg_vocab_new(t);
    memo_walks("root ::= item{1,6}\nitem ::= \"- \" [^\\n]+ \"\\n\"\n", v, 2, 25, 2048); /* negated */
    memo_walks("root ::= [a-z0-9 ]* \".\" [A-Z]+ [0-9]{2,5}", v, 2, 25, 2048);           /* ranges, bounded */
    memo_walks("root ::= [^a-z\\u00e9]+ \"|\" [\\u00e0-\\u00ff\\u4e00-\\u9fff ]*", v, 2, 25, 2048); /* multibyte */
    memo_walks("root ::= ([a-zA-Z .,] | [^\\x00-\\x7f])+ \"\\n\"", v, 2, 25, 2048); /* ASCII and any non-ASCII */
    memo_walks(JSONISH, v, 2, 25, 2048);
    /* a memo with room for little more than one token's path: it starts over again and again */
    memo_walks(JSONISH, v, 2, 25, 1);
    memo_walks("root ::= [a-z ]{0,250} \".\"", v, 2, 40, 1); /* a new parse set at every byte */
    kvt_jg_vocab_free(v);
}

/* The mask of grammar after prefix equals stepping every token's bytes on a
 * fresh matcher, with the budget rule; want_taken: whether the mask must have
 * taken tokens at once through a loopset (1), or must not have (0). */
static void check_loop_mask(const char *grammar, const kvt_jg_vocab *v, const kvt_tokenizer *t, const char *prefix,
                            int32_t budget, int want_taken) {
    char err[256];
    kvt_gbnf *gb = NULL;
    CHECKF(kvt_gbnf_parse(grammar, strlen(grammar), &gb, err, sizeof err) == 0, "%s: %s", grammar, err);
    if (!gb) return;
    int32_t nv = kvt_tokenizer_n_vocab(t), want = 0, wrong = 0;
    uint8_t *mask = malloc((size_t)nv);
    kvt_gbnf_m *m = kvt_gbnf_m_new(gb, v);
    CHECK(kvt_gbnf_m_feed(m, prefix, strlen(prefix)) == 0);
    int32_t n = kvt_gbnf_m_mask(m, budget, mask);
    for (int32_t id = 0; id < nv; id++) {
        char buf[KVT_JG_MAX_TOKEN + 1];
        int len = kvt_token_piece(t, id, buf, sizeof buf, 0), ok;
        if (len > 0 && len <= KVT_JG_MAX_TOKEN) {
            kvt_gbnf_m *h = kvt_gbnf_m_new(gb, NULL);
            ok = kvt_gbnf_m_feed(h, prefix, strlen(prefix)) == 0 && kvt_gbnf_m_feed(h, buf, (size_t)len) == 0 &&
                kvt_gbnf_m_min_bytes(h) <= budget - 1;
            kvt_gbnf_m_free(h);
        } else {
            ok = (kvt_tokenizer_is_eog(t, id) || id == kvt_tokenizer_eos(t)) && kvt_gbnf_m_can_end(m);
        }
        want += ok;
        wrong += ok != mask[id];
    }
    CHECKF(!wrong && n == want, "%s after '%s' (budget %d): mask allows %d, brute force %d, %d differ", grammar, prefix,
           budget, n, want, wrong);
    int32_t taken = kvt_gbnf_m_loop_taken(m);
    CHECKF(want_taken ? taken > 0 : taken == 0, "%s after '%s' (budget %d): %d tokens taken at once", grammar, prefix,
           budget, taken);
    kvt_gbnf_m_free(m);
    free(mask);
    kvt_gbnf_free(gb);
}

/* Two matchers fed the same random tokens: one taking loopsets' tokens at
 * once (memo of memo_max sets), the other walking every token (with the
 * memo, which test_memo holds to the plain walk); the masks agree at every
 * step, tight budgets included. want_taken: some
 * step of the walks took tokens at once (1), none did (0), either (-1). */
static void loop_walks(const char *grammar, const kvt_jg_vocab *v, int walks, int steps, int32_t memo_max,
                       int want_taken) {
    char err[256];
    kvt_gbnf *gb = NULL;
    CHECKF(kvt_gbnf_parse(grammar, strlen(grammar), &gb, err, sizeof err) == 0, "%s: %s", grammar, err);
    if (!gb) return;
    int32_t nv = kvt_jg_vocab_size(v);
    uint8_t *fast = malloc((size_t)nv), *slow = malloc((size_t)nv);
    uint64_t rng = 11;
    long taken = 0;
    for (int w = 0; w < walks; w++) {
        kvt_gbnf_m *a = kvt_gbnf_m_new(gb, v), *b = kvt_gbnf_m_new(gb, v);
        kvt_gbnf_m_set_memo(a, memo_max);
        kvt_gbnf_m_set_loops(b, 0);
        for (int step = 0; step < steps && !kvt_gbnf_m_done(a); step++) {
            int32_t budget = w % 2 ? steps - step : 400; /* odd walks end on a tight budget */
            int32_t n = kvt_gbnf_m_mask(a, budget, fast);
            taken += kvt_gbnf_m_loop_taken(a);
            CHECKF(kvt_gbnf_m_loop_taken(b) == 0, "%s: a matcher with loopsets off took tokens at once", grammar);
            CHECKF(n == kvt_gbnf_m_mask(b, budget, slow) && !memcmp(fast, slow, (size_t)nv),
                   "%s: walk %d step %d: the mask with loopsets differs from the plain one", grammar, w, step);
            if (!n) break;
            int32_t pick = jg_pick(fast, nv, n, &rng);
            CHECK(kvt_gbnf_m_accept(a, pick) == 0 && kvt_gbnf_m_accept(b, pick) == 0);
        }
        kvt_gbnf_m_free(a);
        kvt_gbnf_m_free(b);
    }
    CHECKF(want_taken < 0 || (want_taken ? taken > 0 : taken == 0), "%s: %ld tokens taken at once over the walks",
           grammar, taken);
    free(fast);
    free(slow);
    kvt_gbnf_free(gb);
}

static const char LINES[] = "root ::= item{1,6}\nitem ::= \"- \" [^\\n]+ \"\\n\"\n";

static void test_loops(const kvt_tokenizer *t) {
    kvt_jg_vocab *v = kvt_jg_vocab_new(t);
    /* a negated class looping, then a newline and more lines */
    check_loop_mask(LINES, v, t, "- some text", 100, 1);
    check_loop_mask(LINES, v, t, "- some text", 1, 0);      /* past the budget: only what brings the end nearer */
    check_loop_mask(LINES, v, t, "- ", 100, 0);             /* the first character is not the loop yet */
    check_loop_mask(LINES, v, t, "- caf\xc3", 100, 0);      /* inside a character */
    check_loop_mask(LINES, v, t, "- caf\xc3\xa9 ", 100, 1); /* after a whole one */
    /* a loop over two classes (ASCII letters and any non-ASCII character), then a newline */
    check_loop_mask("root ::= ([a-zA-Z .,] | [^\\x00-\\x7f])+ \"\\n\"", v, t, "Gr\xc3\xbc\xc3\x9f Gott", 100, 1);
    /* only part of a class leads back: 'a' may also begin "ab", so tokens with an 'a' are walked */
    check_loop_mask("root ::= ( [^\\n] | \"ab\" \"!\" )* \"\\n\"", v, t, "xyz", 100, 1);
    check_loop_mask("root ::= ( [^\\n] | \"ab\" \"!\" )* \"\\n\"", v, t, "xyza", 100, 0);
    /* multi-byte characters cut out of a negated class; JSON-like strings on a tight budget */
    check_loop_mask("root ::= [^\\u00e9\\u4e00-\\u9fff\\n]+ \"\\n\"", v, t, "na", 100, 1);
    check_loop_mask(JSONISH, v, t, "{\"key\": \"some value", 3, 1);
    /* bounded repetitions never come back to the same parse set */
    check_loop_mask("root ::= [a-z ]{0,250} \".\"", v, t, "abc", 100, 0);
    loop_walks("root ::= [^\\n]{1,40} \"\\n\"", v, 2, 40, 2048, 0);
    /* narrow classes: too few tokens to pay for taking them at once */
    loop_walks("root ::= [0-9]+ \".\" [0-9]{1,3}", v, 2, 20, 2048, 0);

    loop_walks(LINES, v, 4, 40, 2048, 1);
    loop_walks(LINES, v, 2, 40, 0, 1); /* without the memo, too */
    loop_walks(LINES, v, 2, 40, 1, 1); /* a memo that starts over again and again */
    loop_walks("root ::= [a-z ]+ \".\" [0-9]{1,3}", v, 4, 40, 2048, 1);
    loop_walks("root ::= [^\\u00e9\\u4e00-\\u9fff\\n]+ \"\\n\" [\\u00e0-\\u00ff\\u4e00-\\u9fff ]*", v, 4, 40, 2048, 1);
    /* -1: a loop, but with too few tokens in it (those with no lowercase letter): either way */
    loop_walks("root ::= [^a-z\\u00e9]+ \"|\" [\\u00e0-\\u00ff\\u4e00-\\u9fff ]*", v, 2, 40, 2048, -1);
    loop_walks("root ::= ([a-zA-Z .,] | [^\\x00-\\x7f])+ \"\\n\"", v, 4, 40, 2048, 1);
    loop_walks("root ::= ( [^\\n] | \"ab\" \"!\" )* \"\\n\" \"end\"", v, 4, 40, 2048, 1);
    loop_walks(JSONISH, v, 4, 40, 2048, -1); /* -1: strings may or may not come up */
    loop_walks("root ::= [a-z ]{0,250} \".\"", v, 2, 40, 2048, 0);
    kvt_jg_vocab_free(v);
}

/* ---- UTF-8 at its edges -------------------------------------------------------------------- */

/* How many bytes of b[0..n) are a prefix of valid UTF-8 (shortest forms, no
 * surrogates, nothing past U+10FFFF), written here from the Unicode table of
 * well-formed byte sequences rather than shared with the matcher. */
static size_t utf8_valid_prefix(const uint8_t *b, size_t n) {
    size_t i = 0;
    while (i < n) {
        uint8_t c = b[i], lo = 0x80, hi = 0xBF;
        size_t more;
        if (c < 0x80) more = 0;
        else if (c >= 0xC2 && c <= 0xDF) more = 1;
        else if (c >= 0xE0 && c <= 0xEF) more = 2, lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
        else if (c >= 0xF0 && c <= 0xF4) more = 3, lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
        else return i;
        for (size_t k = 1; k <= more && i + k < n; k++, lo = 0x80, hi = 0xBF)
            if (b[i + k] < lo || b[i + k] > hi) return i + k;
        i += more + 1;
    }
    return n;
}

/* A negated class (as llama.cpp's list.gbnf has) takes every character but
 * no byte sequence that is not one: after each lead byte, exactly the
 * continuations the Unicode table allows are taken, so no parse is left
 * inside a character it cannot finish (a surrogate, an overlong form). */
static void test_utf8_edges(void) {
    static const uint8_t leads[] = {0xC2, 0xDF, 0xE0, 0xE1, 0xED, 0xEE, 0xEF, 0xF0, 0xF1, 0xF4};
    kvt_jg_schema *s = compile("root ::= \"- \" [^\\r\\n]+ \"\\n\"");
    int wrong = 0, first = 0;
    for (size_t i = 0; i < KVT_ARRAY_LEN(leads); i++)
        for (int c = 0x80; c <= 0xBF; c++) {
            uint8_t b[4] = {'-', ' ', leads[i], (uint8_t)c};
            kvt_jg *g = kvt_jg_new(s, NULL);
            int took = kvt_jg_feed(g, (const char *)b, 4) == 0, want = utf8_valid_prefix(b, 4) == 4;
            if (took != want && !wrong++) first = leads[i] << 8 | c;
            kvt_jg_free(g);
        }
    CHECKF(!wrong, "%d lead and continuation pairs taken or refused wrongly, the first %02X %02X", wrong, first >> 8,
           first & 0xFF);
    static const char *const good[] = {"- \xed\x9f\xbf\n", "- \xe0\xa0\x80\n", "- \xf0\x90\x80\x80\n",
                                       "- \xf4\x8f\xbf\xbf\n", "- \xee\x80\x80\n"};
    static const char *const bad[] = {"- \xed\xa0\x80\n", "- \xe0\x80\x80\n", "- \xf0\x80\x80\x80\n",
                                      "- \xf4\x90\x80\x80\n", "- \xc0\x80\n"};
    for (size_t i = 0; i < KVT_ARRAY_LEN(good); i++) CHECKF(accepts(s, good[i]), "'%s' should match", good[i]);
    for (size_t i = 0; i < KVT_ARRAY_LEN(bad); i++) CHECKF(!accepts(s, bad[i]), "'%s' should not match", bad[i]);
    kvt_jg *nul = kvt_jg_new(s, NULL); /* NUL is in the class, but never taken: a reply cannot carry it */
    CHECK(kvt_jg_feed(nul, "- a", 3) == 0 && kvt_jg_feed(nul, "\0", 1) != 0 && kvt_jg_feed(nul, "\x01\n", 2) == 0);
    kvt_jg_free(nul);
    kvt_jg_schema_free(s);
    /* U+D7F0 just below the surrogates is a character; a class of surrogates alone has none that ED begins */
    s = compile("root ::= [\\uD7F0-\\uDFFF]");
    kvt_jg *g = kvt_jg_new(s, NULL);
    CHECK(kvt_jg_feed(g, "\xed\x9f", 2) == 0 && kvt_jg_feed(g, "\xb0", 1) == 0 && kvt_jg_done(g));
    kvt_jg_free(g);
    kvt_jg_schema_free(s);
    s = compile("root ::= [\\uD800-\\uDFFF] | \"x\"");
    g = kvt_jg_new(s, NULL);
    CHECK(kvt_jg_feed(g, "\xed", 1) != 0);
    kvt_jg_free(g);
    kvt_jg_schema_free(s);
}

/* Over a real vocabulary (whose byte tokens can cut characters anywhere):
 * after a lead byte, or part-way through list.gbnf-like lines, every token
 * the mask allows keeps the text valid UTF-8 so far and holds no NUL, and the
 * mask never allows nothing before the text may end. */
static void test_utf8_mask(const kvt_tokenizer *t) {
    kvt_jg_vocab *v = kvt_jg_vocab_new(t);
    kvt_jg_schema *s = compile("root ::= (\"- \" [^\\r\\n\\x0b\\x0c\\x85\\u2028\\u2029]+ \"\\n\")+");
    int32_t nv = kvt_tokenizer_n_vocab(t);
    uint8_t *mask = malloc((size_t)nv);
    static const char *const prefixes[] = {"- \xe0", "- \xed", "- \xf0", "- \xf4", "- \xef\xbf", "- a\xf0\x9f", "- a"};
    for (size_t i = 0; i < KVT_ARRAY_LEN(prefixes); i++) {
        kvt_jg *g = kvt_jg_new(s, v);
        size_t pl = strlen(prefixes[i]);
        CHECK(kvt_jg_feed(g, prefixes[i], pl) == 0);
        int32_t n = kvt_jg_mask(g, 100, mask), bad = 0;
        for (int32_t id = 0; id < nv; id++) {
            uint8_t buf[KVT_JG_MAX_TOKEN + 8];
            memcpy(buf, prefixes[i], pl);
            int len = kvt_token_piece(t, id, (char *)buf + pl, KVT_JG_MAX_TOKEN, 0);
            if (mask[id] && len > 0 &&
                (utf8_valid_prefix(buf, pl + (size_t)len) != pl + (size_t)len || memchr(buf + pl, 0, (size_t)len)))
                bad++;
        }
        CHECKF(n > 0 && !bad, "after '%s': %d allowed, %d of them make invalid UTF-8 or hold NUL", prefixes[i], n, bad);
        jg_check_mask(g, s, t, 100, prefixes[i], mask);
        kvt_jg_free(g);
    }
    /* seeded walks that pick among byte-sized tokens first (those cut characters): valid text, never stuck */
    uint64_t rng = 7;
    uint8_t *one = malloc((size_t)nv), *text = malloc(1 << 16);
    for (int w = 0; w < 12; w++) {
        kvt_jg *g = kvt_jg_new(s, v);
        size_t len = 0;
        int stuck = 0;
        for (int step = 0; step < 60; step++) {
            int32_t n = kvt_jg_mask(g, 60 - step, mask), n1 = 0;
            if (!n) {
                stuck = !kvt_jg_can_end(g);
                break;
            }
            for (int32_t id = 0; id < nv; id++) {
                char b[KVT_JG_MAX_TOKEN + 1];
                one[id] = mask[id] && kvt_token_piece(t, id, b, sizeof b, 0) == 1 && (uint8_t)b[0] >= 0x80;
                n1 += one[id];
            }
            int32_t pick = n1 && w % 3 ? jg_pick(one, nv, n1, &rng) : jg_pick(mask, nv, n, &rng);
            CHECK(kvt_jg_accept(g, pick) == 0);
            if (kvt_tokenizer_is_eog(t, pick) || pick == kvt_tokenizer_eos(t)) break;
            int pl = kvt_token_piece(t, pick, (char *)text + len, (1 << 16) - len, 0);
            if (pl > 0) len += (size_t)pl;
        }
        CHECKF(!stuck, "walk %d: the mask allows nothing after '%.*s'", w, (int)len, text);
        CHECKF(utf8_valid_prefix(text, len) == len, "walk %d made invalid UTF-8: '%.*s'", w, (int)len, text);
        kvt_jg_free(g);
    }
    free(one);
    free(text);
    free(mask);
    kvt_jg_schema_free(s);
    kvt_jg_vocab_free(v);
}

/* The last token of the budget where the text may end (and may go on): only
 * the end of generation. Not yet where it may end: what completes it. */
static void test_last_token(const kvt_tokenizer *t) {
    kvt_jg_vocab *v = kvt_jg_vocab_new(t);
    kvt_jg_schema *s = compile("root ::= [a-z]+ (\"-\" [a-z]+)*");
    int32_t nv = kvt_tokenizer_n_vocab(t), eog = 0;
    uint8_t *mask = malloc((size_t)nv);
    for (int32_t id = 0; id < nv; id++) eog += kvt_tokenizer_is_eog(t, id) || id == kvt_tokenizer_eos(t);
    kvt_jg *g = kvt_jg_new(s, v);
    CHECK(kvt_jg_feed(g, "ab", 2) == 0 && kvt_jg_can_end(g));
    int32_t n = kvt_jg_mask(g, 1, mask), only = 1;
    for (int32_t id = 0; id < nv; id++)
        if (mask[id]) only &= kvt_tokenizer_is_eog(t, id) || id == kvt_tokenizer_eos(t);
    CHECKF(eog > 0 && n == eog && only, "budget 1 where the text may end: %d allowed, %d end generation", n, eog);
    jg_check_mask(g, s, t, 1, "ab", mask);
    CHECK(kvt_jg_mask(g, 2, mask) > 1000); /* with two left, letters may come (and the end after them) */
    jg_check_mask(g, s, t, 2, "ab", mask);
    kvt_jg_free(g);
    g = kvt_jg_new(s, v);
    CHECK(kvt_jg_feed(g, "ab-", 3) == 0 && !kvt_jg_can_end(g));
    n = kvt_jg_mask(g, 1, mask);
    CHECKF(n > 1000 && !mask[kvt_tokenizer_eos(t)], "budget 1 where the text may not end: %d allowed", n);
    jg_check_mask(g, s, t, 1, "ab-", mask);
    kvt_jg_free(g);
    free(mask);
    kvt_jg_schema_free(s);
    kvt_jg_vocab_free(v);
}

static void test_vocab(const kvt_tokenizer *t) {
    kvt_jg_vocab *v = kvt_jg_vocab_new(t);
    kvt_jg_schema *yn = compile("root ::= (\"yes\" | \"no\") \" \" [0-9]{1,3}");
    kvt_jg_schema *js = compile(JSONISH);
    kvt_jg_schema *ar = compile(ARITH);
    check_mask(yn, v, t, "", 100);
    check_mask(yn, v, t, "ye", 100);
    check_mask(yn, v, t, "no 1", 100);
    check_mask(js, v, t, "{\"a\": [1, ", 100);
    check_mask(js, v, t, "{\"a\": [1, ", 6); /* tight: "]}" and whitespace only where they fit */
    check_mask(ar, v, t, "(1+", 50);
    random_walks(yn, v, t, 20);
    random_walks(js, v, t, 20);
    random_walks(ar, v, t, 20);
    kvt_jg_schema_free(yn);
    kvt_jg_schema_free(js);
    kvt_jg_schema_free(ar);
    kvt_jg_vocab_free(v);
}

int main(void) {
    test_match();
    test_empty_items();
    test_errors();
    test_utf8_edges();
    kvt_tokenizer *t = kvt_test_vocab("ggml-vocab-gpt-2.gguf");
    if (!t) {
        kvt_test_skip_part("../shared/vocab/ggml-vocab-gpt-2.gguf is missing: no vocabulary tests");
        return kvt_test_done("test_gbnf");
    }
    test_vocab(t);
    test_utf8_mask(t);
    test_last_token(t);
    test_memo(t);
    test_loops(t);
    kvt_tokenizer_free(t);
    return kvt_test_done("test_gbnf");
}
