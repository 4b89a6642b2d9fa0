// SPDX-License-Identifier: MIT
/* Cache-aware RAG units (rag.h): chunking keeps every chunk within its
 * block budget and loses no text; BM25 ranks the right chunk first; the index
 * file round-trips and a damaged, truncated, foreign-version or linked file,
 * or one whose chunks share an id, is refused with a reason; the planner
 * gives the same bytes for the same set in any score order; ids come from the
 * content, so canonical order survives a changed corpus; kvt_rag_plan_cached follows a cached path, and greedy
 * output over its prompt equals a cold run. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cache.h"
#include "common.h"
#include "crc32c.h"
#include "model.h"
#include "rag.h"
#include "testutil.h"

#define B 16
#define CHUNK 64
#define N_GEN 6

static kvt_model *model;

static const char *const DOCS[][2] = {
    {"lyon",
     "The warehouse in Lyon ships parcels on Mondays and Thursdays only.\n\n"
     "Lyon orders placed after Thursday noon wait for the next Monday truck."},
    {"refunds",
     "Refunds go back to the original card within five business days.\n\n"
     "Gift card refunds become store credit instead of cash."},
    {"etna", "Mount Etna in Sicily erupts several times a year; volcanologists measure sulfur dioxide at its craters."},
    {"tides", "Ocean tides rise and fall twice a day because the moon pulls on the water."},
};

static kvt_rag_index *build(int32_t chunk) {
    kvt_rag_builder *b = NULL;
    CHECKF(kvt_rag_build_new(model, B, chunk, &b) == 0, "%s", kvt_errmsg());
    if (!b) return NULL;
    for (size_t i = 0; i < KVT_ARRAY_LEN(DOCS); i++)
        CHECKF(kvt_rag_build_add(b, DOCS[i][0], DOCS[i][1], strlen(DOCS[i][1])) == 0, "%s", kvt_errmsg());
    kvt_rag_index *x = NULL;
    CHECKF(kvt_rag_build_finish(b, &x) == 0, "%s", kvt_errmsg());
    return x;
}

/* text without whitespace, for comparing what chunks kept with the source */
static char *squeeze(const char *s) {
    char *o = malloc(strlen(s) + 1), *p = o;
    for (; *s; s++)
        if (*s != ' ' && *s != '\n' && *s != '\t') *p++ = *s;
    *p = 0;
    return o;
}

static int32_t rendered_len(const kvt_rag_chunk *c) {
    kvt_document d = {c->id, c->text};
    int32_t *out = NULL;
    size_t n = 0;
    CHECK(kvt_render_documents(model, B, NULL, 0, 0, &d, 1, &out, &n) == 0);
    free(out);
    return (int32_t)n;
}

static void test_chunks(void) {
    kvt_rag_builder *b = NULL;
    CHECK(kvt_rag_build_new(model, B, CHUNK + 1, &b) == KVT_EARG); /* not a multiple of B */
    CHECK(kvt_rag_build_new(model, B, B, &b) == KVT_EARG);         /* less than two blocks */
    /* a long text with a paragraph, sentences, a very long word: split at each level, nothing lost */
    char text[4096] = "Short first paragraph.\n\n";
    for (int i = 0; i < 30; i++) strcat(text, "A sentence about caching blocks of tokens. ");
    strcat(text, "\n\n");
    for (int i = 0; i < 150; i++) strcat(text, "x");
    CHECK(kvt_rag_build_new(model, B, CHUNK, &b) == 0);
    CHECK(kvt_rag_build_add(b, "long", text, strlen(text)) == 0);
    CHECK(kvt_rag_build_add(b, "nul", "a\0b", 3) == KVT_EFORMAT);
    kvt_rag_index *x = NULL;
    CHECK(kvt_rag_build_finish(b, &x) == 0);
    if (!x) return;
    CHECKF(kvt_rag_n_chunks(x) > 5, "%d chunks", kvt_rag_n_chunks(x));
    size_t cap = strlen(text) + 1;
    char *joined = calloc(1, cap);
    for (int32_t i = 0; i < kvt_rag_n_chunks(x); i++) {
        const kvt_rag_chunk *c = kvt_rag_chunk_at(x, i);
        int32_t n = rendered_len(c);
        CHECKF(n <= CHUNK && n % B == 0 && (uint32_t)n == c->tokens, "chunk %s: %d tokens (index says %u)", c->id, n,
               c->tokens);
        CHECK(c->seq == (uint32_t)i && !strncmp(c->id, "long#", 5) && strlen(c->id) == 5 + KVT_RAG_ID_HEX &&
              strspn(c->id + 5, "0123456789abcdef") == KVT_RAG_ID_HEX);
        strcat(joined, c->text);
        for (int32_t j = 0; j < i; j++) /* repeated text (the same sentences) still gets ids of its own */
            CHECKF(strcmp(kvt_rag_chunk_at(x, j)->id, c->id), "chunks %d and %d share id %s", j, i, c->id);
    }
    char *a = squeeze(text), *j = squeeze(joined);
    CHECKF(!strcmp(a, j), "the chunks do not add up to the document");
    free(a);
    free(j);
    free(joined);
    kvt_rag_free(x);
    CHECK(kvt_rag_build_new(model, B, CHUNK, &b) == 0);
    CHECK(kvt_rag_build_finish(b, &x) == KVT_EARG && !x); /* nothing to index */
}

static int32_t top(const kvt_rag_index *x, const char *q) {
    kvt_rag_hit h[3];
    int32_t n = kvt_rag_query(x, q, 3, h);
    return n ? h[0].chunk : -1;
}

/* "<doc>#<position in the doc>" of the best chunk: ids themselves are hashes */
static const char *top_id(const kvt_rag_index *x, const char *q) {
    static char buf[256];
    int32_t c = top(x, q);
    if (c < 0) return "";
    snprintf(buf, sizeof buf, "%s#%u", kvt_rag_chunk_at(x, c)->doc, kvt_rag_chunk_at(x, c)->seq);
    return buf;
}

static void test_retrieval(kvt_rag_index *x) {
    CHECKF(!strcmp(top_id(x, "Which days does the Lyon warehouse ship?"), "lyon#0"), "%s",
           top_id(x, "Which days does the Lyon warehouse ship?"));
    CHECK(!strcmp(top_id(x, "What happens to LYON orders after Thursday NOON?"), "lyon#1"));
    CHECK(!strcmp(top_id(x, "Do gift card refunds become credit?"), "refunds#1"));
    CHECK(!strncmp(top_id(x, "sulfur dioxide at Etna"), "etna#", 5));
    CHECK(!strcmp(top_id(x, "Why does the moon move the tides?"), "tides#0"));
    CHECK(top(x, "the of and") == -1); /* stop words only: nothing */
    kvt_rag_hit h[8];
    int32_t n = kvt_rag_query(x, "Lyon refunds", 8, h);
    CHECK(n >= 3);
    for (int32_t i = 1; i < n; i++) CHECK(h[i - 1].score >= h[i].score && h[i].rank == i);
}

static void test_file(kvt_rag_index *x) {
    const char *dir = kvt_test_tmpdir(), *path = kvt_test_path(dir, "i.idx");
    CHECKF(kvt_rag_save(x, path) == 0, "%s", kvt_errmsg());
    kvt_rag_index *y = NULL;
    CHECKF(kvt_rag_load(path, &y) == 0, "%s", kvt_errmsg());
    if (!y) return;
    CHECK(kvt_rag_n_chunks(y) == kvt_rag_n_chunks(x) && kvt_rag_n_terms(y) == kvt_rag_n_terms(x));
    CHECK(kvt_rag_block_size(y) == B && kvt_rag_chunk_tokens(y) == CHUNK);
    for (int32_t i = 0; i < kvt_rag_n_chunks(x); i++) {
        const kvt_rag_chunk *a = kvt_rag_chunk_at(x, i), *b = kvt_rag_chunk_at(y, i);
        CHECK(!strcmp(a->id, b->id) && !strcmp(a->text, b->text) && a->tokens == b->tokens);
    }
    kvt_rag_hit h1[4], h2[4];
    int32_t n1 = kvt_rag_query(x, "Lyon Monday truck refunds", 4, h1),
            n2 = kvt_rag_query(y, "Lyon Monday truck refunds", 4, h2);
    CHECK(n1 == n2 && n1 > 0);
    for (int32_t i = 0; i < n1 && i < n2; i++)
        CHECK(h1[i].chunk == h2[i].chunk && h1[i].score == h2[i].score && h1[i].rank == h2[i].rank);
    kvt_rag_free(y);

    size_t len;
    char *bytes = kvt_test_read_file(path, &len);
    if (!bytes) return;
    const char *bad = kvt_test_path(dir, "bad.idx");
    FILE *f;
    /* a flipped payload byte */
    bytes[len - 3] ^= 1;
    f = fopen(bad, "wb");
    fwrite(bytes, 1, len, f);
    fclose(f);
    CHECK(kvt_rag_load(bad, &y) == KVT_EFORMAT && !y && strstr(kvt_errmsg(), "checksum"));
    bytes[len - 3] ^= 1;
    /* truncated */
    f = fopen(bad, "wb");
    fwrite(bytes, 1, len - 10, f);
    fclose(f);
    CHECK(kvt_rag_load(bad, &y) == KVT_EFORMAT && strstr(kvt_errmsg(), "truncated"));
    /* another version whose header checksum does not hold under this build's layout (a writer of
     * another version may lay its header out otherwise): named as that version, not as damage */
    bytes[8] = 9;
    f = fopen(bad, "wb");
    fwrite(bytes, 1, len, f);
    fclose(f);
    CHECKF(kvt_rag_load(bad, &y) == KVT_EUNSUPPORTED && !y &&
               strstr(kvt_errmsg(), "written by a newer kvtier (index format version 9;"),
           "%s", kvt_errmsg());
    bytes[8] = 1;
    f = fopen(bad, "wb");
    fwrite(bytes, 1, len, f);
    fclose(f);
    CHECKF(kvt_rag_load(bad, &y) == KVT_EUNSUPPORTED && strstr(kvt_errmsg(), "written by an older kvtier"), "%s",
           kvt_errmsg());
    /* another version, with a valid header checksum */
    bytes[8] = 9;
    uint32_t crc = kvt_crc32c(0, bytes, 40); /* the header's checksum covers its first 40 bytes */
    memcpy(bytes + 40, &crc, 4);             /* little-endian host, as the tests run */
    f = fopen(bad, "wb");
    fwrite(bytes, 1, len, f);
    fclose(f);
    CHECKF(kvt_rag_load(bad, &y) == KVT_EUNSUPPORTED && strstr(kvt_errmsg(), "version 9"), "%s", kvt_errmsg());
    /* not an index, empty, a symbolic link */
    f = fopen(bad, "wb");
    fclose(f);
    CHECK(kvt_rag_load(bad, &y) == KVT_EFORMAT && strstr(kvt_errmsg(), "magic"));
    const char *link = kvt_test_path(dir, "link.idx");
    CHECK(symlink(path, link) == 0);
    CHECK(kvt_rag_load(link, &y) == -ELOOP && !y);
    CHECK(kvt_rag_load(kvt_test_path(dir, "missing.idx"), &y) == -ENOENT);
    free(bytes);
}

/* terms shared by many chunks are one term each, in the index and in its file */
static void test_shared_terms(void) {
    kvt_rag_builder *b = NULL;
    CHECK(kvt_rag_build_new(model, B, CHUNK, &b) == 0);
    const char *names[] = {"a", "b", "c", "d"};
    for (int i = 0; i < 4; i++) CHECK(kvt_rag_build_add(b, names[i], "alpha beta gamma", 16) == 0);
    /* a name given twice (also once its control characters are '_') is refused and adds nothing */
    CHECKF(kvt_rag_build_add(b, "b", "delta", 5) == KVT_EARG && strstr(kvt_errmsg(), "document 'b' is named twice"),
           "%s", kvt_errmsg());
    CHECK(kvt_rag_build_add(b, "x\ty", "alpha", 5) == 0);
    CHECKF(kvt_rag_build_add(b, "x_y", "epsilon", 7) == KVT_EARG && strstr(kvt_errmsg(), "'x_y' is named twice"), "%s",
           kvt_errmsg());
    kvt_rag_index *x = NULL, *y = NULL;
    CHECK(kvt_rag_build_finish(b, &x) == 0);
    if (!x) return;
    CHECKF(kvt_rag_n_terms(x) == 3, "%d terms", kvt_rag_n_terms(x));
    const char *path = kvt_test_path(kvt_test_tmpdir(), "shared.idx");
    CHECK(kvt_rag_save(x, path) == 0);
    CHECKF(kvt_rag_load(path, &y) == 0 && kvt_rag_n_terms(y) == 3, "%s", kvt_errmsg());
    kvt_rag_hit h[4];
    CHECK(y && kvt_rag_query(y, "beta", 4, h) == 4 && h[0].chunk == 0 && h[3].chunk == 3); /* ties: chunk order */
    CHECK(y && kvt_rag_query(y, "delta epsilon", 4, h) == 0); /* the refused documents added nothing */
    kvt_rag_free(x);
    kvt_rag_free(y);
}

/* an index file whose chunks share an id (another tool's: `kvtier rag index` gives each its own) is
 * refused when it loads, naming the file and the id, not by a 400 when a request retrieves both */
static void test_duplicate_ids(kvt_rag_index *x) {
    kvt_rag_chunk *c = (kvt_rag_chunk *)kvt_rag_chunk_at(x, 2);
    const char *own = c->id, *path = kvt_test_path(kvt_test_tmpdir(), "dup.idx");
    c->id = kvt_rag_chunk_at(x, 0)->id;
    int saved = kvt_rag_save(x, path);
    c->id = own;
    CHECKF(saved == 0, "%s", kvt_errmsg());
    kvt_rag_index *y = NULL;
    CHECKF(kvt_rag_load(path, &y) == KVT_EFORMAT && !y && strstr(kvt_errmsg(), path) &&
               strstr(kvt_errmsg(), "chunks 0 and 2 share the id") && strstr(kvt_errmsg(), kvt_rag_chunk_at(x, 0)->id),
           "%s", kvt_errmsg());
    kvt_rag_free(y);
}

static void test_plan(kvt_rag_index *x) {
    kvt_rag_hit a[3] = {{3, 2.0, 0}, {0, 1.5, 1}, {1, 1.0, 2}}, b[3] = {{1, 4.0, 0}, {3, 3.0, 1}, {0, 0.5, 2}};
    kvt_document da[3], db[3];
    kvt_rag_plan(x, KVT_RAG_ORDER_CANONICAL, a, 3, da);
    kvt_rag_plan(x, KVT_RAG_ORDER_CANONICAL, b, 3, db);
    for (int i = 0; i < 3; i++) CHECK(da[i].id == db[i].id && da[i].text == db[i].text);
    CHECK(strcmp(da[0].id, da[1].id) < 0 && strcmp(da[1].id, da[2].id) < 0); /* by id */
    kvt_rag_plan(x, KVT_RAG_ORDER_SCORE, b, 3, db);
    CHECK(b[0].chunk == 1 && b[1].chunk == 3 && b[2].chunk == 0);
    CHECK(kvt_rag_order_parse("cached") == KVT_RAG_ORDER_CACHED && kvt_rag_order_parse("x") < 0);
    CHECK(!strcmp(kvt_rag_order_name(KVT_RAG_ORDER_SCORE), "score"));
}

/* The first n chunk numbers of x in canonical order (by id). */
static void by_id(kvt_rag_index *x, int32_t *out, int32_t n) {
    int32_t all = kvt_rag_n_chunks(x);
    kvt_rag_hit *h = calloc((size_t)all, sizeof *h);
    kvt_document *d = calloc((size_t)all, sizeof *d);
    for (int32_t i = 0; i < all; i++) h[i] = (kvt_rag_hit){i, 1.0, i};
    kvt_rag_plan(x, KVT_RAG_ORDER_CANONICAL, h, all, d);
    for (int32_t i = 0; i < n && i < all; i++) out[i] = h[i].chunk;
    free(h);
    free(d);
}

/* The chunk of x whose text is text, or -1. */
static int32_t find_text(const kvt_rag_index *x, const char *text) {
    for (int32_t i = 0; i < kvt_rag_n_chunks(x); i++)
        if (!strcmp(kvt_rag_chunk_at(x, i)->text, text)) return i;
    return -1;
}

/* Ids come from the content: re-indexing a changed corpus (a document added
 * before the others, one removed, a paragraph inserted at the top of
 * another) keeps every surviving chunk's id and token count, so the same
 * retrieved set plans to the same prompt although chunk numbers moved. */
static void test_ids_stable(kvt_rag_index *x) {
    kvt_rag_builder *b = NULL;
    CHECK(kvt_rag_build_new(model, B, CHUNK, &b) == 0);
    if (!b) return;
    const char *lyon2 = "Lyon is a city in France where two rivers meet, the Rhone and the Saone, under the hill of "
                        "Fourviere and its old basilica.\n\n";
    char *lyon = malloc(strlen(lyon2) + strlen(DOCS[0][1]) + 1);
    strcpy(lyon, lyon2);
    strcat(lyon, DOCS[0][1]);
    const char *aa = "Aardvarks dig burrows at night.";
    CHECK(kvt_rag_build_add(b, "aardvark", aa, strlen(aa)) == 0);
    CHECK(kvt_rag_build_add(b, "lyon", lyon, strlen(lyon)) == 0);
    for (size_t i = 2; i < KVT_ARRAY_LEN(DOCS); i++) /* refunds (DOCS[1]) removed */
        CHECK(kvt_rag_build_add(b, DOCS[i][0], DOCS[i][1], strlen(DOCS[i][1])) == 0);
    kvt_rag_index *y = NULL;
    CHECKF(kvt_rag_build_finish(b, &y) == 0, "%s", kvt_errmsg());
    free(lyon);
    if (!y) return;
    CHECK(!strcmp(kvt_rag_chunk_at(y, 0)->doc, "aardvark")); /* numbered first: every other chunk moved */
    int32_t kept = 0, moved = 0;
    for (int32_t i = 0; i < kvt_rag_n_chunks(x); i++) {
        const kvt_rag_chunk *c = kvt_rag_chunk_at(x, i);
        int32_t j = find_text(y, c->text);
        if (j < 0) continue;
        kept++;
        moved += j != i;
        CHECKF(!strcmp(kvt_rag_chunk_at(y, j)->id, c->id) && kvt_rag_chunk_at(y, j)->tokens == c->tokens,
               "chunk %s is %s after re-indexing", c->id, kvt_rag_chunk_at(y, j)->id);
    }
    CHECKF(kept >= 4 && moved >= 4, "%d chunks kept, %d renumbered", kept, moved);
    /* the same question's chunks: different numbers, the same planned documents */
    const char *q = "Lyon orders Thursday Etna sulfur tides moon";
    kvt_rag_hit hx[3], hy[3];
    kvt_document dx[3], dy[3];
    int32_t nx = kvt_rag_query(x, q, 3, hx), ny = kvt_rag_query(y, q, 3, hy);
    CHECK(nx == 3 && ny == 3);
    kvt_rag_plan(x, KVT_RAG_ORDER_CANONICAL, hx, nx, dx);
    kvt_rag_plan(y, KVT_RAG_ORDER_CANONICAL, hy, ny, dy);
    int same_numbers = 1;
    for (int32_t i = 0; i < 3 && nx == 3 && ny == 3; i++) {
        CHECKF(!strcmp(dx[i].id, dy[i].id) && !strcmp(dx[i].text, dy[i].text), "position %d: %s vs %s", i, dx[i].id,
               dy[i].id);
        same_numbers &= hx[i].chunk == hy[i].chunk;
    }
    CHECK(!same_numbers);
    kvt_rag_free(y);
}

/* [BOS][docs in canonical order as fixed context blocks][question] with each document's offset */
static int32_t *render(kvt_rag_index *x, const int32_t *chunks, size_t n, const char *q, size_t *len, size_t *starts) {
    kvt_rag_hit h[8];
    kvt_document d[8];
    for (size_t i = 0; i < n; i++) h[i] = (kvt_rag_hit){chunks[i], 1.0, (int32_t)i};
    kvt_rag_plan(x, KVT_RAG_ORDER_CANONICAL, h, (int32_t)n, d);
    int32_t *qt = NULL, *out = NULL;
    size_t nq = 0;
    CHECK(kvt_model_tokenize(model, q, strlen(q), 1, 0, &qt, &nq) == 0);
    CHECK(kvt_render_documents_spans(model, B, qt, nq, 1, d, n, &out, len, starts) == 0);
    free(qt);
    return out;
}

static void test_plan_cached(kvt_rag_index *x) {
    kvt_engine *e = kvt_test_engine(model, B, 512, 1024), *ec = kvt_test_engine(model, B, 512, 1024);
    kvt_cache *c = e ? kvt_test_cache(e, NULL, 0) : NULL;
    if (!c || !ec) goto out;
    kvt_hash128 root;
    CHECK(kvt_cache_root(c, NULL, 0, &root) == 0);
    /* s[]: the chunks in canonical order (by id); the cache holds [BOS][s1][s2] */
    int32_t s[6];
    by_id(x, s, 6);
    int32_t warm_set[2] = {s[1], s[2]}, set[3] = {s[0], s[1], s[2]};
    size_t nw, st_w[3], n, st[4];
    int32_t *pw = render(x, warm_set, 2, "First question?", &nw, st_w);
    kvt_test_gen g0 = kvt_test_generate(e, c, pw, (int32_t)nw, N_GEN, NULL);
    /* {s0, s1, s2}: canonical order starts with s0, which is not cached; the planner puts s1, s2 first */
    int32_t *p = render(x, set, 3, "Second question?", &n, st);
    int32_t *canon = malloc(n * sizeof *canon), order[3];
    memcpy(canon, p, n * sizeof *p);
    size_t len0 = st[1] - st[0];
    int32_t lookups = kvt_rag_plan_cached(c, root, p, (int32_t)n, st, 3, order);
    CHECKF(order[0] == 1 && order[1] == 2 && order[2] == 0, "order %d %d %d", order[0], order[1], order[2]);
    CHECK(lookups >= 3 && lookups <= 6);
    CHECK(st[0] == st_w[0] && st[2] == st_w[2] && st[3] - st[2] == len0); /* 2 and 4 where they were cached */
    CHECK(!memcmp(p, pw, st_w[2] * sizeof *p));                           /* the cached prefix, token for token */
    CHECK(!memcmp(p + st[3], canon + st[3], (n - st[3]) * sizeof *p));    /* the question stays last */
    kvt_test_gen g1 = kvt_test_generate(e, c, p, (int32_t)n, N_GEN, NULL);
    CHECKF(g1.res.n_reused == (int32_t)st_w[2], "reused %d, want %zu", g1.res.n_reused, st_w[2]);
    kvt_test_gen cold = kvt_test_generate(ec, NULL, p, (int32_t)n, N_GEN, NULL);
    CHECKF(kvt_test_same(&g1, &cold), "greedy over the planned prompt differs from a cold run");
    /* the same set again: the whole planned prefix is cached, the order stays */
    int32_t *p2 = render(x, set, 3, "Third question?", &n, st);
    kvt_rag_plan_cached(c, root, p2, (int32_t)n, st, 3, order);
    CHECK(order[0] == 1 && order[1] == 2 && order[2] == 0);
    kvt_cache_match m;
    kvt_cache_lookup_root(c, root, p2, (int32_t)st[3], &m);
    CHECK(m.n_tokens == (int32_t)st[3]);
    /* nothing cached along any candidate: canonical order, untouched */
    int32_t other[2] = {s[3], s[4]};
    int32_t *p3 = render(x, other, 2, "Fourth?", &n, st);
    int32_t *copy = malloc(n * sizeof *copy);
    memcpy(copy, p3, n * sizeof *p3);
    kvt_rag_plan_cached(c, root, p3, (int32_t)n, st, 2, order);
    CHECK(order[0] == 0 && order[1] == 1 && !memcmp(copy, p3, n * sizeof *p3));
    free(copy);
    free(p3);
    free(p2);
    free(canon);
    free(p);
    free(pw);
    kvt_test_gen_free(&g0);
    kvt_test_gen_free(&g1);
    kvt_test_gen_free(&cold);
out:
    kvt_cache_free(c);
    kvt_engine_free(e);
    kvt_engine_free(ec);
}

int main(void) {
    model = kvt_test_tiny_model("rag.gguf", 2048);
    if (!model) return 1;
    test_chunks();
    test_shared_terms();
    kvt_rag_index *x = build(CHUNK);
    if (x) {
        for (int32_t i = 0; i < kvt_rag_n_chunks(x); i++) CHECK(kvt_rag_chunk_at(x, i)->tokens <= CHUNK);
        CHECKF(kvt_rag_n_chunks(x) >= 6, "%d chunks", kvt_rag_n_chunks(x));
        test_retrieval(x);
        test_file(x);
        test_duplicate_ids(x);
        test_plan(x);
        test_ids_stable(x);
        test_plan_cached(x);
    }
    kvt_rag_free(x);
    kvt_model_free(model);
    return kvt_test_done("test_rag");
}
