// SPDX-License-Identifier: MIT
/* Building a RAG index (rag.h): documents cut into chunks that render as whole
 * runs of cache blocks, their BM25 terms, and the postings sorted into an
 * index. rag_index.c holds the finished index: file format, load, query. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

#include "common.h"
#include "hmap128.h"
#include "model.h"
#include "rag_internal.h"
#include "tokenizer.h"

#define DOC_HEADER "Document " /* kvt_render_documents' rendering, measured here */

typedef struct {
    char *term;
    int32_t chunk;
    uint32_t tf;
} triple;

struct kvt_rag_builder {
    const kvt_model *m;
    int32_t B, chunk_tokens;
    kvt_rag_chunk *chunks;
    int32_t n_chunks, cap_chunks;
    triple *tr;
    size_t n_tr, cap_tr;
    /* the chunk being filled */
    const char *doc;
    uint32_t seq;
    int32_t *ids;   /* open-addressing set of the ids given so far: chunk number + 1, 0 = empty */
    size_t ids_cap; /* a power of two, at least twice n_chunks */
    char *cur;
    size_t cur_len, cur_cap;
    int err;
    kvt_hmap128 names; /* the documents' names as kept (XXH3-128): a name given twice is refused */
};

int kvt_rag_build_new(const kvt_model *m, int32_t block_size, int32_t chunk_tokens, kvt_rag_builder **out) {
    *out = NULL;
    if (!m || block_size < 1 || chunk_tokens < 2 * block_size || chunk_tokens % block_size)
        return kvt_fail(KVT_EARG, "--chunk-tokens %d must be a multiple of the block size %d and at least two blocks",
                        chunk_tokens, block_size);
    if (kvt_document_pad_token(m) < 0) return KVT_EUNSUPPORTED;
    kvt_rag_builder *b = kvt_xcalloc(1, sizeof *b);
    b->m = m;
    b->B = block_size;
    b->chunk_tokens = chunk_tokens;
    *out = b;
    return 0;
}

int32_t kvt_rag_build_chunks(const kvt_rag_builder *b) { return b->n_chunks; }

/* The slot of id in the id set: where it is, or the empty slot where it would go. */
static size_t id_slot(const kvt_rag_builder *b, const char *id) {
    size_t i = (size_t)XXH3_64bits(id, strlen(id)) & (b->ids_cap - 1);
    while (b->ids[i] && strcmp(b->chunks[b->ids[i] - 1].id, id)) i = (i + 1) & (b->ids_cap - 1);
    return i;
}

static void id_insert(kvt_rag_builder *b, int32_t chunk) {
    if ((size_t)(chunk + 1) * 2 > b->ids_cap) { /* grow and rehash */
        free(b->ids);
        b->ids_cap = b->ids_cap ? 2 * b->ids_cap : 256;
        b->ids = kvt_xcalloc(b->ids_cap, sizeof *b->ids);
        for (int32_t i = 0; i < chunk; i++) b->ids[id_slot(b, b->chunks[i].id)] = i + 1;
    }
    b->ids[id_slot(b, b->chunks[chunk].id)] = chunk + 1;
}

/* The id text gets as a chunk of the current document: its content hash,
 * re-seeded (1, 2, ...) while an earlier chunk holds that id (the same text
 * repeated in the document, or a hash collision). malloc'd. */
static char *chunk_id(const kvt_rag_builder *b, const char *text, size_t len) {
    for (uint64_t seed = 0;; seed++) {
        char *id = kvt_rag_chunk_id(b->doc, text, len, seed);
        if (!b->ids_cap || !b->ids[id_slot(b, id)]) return id;
        free(id);
    }
}

/* Tokens of text rendered as a chunk of the current document (with the id
 * emit would give it), padded to whole blocks; < 0 on error. */
static long rendered_tokens(kvt_rag_builder *b, const char *text, size_t len) {
    char *id = chunk_id(b, text, len);
    size_t n = strlen(DOC_HEADER) + strlen(id) + len + 4;
    char *s = kvt_xmalloc(n);
    int k = snprintf(s, n, DOC_HEADER "%s:\n%.*s\n", id, (int)len, text);
    free(id);
    int32_t *ids = NULL;
    size_t nt = 0;
    int rc = kvt_tokenize(b->m->tok, s, (size_t)k, 0, 0, &ids, &nt);
    free(s);
    free(ids);
    if (rc) return rc;
    return (long)((nt + (size_t)b->B - 1) / (size_t)b->B * (size_t)b->B);
}

static int fits(kvt_rag_builder *b, const char *text, size_t len) {
    long t = rendered_tokens(b, text, len);
    if (t < 0) b->err = (int)t;
    return t >= 0 && t <= b->chunk_tokens;
}

static int is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

/* Counts the chunk's terms: sorted, then one triple per distinct term. */
static uint32_t index_terms(kvt_rag_builder *b, int32_t chunk, const char *text) {
    char **terms = NULL;
    size_t n = kvt_rag_terms(text, strlen(text), &terms);
    if (n) qsort(terms, n, sizeof *terms, kvt_rag_strcmp); /* qsort with a NULL array is undefined even for 0 */
    for (size_t i = 0; i < n;) {
        size_t j = i + 1;
        while (j < n && !strcmp(terms[i], terms[j])) free(terms[j++]);
        if (b->n_tr == b->cap_tr)
            b->tr = kvt_xrealloc(b->tr, (b->cap_tr = b->cap_tr ? 2 * b->cap_tr : 1024) * sizeof *b->tr);
        b->tr[b->n_tr++] = (triple){terms[i], chunk, (uint32_t)(j - i)};
        i = j;
    }
    free(terms);
    return (uint32_t)n;
}

/* Closes the chunk being filled (if it holds any text). */
static void emit(kvt_rag_builder *b) {
    if (!b->cur_len) return;
    long t = rendered_tokens(b, b->cur, b->cur_len);
    if (t < 0) {
        b->err = (int)t;
        b->cur_len = 0;
        return;
    }
    if (b->n_chunks == b->cap_chunks)
        b->chunks = kvt_xrealloc(b->chunks,
                                 (size_t)(b->cap_chunks = b->cap_chunks ? 2 * b->cap_chunks : 64) * sizeof *b->chunks);
    kvt_rag_chunk *c = &b->chunks[b->n_chunks];
    memset(c, 0, sizeof *c);
    c->doc = kvt_xstrdup(b->doc);
    c->seq = b->seq++;
    c->text = kvt_rag_strndup(b->cur, b->cur_len);
    c->id = chunk_id(b, b->cur, b->cur_len);
    c->tokens = (uint32_t)t;
    c->n_terms = index_terms(b, b->n_chunks, c->text);
    id_insert(b, b->n_chunks);
    b->n_chunks++;
    b->cur_len = 0;
}

static void cur_set(kvt_rag_builder *b, const char *a, size_t na, const char *sep, const char *p, size_t np) {
    size_t ns = sep ? strlen(sep) : 0, need = na + ns + np + 1;
    char *t = kvt_xmalloc(need);
    if (na) memcpy(t, a, na);
    if (ns) memcpy(t + na, sep, ns);
    if (np) memcpy(t + na + ns, p, np);
    t[na + ns + np] = 0;
    free(b->cur);
    b->cur = t;
    b->cur_len = na + ns + np;
    b->cur_cap = need;
}

/* Separators of each level of splitting: paragraphs, sentences, words; then bytes. */
enum { LVL_PARA, LVL_SENT, LVL_WORD, LVL_BYTE };
static const char *const LVL_SEP[] = {"\n\n", " ", " ", ""};

/* The end of the next piece of s[0..n) at level lvl, and where the one after starts. */
static size_t next_piece(const char *s, size_t n, int lvl, size_t *next) {
    size_t i = 0;
    for (; i < n; i++) {
        if (lvl == LVL_PARA && s[i] == '\n') {
            size_t j = i + 1;
            while (j < n && (s[j] == ' ' || s[j] == '\t' || s[j] == '\r')) j++;
            if (j < n && s[j] == '\n') break;
        } else if (lvl == LVL_SENT &&
                   (s[i] == '\n' || ((s[i] == '.' || s[i] == '?' || s[i] == '!') && i + 1 < n && is_space(s[i + 1])))) {
            if (s[i] != '\n') i++;
            break;
        } else if (lvl == LVL_WORD && is_space(s[i])) {
            break;
        }
    }
    size_t end = i;
    while (i < n && is_space(s[i])) i++;
    *next = i;
    return end;
}

static void add_piece(kvt_rag_builder *b, const char *p, size_t n, const char *sep, int lvl);

/* Splits p[0..n) at level lvl and adds each piece; the first joins with sep. */
static void split(kvt_rag_builder *b, const char *p, size_t n, const char *sep, int lvl) {
    if (lvl == LVL_BYTE) {
        /* a run with no break: the longest prefix that fits, cut on a UTF-8 boundary */
        while (n && !b->err) {
            emit(b);
            size_t lo = 1, hi = n;
            while (lo < hi) {
                size_t mid = lo + (hi - lo + 1) / 2;
                if (fits(b, p, mid)) lo = mid;
                else hi = mid - 1;
            }
            while (lo < n && lo > 1 && ((unsigned char)p[lo] & 0xC0) == 0x80) lo--;
            cur_set(b, p, lo, NULL, NULL, 0);
            p += lo;
            n -= lo;
        }
        return;
    }
    size_t i = 0;
    while (i < n && is_space(p[i])) i++;
    while (i < n && !b->err) {
        size_t next, end = i + next_piece(p + i, n - i, lvl, &next);
        while (end > i && is_space(p[end - 1])) end--;
        if (end > i) add_piece(b, p + i, end - i, sep, lvl + 1);
        sep = LVL_SEP[lvl];
        i += next;
    }
}

/* Appends piece p to the chunk being filled if it fits, else starts a new
 * chunk with it; a piece too long for a chunk of its own is split finer. */
static void add_piece(kvt_rag_builder *b, const char *p, size_t n, const char *sep, int lvl) {
    if (b->cur_len) {
        size_t ns = strlen(sep);
        char *cand = kvt_xmalloc(b->cur_len + ns + n);
        memcpy(cand, b->cur, b->cur_len);
        memcpy(cand + b->cur_len, sep, ns);
        memcpy(cand + b->cur_len + ns, p, n);
        int ok = fits(b, cand, b->cur_len + ns + n);
        free(cand);
        if (ok) {
            char *old = b->cur;
            b->cur = NULL;
            cur_set(b, old, b->cur_len, sep, p, n);
            free(old);
            return;
        }
        emit(b);
    }
    if (fits(b, p, n)) cur_set(b, p, n, NULL, NULL, 0);
    else if (!b->err) split(b, p, n, "", lvl);
}

int kvt_rag_build_add(kvt_rag_builder *b, const char *doc, const char *text, size_t len) {
    if (memchr(text, 0, len))
        return kvt_fail(KVT_EFORMAT, "document %s holds a NUL byte at offset %zu", doc,
                        (size_t)((const char *)memchr(text, 0, len) - text));
    char *name = kvt_rag_strndup(doc, strnlen(doc, KVT_RAG_DOC_MAX));
    for (char *q = name; *q; q++)
        if ((unsigned char)*q < 0x20 || *q == 0x7f) *q = '_';
    if (!*name) {
        free(name);
        return kvt_fail(KVT_EARG, "a document needs a non-empty name");
    }
    XXH128_hash_t h = XXH3_128bits(name, strlen(name));
    kvt_hash128 key = {h.low64, h.high64};
    if (kvt_hmap128_get(&b->names, key, NULL)) {
        int rc = kvt_fail(KVT_EARG,
                          "document '%s' is named twice (a name is kept to its first %d bytes, control characters "
                          "as '_'): each document needs its own name, or its chunks could not be told apart",
                          name, KVT_RAG_DOC_MAX);
        free(name);
        return rc;
    }
    kvt_hmap128_put(&b->names, key, 0);
    b->doc = name;
    b->seq = 0;
    b->cur_len = 0;
    b->err = 0;
    if (!fits(b, "x", 1)) {
        free(name);
        b->doc = NULL;
        return b->err ? b->err
                      : kvt_fail(KVT_ELIMIT,
                                 "document %s: its name alone fills a chunk of %d tokens; use a shorter "
                                 "name or a larger --chunk-tokens",
                                 doc, b->chunk_tokens);
    }
    split(b, text, len, "", LVL_PARA);
    emit(b);
    free(name);
    b->doc = NULL;
    return b->err ? kvt_fail(b->err, "cannot tokenize document %s: %s", doc, kvt_errmsg()) : 0;
}

static int triple_cmp(const void *x, const void *y) {
    const triple *a = x, *b = y;
    int c = strcmp(a->term, b->term);
    return c ? c : (a->chunk > b->chunk) - (a->chunk < b->chunk);
}

int kvt_rag_build_finish(kvt_rag_builder *b, kvt_rag_index **out) {
    *out = NULL;
    if (!b->n_chunks) {
        kvt_rag_build_free(b);
        return kvt_fail(KVT_EARG, "no document held any text to index");
    }
    qsort(b->tr, b->n_tr, sizeof *b->tr, triple_cmp);
    kvt_rag_index *x = kvt_xcalloc(1, sizeof *x);
    x->B = b->B;
    x->chunk_tokens = b->chunk_tokens;
    x->n_chunks = b->n_chunks;
    x->chunks = b->chunks;
    b->chunks = NULL;
    b->n_chunks = 0;
    x->post_chunk = kvt_xmalloc((b->n_tr ? b->n_tr : 1) * sizeof *x->post_chunk);
    x->post_tf = kvt_xmalloc((b->n_tr ? b->n_tr : 1) * sizeof *x->post_tf);
    x->terms = kvt_xmalloc((b->n_tr ? b->n_tr : 1) * sizeof *x->terms);
    x->post_off = kvt_xmalloc((b->n_tr + 1) * sizeof *x->post_off);
    for (size_t i = 0; i < b->n_tr; i++) {
        if (!x->n_terms || strcmp(b->tr[i].term, x->terms[x->n_terms - 1])) {
            x->post_off[x->n_terms] = (uint32_t)i;
            x->terms[x->n_terms++] = b->tr[i].term;
        } else {
            free(b->tr[i].term);
        }
        x->post_chunk[i] = (uint32_t)b->tr[i].chunk;
        x->post_tf[i] = b->tr[i].tf;
    }
    x->post_off[x->n_terms] = (uint32_t)b->n_tr;
    x->n_post = b->n_tr;
    b->n_tr = 0;
    kvt_rag_index_finish(x);
    kvt_rag_build_free(b);
    *out = x;
    return 0;
}

void kvt_rag_build_free(kvt_rag_builder *b) {
    if (!b) return;
    for (int32_t i = 0; i < b->n_chunks; i++) kvt_rag_chunk_free(&b->chunks[i]);
    free(b->chunks);
    for (size_t i = 0; i < b->n_tr; i++) free(b->tr[i].term);
    free(b->tr);
    free(b->cur);
    free(b->ids);
    kvt_hmap128_free(&b->names);
    free(b);
}
