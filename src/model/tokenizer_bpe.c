// SPDX-License-Identifier: MIT
/* Byte-level BPE (GPT-2 style) as llama.cpp does it: a chain of pre-tokenizer
 * regexes (chosen by tokenizer.ggml.pre) splits the text into words, each
 * match and each unmatched gap becoming a word of its own and the next regex
 * splitting each word further; every byte of a word maps to one printable
 * character (GPT-2's bytes_to_unicode); adjacent symbols are merged by lowest
 * merge rank (leftmost on ties) until no pair has a rank.
 *
 * The regexes are llama.cpp's lists rewritten for PCRE2 (UTF + UCP). llama.cpp
 * runs most of them through std::regex over a "collapsed" text where each
 * non-ASCII character stands for its Unicode category, and the others through
 * std::wregex over a text where each non-ASCII space is a vertical tab; the
 * classes below spell out the character sets that gives (its tables, not
 * PCRE2's). Invalid UTF-8 cannot be matched (PCRE2_MATCH_INVALID_UTF), so such
 * bytes end up in gaps and then in byte tokens. */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "tokenizer_impl.h"

/* ---- pre-tokenizer regexes ---- */

/* The contents of a character class ([...]) for llama.cpp's character
 * classes. WS: its \s, Unicode's White_Space list (PCRE2's \s also takes
 * U+180E, a format character since Unicode 6.3). LET, NUM, PUN: \p{L},
 * \p{N}, \p{P} with the characters Unicode 15.0 and 15.1 gave those
 * categories, which llama.cpp's tables have and the tables of PCRE2 10.42
 * (Unicode 14) lack; SYM and MRK likewise for \p{S} and \p{M}. */
#define WS "\\t-\\r \\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}"
#define LET \
    "\\p{L}\\x{1123F}\\x{11240}\\x{11F02}\\x{11F04}-\\x{11F10}\\x{11F12}-\\x{11F33}\\x{1342F}\\x{13441}-\\x{13446}" \
    "\\x{1B132}\\x{1B155}\\x{1DF25}-\\x{1DF2A}\\x{1E030}-\\x{1E06D}\\x{1E4D0}-\\x{1E4EB}\\x{2B739}" \
    "\\x{2EBF0}-\\x{2EE5D}\\x{31350}-\\x{323AF}"
#define NUM "\\p{N}\\x{11F50}-\\x{11F59}\\x{1D2C0}-\\x{1D2D3}\\x{1E4F0}-\\x{1E4F9}"
#define PUN "\\p{P}\\x{11B00}-\\x{11B09}\\x{11F43}-\\x{11F4F}"
#define SYM \
    "\\p{S}\\x{2FFC}-\\x{2FFF}\\x{31EF}\\x{1F6DC}\\x{1F774}-\\x{1F776}\\x{1F77B}-\\x{1F77F}\\x{1F7D9}" \
    "\\x{1FA75}-\\x{1FA77}\\x{1FA87}\\x{1FA88}\\x{1FAAD}-\\x{1FAAF}\\x{1FABB}-\\x{1FABD}\\x{1FABF}" \
    "\\x{1FACE}\\x{1FACF}\\x{1FADA}\\x{1FADB}\\x{1FAE8}\\x{1FAF7}\\x{1FAF8}"
#define MRK \
    "\\p{M}\\x{CF3}\\x{ECE}\\x{10EFD}-\\x{10EFF}\\x{11241}\\x{11F00}\\x{11F01}\\x{11F03}\\x{11F34}-\\x{11F3A}" \
    "\\x{11F3E}-\\x{11F42}\\x{13440}\\x{13447}-\\x{13455}\\x{1E08F}\\x{1E4EC}-\\x{1E4EF}"

/* GPT-2's pattern: contractions, letters, numbers, other symbols, spaces. */
#define RE_GPT2 "'s|'t|'re|'ve|'m|'ll|'d| ?[" LET "]+| ?[" NUM "]+| ?[^" WS LET NUM "]+|[" WS "]+(?![^" WS "])"
/* Llama 3 / Qwen2 family; REP is the digit-group quantifier. */
#define RE_LLAMA3_WITH(REP) \
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n" LET NUM "]?[" LET "]+|[" NUM "]" REP \
    "| ?[^" WS LET NUM "]+[\\r\\n]*|[" WS "]*[\\r\\n]+|[" WS "]+(?![^" WS "])|[" WS "]+"
/* CJK ideographs, the blocks from U+0800 up to them, and Hangul (DeepSeek),
 * less the spaces among them: llama.cpp has turned those into vertical tabs
 * by the time this runs. */
#define RE_CJK \
    "[\\x{4E00}-\\x{9FA5}\\x{0800}-\\x{167F}\\x{1681}-\\x{1FFF}\\x{200B}-\\x{2027}\\x{202A}-\\x{202E}" \
    "\\x{2030}-\\x{205E}\\x{2060}-\\x{2FFF}\\x{3001}-\\x{4E00}\\x{AC00}-\\x{D7FF}]+"
/* Mistral's Tekken: a word is a run of capitals then lower case (or the
 * reverse), letters of no case counting as both. */
#define RE_TEKKEN \
    "[^\\r\\n" LET NUM "]?(?:(?=[" LET "])[^a-z])*(?:(?=[" LET "])[^A-Z])+|[^\\r\\n" LET NUM "]?(?:(?=[" LET \
    "])[^a-z])+(?:(?=[" LET "])[^A-Z])*|[" NUM "]| ?[^" WS LET NUM "]+[\\r\\n/]*|[" WS "]*[\\r\\n]+|[" WS "]+(?![^" WS \
    "])|[" WS "]+"
/* Poro, Viking, BLOOM: a word runs to a space or one of these stops (the
 * parentheses and the bar are in the class, as in llama.cpp). */
#define RE_STOPS " ?[^(" WS "|.,!?\\x{2026}\\x{3002}\\x{FF0C}\\x{3001}\\x{964}\\x{6D4}\\x{60C})]+"
/* DeepSeek V3: ASCII punctuation takes the Latin word after it; letters keep
 * their combining marks. '~' is a symbol here, as the regex means it (a
 * deviation: llama.cpp's stand-in for \p{S} misses it). */
#define RE_DEEPSEEK3 \
    "[!-/:-@\\[-`{-~][A-Za-z]+|[^\\r\\n" LET PUN SYM "]?[" LET MRK "]+| ?[" PUN SYM "]+[\\r\\n]*|[" WS \
    "]*[\\r\\n]+|[" WS "]+(?![^" WS "])|[" WS "]+"
/* The cased letters of DeepSeek LLM's tokenizer.json, range by range. */
#define RE_DEEPSEEK_LETTERS \
    "[" WS "]?[A-Za-z\\x{B5}\\x{C0}-\\x{D6}\\x{D8}-\\x{F6}\\x{F8}-\\x{1BA}\\x{1BC}-\\x{1BF}\\x{1C4}-\\x{293}" \
    "\\x{295}-\\x{2AF}\\x{370}-\\x{373}\\x{376}\\x{377}\\x{37B}-\\x{37D}\\x{37F}\\x{386}\\x{388}-\\x{38A}" \
    "\\x{38C}\\x{38E}-\\x{3A1}\\x{3A3}-\\x{3F5}\\x{3F7}-\\x{481}\\x{48A}-\\x{52F}\\x{531}-\\x{556}" \
    "\\x{10A0}-\\x{10C5}\\x{13A0}-\\x{13F5}\\x{13F8}-\\x{13FD}\\x{1C90}-\\x{1CBA}\\x{1CBD}-\\x{1CBF}" \
    "\\x{1D00}-\\x{1D2B}\\x{1D6B}-\\x{1D77}\\x{1D79}-\\x{1D9A}\\x{1E00}-\\x{1F15}\\x{1F18}-\\x{1F1D}" \
    "\\x{1F20}-\\x{1F45}\\x{1F48}-\\x{1F4D}\\x{1F50}-\\x{1F57}\\x{1F59}\\x{1F5B}\\x{1F5D}\\x{1F5F}-\\x{1F7D}" \
    "\\x{1F80}-\\x{1FB4}\\x{1FB6}-\\x{1FBC}\\x{1FBE}\\x{1FC2}-\\x{1FC4}\\x{1FC6}-\\x{1FCC}\\x{1FD0}-\\x{1FD3}" \
    "\\x{1FD6}-\\x{1FDB}\\x{1FE0}-\\x{1FEC}\\x{1FF2}-\\x{1FF4}\\x{1FF6}-\\x{1FFC}\\x{2102}\\x{2107}" \
    "\\x{210A}-\\x{2113}\\x{2115}\\x{2119}-\\x{211D}\\x{2124}\\x{2126}\\x{2128}\\x{212A}-\\x{212D}" \
    "\\x{212F}-\\x{2134}\\x{2139}\\x{213C}-\\x{213F}\\x{2145}-\\x{2149}\\x{214E}\\x{2183}\\x{2184}" \
    "\\x{2C00}-\\x{2C7B}\\x{2C7E}-\\x{2CE4}\\x{2CEB}-\\x{2CEE}\\x{2CF2}\\x{2CF3}\\x{A640}-\\x{A66D}" \
    "\\x{A680}-\\x{A69B}\\x{A722}-\\x{A76F}\\x{A771}-\\x{A787}\\x{A78B}-\\x{A78E}\\x{AB70}-\\x{ABBF}" \
    "\\x{FB00}-\\x{FB06}\\x{FB13}-\\x{FB17}\\x{FF21}-\\x{FF3A}\\x{FF41}-\\x{FF5A}\\x{10400}-\\x{1044F}" \
    "\\x{104B0}-\\x{104D3}\\x{104D8}-\\x{104FB}\\x{10C80}-\\x{10CB2}\\x{10CC0}-\\x{10CF2}\\x{118A0}-\\x{118DF}" \
    "\\x{1E900}-\\x{1E943}]+"

typedef struct {
    const char *names; /* '|'-separated tokenizer.ggml.pre values */
    const char *canonical;
    int add_bos, ignore_merges;
    const char *re[KVT_BPE_MAX_REGEX];
} pre_def;

static const pre_def pre_defs[] = {
    {"default", "default", 0, 0, {"[" PUN "\\$\\+<=>\\^~\\|]+", RE_GPT2, "[" NUM "]+", "[0-9][0-9][0-9]"}},
    /* add_bos: llama.cpp (build 4748) sets it for these, tekken and chameleon only */
    {"llama3|llama-v3|llama-bpe|falcon3", "llama3", 1, 1, {RE_LLAMA3_WITH("{1,3}")}},
    {"tekken", "tekken", 1, 1, {RE_TEKKEN}},
    {"chameleon",
     "chameleon",
     1,
     0,
     {"<sentinel:[0-9]+>", "IMGIMG[A-I]{1,4}Z", "[\\t\\n]|    |  ", "[" NUM "]", "[" PUN "!-/:-@\\[-`{-~]", RE_GPT2}},
    {"deepseek-v3", "deepseek-v3", 0, 0, {"[" NUM "]{1,3}", "[\\x{4E00}-\\x{9FA5}\\x{3040}-\\x{30FF}]+", RE_DEEPSEEK3}},
    {"poro-chat|bloom|gpt3-finnish", "bloom", 0, 0, {RE_STOPS}},
    {"viking", "viking", 0, 0, {RE_STOPS, "[" NUM "]"}},
    /* llama3's regex, but neither BOS nor ignore_merges */
    {"dbrx|smaug-bpe", "dbrx", 0, 0, {RE_LLAMA3_WITH("{1,3}")}},
    {"deepseek-llm",
     "deepseek-llm",
     0,
     0,
     {"[\\r\\n]", RE_DEEPSEEK_LETTERS,
      "[" WS "]?[!-/:-~\\x{FF01}-\\x{FF0F}\\x{FF1A}-\\x{FF5E}\\x{2018}-\\x{201F}\\x{3001}-\\x{3002}]+", "[" WS "]+$",
      RE_CJK, "[" NUM "]+"}},
    {"deepseek-coder",
     "deepseek-coder",
     0,
     0,
     {"[\\r\\n]", "[" WS "]?[" LET "]+", "[" WS "]?[" PUN "]+", RE_CJK, "[" NUM "]"}},
    {"falcon", "falcon", 0, 0, {"[" PUN "\\$\\+<=>\\^~\\|`]+", RE_GPT2, "[0-9][0-9][0-9]"}},
    {"starcoder|refact|command-r|smollm|codeshell|exaone|minerva-7b", "starcoder", 0, 0, {"[" NUM "]", RE_GPT2}},
    {"gpt-2|phi-2|mpt|olmo|jais|jina-es|jina-de|gigachat|jina-v1-en|jina-v2-es|jina-v2-de|jina-v2-code|roberta-bpe",
     "gpt-2",
     0,
     0,
     {RE_GPT2}},
    {"qwen2|stablelm2|megrez|deepseek-r1-qwen", "qwen2", 0, 0, {RE_LLAMA3_WITH("")}},
    {"chatglm-bpe", "chatglm-bpe", 0, 0, {RE_LLAMA3_WITH("{1,3}")}},
};

static int name_in_list(const char *list, const char *name) {
    size_t n = strlen(name);
    for (const char *p = list;;) {
        const char *bar = strchr(p, '|');
        size_t len = bar ? (size_t)(bar - p) : strlen(p);
        if (len == n && !memcmp(p, name, n)) return 1;
        if (!bar) return 0;
        p = bar + 1;
    }
}

/* ---- byte-level mapping ---- */

/* GPT-2's bytes_to_unicode: printable Latin-1 bytes map to themselves, the
 * other 68 to U+0100.. in byte order, so every byte has a visible character. */
static uint32_t byte_to_cp(uint8_t b) {
    if ((b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE)) return b;
    uint32_t k = 0; /* index among the remapped bytes below b */
    for (uint32_t c = 0; c < b; c++)
        if (!((c >= '!' && c <= '~') || (c >= 0xA1 && c <= 0xAC) || (c >= 0xAE))) k++;
    return KVT_N_BYTES + k;
}

/* UTF-8 encoding of cp (< U+0800 here); returns its length. */
static size_t utf8_put(uint32_t cp, char *out) {
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    out[0] = (char)(0xC0 | (cp >> 6));
    out[1] = (char)(0x80 | (cp & 0x3F));
    return 2;
}

/* Precomputed encodings: byte b -> enc[b][0..enc_len[b]) */
static char enc[KVT_N_BYTES][2];
static uint8_t enc_len[KVT_N_BYTES];
/* Inverse for decoding: codepoint (< 512) -> byte + 1, 0 if none. */
#define DECODE_CP_LIMIT 512
static uint16_t cp_to_byte[DECODE_CP_LIMIT];
static pthread_once_t tables_once = PTHREAD_ONCE_INIT;

static void init_tables(void) {
    for (int b = 0; b < KVT_N_BYTES; b++) {
        uint32_t cp = byte_to_cp((uint8_t)b);
        enc_len[b] = (uint8_t)utf8_put(cp, enc[b]);
        cp_to_byte[cp] = (uint16_t)(b + 1);
    }
}

size_t kvt_bpe_decode(const char *s, size_t n, char *buf, size_t cap) {
    pthread_once(&tables_once, init_tables);
    size_t at = 0;
    for (size_t i = 0; i < n;) {
        uint8_t c = (uint8_t)s[i];
        size_t cl = KVT_MIN(kvt_utf8_len(c), n - i);
        uint32_t cp = DECODE_CP_LIMIT;
        if (cl == 1 && c < 0x80) cp = c;
        else if (cl == 2 && ((uint8_t)s[i + 1] & 0xC0) == 0x80)
            cp = ((uint32_t)(c & 0x1F) << 6) | ((uint8_t)s[i + 1] & 0x3F);
        if (cp < DECODE_CP_LIMIT && cp_to_byte[cp]) {
            if (at < cap) buf[at] = (char)(cp_to_byte[cp] - 1);
            at++;
        } else { /* not a byte-level character: keep its UTF-8 as is */
            for (size_t j = 0; j < cl; j++, at++)
                if (at < cap) buf[at] = s[i + j];
        }
        i += cl;
    }
    return at;
}

/* ---- merges ---- */

static uint64_t merge_key(int32_t l, int32_t r) { return ((uint64_t)(uint32_t)l << 32) | (uint32_t)r; }

static uint64_t mix64(uint64_t x) { /* splitmix64 finaliser: spreads the id pair over the table */
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

static const kvt_merge_slot *merge_find(const kvt_tokenizer *t, int32_t l, int32_t r) {
    uint64_t key = merge_key(l, r);
    for (uint64_t i = mix64(key) & t->merge_mask;; i = (i + 1) & t->merge_mask) {
        const kvt_merge_slot *s = &t->merges[i];
        if (s->rank < 0) return NULL;
        if (s->key == key) return s;
    }
}

static int load_merges(kvt_tokenizer *t, const kvt_gguf *g) {
    const kvt_gguf_kv *m;
    int rc = kvt_gguf_get_arr(g, "tokenizer.ggml.merges", &m);
    if (rc == KVT_ENOTFOUND) return kvt_fail(KVT_ENOTFOUND, "BPE tokenizer without tokenizer.ggml.merges");
    if (rc || m->arr_type != KVT_GGUF_STRING)
        return kvt_fail(KVT_EFORMAT, "tokenizer.ggml.merges is not an array of strings");
    if (m->arr_n > INT32_MAX) return kvt_fail(KVT_ELIMIT, "%llu merges", (unsigned long long)m->arr_n);
    uint64_t cap = 16;
    while (cap < m->arr_n * 2) cap <<= 1;
    t->merges = kvt_xmalloc(cap * sizeof *t->merges);
    for (uint64_t i = 0; i < cap; i++) t->merges[i].rank = -1;
    t->merge_mask = cap - 1;
    char *buf = NULL;
    size_t buf_cap = 0;
    for (uint64_t i = 0; i < m->arr_n; i++) {
        uint64_t len;
        const char *s = kvt_gguf_arr_str(m, i, &len);
        /* "left right": the separator is the first space after the first byte */
        const char *sp = len > 1 ? memchr(s + 1, ' ', len - 1) : NULL;
        if (!sp) {
            free(buf);
            return kvt_fail(KVT_EFORMAT, "merge %llu '%.*s' is not 'left right'", (unsigned long long)i,
                            (int)KVT_MIN(len, 64), s);
        }
        size_t ll = (size_t)(sp - s), rl = len - ll - 1;
        int32_t l = kvt_tok_lookup(t, s, ll), r = kvt_tok_lookup(t, sp + 1, rl);
        if (l < 0 || r < 0) {
            free(buf);
            return kvt_fail(KVT_EFORMAT, "merge %llu '%.*s' names a token that is not in the vocabulary",
                            (unsigned long long)i, (int)KVT_MIN(len, 64), s);
        }
        if (ll + rl > buf_cap) {
            buf_cap = ll + rl;
            buf = kvt_xrealloc(buf, buf_cap);
        }
        memcpy(buf, s, ll);
        memcpy(buf + ll, sp + 1, rl);
        uint64_t key = merge_key(l, r);
        for (uint64_t h = mix64(key) & t->merge_mask;; h = (h + 1) & t->merge_mask) {
            kvt_merge_slot *slot = &t->merges[h];
            if (slot->rank >= 0 && slot->key == key) break; /* duplicate: the first (lowest) rank stays */
            if (slot->rank < 0) {
                *slot = (kvt_merge_slot){key, (int32_t)i, kvt_tok_lookup(t, buf, ll + rl)};
                break;
            }
        }
    }
    free(buf);
    return 0;
}

/* ---- regex matchers ---- */

/* Backtracking room for the JIT matcher: the default 32 KiB machine stack is
 * too small for long runs of one character class. */
#define JIT_STACK_START (32 * 1024)
#define JIT_STACK_MAX (8 * 1024 * 1024)
#define IDLE_MATCHERS 8 /* kept for the next tokenize calls; more are freed */

/* A match context with its JIT stack. Creating the stack maps JIT_STACK_MAX
 * bytes and freeing it unmaps them: done for every text tokenized, that was
 * most of the cost of a chat prompt's many short pieces (markup, roles), so
 * they are kept and reused. */
typedef struct matcher {
    pcre2_match_context *mc;
    pcre2_jit_stack *js;
    struct matcher *next;
} matcher;

struct kvt_bpe_matchers {
    pthread_mutex_t mu;
    matcher *idle;
    int n_idle;
};

static void matcher_free(matcher *m) {
    pcre2_jit_stack_free(m->js);
    pcre2_match_context_free(m->mc);
    free(m);
}

static matcher *matcher_take(const kvt_tokenizer *t) {
    struct kvt_bpe_matchers *p = t->matchers;
    matcher *m = NULL;
    pthread_mutex_lock(&p->mu);
    if ((m = p->idle)) {
        p->idle = m->next;
        p->n_idle--;
    }
    pthread_mutex_unlock(&p->mu);
    if (m) return m;
    m = kvt_xcalloc(1, sizeof *m);
    m->mc = pcre2_match_context_create(NULL);
    m->js = pcre2_jit_stack_create(JIT_STACK_START, JIT_STACK_MAX, NULL);
    if (m->mc && m->js) pcre2_jit_stack_assign(m->mc, NULL, m->js);
    return m;
}

static void matcher_give(const kvt_tokenizer *t, matcher *m) {
    struct kvt_bpe_matchers *p = t->matchers;
    pthread_mutex_lock(&p->mu);
    int keep = p->n_idle < IDLE_MATCHERS;
    if (keep) {
        m->next = p->idle;
        p->idle = m;
        p->n_idle++;
    }
    pthread_mutex_unlock(&p->mu);
    if (!keep) matcher_free(m);
}

/* ---- init ---- */

int kvt_bpe_init(kvt_tokenizer *t, const kvt_gguf *g) {
    pthread_once(&tables_once, init_tables);
    int rc = load_merges(t, g);
    if (rc) return rc;

    const char *pre = NULL;
    kvt_gguf_get_str(g, "tokenizer.ggml.pre", &pre);
    const pre_def *def = &pre_defs[0];
    if (!pre || !*pre) {
        kvt_log(KVT_LOG_WARN, "tokenizer: no tokenizer.ggml.pre; using the 'default' pre-tokenizer");
    } else {
        size_t i;
        for (i = 0; i < KVT_ARRAY_LEN(pre_defs); i++)
            if (name_in_list(pre_defs[i].names, pre)) break;
        if (i < KVT_ARRAY_LEN(pre_defs)) def = &pre_defs[i];
        else
            kvt_logk(KVT_LOG_WARN, "pre_tokenizer",
                     "tokenizer: unknown pre-tokenizer '%s'; using 'default' (tokens may differ)", pre);
    }
    t->pre_name = def->canonical;
    t->add_bos = def->add_bos; /* the vocabulary type's default; add_bos_token overrides it */
    t->ignore_merges = def->ignore_merges;

    for (size_t i = 0; i < KVT_BPE_MAX_REGEX && def->re[i]; i++) {
        int err;
        PCRE2_SIZE erroff;
        /* DOLLAR_ENDONLY: like std::regex, '$' is the end of the word only */
        pcre2_code *re = pcre2_compile((PCRE2_SPTR)def->re[i], PCRE2_ZERO_TERMINATED,
                                       PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF | PCRE2_DOLLAR_ENDONLY, &err,
                                       &erroff, NULL);
        if (!re) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(err, msg, sizeof msg);
            return kvt_fail(KVT_EUNSUPPORTED, "pre-tokenizer '%s' regex %zu: %s at offset %zu", def->canonical, i,
                            (const char *)msg, (size_t)erroff);
        }
        pcre2_jit_compile(re, PCRE2_JIT_COMPLETE); /* optional: the interpreter is the fallback */
        t->re[t->n_re++] = re;
    }

    for (int b = 0; b < KVT_N_BYTES; b++) t->byte_tok[b] = kvt_tok_lookup(t, enc[b], enc_len[b]);
    t->matchers = kvt_xcalloc(1, sizeof *t->matchers);
    pthread_mutex_init(&t->matchers->mu, NULL);
    return 0;
}

void kvt_bpe_free(kvt_tokenizer *t) {
    if (t->matchers) {
        for (matcher *m = t->matchers->idle, *next; m; m = next) {
            next = m->next;
            matcher_free(m);
        }
        pthread_mutex_destroy(&t->matchers->mu);
        free(t->matchers);
        t->matchers = NULL;
    }
    for (size_t i = 0; i < t->n_re; i++) pcre2_code_free(t->re[i]);
    t->n_re = 0;
    free(t->merges);
    t->merges = NULL;
}

/* ---- tokenize ---- */

typedef struct {
    size_t off, len;
} span;

typedef struct {
    span *v;
    size_t n, cap;
} spanvec;

static void span_push(spanvec *sv, size_t off, size_t len) {
    if (!len) return;
    if (sv->n == sv->cap) {
        sv->cap = sv->cap ? sv->cap * 2 : 64;
        sv->v = kvt_xrealloc(sv->v, sv->cap * sizeof *sv->v);
    }
    sv->v[sv->n++] = (span){off, len};
}

/* Splits each span of in by re into out: matches and the gaps between them. The
 * subject is the span alone, so lookarounds and '$' see its ends, as in llama.cpp. */
static int regex_split(const pcre2_code *re, pcre2_match_data *md, pcre2_match_context *mc, const char *text,
                       const spanvec *in, spanvec *out) {
    out->n = 0;
    for (size_t k = 0; k < in->n; k++) {
        const char *subj = text + in->v[k].off;
        size_t len = in->v[k].len, pos = 0, gap = 0;
        while (pos < len) {
            int rc = pcre2_match(re, (PCRE2_SPTR)subj, len, pos, 0, md, mc);
            if (rc == PCRE2_ERROR_NOMATCH) break;
            if (rc < 0) {
                PCRE2_UCHAR msg[256];
                pcre2_get_error_message(rc, msg, sizeof msg);
                return kvt_fail(KVT_ELIMIT, "tokenize: pre-tokenizer regex failed: %s", (const char *)msg);
            }
            PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
            size_t ms = ov[0], me = ov[1];
            if (me == ms) { /* empty match: step one character so the loop moves on */
                pos = ms + KVT_MIN(kvt_utf8_len((uint8_t)subj[ms]), len - ms);
                continue;
            }
            span_push(out, in->v[k].off + gap, ms - gap);
            span_push(out, in->v[k].off + ms, me - ms);
            pos = gap = me;
        }
        span_push(out, in->v[k].off + gap, len - gap);
    }
    return 0;
}

typedef struct {
    int32_t id;        /* token of the symbol's text, -1 if none */
    uint32_t start, n; /* raw bytes of the word; n == 0 once merged away */
    int32_t prev, next;
} bpe_symbol;

static void try_merge(const kvt_tokenizer *t, const bpe_symbol *sym, int32_t left, int32_t right,
                      kvt_bigram_heap *heap) {
    if (left < 0 || right < 0 || sym[left].id < 0 || sym[right].id < 0) return;
    const kvt_merge_slot *m = merge_find(t, sym[left].id, sym[right].id);
    if (!m) return;
    kvt_heap_push(heap, (kvt_bigram){(double)m->rank, left, right, sym[left].n + sym[right].n, m->result});
}

/* A symbol whose text is no token: llama.cpp looks up each byte of its
 * byte-level text as a one-byte token and drops the ones it cannot find. */
static void emit_fallback(const kvt_tokenizer *t, const char *word, const bpe_symbol *s, kvt_tokvec *out) {
    for (uint32_t j = 0; j < s->n; j++) {
        uint8_t b = (uint8_t)word[s->start + j];
        for (uint8_t e = 0; e < enc_len[b]; e++) {
            int32_t id = kvt_tok_lookup(t, &enc[b][e], 1);
            if (id >= 0) kvt_tokvec_push(out, id);
        }
    }
}

static void bpe_word(const kvt_tokenizer *t, const char *word, size_t len, char **scratch, size_t *scratch_cap,
                     bpe_symbol **symp, size_t *sym_cap, kvt_bigram_heap *heap, kvt_tokvec *out) {
    if (t->ignore_merges) { /* a word that is a token as a whole is taken as is */
        if (*scratch_cap < len * 2) {
            *scratch_cap = len * 2;
            *scratch = kvt_xrealloc(*scratch, *scratch_cap);
        }
        size_t n = 0;
        for (size_t i = 0; i < len; i++) {
            uint8_t b = (uint8_t)word[i];
            memcpy(*scratch + n, enc[b], enc_len[b]);
            n += enc_len[b];
        }
        int32_t id = kvt_tok_lookup(t, *scratch, n);
        if (id >= 0) {
            kvt_tokvec_push(out, id);
            return;
        }
    }
    if (*sym_cap < len) {
        *sym_cap = len;
        *symp = kvt_xrealloc(*symp, len * sizeof **symp);
    }
    bpe_symbol *sym = *symp;
    int32_t n_sym = (int32_t)len;
    for (int32_t i = 0; i < n_sym; i++)
        sym[i] = (bpe_symbol){t->byte_tok[(uint8_t)word[i]], (uint32_t)i, 1, i - 1, i + 1 == n_sym ? -1 : i + 1};
    heap->n = 0;
    for (int32_t i = 1; i < n_sym; i++) try_merge(t, sym, i - 1, i, heap);
    while (heap->n) {
        kvt_bigram b = kvt_heap_pop(heap);
        bpe_symbol *l = &sym[b.left], *r = &sym[b.right];
        if (l->n == 0 || r->n == 0 || l->n + r->n != b.size) continue; /* outdated */
        l->n += r->n;
        l->id = b.result;
        r->n = 0;
        l->next = r->next;
        if (r->next >= 0) sym[r->next].prev = b.left;
        try_merge(t, sym, l->prev, b.left, heap);
        try_merge(t, sym, b.left, l->next, heap);
    }
    for (int32_t i = 0; i != -1; i = sym[i].next) {
        if (sym[i].id >= 0) kvt_tokvec_push(out, sym[i].id);
        else emit_fallback(t, word, &sym[i], out);
    }
}

int kvt_bpe_tokenize(const kvt_tokenizer *t, const char *text, size_t len, size_t max_n, kvt_tokvec *out) {
    if (!len) return 0;
    spanvec a = {0}, b = {0};
    span_push(&a, 0, len);
    matcher *m = matcher_take(t);
    pcre2_match_context *mc = m->mc;
    int rc = 0;
    for (size_t i = 0; i < t->n_re && !rc; i++) {
        pcre2_match_data *md = pcre2_match_data_create_from_pattern(t->re[i], NULL);
        if (!md) {
            rc = kvt_fail(-ENOMEM, "tokenize: no memory for regex match data");
            break;
        }
        rc = regex_split(t->re[i], md, mc, text, &a, &b);
        pcre2_match_data_free(md);
        spanvec tmp = a;
        a = b;
        b = tmp;
    }
    matcher_give(t, m);
    if (!rc) {
        char *scratch = NULL;
        size_t scratch_cap = 0, sym_cap = 0;
        bpe_symbol *sym = NULL;
        kvt_bigram_heap heap = {0};
        for (size_t k = 0; k < a.n && out->n <= max_n; k++)
            bpe_word(t, text + a.v[k].off, a.v[k].len, &scratch, &scratch_cap, &sym, &sym_cap, &heap, out);
        free(scratch);
        free(sym);
        free(heap.v);
    }
    free(a.v);
    free(b.v);
    return rc;
}
