// SPDX-License-Identifier: MIT
/* `kvtier rag prewarm`: computes the KV of the prompt prefixes RAG requests
 * will have, [system][chunk] for every chunk and [system][a][b] for the most
 * common chunk pairs of a question log, without generating: on a running
 * server (POST /v1/cache/prefill) or in this process into a disk-tier
 * directory a server then opens (docs/rag.md "Prefill and prewarm"). */
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "cli.h"
#include "cli_rag.h"
#include "common.h"
#include "generate.h"
#include "rag.h"

#define PROGRESS_EVERY_S 1.0
#define HTTP_MAX_REPLY (16u << 20)

/* POSTs body to http://host:port/path; returns the status (or -1 after
 * printing why) and the reply's body in *reply (malloc'd). */
static int http_post(const char *host, const char *port, const char *path, const char *key, const char *body,
                     char **reply) {
    *reply = NULL;
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *res = NULL;
    int gai = getaddrinfo(host, port, &hints, &res);
    if (gai) {
        fprintf(stderr, "kvtier rag prewarm: cannot resolve %s: %s\n", host, gai_strerror(gai));
        return -1;
    }
    int fd = -1;
    for (struct addrinfo *a = res; a && fd < 0; a = a->ai_next) {
        fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
        if (fd >= 0 && connect(fd, a->ai_addr, a->ai_addrlen) < 0) {
            close(fd);
            fd = -1;
        }
    }
    freeaddrinfo(res);
    if (fd < 0) {
        fprintf(stderr, "kvtier rag prewarm: cannot connect to %s:%s: %s\n", host, port, strerror(errno));
        return -1;
    }
    size_t blen = strlen(body), hcap = 512 + strlen(host) + strlen(path) + (key ? strlen(key) : 0);
    char *req = kvt_xmalloc(hcap + blen);
    int h = snprintf(req, hcap,
                     "POST %s HTTP/1.1\r\nHost: %s:%s\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n"
                     "Connection: close\r\n%s%s%s\r\n",
                     path, host, port, blen, key ? "Authorization: Bearer " : "", key ? key : "", key ? "\r\n" : "");
    memcpy(req + h, body, blen);
    size_t n = (size_t)h + blen, off = 0;
    while (off < n) {
        ssize_t w = send(fd, req + off, n - off, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) break;
        off += (size_t)w;
    }
    free(req);
    size_t len = 0, cap = 4096;
    char *buf = kvt_xmalloc(cap + 1);
    for (;;) {
        if (len == cap) {
            if (cap >= HTTP_MAX_REPLY) break;
            buf = kvt_xrealloc(buf, (cap *= 2) + 1);
        }
        ssize_t r = recv(fd, buf + len, cap - len, 0);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        len += (size_t)r;
    }
    close(fd);
    buf[len] = 0;
    int status = -1;
    char *sep = strstr(buf, "\r\n\r\n");
    if (off < n || sscanf(buf, "HTTP/1.%*d %d", &status) != 1 || !sep) {
        fprintf(stderr, "kvtier rag prewarm: no HTTP answer from %s:%s%s\n", host, port, path);
        free(buf);
        return -1;
    }
    *reply = kvt_xstrdup(sep + 4);
    free(buf);
    return status;
}

/* ---- what to prewarm ----------------------------------------------------------------------- */

typedef struct {
    const char *url, *cache_dir, *model, *system, *key, *questions, *embed_model;
    long k, pairs, threads, rrf_k;
    int flush, dev_given, retrieve, pooling; /* pooling 0: the index's */
    kvt_kv_dtype dt;
    kvt_cli_device dev;
    char host[256], port[16];
} prewarm_args;

/* One prompt prefix to compute: [system][chunk a] or [system][a][b]. */
typedef struct {
    int32_t a, b; /* chunk numbers; b = -1 for a single chunk */
    long count;   /* pairs: how many logged questions open with it */
} item;

static const kvt_rag_index *cmp_idx; /* for item_by_count (qsort has no context) */

/* Pairs by count, most common first, then by their ids: a stable choice. */
static int item_by_count(const void *x, const void *y) {
    const item *p = x, *q = y;
    if (p->count != q->count) return p->count < q->count ? 1 : -1;
    int c = strcmp(kvt_rag_chunk_at(cmp_idx, p->a)->id, kvt_rag_chunk_at(cmp_idx, q->a)->id);
    return c ? c : strcmp(kvt_rag_chunk_at(cmp_idx, p->b)->id, kvt_rag_chunk_at(cmp_idx, q->b)->id);
}

static int item_by_chunks(const void *x, const void *y) {
    const item *p = x, *q = y;
    if (p->a != q->a) return p->a < q->a ? -1 : 1;
    return (p->b > q->b) - (p->b < q->b);
}

/* The x->pairs most common opening pairs of the questions in x->questions:
 * each question's top k chunks by x->retrieve (qe embeds it for dense and
 * hybrid) in canonical order (as the planner falls back to), the first two.
 * Appends them to *items; returns how many, or -1 after printing why. */
static long common_pairs(const prewarm_args *x, const kvt_rag_index *idx, kvt_cli_rag_qembed *qe, item **items,
                         size_t *n_items, long *n_questions) {
    const char *path = x->questions;
    float *qvec = qe->e ? kvt_xmalloc((size_t)qe->dim * sizeof *qvec) : NULL;
    size_t len = 0;
    char *text = kvt_cli_rag_slurp(AT_FDCWD, path, &len);
    if (!text) {
        fprintf(stderr, "kvtier rag prewarm: cannot read %s: %s\n", path,
                errno == ELOOP        ? "a symbolic link (give the file itself)"
                    : errno == EINVAL ? "not a regular file"
                                      : strerror(errno));
        free(qvec);
        return -1;
    }
    int rc = 0;
    item *seen = NULL;
    size_t n_seen = 0, cap = 0;
    *n_questions = 0;
    long lineno = 0;
    for (char *line = text, *next; line && line < text + len && !rc; line = next) {
        next = strchr(line, '\n');
        if (next) *next++ = 0;
        ++lineno;
        if (line[strspn(line, " \t\r")] == 0) continue; /* a blank line asks nothing */
        cJSON *j = line[0] == '{' ? cJSON_Parse(line) : NULL;
        const cJSON *q = cJSON_GetObjectItemCaseSensitive(j, "question");
        if (line[0] == '{' && !cJSON_IsString(q)) {
            fprintf(stderr, "kvtier rag prewarm: %s:%ld: %s\n", path, lineno,
                    !cJSON_IsObject(j)
                        ? "a line starting with '{' is not a JSON object (JSON lines need {\"question\": ...})"
                        : "this JSON line has no string \"question\"");
            cJSON_Delete(j);
            rc = -1;
            break;
        }
        const char *question = cJSON_IsString(q) ? q->valuestring : line;
        kvt_rag_hit hits[KVT_RAG_MAX_K];
        kvt_document docs[KVT_RAG_MAX_K];
        int asked = *question != 0;
        if (asked && qvec) rc = kvt_cli_rag_qembed_run(qe, "rag prewarm", question, qvec);
        int32_t n = asked && !rc ? kvt_rag_retrieve_k(idx, (kvt_rag_retrieve)x->retrieve, question, qvec, (int32_t)x->k,
                                                      (int32_t)x->rrf_k, hits)
                                 : 0;
        cJSON_Delete(j); /* question may point into it */
        if (!asked || rc) continue;
        ++*n_questions;
        if (n < 2) continue;
        kvt_rag_plan(idx, KVT_RAG_ORDER_CANONICAL, hits, n, docs);
        if (n_seen == cap) seen = kvt_xrealloc(seen, (cap = cap ? 2 * cap : 256) * sizeof *seen);
        seen[n_seen++] = (item){hits[0].chunk, hits[1].chunk, 1};
    }
    free(text);
    free(qvec);
    if (rc) {
        free(seen);
        return -1;
    }
    /* count equal pairs, then keep the most common */
    size_t m = 0;
    if (n_seen) qsort(seen, n_seen, sizeof *seen, item_by_chunks);
    for (size_t i = 0; i < n_seen; i++) {
        if (m && seen[m - 1].a == seen[i].a && seen[m - 1].b == seen[i].b) seen[m - 1].count++;
        else seen[m++] = seen[i];
    }
    cmp_idx = idx;
    if (m) qsort(seen, m, sizeof *seen, item_by_count);
    long take = KVT_MIN((long)m, x->pairs);
    for (long i = 0; i < take; i++)
        fprintf(stderr, "rag prewarm: pair %ld: %s + %s, opening %ld question(s)\n", i + 1,
                kvt_rag_chunk_at(idx, seen[i].a)->id, kvt_rag_chunk_at(idx, seen[i].b)->id, seen[i].count);
    *items = kvt_xrealloc(*items, (*n_items + (size_t)take + 1) * sizeof **items);
    if (take) memcpy(*items + *n_items, seen, (size_t)take * sizeof *seen); /* seen is NULL without pairs */
    *n_items += (size_t)take;
    free(seen);
    return take;
}

/* --pairs: common_pairs with the question embedder dense and hybrid need,
 * and a line saying what was found. The number of pairs, or -1 after printing why. */
static long plan_pairs(const prewarm_args *x, const char *path, const kvt_rag_index *idx, item **items,
                       size_t *n_items) {
    kvt_cli_rag_qembed qe = {0};
    if (x->retrieve != KVT_RAG_RETRIEVE_BM25 &&
        kvt_cli_rag_qembed_open(&qe, "rag prewarm", path, idx, x->embed_model ? x->embed_model : x->model, x->pooling,
                                x->threads))
        return -1;
    long n_questions = 0, n_pairs = common_pairs(x, idx, &qe, items, n_items, &n_questions);
    char emb[64] = "";
    if (qe.e) snprintf(emb, sizeof emb, "; embedding the questions took %.1f ms", qe.ms);
    if (n_pairs >= 0)
        fprintf(stderr, "rag prewarm: %ld questions, the %ld most common opening pairs (of %ld chunks each, by %s%s)\n",
                n_questions, n_pairs, x->k, kvt_rag_retrieve_name((kvt_rag_retrieve)x->retrieve), emb);
    kvt_cli_rag_qembed_close(&qe);
    return n_pairs;
}

/* ---- computing them ------------------------------------------------------------------------ */

typedef struct {
    long computed, cached, stored;
} totals;

/* Over HTTP: POST /v1/cache/prefill with the item's chunks as documents. 0 or -1. */
static int prefill_remote(const prewarm_args *x, const kvt_rag_index *idx, const item *it, totals *t) {
    cJSON *o = cJSON_CreateObject(), *msgs = cJSON_AddArrayToObject(o, "messages"), *m;
    if (x->system) {
        cJSON_AddItemToArray(msgs, m = cJSON_CreateObject());
        cJSON_AddStringToObject(m, "role", "system");
        cJSON_AddStringToObject(m, "content", x->system);
    }
    /* the prompt a RAG request has up to the end of its chunks: [system][user turn: chunks] */
    cJSON_AddItemToArray(msgs, m = cJSON_CreateObject());
    cJSON_AddStringToObject(m, "role", "user");
    cJSON_AddStringToObject(m, "content", "");
    cJSON *docs = cJSON_AddArrayToObject(cJSON_AddObjectToObject(o, "kvtier"), "documents"), *d;
    for (int i = 0; i < 2; i++) {
        int32_t ch = i ? it->b : it->a;
        if (ch < 0) break;
        const kvt_rag_chunk *c = kvt_rag_chunk_at(idx, ch);
        cJSON_AddItemToArray(docs, d = cJSON_CreateObject());
        cJSON_AddStringToObject(d, "id", c->id);
        cJSON_AddStringToObject(d, "text", c->text);
    }
    char *body = cJSON_PrintUnformatted(o), *reply = NULL;
    cJSON_Delete(o);
    int status = http_post(x->host, x->port, "/v1/cache/prefill", x->key, body, &reply);
    free(body);
    cJSON *r = reply ? cJSON_Parse(reply) : NULL;
    int rc = 0;
    if (status != 200 || !r) {
        if (status > 0)
            fprintf(stderr, "kvtier rag prewarm: chunk %s: HTTP %d: %s\n", kvt_rag_chunk_at(idx, it->a)->id, status,
                    reply);
        rc = -1;
    } else {
        t->computed += (long)cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(r, "computed_tokens"));
        t->cached += (long)cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(r, "cached_tokens"));
        t->stored += (long)cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(r, "stored_tokens"));
    }
    cJSON_Delete(r);
    free(reply);
    return rc;
}

/* In this process: the model, an engine and a cache over the disk directory. */
typedef struct {
    kvt_model *m;
    kvt_engine *e;
    kvt_cache *c;
} local_rt;

static void local_close(local_rt *l) {
    kvt_cache_free(l->c);
    kvt_engine_free(l->e);
    kvt_model_free(l->m);
    memset(l, 0, sizeof *l); /* closed again at the command's end after a failed local_open: frees nothing then */
}

/* Opens what prefill_local needs; the context fits the longest prompt (max_tokens). */
static int local_open(const prewarm_args *x, int32_t block, int32_t max_tokens, local_rt *l) {
    memset(l, 0, sizeof *l);
    if (kvt_model_load(x->model, kvt_model_default_params(), &l->m)) goto fail;
    kvt_engine_params ep = kvt_engine_default_params();
    ep.n_threads = (int32_t)x->threads;
    ep.n_ctx = (max_tokens + 1 + block - 1) / block * block;
    ep.block_size = block;
    ep.kv_dtype = x->dt;
    kvt_cli_device_apply("rag prewarm", &x->dev, &ep);
    ep.max_seqs = 1;
    ep.n_pages = 2 * (ep.n_ctx / block) + 1; /* one prompt, plus as much again kept cached while it goes down */
    if (kvt_engine_new(l->m, ep, &l->e)) {
        fprintf(stderr, "kvtier rag prewarm: %s\n", kvt_errmsg());
        /* a GPU refusal names the --block-size of run and serve; here the block size is the index's */
        if (strstr(kvt_errmsg(), "--block-size"))
            fprintf(stderr,
                    "kvtier rag prewarm: its blocks are the index's (%d tokens): cut the index for smaller ones with "
                    "`kvtier rag index --block-size B`, and give serve the same --block-size\n",
                    block);
        local_close(l);
        return -1;
    }
    kvt_cache_params cp = kvt_cache_default_params();
    cp.disk_dir = x->cache_dir;
    if (kvt_cache_new(l->e, cp, &l->c)) goto fail;
    return 0;
fail:
    fprintf(stderr, "kvtier rag prewarm: %s\n", kvt_errmsg());
    local_close(l);
    return -1;
}

/* The item's prompt tokens, as the server would build them. */
static int item_prompt(const prewarm_args *x, const kvt_rag_index *idx, const kvt_model *m, const item *it,
                       int32_t **toks, size_t *n) {
    kvt_document docs[2];
    size_t nd = 0;
    for (int i = 0; i < 2; i++) {
        int32_t ch = i ? it->b : it->a;
        if (ch < 0) break;
        docs[nd++] = (kvt_document){kvt_rag_chunk_at(idx, ch)->id, kvt_rag_chunk_at(idx, ch)->text};
    }
    int rc = kvt_cli_rag_prompt(m, kvt_rag_block_size(idx), x->system, "", docs, nd, toks, n);
    if (rc) fprintf(stderr, "kvtier rag prewarm: cannot build the prompt: %s\n", kvt_errmsg());
    return rc ? -1 : 0;
}

static int prefill_local(const prewarm_args *x, const kvt_rag_index *idx, local_rt *l, const item *it, totals *t) {
    int32_t *toks = NULL;
    size_t n = 0;
    if (item_prompt(x, idx, l->m, it, &toks, &n)) return -1;
    kvt_gen_params gp = {.max_tokens = 0}; /* prefill and commit; nothing generated */
    kvt_gen_result r;
    memset(&r, 0, sizeof r);
    int rc = kvt_generate(l->e, l->c, toks, (int32_t)n, &gp, NULL, &r);
    free(toks);
    if (rc) {
        fprintf(stderr, "kvtier rag prewarm: %s\n", kvt_errmsg());
        return -1;
    }
    t->computed += r.n_computed;
    t->cached += r.n_reused;
    t->stored += (long)(n / (size_t)kvt_rag_block_size(idx) * (size_t)kvt_rag_block_size(idx));
    return 0;
}

/* ---- the command ------------------------------------------------------------------------------ */

/* The retrieval flags (--retrieve, --rrf-k, --embed-model, --pooling), as
 * `rag query` reads them: 1 when argv[*i] was one, 0 when not, -1 after printing why. */
static int retrieve_flag(int argc, char **argv, int *i, prewarm_args *x) {
    const char *a = argv[*i], *v;
    if (!strcmp(a, "--retrieve")) {
        if (!(v = kvt_cli_value(argc, argv, i))) return -1;
        if ((x->retrieve = kvt_rag_retrieve_parse(v)) < 0) {
            fprintf(stderr, "kvtier rag prewarm: --retrieve must be bm25, dense or hybrid, not '%s'\n", v);
            return -1;
        }
    } else if (!strcmp(a, "--rrf-k")) {
        if (!(v = kvt_cli_value(argc, argv, i)) || (x->rrf_k = kvt_cli_parse_long(a, v, 1, 1000000)) < 0) return -1;
    } else if (!strcmp(a, "--embed-model")) {
        if (!(x->embed_model = kvt_cli_value(argc, argv, i))) return -1;
    } else if (!strcmp(a, "--pooling")) {
        if (!(v = kvt_cli_value(argc, argv, i))) return -1;
        if ((x->pooling = kvt_rag_pooling_parse(v)) < 0) {
            fprintf(stderr, "kvtier rag prewarm: --pooling must be mean, last or cls, not '%s'\n", v);
            return -1;
        }
    } else {
        return 0;
    }
    return 1;
}

static int parse_args(int argc, char **argv, prewarm_args *x, const char **path) {
    memset(x, 0, sizeof *x);
    x->key = getenv("KVTIER_API_KEY");
    x->k = KVT_RAG_DEFAULT_K;
    x->rrf_k = KVT_RAG_RRF_K;
    x->threads = kvt_cli_default_threads();
    x->dt = KVT_KV_F16;
    strcpy(x->port, "80");
    *path = NULL;
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i], *v = NULL;
        int kf;
        if (!strcmp(a, "--server")) {
            if (!(x->url = kvt_cli_value(argc, argv, &i))) return -1;
        } else if (!strcmp(a, "--cache-dir")) {
            if (!(x->cache_dir = kvt_cli_value(argc, argv, &i))) return -1;
        } else if (!strcmp(a, "-m") || !strcmp(a, "--model")) {
            if (!(x->model = kvt_cli_value(argc, argv, &i))) return -1;
        } else if (!strcmp(a, "--system")) {
            if (!(x->system = kvt_cli_value(argc, argv, &i))) return -1;
        } else if (!strcmp(a, "--api-key")) {
            if (!(x->key = kvt_cli_value(argc, argv, &i))) return -1;
        } else if (!strcmp(a, "--questions")) {
            if (!(x->questions = kvt_cli_value(argc, argv, &i))) return -1;
        } else if (!strcmp(a, "-k")) {
            if (!(v = kvt_cli_value(argc, argv, &i)) || (x->k = kvt_cli_parse_long(a, v, 1, KVT_RAG_MAX_K)) < 0)
                return -1;
        } else if (!strcmp(a, "--pairs")) {
            if (!(v = kvt_cli_value(argc, argv, &i)) || (x->pairs = kvt_cli_parse_long(a, v, 0, 1L << 30)) < 0)
                return -1;
        } else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) {
            if (!(v = kvt_cli_value(argc, argv, &i)) ||
                (x->threads = kvt_cli_parse_long(a, v, 1, KVT_CLI_MAX_THREADS)) < 0)
                return -1;
        } else if (!strcmp(a, "--kv-type")) {
            if (!(v = kvt_cli_value(argc, argv, &i))) return -1;
            if (kvt_kv_dtype_parse(v, &x->dt)) {
                fprintf(stderr, "kvtier rag prewarm: --kv-type must be f16, f32 or q8_0\n");
                return -1;
            }
        } else if ((kf = retrieve_flag(argc, argv, &i, x))) {
            if (kf < 0) return -1;
        } else if (!strcmp(a, "--flush")) {
            x->flush = 1;
        } else if ((kf = kvt_cli_device_flag(argc, argv, &i, &x->dev_given, &x->dev))) {
            if (kf < 0) return -1;
        } else if (a[0] != '-' && !*path) {
            *path = a;
        } else {
            fprintf(stderr, "kvtier rag prewarm: unknown argument '%s'\n", a);
            return -1;
        }
    }
    if (!x->dev_given && kvt_cli_device_env(&x->dev)) return -1;
    if (kvt_cli_device_auto("rag prewarm", &x->dev)) return -1;
    const char *why = !*path        ? "needs INDEX"
        : !x->url == !x->cache_dir  ? "needs one of --server URL and --cache-dir DIR"
        : x->cache_dir && !x->model ? "--cache-dir needs -m MODEL"
        : x->pairs && !x->questions ? "--pairs needs --questions FILE"
        : x->retrieve && !x->pairs
        ? "--retrieve dense or hybrid picks the pairs: it needs --questions FILE and --pairs N"
        : x->retrieve && !x->model && !x->embed_model
        ? "--retrieve dense or hybrid needs -m MODEL or --embed-model MODEL (the index's)"
        : x->url && sscanf(x->url, "http://%255[^:/]:%15[0-9]", x->host, x->port) < 1
        ? "--server takes http://HOST:PORT"
        : NULL;
    if (why) {
        fprintf(stderr, "kvtier rag prewarm: %s\n", why);
        kvt_usage_rag(stderr);
        return -1;
    }
    if (x->key && !*x->key) x->key = NULL;
    return 0;
}

int kvt_cmd_rag_prewarm(int argc, char **argv) {
    prewarm_args x;
    const char *path;
    if (parse_args(argc, argv, &x, &path)) return 2;
    kvt_rag_index *idx = NULL;
    if (kvt_rag_load(path, &idx)) {
        fprintf(stderr, "kvtier rag prewarm: %s\n", kvt_errmsg());
        return 1;
    }
    /* every chunk, then the common pairs */
    int32_t n_chunks = kvt_rag_n_chunks(idx);
    size_t n_items = (size_t)n_chunks;
    item *items = kvt_xmalloc((n_items + 1) * sizeof *items);
    for (int32_t i = 0; i < n_chunks; i++) items[i] = (item){i, -1, 0};
    long n_pairs = x.pairs ? plan_pairs(&x, path, idx, &items, &n_items) : 0;
    if (n_pairs < 0) {
        free(items);
        kvt_rag_free(idx);
        return 1;
    }
    local_rt l = {0};
    int rc = 0;
    if (x.cache_dir) {
        /* the context must hold the longest prompt: measure them with the tokenizer first */
        kvt_model *vm = kvt_cli_load_vocab("rag prewarm", x.model);
        int32_t longest = 0;
        if (!vm) rc = 1;
        for (size_t i = 0; i < n_items && !rc; i++) {
            int32_t *toks = NULL;
            size_t n = 0;
            if (item_prompt(&x, idx, vm, &items[i], &toks, &n)) rc = 1;
            longest = KVT_MAX(longest, (int32_t)n);
            free(toks);
        }
        kvt_model_free(vm);
        if (!rc && local_open(&x, kvt_rag_block_size(idx), longest, &l)) rc = 1;
    }
    totals t = {0};
    double t0 = kvt_now(), t_last = t0;
    for (size_t i = 0; i < n_items && !rc; i++) {
        rc = (x.cache_dir ? prefill_local(&x, idx, &l, &items[i], &t) : prefill_remote(&x, idx, &items[i], &t)) ? 1 : 0;
        double now = kvt_now();
        if (now - t_last >= PROGRESS_EVERY_S || i + 1 == n_items) {
            fprintf(stderr,
                    "rag prewarm: %zu/%zu prompts (%d chunks, %ld pairs), %ld tokens computed, %ld already "
                    "cached, %.0f s\n",
                    i + 1, n_items, n_chunks, n_pairs, t.computed, t.cached, now - t0);
            t_last = now;
        }
    }
    if (!rc && x.cache_dir && kvt_cache_flush(l.c)) {
        fprintf(stderr, "kvtier rag prewarm: writing to %s: %s\n", x.cache_dir, kvt_errmsg());
        rc = 1;
    } else if (!rc && x.flush) {
        char *reply = NULL;
        int status = http_post(x.host, x.port, "/v1/cache/flush", x.key, "{}", &reply);
        if (status != 200) {
            if (status > 0) fprintf(stderr, "kvtier rag prewarm: flush: HTTP %d: %s\n", status, reply);
            rc = 1;
        }
        free(reply);
    }
    if (!rc)
        printf("prewarmed %d chunks and %ld pairs: %ld prompt tokens computed, %ld were already cached, %ld stored as "
               "whole blocks%s, in %.1f s\n",
               n_chunks, n_pairs, t.computed, t.cached, t.stored,
               x.cache_dir   ? " in the disk tier"
                   : x.flush ? " and flushed to the disk tier"
                             : "",
               kvt_now() - t0);
    local_close(&l);
    free(items);
    kvt_rag_free(idx);
    return rc;
}
