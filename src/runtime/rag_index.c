// SPDX-License-Identifier: MIT
/* The RAG index (rag.h): its file format (save, validated load), BM25
 * retrieval, and the planner that orders retrieved chunks into a stable
 * prefix. Building it is rag_build.c. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <xxhash.h>

#include "common.h"
#include "crc32c.h"
#include "rag_internal.h"

#define MAGIC "KVTRAGIX"
#define MAGIC_LEN 8
#define HEADER_BYTES KVT_RAG_HEADER_BYTES
_Static_assert(HEADER_BYTES == MAGIC_LEN + 5 * 4 + 8 + 4 + 4, "the header layout of rag.h");

/* ---- terms ------------------------------------------------------------------------- */

static const char *const STOP[] = {"a",     "an",    "and",   "are",   "as",   "at",  "be",   "by",   "can",
                                   "did",   "do",    "does",  "for",   "from", "has", "have", "how",  "i",
                                   "in",    "is",    "it",    "its",   "of",   "on",  "or",   "that", "the",
                                   "their", "there", "these", "they",  "this", "to",  "was",  "we",   "were",
                                   "what",  "when",  "where", "which", "who",  "why", "will", "with", "you"};

static int is_stop(const char *t) {
    for (size_t i = 0; i < sizeof STOP / sizeof *STOP; i++)
        if (!strcmp(t, STOP[i])) return 1;
    return 0;
}

static int term_byte(unsigned char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c >= 0x80;
}

size_t kvt_rag_terms(const char *text, size_t len, char ***out) {
    char **v = NULL;
    size_t n = 0, cap = 0;
    for (size_t i = 0; i < len;) {
        if (!term_byte((unsigned char)text[i])) {
            i++;
            continue;
        }
        size_t j = i;
        while (j < len && term_byte((unsigned char)text[j])) j++;
        size_t k = KVT_MIN(j - i, (size_t)KVT_RAG_TERM_MAX);
        char *t = kvt_rag_strndup(text + i, k);
        for (char *q = t; *q; q++)
            if (*q >= 'A' && *q <= 'Z') *q = (char)(*q - 'A' + 'a');
        if (is_stop(t)) {
            free(t);
        } else {
            if (n == cap) v = kvt_xrealloc(v, (cap = cap ? 2 * cap : 64) * sizeof *v);
            v[n++] = t;
        }
        i = j;
    }
    *out = v;
    return n;
}

int kvt_rag_strcmp(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

char *kvt_rag_strndup(const char *s, size_t n) {
    char *t = kvt_xmalloc(n + 1);
    if (n) memcpy(t, s, n);
    t[n] = 0;
    return t;
}

char *kvt_rag_chunk_id(const char *doc, const char *text, size_t len, uint64_t seed) {
    size_t n = strlen(doc) + 2 + KVT_RAG_ID_HEX;
    char *id = kvt_xmalloc(n);
    uint64_t h = XXH3_64bits_withSeed(text, len, seed) >> (64 - 4 * KVT_RAG_ID_HEX);
    snprintf(id, n, "%s#%0*llx", doc, KVT_RAG_ID_HEX, (unsigned long long)h);
    return id;
}

void kvt_rag_chunk_free(kvt_rag_chunk *c) {
    free((char *)c->doc);
    free((char *)c->id);
    free((char *)c->text);
}

void kvt_rag_index_finish(kvt_rag_index *x) {
    double sum = 0;
    for (int32_t i = 0; i < x->n_chunks; i++) sum += x->chunks[i].n_terms;
    x->avg_len = x->n_chunks ? sum / x->n_chunks : 0;
    if (x->avg_len <= 0) x->avg_len = 1;
}

void kvt_rag_free(kvt_rag_index *x) {
    if (!x) return;
    for (int32_t i = 0; i < x->n_chunks; i++) kvt_rag_chunk_free(&x->chunks[i]);
    free(x->chunks);
    for (int32_t t = 0; t < x->n_terms; t++) free(x->terms[t]);
    free(x->terms);
    free(x->post_off);
    free(x->post_chunk);
    free(x->post_tf);
    free(x->model_name);
    free(x->vecs);
    free(x);
}

int32_t kvt_rag_n_chunks(const kvt_rag_index *x) { return x->n_chunks; }
int32_t kvt_rag_n_terms(const kvt_rag_index *x) { return x->n_terms; }
int32_t kvt_rag_block_size(const kvt_rag_index *x) { return x->B; }
int32_t kvt_rag_chunk_tokens(const kvt_rag_index *x) { return x->chunk_tokens; }
const kvt_rag_chunk *kvt_rag_chunk_at(const kvt_rag_index *x, int32_t i) {
    return i >= 0 && i < x->n_chunks ? &x->chunks[i] : NULL;
}

/* ---- file ---------------------------------------------------------------------------- */

typedef struct {
    uint8_t *p;
    size_t len, cap;
} wbuf;

static void w_put(wbuf *b, const void *p, size_t n) {
    if (b->len + n > b->cap) b->p = kvt_xrealloc(b->p, b->cap = KVT_MAX(b->len + n, 2 * b->cap + 4096));
    if (n) memcpy(b->p + b->len, p, n);
    b->len += n;
}

static void w_u32(wbuf *b, uint32_t v) {
    uint8_t le[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24)};
    w_put(b, le, 4);
}

static void w_u64(wbuf *b, uint64_t v) {
    w_u32(b, (uint32_t)v);
    w_u32(b, (uint32_t)(v >> 32));
}

static void w_str(wbuf *b, const char *s) {
    size_t n = strlen(s);
    w_u32(b, (uint32_t)n);
    w_put(b, s, n);
}

/* The vector section (rag.h): dim, pooling, fingerprint, model name, the floats' bits. */
static void write_vectors(wbuf *b, const kvt_rag_index *x) {
    w_u32(b, (uint32_t)x->dim);
    w_u32(b, (uint32_t)x->pooling);
    w_u64(b, x->fingerprint.lo);
    w_u64(b, x->fingerprint.hi);
    w_str(b, x->model_name ? x->model_name : "");
    size_t n = (size_t)x->n_chunks * (size_t)x->dim;
    for (size_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &x->vecs[i], 4);
        w_u32(b, u);
    }
}

int kvt_rag_save(const kvt_rag_index *x, const char *path) {
    wbuf pl = {0}, h = {0};
    for (int32_t i = 0; i < x->n_chunks; i++) {
        const kvt_rag_chunk *c = &x->chunks[i];
        w_str(&pl, c->doc);
        w_str(&pl, c->id);
        w_u32(&pl, c->seq);
        w_u32(&pl, c->tokens);
        w_u32(&pl, c->n_terms);
        w_str(&pl, c->text);
    }
    for (int32_t t = 0; t < x->n_terms; t++) {
        w_str(&pl, x->terms[t]);
        w_u32(&pl, x->post_off[t + 1] - x->post_off[t]);
        for (uint32_t k = x->post_off[t]; k < x->post_off[t + 1]; k++) {
            w_u32(&pl, x->post_chunk[k]);
            w_u32(&pl, x->post_tf[k]);
        }
    }
    if (x->dim) write_vectors(&pl, x);
    w_put(&h, MAGIC, MAGIC_LEN);
    w_u32(&h, x->dim ? KVT_RAG_VERSION_DENSE : KVT_RAG_VERSION);
    w_u32(&h, (uint32_t)x->B);
    w_u32(&h, (uint32_t)x->chunk_tokens);
    w_u32(&h, (uint32_t)x->n_chunks);
    w_u32(&h, (uint32_t)x->n_terms);
    w_u64(&h, pl.len);
    w_u32(&h, kvt_crc32c(0, pl.p, pl.len));
    w_u32(&h, kvt_crc32c(0, h.p, h.len));
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid());
    int rc = 0, fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0) rc = -errno;
    if (!rc) rc = kvt_write_all(fd, h.p, h.len);
    if (!rc) rc = kvt_write_all(fd, pl.p, pl.len);
    if (!rc && fsync(fd) < 0) rc = -errno;
    if (fd >= 0 && close(fd) < 0 && !rc) rc = -errno;
    if (!rc && rename(tmp, path) < 0) rc = -errno;
    if (rc && fd >= 0) unlink(tmp);
    free(pl.p);
    free(h.p);
    return rc ? kvt_fail(rc, "%s: cannot write the index: %s", path, strerror(-rc)) : 0;
}

/* A bounds-checked reader over the loaded bytes. */
typedef struct {
    const uint8_t *p;
    size_t len, off;
    int bad;
} rbuf;

static uint32_t r_u32(rbuf *r) {
    if (r->bad || r->len - r->off < 4) {
        r->bad = 1;
        return 0;
    }
    const uint8_t *q = r->p + r->off;
    r->off += 4;
    return (uint32_t)q[0] | (uint32_t)q[1] << 8 | (uint32_t)q[2] << 16 | (uint32_t)q[3] << 24;
}

static uint64_t r_u64(rbuf *r) {
    uint64_t lo = r_u32(r);
    return lo | (uint64_t)r_u32(r) << 32;
}

/* A length-prefixed string of at most max bytes without NUL, malloc'd; NULL when bad. */
static char *r_str(rbuf *r, size_t max) {
    uint32_t n = r_u32(r);
    if (r->bad || n > max || r->len - r->off < n || memchr(r->p + r->off, 0, n)) {
        r->bad = 1;
        return NULL;
    }
    char *s = kvt_rag_strndup((const char *)r->p + r->off, n);
    r->off += n;
    return s;
}

/* The vector section of a version 3 payload, at r's offset; it must end the
 * payload. 0, or KVT_EFORMAT naming what is wrong with it. */
static int read_vectors(const char *path, rbuf *r, kvt_rag_index *x) {
    size_t at = HEADER_BYTES + r->off;
    uint32_t dim = r_u32(r), pool = r_u32(r);
    x->fingerprint.lo = r_u64(r);
    x->fingerprint.hi = r_u64(r);
    if (r->bad) return kvt_fail(KVT_EFORMAT, "%s: the vector section at byte %zu is cut short", path, at);
    if (dim < 1 || dim > KVT_RAG_DIM_MAX)
        return kvt_fail(KVT_EFORMAT, "%s: the vector section gives %u floats per vector (1 to %d)", path, dim,
                        KVT_RAG_DIM_MAX);
    if (pool < KVT_RAG_POOL_MEAN || pool > KVT_RAG_POOL_CLS)
        return kvt_fail(KVT_EFORMAT, "%s: the vector section's pooling %u is not 1 (mean), 2 (last) or 3 (cls)", path,
                        pool);
    x->model_name = r_str(r, KVT_RAG_MODEL_NAME_MAX);
    if (!x->model_name) return kvt_fail(KVT_EFORMAT, "%s: the vector section's model name is malformed", path);
    uint64_t want = (uint64_t)x->n_chunks * dim * 4, left = r->len - r->off;
    if (left != want)
        return kvt_fail(KVT_EFORMAT,
                        "%s: the vector section holds %llu bytes of vectors, %d chunks of %u floats need %llu "
                        "(truncated or extended)",
                        path, (unsigned long long)left, x->n_chunks, dim, (unsigned long long)want);
    x->vecs = kvt_xmalloc((size_t)want);
    for (size_t i = 0; i < (size_t)x->n_chunks * dim; i++) {
        uint32_t u = r_u32(r);
        memcpy(&x->vecs[i], &u, 4);
        if (!isfinite(x->vecs[i]))
            return kvt_fail(KVT_EFORMAT, "%s: the vector of chunk %zu holds a value that is not a finite number", path,
                            i / dim);
    }
    x->dim = (int32_t)dim;
    x->pooling = (kvt_rag_pooling)pool;
    return 0;
}

static int chunk_by_id(const void *a, const void *b) {
    return strcmp((*(const kvt_rag_chunk *const *)a)->id, (*(const kvt_rag_chunk *const *)b)->id);
}

/* Refuses an index two of whose chunks share an id: an id names one document of a request
 * (kvtier.documents), so a retrieval that picked both would be refused at request time. `kvtier rag
 * index` never writes one (it re-seeds a repeated text's id); another tool's index might. */
static int check_ids(const char *path, const kvt_rag_index *x) {
    const kvt_rag_chunk **by = kvt_xmalloc((size_t)x->n_chunks * sizeof *by);
    for (int32_t i = 0; i < x->n_chunks; i++) by[i] = &x->chunks[i];
    qsort(by, (size_t)x->n_chunks, sizeof *by, chunk_by_id);
    int rc = 0;
    for (int32_t i = 1; i < x->n_chunks && !rc; i++) {
        if (strcmp(by[i - 1]->id, by[i]->id)) continue;
        long a = (long)(by[i - 1] - x->chunks), b = (long)(by[i] - x->chunks);
        rc = kvt_fail(KVT_EFORMAT,
                      "%s: chunks %ld and %ld share the id '%.64s': each chunk needs its own id (an index not "
                      "written by `kvtier rag index`? rebuild it with that)",
                      path, KVT_MIN(a, b), KVT_MAX(a, b), by[i]->id);
    }
    free(by);
    return rc;
}

static int parse(const char *path, const uint8_t *p, size_t len, kvt_rag_index *x) {
    if (len < HEADER_BYTES || memcmp(p, MAGIC, MAGIC_LEN))
        return kvt_fail(KVT_EFORMAT, "%s: not a kvtier RAG index (bad magic)", path);
    rbuf r = {p, HEADER_BYTES, MAGIC_LEN, 0};
    uint32_t version = r_u32(&r);
    x->B = (int32_t)r_u32(&r);
    x->chunk_tokens = (int32_t)r_u32(&r);
    uint32_t n_chunks = r_u32(&r), n_terms = r_u32(&r);
    uint64_t pl_len = r_u64(&r);
    uint32_t pl_crc = r_u32(&r), h_crc = r_u32(&r);
    /* the version before the checksum: another version may lay its header out otherwise, so its
     * checksum proves nothing here, and "written by another version" is what its reader needs */
    if (version != KVT_RAG_VERSION && version != KVT_RAG_VERSION_DENSE)
        return kvt_fail(KVT_EUNSUPPORTED,
                        "%s: written by %s kvtier (index format version %u; this build reads versions %d and %d): "
                        "rebuild it with `kvtier rag index`",
                        path, version > KVT_RAG_VERSION_DENSE ? "a newer" : "an older", version, KVT_RAG_VERSION,
                        KVT_RAG_VERSION_DENSE);
    if (kvt_crc32c(0, p, HEADER_BYTES - 4) != h_crc)
        return kvt_fail(KVT_EFORMAT, "%s: header checksum mismatch (the file is damaged)", path);
    if (pl_len != len - HEADER_BYTES)
        return kvt_fail(KVT_EFORMAT, "%s: %zu payload bytes, the header says %llu (truncated or extended)", path,
                        len - HEADER_BYTES, (unsigned long long)pl_len);
    if (kvt_crc32c(0, p + HEADER_BYTES, len - HEADER_BYTES) != pl_crc)
        return kvt_fail(KVT_EFORMAT, "%s: payload checksum mismatch (the file is damaged)", path);
    if (x->B < 1 || x->chunk_tokens < x->B || n_chunks == 0 || n_chunks > len / 16 || n_terms > len / 8)
        return kvt_fail(KVT_EFORMAT, "%s: implausible counts in the header", path);
    r = (rbuf){p + HEADER_BYTES, len - HEADER_BYTES, 0, 0};
    x->chunks = kvt_xcalloc(n_chunks, sizeof *x->chunks);
    for (uint32_t i = 0; i < n_chunks && !r.bad; i++) {
        kvt_rag_chunk *c = &x->chunks[i];
        x->n_chunks = (int32_t)i + 1;
        c->doc = r_str(&r, KVT_RAG_DOC_MAX);
        c->id = r_str(&r, KVT_RAG_DOC_MAX + 16);
        c->seq = r_u32(&r);
        c->tokens = r_u32(&r);
        c->n_terms = r_u32(&r);
        c->text = r_str(&r, len);
    }
    x->terms = kvt_xcalloc(n_terms ? n_terms : 1, sizeof *x->terms);
    x->post_off = kvt_xcalloc((size_t)n_terms + 1, sizeof *x->post_off);
    size_t cap = 0;
    for (uint32_t t = 0; t < n_terms && !r.bad; t++) {
        x->terms[t] = r_str(&r, KVT_RAG_TERM_MAX);
        x->n_terms = (int32_t)t + 1;
        uint32_t df = r_u32(&r);
        if (r.bad || df == 0 || df > n_chunks || (r.len - r.off) / 8 < df ||
            (t && strcmp(x->terms[t - 1], x->terms[t]) >= 0)) {
            r.bad = 1;
            break;
        }
        if (x->n_post + df > cap) {
            cap = KVT_MAX(x->n_post + df, 2 * cap);
            x->post_chunk = kvt_xrealloc(x->post_chunk, cap * sizeof *x->post_chunk);
            x->post_tf = kvt_xrealloc(x->post_tf, cap * sizeof *x->post_tf);
        }
        for (uint32_t k = 0; k < df; k++) {
            uint32_t ch = r_u32(&r), tf = r_u32(&r);
            if (ch >= n_chunks || tf == 0 || (k && ch <= x->post_chunk[x->n_post - 1])) r.bad = 1;
            x->post_chunk[x->n_post] = ch;
            x->post_tf[x->n_post++] = tf;
        }
        x->post_off[t + 1] = (uint32_t)x->n_post;
    }
    if (r.bad || (r.off != r.len && version == KVT_RAG_VERSION))
        return kvt_fail(KVT_EFORMAT, "%s: malformed payload at byte %zu (a bad length, count or order)", path,
                        HEADER_BYTES + r.off);
    if (version == KVT_RAG_VERSION_DENSE) {
        int rc = read_vectors(path, &r, x);
        if (rc) return rc;
    }
    int rc = check_ids(path, x);
    if (rc) return rc;
    kvt_rag_index_finish(x);
    return 0;
}

int kvt_rag_load(const char *path, kvt_rag_index **out) {
    *out = NULL;
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        return kvt_fail(-e, "%s: cannot open the index: %s%s", path, strerror(e),
                        e == ELOOP ? " (a symbolic link: give the file itself)" : "");
    }
    struct stat st;
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || (uint64_t)st.st_size > KVT_RAG_MAX_FILE) {
        close(fd);
        return kvt_fail(KVT_EFORMAT, "%s: not a regular file of at most %llu bytes", path,
                        (unsigned long long)KVT_RAG_MAX_FILE);
    }
    size_t len = (size_t)st.st_size, got = 0;
    uint8_t *p = kvt_xmalloc(len ? len : 1);
    while (got < len) {
        ssize_t k = read(fd, p + got, len - got);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) break;
        got += (size_t)k;
    }
    close(fd);
    int rc = got == len ? kvt_rag_parse(p, len, path, out) : kvt_fail(-EIO, "%s: short read", path);
    free(p);
    return rc;
}

int kvt_rag_parse(const void *buf, size_t len, const char *name, kvt_rag_index **out) {
    *out = NULL;
    kvt_rag_index *x = kvt_xcalloc(1, sizeof *x);
    int rc = parse(name, buf, len, x);
    if (rc) {
        kvt_rag_free(x);
        return rc;
    }
    *out = x;
    return 0;
}

/* ---- retrieval and planning ---------------------------------------------------------------- */

static int32_t find_term(const kvt_rag_index *x, const char *t) {
    int32_t lo = 0, hi = x->n_terms - 1;
    while (lo <= hi) {
        int32_t mid = lo + (hi - lo) / 2;
        int c = strcmp(x->terms[mid], t);
        if (!c) return mid;
        if (c < 0) lo = mid + 1;
        else hi = mid - 1;
    }
    return -1;
}

/* qsort has no context argument: the index the comparators read ids from,
 * set by the caller just before sorting (per thread: queries are reentrant) */
static _Thread_local const kvt_rag_index *sort_index;

/* By id (content-derived, so the order survives re-indexing), then by number for a duplicate id. */
static int hit_by_id(const void *a, const void *b) {
    const kvt_rag_hit *x = a, *y = b;
    int c = strcmp(sort_index->chunks[x->chunk].id, sort_index->chunks[y->chunk].id);
    return c ? c : (x->chunk > y->chunk) - (x->chunk < y->chunk);
}

static int hit_by_score(const void *a, const void *b) {
    const kvt_rag_hit *x = a, *y = b;
    if (x->score != y->score) return x->score < y->score ? 1 : -1;
    return hit_by_id(a, b);
}

void kvt_rag_sort_by_score(const kvt_rag_index *x, kvt_rag_hit *hits, int32_t n) {
    sort_index = x;
    if (n > 0) qsort(hits, (size_t)n, sizeof *hits, hit_by_score);
}

int32_t kvt_rag_rank_bm25(const kvt_rag_index *x, const char *question, kvt_rag_hit **out) {
    char **terms = NULL;
    size_t n = kvt_rag_terms(question, strlen(question), &terms);
    if (n) qsort(terms, n, sizeof *terms, kvt_rag_strcmp); /* qsort with a NULL array is undefined even for 0 */
    double *score = kvt_xcalloc((size_t)x->n_chunks, sizeof *score);
    for (size_t i = 0; i < n; i++) {
        if (i && !strcmp(terms[i], terms[i - 1])) continue; /* each distinct term once */
        int32_t t = find_term(x, terms[i]);
        if (t < 0) continue;
        double df = x->post_off[t + 1] - x->post_off[t];
        double idf = log(1.0 + ((double)x->n_chunks - df + 0.5) / (df + 0.5));
        for (uint32_t p = x->post_off[t]; p < x->post_off[t + 1]; p++) {
            double tf = x->post_tf[p], len = x->chunks[x->post_chunk[p]].n_terms;
            score[x->post_chunk[p]] += idf * tf * (KVT_RAG_K1 + 1) /
                (tf + KVT_RAG_K1 * (1 - KVT_RAG_B + KVT_RAG_B * len / x->avg_len));
        }
    }
    for (size_t i = 0; i < n; i++) free(terms[i]);
    free(terms);
    kvt_rag_hit *all = kvt_xmalloc((size_t)x->n_chunks * sizeof *all);
    int32_t m = 0;
    for (int32_t c = 0; c < x->n_chunks; c++)
        if (score[c] > 0) all[m++] = (kvt_rag_hit){c, score[c], 0};
    free(score);
    kvt_rag_sort_by_score(x, all, m);
    for (int32_t i = 0; i < m; i++) all[i].rank = i;
    if (!m) {
        free(all);
        all = NULL;
    }
    *out = all;
    return m;
}

int32_t kvt_rag_query(const kvt_rag_index *x, const char *question, int32_t k, kvt_rag_hit *out) {
    if (k <= 0) return 0;
    kvt_rag_hit *all = NULL;
    int32_t m = kvt_rag_rank_bm25(x, question, &all), got = KVT_MIN(m, k); /* KVT_MIN evaluates twice */
    if (got > 0) memcpy(out, all, (size_t)got * sizeof *out);
    free(all);
    return got;
}

const char *kvt_rag_order_name(kvt_rag_order o) {
    return o == KVT_RAG_ORDER_SCORE ? "score" : o == KVT_RAG_ORDER_CANONICAL ? "canonical" : "cached";
}

int kvt_rag_order_parse(const char *s) {
    if (!strcmp(s, "cached")) return KVT_RAG_ORDER_CACHED;
    if (!strcmp(s, "canonical")) return KVT_RAG_ORDER_CANONICAL;
    if (!strcmp(s, "score")) return KVT_RAG_ORDER_SCORE;
    return -1;
}

void kvt_rag_plan(const kvt_rag_index *x, kvt_rag_order mode, kvt_rag_hit *hits, int32_t n, kvt_document *docs) {
    /* "cached" starts from canonical order too: kvt_rag_plan_cached departs from it only along a cached path */
    sort_index = x;
    qsort(hits, (size_t)n, sizeof *hits, mode == KVT_RAG_ORDER_SCORE ? hit_by_score : hit_by_id);
    for (int32_t i = 0; i < n; i++)
        docs[i] = (kvt_document){x->chunks[hits[i].chunk].id, x->chunks[hits[i].chunk].text};
}
