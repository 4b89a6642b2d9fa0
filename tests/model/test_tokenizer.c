// SPDX-License-Identifier: MIT
/* Tokenizer: llama.cpp's vocab test strings token for token, and strings
 * beyond them that once differed, round trips,
 * the reference prompts of the shared models, pieces and special tokens,
 * malformed metadata, tokenizing from several threads at once, and a timing
 * on 100 KB inputs. */
#include <dirent.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "gguf.h"
#include "testutil.h"
#include "tokenizer.h"

#define VOCAB_SEP "\n__ggml_vocab_test__\n"
#define MAX_IDS_SHOWN 24

static kvt_tokenizer *load_path(const char *path) {
    kvt_gguf *g;
    if (kvt_gguf_open(path, &g)) {
        fprintf(stderr, "%s: %s\n", path, kvt_errmsg());
        return NULL;
    }
    kvt_tokenizer *t = NULL;
    int rc = kvt_tokenizer_load(g, &t);
    CHECKF(rc == 0, "%s: %s", path, kvt_errmsg());
    kvt_gguf_close(g);
    return t;
}

static void print_ids(const char *label, const int32_t *ids, size_t n) {
    fprintf(stderr, "  %s (%zu):", label, n);
    for (size_t i = 0; i < n && i < MAX_IDS_SHOWN; i++) fprintf(stderr, " %d", ids[i]);
    fprintf(stderr, n > MAX_IDS_SHOWN ? " ...\n" : "\n");
}

/* Parses one line of space-separated ids. */
static size_t parse_ids(const char *line, const char *end, int32_t **out) {
    size_t n = 0, cap = 16;
    int32_t *v = malloc(cap * sizeof *v);
    const char *p = line;
    while (p < end) {
        while (p < end && *p == ' ') p++;
        if (p >= end) break;
        char *q;
        long id = strtol(p, &q, 10);
        if (q == p) break;
        if (n == cap) v = realloc(v, (cap *= 2) * sizeof *v);
        v[n++] = (int32_t)id;
        p = q;
    }
    *out = v;
    return n;
}

/* kvt_tokenize_max(text) agrees with kvt_tokenize: the same ids with room for
 * exactly them, KVT_ELIMIT with one token less. */
static void check_max(const kvt_tokenizer *t, const char *name, const char *s, size_t len, int add_bos, int special) {
    int32_t *ids, *ids2;
    size_t n, n2;
    if (kvt_tokenize(t, s, len, add_bos, special, &ids, &n)) return;
    int rc = kvt_tokenize_max(t, s, len, add_bos, special, n, &ids2, &n2);
    CHECKF(rc == 0 && n2 == n && (n == 0 || !memcmp(ids, ids2, n * sizeof *ids)), "%s: max %zu of '%.*s'", name, n,
           (int)KVT_MIN(len, 60), s);
    free(ids2);
    if (n) {
        rc = kvt_tokenize_max(t, s, len, add_bos, special, n - 1, &ids2, &n2);
        CHECKF(rc == KVT_ELIMIT && !ids2 && n2 == 0, "%s: max %zu of '%.*s' (%zu tokens) gave %d", name, n - 1,
               (int)KVT_MIN(len, 60), s, n, rc);
    }
    free(ids);
}

static void test_vocab_file(const char *dir, const char *name, int *files_ok) {
    char inp_name[512], out_name[512];
    snprintf(inp_name, sizeof inp_name, "%s.inp", name);
    snprintf(out_name, sizeof out_name, "%s.out", name);
    size_t inp_len, out_len;
    char *inp = kvt_test_read_file(kvt_test_path(dir, inp_name), &inp_len);
    char *outf = kvt_test_read_file(kvt_test_path(dir, out_name), &out_len);
    if (!inp || !outf) {
        printf("%s: no .inp/.out, only loading it\n", name);
        kvt_tokenizer *t = load_path(kvt_test_path(dir, name));
        kvt_tokenizer_free(t);
        free(inp);
        free(outf);
        return;
    }
    kvt_tokenizer *t = load_path(kvt_test_path(dir, name));
    if (!t) {
        free(inp);
        free(outf);
        return;
    }
    size_t pos = 0, opos = 0, n_str = 0, n_ok = 0, n_rt = 0;
    const size_t sep_len = strlen(VOCAB_SEP);
    while (pos < inp_len) {
        const char *sep = memmem(inp + pos, inp_len - pos, VOCAB_SEP, sep_len);
        if (!sep) break;
        const char *s = inp + pos;
        size_t slen = (size_t)(sep - s);
        pos = (size_t)(sep - inp) + sep_len;
        /* matching line of .out */
        const char *line = outf + opos;
        const char *nl = memchr(line, '\n', out_len - opos);
        const char *line_end = nl ? nl : outf + out_len;
        opos = nl ? (size_t)(nl - outf) + 1 : out_len;
        int32_t *want;
        size_t n_want = parse_ids(line, line_end, &want);

        int32_t *got;
        size_t n_got;
        int rc = kvt_tokenize(t, s, slen, 0, 0, &got, &n_got);
        CHECKF(rc == 0, "%s: %s", name, kvt_errmsg());
        int same = rc == 0 && n_got == n_want && (n_got == 0 || !memcmp(got, want, n_got * sizeof *got));
        n_str++;
        if (same) {
            n_ok++;
        } else {
            fprintf(stderr, "%s: string %zu '%.*s' differs\n", name, n_str, (int)KVT_MIN(slen, 60), s);
            print_ids("want", want, n_want);
            print_ids("got", got, n_got);
        }
        CHECK(same);
        check_max(t, name, s, slen, 0, 0);
        check_max(t, name, s, slen, 1, 1);
        if (rc == 0) {
            char *back;
            size_t blen;
            rc = kvt_detokenize(t, got, n_got, 0, &back, &blen);
            int rt = rc == 0 && blen == slen && !memcmp(back, s, slen);
            CHECKF(rt, "%s: round trip of string %zu '%.*s' gave '%s'", name, n_str, (int)KVT_MIN(slen, 60), s,
                   rc ? "(error)" : back);
            n_rt += rt;
            free(back);
        }
        free(got);
        free(want);
    }
    printf("%s: %zu/%zu strings match llama.cpp, %zu round-trip (pre-tokenizer %s, %s)\n", name, n_ok, n_str, n_rt,
           kvt_tokenizer_pre(t), kvt_tokenizer_kind(t));
    CHECKF(n_str > 0, "%s: no test strings parsed", name);
    if (n_str > 0 && n_ok == n_str) (*files_ok)++;
    kvt_tokenizer_free(t);
    free(inp);
    free(outf);
}

static int name_cmp(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static void test_vocab_dir(void) {
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/vocab", kvt_test_shared());
    DIR *dp = opendir(dir);
    if (!dp) {
        kvt_test_skip_part("no ../shared/vocab: the tokenizer test vectors did not run");
        return;
    }
    char *names[256];
    size_t n = 0;
    struct dirent *e;
    while ((e = readdir(dp)) && n < KVT_ARRAY_LEN(names)) {
        size_t l = strlen(e->d_name);
        if (!strncmp(e->d_name, "ggml-vocab-", 11) && l > 5 && !strcmp(e->d_name + l - 5, ".gguf"))
            names[n++] = kvt_xstrdup(e->d_name);
    }
    closedir(dp);
    qsort(names, n, sizeof *names, name_cmp);
    int ok = 0;
    for (size_t i = 0; i < n; i++) {
        test_vocab_file(dir, names[i], &ok);
        free(names[i]);
    }
    printf("vocab files fully matching: %d\n", ok);
}

/* ---- texts beyond the test vectors ---- */

/* Strings on which kvtier once split words otherwise than llama.cpp b4748,
 * each reduced from seeded random text, with llama.cpp's ids (its
 * llama_tokenize with add_special, parse_special off) and, where llama.cpp's
 * detokenizer gives the text back, the same round trip. */
static const struct {
    const char *vocab, *pre; /* pre: the vocabulary with tokenizer.ggml.pre set to this */
    const char *text;
    int32_t ids[24];
    int round_trip;
} beyond[] = {
    /* U+180E is no space in llama.cpp's tables (PCRE2's \s takes it) */
    {"gpt-2",
     NULL,
     "a \xe1\xa0\x8e"
     "b",
     {64, 28053, 254, 236, 65, -1},
     1},
    {"falcon", NULL, "a  \xe1\xa0\x8e", {76, 204, 27171, 238, 220, -1}, 1},
    /* DeepSeek's literal ranges never match a space: llama.cpp turns them into \v first */
    {"deepseek-llm", NULL, "x\xe2\x80\xa9 ", {100000, 87, 350, 20535, -1}, 1},
    {"deepseek-llm", NULL, "\xc2\xa0\xc2\xa0\xe3\x80\x80", {100000, 10467, 88946, -1}, 1},
    /* U+11F18, a Kawi letter of Unicode 15.0, which PCRE2 10.42's tables lack */
    {"deepseek-coder", NULL, "  \xf0\x91\xbc\x98", {32013, 207, 207, 170, 226, 120, 233, -1}, 1},
    /* pre-tokenizers kvtier once lacked (it fell back to "default"), on gpt-2's vocabulary */
    {"gpt-2", "tekken", "\xc3\x89lan McDONALD's", {50256, 38351, 9620, 1982, 41173, 44071, 338, -1}, 1},
    {"gpt-2", "viking", "Hei, maailma! 2024", {1544, 72, 11, 17266, 603, 2611, 0, 220, 17, 15, 17, 19, -1}, 1},
    {"gpt-2", "bloom", "Hei, maailma! 2024", {1544, 72, 11, 17266, 603, 2611, 0, 48609, -1}, 1},
    {"gpt-2",
     "chameleon",
     "<sentinel:12> IMGIMGABZ    x",
     {50256, 27, 34086, 20538, 25, 16, 17, 29, 220, 3955, 38, 3955, 38, 6242, 57, 220, 220, 220, 220, 87, -1},
     1},
    {"gpt-2", "deepseek-v3", "\xc3\x89lan McDONALD's", {38351, 9620, 23394, 1340, 44071, 338, -1}, 1},
};

static int load_written(kvt_gguf_writer *w, kvt_tokenizer **t);

static void test_beyond(void) {
    char dir[4096], name[256];
    snprintf(dir, sizeof dir, "%s/vocab", kvt_test_shared());
    for (size_t i = 0; i < KVT_ARRAY_LEN(beyond); i++) {
        snprintf(name, sizeof name, "ggml-vocab-%s.gguf", beyond[i].vocab);
        kvt_gguf *g;
        if (kvt_gguf_open(kvt_test_path(dir, name), &g)) {
            kvt_test_skip_part("a vocab file is missing: the texts beyond the test vectors did not all run");
            continue;
        }
        kvt_tokenizer *t = NULL;
        if (beyond[i].pre) {
            kvt_gguf_writer *w = kvt_gguf_writer_new();
            for (uint64_t k = 0; k < g->n_kv; k++)
                if (strcmp(g->kv[k].key, "tokenizer.ggml.pre")) kvt_gguf_w_copy(w, &g->kv[k]);
            kvt_gguf_w_str(w, "tokenizer.ggml.pre", beyond[i].pre);
            CHECKF(load_written(w, &t) == 0, "%s as %s: %s", name, beyond[i].pre, kvt_errmsg());
            CHECKF(t && !strcmp(kvt_tokenizer_pre(t), beyond[i].pre), "pre %s", beyond[i].pre);
        } else {
            CHECKF(kvt_tokenizer_load(g, &t) == 0, "%s: %s", name, kvt_errmsg());
        }
        kvt_gguf_close(g);
        if (!t) continue;
        const char *s = beyond[i].text;
        size_t want = 0;
        while (beyond[i].ids[want] >= 0) want++;
        int32_t *ids;
        size_t n;
        int rc = kvt_tokenize(t, s, strlen(s), kvt_tokenizer_add_special(t), 0, &ids, &n);
        int same = rc == 0 && n == want && !memcmp(ids, beyond[i].ids, want * sizeof *ids);
        CHECKF(same, "%s (%s): '%s' does not tokenize as llama.cpp's", name, beyond[i].pre ? beyond[i].pre : "its pre",
               s);
        if (!same && rc == 0) {
            print_ids("llama.cpp", beyond[i].ids, want);
            print_ids("kvtier", ids, n);
        }
        if (rc == 0 && beyond[i].round_trip) {
            size_t skip = n && ids[0] == kvt_tokenizer_bos(t) && (kvt_tokenizer_add_special(t) & KVT_TOK_ADD_BOS);
            char *back;
            CHECK(kvt_detokenize(t, ids + skip, n - skip, 0, &back, NULL) == 0);
            CHECKF(!strcmp(back, s), "%s: '%s' came back as '%s'", name, s, back);
            free(back);
        }
        if (rc == 0) free(ids);
        kvt_tokenizer_free(t);
    }
}

/* ---- reference prompts (jsonl) ---- */

/* Decodes the JSON string starting at p (just after the opening quote) into a
 * malloc'd buffer; returns its length, sets *endp past the closing quote. */
static size_t json_string(const char *p, char **out, const char **endp) {
    size_t cap = strlen(p) + 1, n = 0;
    char *s = malloc(cap);
    while (*p && *p != '"') {
        if (*p != '\\') {
            s[n++] = *p++;
            continue;
        }
        p++;
        char c = *p++;
        switch (c) {
        case 'n': s[n++] = '\n'; break;
        case 't': s[n++] = '\t'; break;
        case 'r': s[n++] = '\r'; break;
        case 'b': s[n++] = '\b'; break;
        case 'f': s[n++] = '\f'; break;
        case 'u': {
            unsigned cp = (unsigned)strtoul((char[5]){p[0], p[1], p[2], p[3], 0}, NULL, 16);
            p += 4;
            if (cp >= 0xD800 && cp < 0xDC00 && p[0] == '\\' && p[1] == 'u') {
                unsigned lo = (unsigned)strtoul((char[5]){p[2], p[3], p[4], p[5], 0}, NULL, 16);
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                p += 6;
            }
            if (cp < 0x80) s[n++] = (char)cp;
            else if (cp < 0x800) {
                s[n++] = (char)(0xC0 | (cp >> 6));
                s[n++] = (char)(0x80 | (cp & 0x3F));
            } else if (cp < 0x10000) {
                s[n++] = (char)(0xE0 | (cp >> 12));
                s[n++] = (char)(0x80 | ((cp >> 6) & 0x3F));
                s[n++] = (char)(0x80 | (cp & 0x3F));
            } else {
                s[n++] = (char)(0xF0 | (cp >> 18));
                s[n++] = (char)(0x80 | ((cp >> 12) & 0x3F));
                s[n++] = (char)(0x80 | ((cp >> 6) & 0x3F));
                s[n++] = (char)(0x80 | (cp & 0x3F));
            }
            break;
        }
        default: s[n++] = c; break; /* \" \\ \/ */
        }
    }
    *endp = *p ? p + 1 : p;
    *out = s;
    return n;
}

static void test_reference(void) {
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/reference", kvt_test_shared());
    DIR *dp = opendir(dir);
    if (!dp) {
        kvt_test_skip_part("no ../shared/reference: the reference prompts' tokens were not compared");
        return;
    }
    struct dirent *e;
    int n_prompts = 0, n_ok = 0;
    while ((e = readdir(dp))) {
        size_t l = strlen(e->d_name);
        if (l < 7 || strcmp(e->d_name + l - 6, ".jsonl")) continue;
        char model[512];
        snprintf(model, sizeof model, "%s/models/%.*s.gguf", kvt_test_shared(), (int)(l - 6), e->d_name);
        kvt_tokenizer *t = load_path(model);
        if (!t) continue;
        size_t len;
        char *data = kvt_test_read_file(kvt_test_path(dir, e->d_name), &len);
        for (char *line = data; line && *line;) {
            char *nl = strchr(line, '\n');
            if (nl) *nl = 0;
            const char *pp = strstr(line, "\"prompt\":\"");
            const char *tp = strstr(line, "\"prompt_tokens\":[");
            if (pp && tp) {
                char *prompt;
                const char *end;
                size_t plen = json_string(pp + strlen("\"prompt\":\""), &prompt, &end);
                const char *ids_start = tp + strlen("\"prompt_tokens\":[");
                const char *ids_end = strchr(ids_start, ']');
                char *ids_copy = strndup(ids_start, (size_t)(ids_end - ids_start));
                for (char *c = ids_copy; *c; c++)
                    if (*c == ',') *c = ' ';
                int32_t *want;
                size_t n_want = parse_ids(ids_copy, ids_copy + strlen(ids_copy), &want);
                int32_t *got;
                size_t n_got;
                int rc = kvt_tokenize(t, prompt, plen, kvt_tokenizer_add_special(t), 1, &got, &n_got);
                int same = rc == 0 && n_got == n_want && !memcmp(got, want, n_got * sizeof *got);
                CHECKF(same, "%s: prompt '%.40s...' tokenizes differently", e->d_name, prompt);
                if (!same) {
                    print_ids("want", want, n_want);
                    print_ids("got", got, n_got);
                }
                n_prompts++;
                n_ok += same;
                free(got);
                free(want);
                free(ids_copy);
                free(prompt);
            }
            line = nl ? nl + 1 : NULL;
        }
        free(data);
        kvt_tokenizer_free(t);
    }
    closedir(dp);
    printf("reference prompts: %d/%d match\n", n_ok, n_prompts);
}

/* ---- pieces, specials, invalid UTF-8 ---- */

static void test_api(void) {
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/vocab", kvt_test_shared());
    kvt_tokenizer *g2 = load_path(kvt_test_path(dir, "ggml-vocab-gpt-2.gguf"));
    kvt_tokenizer *spm = load_path(kvt_test_path(dir, "ggml-vocab-llama-spm.gguf"));
    if (!g2 || !spm) {
        kvt_tokenizer_free(g2);
        kvt_tokenizer_free(spm);
        kvt_test_skip_part("gpt-2 / llama-spm vocab missing: the API checks did not run");
        return;
    }
    CHECK(kvt_tokenizer_n_vocab(g2) == 50257);
    CHECK(kvt_tokenizer_bos(spm) == 1 && kvt_tokenizer_eos(spm) == 2);
    CHECK(kvt_tokenizer_is_eog(spm, 2) && !kvt_tokenizer_is_eog(spm, 1) && !kvt_tokenizer_is_eog(spm, -5));
    CHECK(kvt_tokenizer_is_eog(g2, 50256));
    CHECK(kvt_tokenizer_add_special(spm) == KVT_TOK_ADD_BOS && kvt_tokenizer_add_special(g2) == 0);
    CHECK(!strcmp(kvt_tokenizer_pre(g2), "gpt-2"));
    CHECK(!strcmp(kvt_tokenizer_kind(spm), "llama (SentencePiece)"));
    CHECK(kvt_tokenizer_token_type(g2, 50256) == KVT_TOKEN_CONTROL);
    CHECK(kvt_tokenizer_token_type(g2, 50257) < 0);
    CHECK(kvt_tokenizer_find(g2, "<|endoftext|>", 13) == 50256);
    CHECK(kvt_tokenizer_find(g2, "no such token", 13) == -1);

    /* special text: a token with parse_special, plain text without */
    const char *s = "a<|endoftext|>b";
    int32_t *ids;
    size_t n;
    CHECK(kvt_tokenize(g2, s, strlen(s), 0, 1, &ids, &n) == 0);
    CHECK(n == 3 && ids[1] == 50256);
    char *back;
    CHECK(kvt_detokenize(g2, ids, n, 1, &back, NULL) == 0 && !strcmp(back, s));
    free(back);
    CHECK(kvt_detokenize(g2, ids, n, 0, &back, NULL) == 0 && !strcmp(back, "ab"));
    free(back);
    free(ids);
    CHECK(kvt_tokenize(g2, s, strlen(s), 0, 0, &ids, &n) == 0);
    CHECK(n > 3);
    for (size_t i = 0; i < n; i++) CHECK(ids[i] != 50256);
    free(ids);

    /* SPM: BOS, prefix space, pieces */
    CHECK(kvt_tokenize(spm, "Hello", 5, 1, 0, &ids, &n) == 0);
    CHECK(n == 2 && ids[0] == 1);
    char buf[16];
    int k = kvt_token_piece(spm, ids[1], buf, sizeof buf, 0);
    CHECK(k == 6 && !memcmp(buf, " Hello", 6));
    CHECK(kvt_token_piece(spm, ids[1], buf, 2, 0) == 6); /* too small: full length, partial copy */
    CHECK(kvt_token_piece(spm, 1, buf, sizeof buf, 0) == 0);
    CHECK(kvt_token_piece(spm, 1, buf, sizeof buf, 1) == 3 && !memcmp(buf, "<s>", 3));
    CHECK(kvt_token_piece(spm, 13, buf, sizeof buf, 0) == 1 && buf[0] == '\n'); /* <0x0A> */
    CHECK(kvt_token_piece(spm, -1, buf, sizeof buf, 0) < 0);
    CHECK(kvt_token_piece(spm, kvt_tokenizer_n_vocab(spm), buf, sizeof buf, 0) < 0);
    /* DRY's breaker map: tokens holding "\n" (<0x0A> is 13) or "<s>" (special tokens as written); ids
     * past the tokenizer (a model with more output rows) are in the map, never breakers */
    int32_t nv = kvt_tokenizer_n_vocab(spm);
    const char *const brk[] = {"\n", "<s>"};
    uint8_t *map = kvt_tokens_containing(spm, nv + 100, brk, 2);
    CHECK(map[13] && map[1] && !map[ids[1]] && !map[nv] && !map[nv + 99]);
    free(map);
    map = kvt_tokens_containing(spm, 5, brk, 2); /* fewer ids than tokens: only those */
    CHECK(map[1] && !map[4]);
    free(map);
    CHECK(kvt_detokenize(spm, ids, n, 0, &back, NULL) == 0 && !strcmp(back, "Hello"));
    free(back);
    int32_t bad[] = {1, 99999};
    CHECK(kvt_detokenize(spm, bad, 2, 0, &back, NULL) < 0 && back == NULL);
    free(ids);

    /* empty text, with and without BOS */
    CHECK(kvt_tokenize(spm, "", 0, 0, 0, &ids, &n) == 0 && n == 0);
    free(ids);
    CHECK(kvt_tokenize(spm, "", 0, 1, 0, &ids, &n) == 0 && n == 1 && ids[0] == 1);
    free(ids);
    CHECK(kvt_tokenize(g2, "x", 1, 1, 0, &ids, &n) == 0 && n == 2 && ids[0] == 50256);
    free(ids);

    /* invalid UTF-8 is not an error and survives a round trip. (Not for SPM when
     * a truncated sequence precedes a space: like llama.cpp, the character then
     * swallows a byte of the escaped space and the space comes back as U+2581.) */
    const char junk[] = "ok \xc3(\xff\xfe!!!x end\x80 \xe2\x82";
    kvt_tokenizer *both[] = {g2, spm};
    for (int i = 0; i < 2; i++) {
        CHECK(kvt_tokenize(both[i], junk, sizeof junk - 1, 0, 0, &ids, &n) == 0);
        size_t blen;
        CHECK(kvt_detokenize(both[i], ids, n, 0, &back, &blen) == 0);
        CHECKF(blen == sizeof junk - 1 && !memcmp(back, junk, blen), "%s: invalid UTF-8 round trip",
               kvt_tokenizer_kind(both[i]));
        free(back);
        free(ids);
    }
    kvt_tokenizer_free(g2);
    kvt_tokenizer_free(spm);
}

/* ---- malformed metadata ---- */

static int load_written(kvt_gguf_writer *w, kvt_tokenizer **t) {
    const char *path = kvt_test_path(kvt_test_tmpdir(), "tok.gguf");
    int rc = kvt_gguf_write(w, path);
    kvt_gguf_writer_free(w);
    CHECK(rc == 0);
    kvt_gguf *g;
    if (rc || kvt_gguf_open(path, &g)) return -1;
    *t = NULL;
    rc = kvt_tokenizer_load(g, t);
    kvt_gguf_close(g);
    return rc;
}

static void test_malformed(void) {
    static const char *const toks[] = {"a", "b", "ab", "<s>"};
    kvt_tokenizer *t;
    int rc;

    /* no model / unknown model / no tokens / empty tokens */
    kvt_gguf_writer *w = kvt_gguf_writer_new();
    kvt_gguf_w_arr_str(w, "tokenizer.ggml.tokens", toks, 4);
    CHECK(load_written(w, &t) == KVT_ENOTFOUND && t == NULL);
    w = kvt_gguf_writer_new();
    kvt_gguf_w_str(w, "tokenizer.ggml.model", "t5");
    kvt_gguf_w_arr_str(w, "tokenizer.ggml.tokens", toks, 4);
    CHECK(load_written(w, &t) == KVT_EUNSUPPORTED);
    w = kvt_gguf_writer_new();
    kvt_gguf_w_str(w, "tokenizer.ggml.model", "llama");
    rc = load_written(w, &t);
    CHECKF(rc == KVT_ENOTFOUND && strstr(kvt_errmsg(), "tokens"), "%s", kvt_errmsg());
    w = kvt_gguf_writer_new();
    kvt_gguf_w_str(w, "tokenizer.ggml.model", "llama");
    kvt_gguf_w_arr_str(w, "tokenizer.ggml.tokens", toks, 0);
    CHECK(load_written(w, &t) == KVT_EFORMAT);
    /* tokens of the wrong type */
    w = kvt_gguf_writer_new();
    kvt_gguf_w_str(w, "tokenizer.ggml.model", "llama");
    int32_t nums[4] = {1, 2, 3, 4};
    kvt_gguf_w_arr(w, "tokenizer.ggml.tokens", KVT_GGUF_I32, nums, 4);
    CHECK(load_written(w, &t) == KVT_EFORMAT);
    /* scores / types of the wrong length */
    w = kvt_gguf_writer_new();
    kvt_gguf_w_str(w, "tokenizer.ggml.model", "llama");
    kvt_gguf_w_arr_str(w, "tokenizer.ggml.tokens", toks, 4);
    float sc[3] = {0, 1, 2};
    kvt_gguf_w_arr(w, "tokenizer.ggml.scores", KVT_GGUF_F32, sc, 3);
    CHECK(load_written(w, &t) == KVT_EFORMAT);
    w = kvt_gguf_writer_new();
    kvt_gguf_w_str(w, "tokenizer.ggml.model", "llama");
    kvt_gguf_w_arr_str(w, "tokenizer.ggml.tokens", toks, 4);
    kvt_gguf_w_arr(w, "tokenizer.ggml.token_type", KVT_GGUF_I32, nums, 3);
    CHECK(load_written(w, &t) == KVT_EFORMAT);

    /* BPE: merges missing, naming unknown tokens, without a separator */
    w = kvt_gguf_writer_new();
    kvt_gguf_w_str(w, "tokenizer.ggml.model", "gpt2");
    kvt_gguf_w_arr_str(w, "tokenizer.ggml.tokens", toks, 4);
    CHECK(load_written(w, &t) == KVT_ENOTFOUND);
    static const char *const bad_merges[] = {"a b", "a zz"};
    w = kvt_gguf_writer_new();
    kvt_gguf_w_str(w, "tokenizer.ggml.model", "gpt2");
    kvt_gguf_w_arr_str(w, "tokenizer.ggml.tokens", toks, 4);
    kvt_gguf_w_arr_str(w, "tokenizer.ggml.merges", bad_merges, 2);
    rc = load_written(w, &t);
    CHECKF(rc == KVT_EFORMAT && strstr(kvt_errmsg(), "merge 1"), "%d %s", rc, kvt_errmsg());
    static const char *const nosep[] = {"ab"};
    w = kvt_gguf_writer_new();
    kvt_gguf_w_str(w, "tokenizer.ggml.model", "gpt2");
    kvt_gguf_w_arr_str(w, "tokenizer.ggml.tokens", toks, 4);
    kvt_gguf_w_arr_str(w, "tokenizer.ggml.merges", nosep, 1);
    CHECK(load_written(w, &t) == KVT_EFORMAT);

    /* a tiny valid BPE vocab: out-of-range special ids are ignored, unknown pre
     * falls back, bytes without tokens are dropped rather than crashing */
    static const char *const good_merges[] = {"a b"};
    w = kvt_gguf_writer_new();
    kvt_gguf_w_str(w, "tokenizer.ggml.model", "gpt2");
    kvt_gguf_w_str(w, "tokenizer.ggml.pre", "no-such-pre");
    kvt_gguf_w_arr_str(w, "tokenizer.ggml.tokens", toks, 4);
    kvt_gguf_w_arr_str(w, "tokenizer.ggml.merges", good_merges, 1);
    kvt_gguf_w_u32(w, "tokenizer.ggml.bos_token_id", 1000);
    kvt_gguf_w_u32(w, "tokenizer.ggml.eos_token_id", 3);
    rc = load_written(w, &t);
    CHECKF(rc == 0, "%s", kvt_errmsg());
    if (rc == 0) {
        CHECK(kvt_tokenizer_bos(t) == -1 && kvt_tokenizer_eos(t) == 3);
        CHECK(!strcmp(kvt_tokenizer_pre(t), "default"));
        int32_t *ids;
        size_t n;
        CHECK(kvt_tokenize(t, "abxab", 5, 0, 0, &ids, &n) == 0);
        CHECK(n == 2 && ids[0] == 2 && ids[1] == 2);
        free(ids);
        CHECK(kvt_tokenize(t, "ab", 2, 1, 0, &ids, &n) == KVT_ENOTFOUND && ids == NULL);
        kvt_tokenizer_free(t);
    }

    /* SPM with an empty token and no byte tokens: unknown bytes become <unk>=0... */
    static const char *const spm_toks[] = {"<unk>", "<s>", "</s>", "", "\xe2\x96\x81", "a"};
    w = kvt_gguf_writer_new();
    kvt_gguf_w_str(w, "tokenizer.ggml.model", "llama");
    kvt_gguf_w_arr_str(w, "tokenizer.ggml.tokens", spm_toks, 6);
    rc = load_written(w, &t);
    CHECKF(rc == 0, "%s", kvt_errmsg());
    if (rc == 0) {
        int32_t *ids;
        size_t n;
        CHECK(kvt_tokenize(t, "a?", 2, 0, 0, &ids, &n) == 0);
        CHECK(n == 3 && ids[0] == 4 && ids[1] == 5 && ids[2] == 0);
        free(ids);
        kvt_tokenizer_free(t);
    }
}

/* Every pre-tokenizer's regexes compile and run (the vocab files cover only some). */
static void test_all_pre(void) {
    static const char *const pres[][2] = {
        {"llama3", "llama3"},
        {"llama-bpe", "llama3"},
        {"qwen2", "qwen2"},
        {"deepseek-llm", "deepseek-llm"},
        {"deepseek-coder", "deepseek-coder"},
        {"falcon", "falcon"},
        {"mpt", "gpt-2"},
        {"starcoder", "starcoder"},
        {"refact", "starcoder"},
        {"gpt-2", "gpt-2"},
        {"chatglm-bpe", "chatglm-bpe"},
        {"default", "default"},
        {"tekken", "tekken"},
        {"viking", "viking"},
        {"poro-chat", "bloom"},
        {"gpt3-finnish", "bloom"},
        {"chameleon", "chameleon"},
        {"deepseek-v3", "deepseek-v3"},
    };
    static const char *const toks[] = {"a", "b", "ab", "\xc4\xa0"};
    static const char *const merges[] = {"a b"};
    static const char text[] = "ab's  x\r\n\t 12345 \xe6\x97\xa5\xe6\x9c\xac caf\xc3\xa9!! \xff end   ";
    for (size_t i = 0; i < KVT_ARRAY_LEN(pres); i++) {
        kvt_gguf_writer *w = kvt_gguf_writer_new();
        kvt_gguf_w_str(w, "tokenizer.ggml.model", "gpt2");
        kvt_gguf_w_str(w, "tokenizer.ggml.pre", pres[i][0]);
        kvt_gguf_w_arr_str(w, "tokenizer.ggml.tokens", toks, 4);
        kvt_gguf_w_arr_str(w, "tokenizer.ggml.merges", merges, 1);
        kvt_tokenizer *t;
        int rc = load_written(w, &t);
        CHECKF(rc == 0, "pre %s: %s", pres[i][0], kvt_errmsg());
        if (rc) continue;
        CHECKF(!strcmp(kvt_tokenizer_pre(t), pres[i][1]), "pre %s -> %s", pres[i][0], kvt_tokenizer_pre(t));
        int bos = !strcmp(pres[i][1], "llama3") || !strcmp(pres[i][1], "tekken") || !strcmp(pres[i][1], "chameleon");
        CHECKF(kvt_tokenizer_add_special(t) == (bos ? KVT_TOK_ADD_BOS : 0), "pre %s: add_special", pres[i][0]);
        int32_t *ids;
        size_t n;
        CHECK(kvt_tokenize(t, text, sizeof text - 1, 0, 0, &ids, &n) == 0 && n > 0 && ids[0] == 2);
        free(ids);
        kvt_tokenizer_free(t);
    }
}

/* ---- BOS / EOS: llama.cpp's add_special rule ---- */

/* What llama.cpp (build 4748, llama-vocab.cpp) adds for each shared vocabulary,
 * from the file's tokenizer.ggml.add_bos_token / add_eos_token where present,
 * else the vocabulary type's default (SPM: BOS; BPE: BOS only for the llama3
 * pre-tokenizers; EOS never). */
static const struct {
    const char *file;
    int add;
} VOCAB_ADD[] = {
    {"ggml-vocab-baichuan.gguf", KVT_TOK_ADD_BOS},       /* SPM, no keys */
    {"ggml-vocab-deepseek-coder.gguf", KVT_TOK_ADD_BOS}, /* BPE, add_bos_token true */
    {"ggml-vocab-deepseek-llm.gguf", KVT_TOK_ADD_BOS},   /* BPE, add_bos_token true */
    {"ggml-vocab-falcon.gguf", 0},                       /* BPE falcon, no keys */
    {"ggml-vocab-gpt-2.gguf", 0},                        /* BPE gpt-2, no keys */
    {"ggml-vocab-gpt-neox.gguf", 0},                     /* BPE without a pre, no keys */
    {"ggml-vocab-llama-spm.gguf", KVT_TOK_ADD_BOS},      /* SPM, add_bos_token true */
    {"ggml-vocab-mpt.gguf", 0},
    {"ggml-vocab-phi-3.gguf", KVT_TOK_ADD_BOS}, /* SPM, add_bos_token true */
    {"ggml-vocab-refact.gguf", 0},
    {"ggml-vocab-starcoder.gguf", 0},
};

/* Tokenizes "Hello world" with the tokenizer's own flags and checks what surrounds it. */
static void check_added(const kvt_tokenizer *t, int want_add, const char *what) {
    int add = kvt_tokenizer_add_special(t);
    CHECKF(add == want_add, "%s: add_special %d, expected %d", what, add, want_add);
    int32_t *plain, *ids;
    size_t n_plain, n;
    if (kvt_tokenize(t, "Hello world", 11, 0, 0, &plain, &n_plain) ||
        kvt_tokenize(t, "Hello world", 11, add, 0, &ids, &n)) {
        CHECKF(0, "%s: tokenize: %s", what, kvt_errmsg());
        return;
    }
    size_t lead = (add & KVT_TOK_ADD_BOS) != 0, trail = (add & KVT_TOK_ADD_EOS) != 0;
    CHECKF(n == n_plain + lead + trail, "%s: %zu tokens, %zu without specials", what, n, n_plain);
    if (n == n_plain + lead + trail) {
        if (lead) CHECKF(ids[0] == kvt_tokenizer_bos(t), "%s: first token %d is not BOS", what, ids[0]);
        if (trail) CHECKF(ids[n - 1] == kvt_tokenizer_eos(t), "%s: last token %d is not EOS", what, ids[n - 1]);
        CHECKF(!memcmp(ids + lead, plain, n_plain * sizeof *ids), "%s: the text's tokens changed", what);
    }
    free(plain);
    free(ids);
}

static void test_add_special(void) {
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/vocab", kvt_test_shared());
    int found = 0;
    for (size_t i = 0; i < KVT_ARRAY_LEN(VOCAB_ADD); i++) {
        FILE *f = fopen(kvt_test_path(dir, VOCAB_ADD[i].file), "rb");
        if (!f) continue;
        fclose(f);
        kvt_tokenizer *t = load_path(kvt_test_path(dir, VOCAB_ADD[i].file));
        if (!t) continue;
        found++;
        check_added(t, VOCAB_ADD[i].add, VOCAB_ADD[i].file);
        kvt_tokenizer_free(t);
    }
    if (!found) kvt_test_skip_part("no ../shared/vocab files: BOS/EOS were checked on synthetic vocabularies only");

    /* synthetic: the keys override each type's default, both ways */
    static const char *const toks[] = {"<s>",      "</s>",         "H",    "e", "l", "o", " ", "w", "r", "d",
                                       "\xc4\xa0", "\xe2\x96\x81", "<unk>"};
    static const char *const merges[] = {"l l"};
    static const struct {
        const char *model, *pre;
        int bos_key, eos_key; /* -1: absent */
        int want;
    } cases[] = {
        {"gpt2", "llama3", -1, -1, KVT_TOK_ADD_BOS},
        {"gpt2", "llama-bpe", -1, -1, KVT_TOK_ADD_BOS},
        {"gpt2", "falcon3", -1, -1, KVT_TOK_ADD_BOS},
        {"gpt2", "dbrx", -1, -1, 0},
        {"gpt2", "smaug-bpe", -1, -1, 0},
        {"gpt2", "qwen2", -1, -1, 0},
        {"gpt2", "llama3", 0, -1, 0},
        {"gpt2", "gpt-2", 1, 1, KVT_TOK_ADD_BOS | KVT_TOK_ADD_EOS},
        {"gpt2", "qwen2", -1, 1, KVT_TOK_ADD_EOS},
        {"llama", NULL, -1, -1, KVT_TOK_ADD_BOS},
        {"llama", NULL, 0, -1, 0},
        {"llama", NULL, 0, 1, KVT_TOK_ADD_EOS},
        {"llama", NULL, 1, 1, KVT_TOK_ADD_BOS | KVT_TOK_ADD_EOS},
    };
    for (size_t i = 0; i < KVT_ARRAY_LEN(cases); i++) {
        kvt_gguf_writer *w = kvt_gguf_writer_new();
        kvt_gguf_w_str(w, "tokenizer.ggml.model", cases[i].model);
        if (cases[i].pre) kvt_gguf_w_str(w, "tokenizer.ggml.pre", cases[i].pre);
        kvt_gguf_w_arr_str(w, "tokenizer.ggml.tokens", toks, KVT_ARRAY_LEN(toks));
        if (!strcmp(cases[i].model, "gpt2")) kvt_gguf_w_arr_str(w, "tokenizer.ggml.merges", merges, 1);
        kvt_gguf_w_u32(w, "tokenizer.ggml.bos_token_id", 0);
        kvt_gguf_w_u32(w, "tokenizer.ggml.eos_token_id", 1);
        kvt_gguf_w_u32(w, "tokenizer.ggml.unknown_token_id", 12);
        if (cases[i].bos_key >= 0) kvt_gguf_w_bool(w, "tokenizer.ggml.add_bos_token", cases[i].bos_key);
        if (cases[i].eos_key >= 0) kvt_gguf_w_bool(w, "tokenizer.ggml.add_eos_token", cases[i].eos_key);
        kvt_tokenizer *t;
        int rc = load_written(w, &t);
        CHECKF(rc == 0, "case %zu: %s", i, kvt_errmsg());
        if (rc) continue;
        char what[64];
        snprintf(what, sizeof what, "%s/%s bos_key %d eos_key %d", cases[i].model, cases[i].pre ? cases[i].pre : "-",
                 cases[i].bos_key, cases[i].eos_key);
        check_added(t, cases[i].want, what);
        kvt_tokenizer_free(t);
    }

    /* a flag whose token the vocabulary lacks is an error, not a silent skip */
    kvt_gguf_writer *w = kvt_gguf_writer_new();
    kvt_gguf_w_str(w, "tokenizer.ggml.model", "gpt2");
    kvt_gguf_w_str(w, "tokenizer.ggml.pre", "gpt-2");
    kvt_gguf_w_arr_str(w, "tokenizer.ggml.tokens", toks, KVT_ARRAY_LEN(toks));
    kvt_gguf_w_arr_str(w, "tokenizer.ggml.merges", merges, 1);
    kvt_tokenizer *t;
    if (load_written(w, &t) == 0) {
        int32_t *ids;
        size_t n;
        CHECK(kvt_tokenize(t, "He", 2, KVT_TOK_ADD_EOS, 0, &ids, &n) == KVT_ENOTFOUND && ids == NULL);
        CHECK(kvt_tokenize(t, "He", 2, KVT_TOK_ADD_BOS, 0, &ids, &n) == KVT_ENOTFOUND && ids == NULL);
        kvt_tokenizer_free(t);
    }
}

/* ---- timing ---- */

#define PERF_BYTES (100 * 1024)

static void time_one(const char *dir, const char *file) {
    kvt_tokenizer *t = load_path(kvt_test_path(dir, file));
    if (!t) return;
    static const char para[] =
        "The quick brown fox jumps over the lazy dog; 1234 caf\xc3\xa9s, \xe6\x97\xa5\xe6\x9c\xac. ";
    char *text = malloc(PERF_BYTES), *word = malloc(PERF_BYTES);
    for (size_t i = 0; i < PERF_BYTES; i++) {
        text[i] = para[i % (sizeof para - 1)];
        word[i] = "abcdefghij"[(i * 7 + i / 3) % 10];
    }
    const char *names[] = {"prose", "one 100 KB word"};
    char *inputs[] = {text, word};
    for (int k = 0; k < 2; k++) {
        int32_t *ids;
        size_t n;
        double t0 = kvt_now();
        int rc = kvt_tokenize(t, inputs[k], PERF_BYTES, 0, 0, &ids, &n);
        double dt = kvt_now() - t0;
        CHECKF(rc == 0, "%s: %s", file, kvt_errmsg());
        printf("perf: %s, %s: %d KB -> %zu tokens in %.1f ms\n", file, names[k], PERF_BYTES / 1024, n, dt * 1e3);
        free(ids);
    }
    free(text);
    free(word);
    kvt_tokenizer_free(t);
}

static void test_perf(void) {
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/vocab", kvt_test_shared());
    time_one(dir, "ggml-vocab-gpt-2.gguf");
    time_one(dir, "ggml-vocab-llama-spm.gguf");
    time_one(dir, "ggml-vocab-deepseek-llm.gguf");
}

/* A text far past the context is refused from a lower bound on its token
 * count, without tokenizing it all; the time is printed, not asserted. Texts of special tokens and
 * of spaces alone, whose fragments the lower bound treats differently, too. */
static void test_max_big(void) {
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/vocab", kvt_test_shared());
    const char *files[] = {"ggml-vocab-gpt-2.gguf", "ggml-vocab-llama-spm.gguf", "ggml-vocab-phi-3.gguf"};
    const size_t big = 8u << 20, ctx = 8192;
    static const char para[] = "The quick brown fox jumps over the lazy dog; 1234 caf\xc3\xa9s. ";
    char *text = malloc(big);
    int loaded = 0;
    for (size_t f = 0; f < KVT_ARRAY_LEN(files); f++) {
        kvt_tokenizer *t = load_path(kvt_test_path(dir, files[f]));
        if (!t) continue;
        loaded++;
        for (int k = 0; k < 3; k++) {
            for (size_t i = 0; i < big; i++) text[i] = k == 0 ? para[i % (sizeof para - 1)] : ' ';
            if (k == 2) { /* the end-of-text token's text, over and over */
                size_t el;
                const char *e = kvt_tokenizer_token_text(t, kvt_tokenizer_eos(t), &el);
                for (size_t i = 0; e && el && i + el <= big; i += el) memcpy(text + i, e, el);
            }
            int32_t *ids;
            size_t n;
            double t0 = kvt_now();
            int rc = kvt_tokenize_max(t, text, big, 1, 1, ctx, &ids, &n);
            CHECKF(rc == KVT_ELIMIT && !ids, "%s: 8 MB text %d: %d", files[f], k, rc);
            printf("tokenize_max: %s, 8 MB text %d past a %zu-token context refused in %.1f ms\n", files[f], k, ctx,
                   (kvt_now() - t0) * 1e3);
            check_max(t, files[f], text, 3000, 1, 1); /* a short text of the same kind: exact either way */
        }
        kvt_tokenizer_free(t);
    }
    free(text);
    if (!loaded) kvt_test_skip_part("no ../shared/vocab: an oversized text was not refused on a real vocabulary");
}

/* Tokenizing from several threads at once, over and over (reusing the tokenizer's idle regex
 * matchers), gives the ids of the first tokenization every time. */
typedef struct {
    const kvt_tokenizer *t;
    const char *text;
    const int32_t *want;
    size_t n_want;
    int bad;
} reuse_job;

static void *reuse_worker(void *arg) {
    reuse_job *j = arg;
    for (int i = 0; i < 40; i++) {
        int32_t *ids = NULL;
        size_t n = 0;
        j->bad += kvt_tokenize(j->t, j->text, strlen(j->text), 0, 1, &ids, &n) || n != j->n_want ||
            memcmp(ids, j->want, n * sizeof *ids);
        free(ids);
    }
    return NULL;
}

static void test_reuse(void) {
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/vocab", kvt_test_shared());
    kvt_tokenizer *t = load_path(kvt_test_path(dir, "ggml-vocab-gpt-2.gguf"));
    if (!t) {
        kvt_test_skip_part("gpt-2 vocab missing: concurrent tokenizing did not run");
        return;
    }
    const char *text = "Tool result: replication lag 31 s on replica-2 <|endoftext|> aaaaaaaaaaaaaaaaaaaaaaaa!!!";
    int32_t *want = NULL;
    size_t n_want = 0;
    CHECK(!kvt_tokenize(t, text, strlen(text), 0, 1, &want, &n_want) && n_want > 10);
    pthread_t th[4];
    reuse_job jobs[4];
    for (int i = 0; i < 4; i++) {
        jobs[i] = (reuse_job){t, text, want, n_want, 0};
        CHECK(!pthread_create(&th[i], NULL, reuse_worker, &jobs[i]));
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        CHECKF(!jobs[i].bad, "thread %d: %d tokenizations differed from the first", i, jobs[i].bad);
    }
    free(want);
    kvt_tokenizer_free(t);
}

int main(void) {
    test_vocab_dir();
    test_beyond();
    test_reuse();
    test_reference();
    test_api();
    test_malformed();
    test_all_pre();
    test_add_special();
    test_perf();
    test_max_big();
    return kvt_test_done("test_tokenizer");
}
