// SPDX-License-Identifier: MIT
/* `kvtier rag`: index a corpus into fixed context blocks with a BM25 index
 * (rag.h) and query it; `rag prewarm` is cli_rag_prewarm.c (docs/rag.md). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "blockhash.h" /* KVT_BLOCK_TOKENS_MAX: a server's largest block */
#include "chat.h"
#include "cli.h"
#include "cli_rag.h"
#include "common.h"
#include "model.h"
#include "rag.h"

#define PROGRESS_EVERY_S 1.0
#define DOC_MAX_BYTES (256u << 20) /* one document file at most */
#define SNIPPET 100                /* bytes of a chunk's text that `query` shows */

/* The prewarm part of `kvtier rag --help`. */
static void usage_prewarm(FILE *f) {
    fprintf(f,
            "prewarm  computes the KV of [system][chunk] for every chunk, and with --pairs of the most common\n"
            "         [system][a][b] (a, b the first two of a retrieved set in the planner's canonical order),\n"
            "         without generating, so the questions that retrieve them find them cached; a progress\n"
            "         line each second.\n"
            "  --server URL        on a running `kvtier serve` at http://HOST:PORT (POST /v1/cache/prefill)\n"
            "  --cache-dir DIR     or in this process, into the disk-tier directory DIR (created if missing;\n"
            "                      then `kvtier serve -m MODEL --kv-disk DIR` finds them). Needs -m\n"
            "  -m, --model MODEL   the model the server runs (--cache-dir); for dense and hybrid also the\n"
            "                      model the questions are embedded with (loaded whole)\n"
            "  -t, --threads N     worker threads (--cache-dir; default: the online CPUs)\n"
            "  --kv-type T         f16 (default), f32 or q8_0: as the server's --kv-type (--cache-dir)\n"
            "  --device DEV        cpu (default) or vulkan[:N], as the server's --device (--cache-dir):\n"
            "                      blocks computed on one device never serve another\n"
            "  --gpu-memory-fraction F, -ngl N\n"
            "                      as the server's, on a GPU (--cache-dir): the share of its memory the\n"
            "                      engine may take (default 0.9), and the layers on it (all; fewer is refused)\n"
            "  --system TEXT       the system prompt the RAG requests will carry (default: none)\n"
            "  --questions FILE    a query log or sample questions, one per line (or JSON lines with\n"
            "                      \"question\"): each is retrieved (top K) to count which chunk pairs open a\n"
            "                      prompt together\n"
            "  -k K                chunks per question, as the server's --rag-k / kvtier.rag.k (default %d)\n"
            "  --pairs N           also prewarm the N most common pairs (default 0; needs --questions)\n"
            "  --retrieve R        how each question is retrieved to pick the pairs, as the server's\n"
            "                      --rag-retrieve: bm25 (default), dense or hybrid (an index built with\n"
            "                      --embed; the questions are embedded with -m, the index's model)\n"
            "  --rrf-k N           hybrid's constant, as query's (default %d)\n"
            "  --embed-model M     dense, hybrid: embed the questions with M (the index's embedding model)\n"
            "                      instead of -m; with --server, one of the two is needed\n"
            "  --pooling P         dense, hybrid: the pooling to embed the questions with; it must be the\n"
            "                      index's (default: the index's)\n"
            "  --api-key KEY       the server's API key (default $KVTIER_API_KEY)\n"
            "  --flush             then write the server's cache down to its disk tier (POST /v1/cache/flush;\n"
            "                      --cache-dir always ends on disk)\n",
            KVT_RAG_DEFAULT_K, KVT_RAG_RRF_K);
}

void kvt_usage_rag(FILE *f) {
    fprintf(
        f,
        "usage: kvtier rag index -m MODEL --docs DIR|FILE.jsonl|FILE -o INDEX [--chunk-tokens N] [--block-size B]\n"
        "                        [--embed [--embed-model MODEL] [--pooling P] [-t N] [--device DEV]]\n"
        "       kvtier rag query INDEX \"question\" [-k K] [--json] [--prompt -m MODEL [--system TEXT] [--order O]]\n"
        "                        [--retrieve bm25|dense|hybrid (-m|--embed-model) MODEL [--rrf-k N] [--pooling P]]\n"
        "       kvtier rag prewarm (--server URL | --cache-dir DIR -m MODEL) INDEX [--system TEXT]\n"
        "                          [--questions FILE [-k K] [--pairs N]] [--flush] [--api-key KEY] [-t N]\n"
        "                          [--kv-type T] [--device DEV]\n"
        "                          [--retrieve bm25|dense|hybrid [--embed-model MODEL] [--rrf-k N] [--pooling P]]\n\n"
        "index    splits documents into chunks that render as whole runs of cache blocks (paragraphs\n"
        "         first, then sentences, words, bytes) and writes a BM25 index (one checksummed file).\n"
        "  -m, --model MODEL   the model whose tokenizer measures the chunks (a vocab-only GGUF will do)\n"
        "  --docs PATH         a directory (each regular file is a document named by its file name;\n"
        "                      hidden files and symbolic links are skipped), a JSONL file of\n"
        "                      {\"id\": ..., \"text\": ...} lines, or one text file\n"
        "  -o, --output INDEX  the index file to write (atomically)\n"
        "  --chunk-tokens N    tokens per chunk at most, a multiple of the block size (default %d)\n"
        "  --block-size B      the cache block size the server uses (default %d)\n"
        "  --embed             also store a dense vector per chunk: its text run through MODEL (loaded\n"
        "                      whole, not vocab-only), the final hidden rows pooled and L2-normalised as\n"
        "                      `serve --embeddings` does; the file records the model and the pooling\n"
        "  --embed-model M     with --embed: embed with M instead of MODEL (MODEL still measures the\n"
        "                      chunks); the server's RAG route embeds questions with its own model, so\n"
        "                      dense retrieval there needs the served model here\n"
        "  --pooling P         with --embed: mean, last or cls (default: the model's <arch>.pooling_type,\n"
        "                      else mean)\n"
        "  -t, --threads N     with --embed: worker threads (default: the online CPUs)\n"
        "  --device DEV        with --embed: cpu (default) or vulkan[:N], where the chunks are run; a\n"
        "                      GPU's vectors agree with the CPU's to rounding (default $KVTIER_DEVICE)\n"
        "query    prints the K best chunks for a question: rank, score, id, tokens, text.\n"
        "  -k K                chunks to print (default %d)\n"
        "  --retrieve R        bm25 (default): terms only; dense: cosine between the question's vector and\n"
        "                      the chunks' (an index built with --embed; needs -m, the index's model);\n"
        "                      hybrid: both rankings fused by reciprocal rank (score = sum of\n"
        "                      1 / (rrf-k + rank))\n"
        "  --rrf-k N           hybrid's constant: larger flattens the weight of the top ranks (default %d)\n"
        "  --pooling P         dense, hybrid: the pooling to embed the question with; it must be the\n"
        "                      index's (default: the index's)\n"
        "  -t, --threads N     dense, hybrid: worker threads for embedding the question\n"
        "  --json              one JSON object instead of text\n"
        "  --prompt            also print the token ids of the prompt /v1/rag/chat/completions builds for\n"
        "                      the question ([system][chunks as fixed context blocks][question], the\n"
        "                      model's chat template), e.g. to send the same prompt to another server\n"
        "  -m, --model MODEL   the served model (--prompt; a vocab-only GGUF will do); for dense and\n"
        "                      hybrid also the model the question is embedded with (loaded whole)\n"
        "  --embed-model M     dense, hybrid: embed the question with M (the index's embedding model)\n"
        "                      instead of -m\n"
        "  --system TEXT       the system message (--prompt; default: none)\n"
        "  --order O           score (best first, default) or canonical (by id) (--prompt; \"cached\"\n"
        "                      depends on a server's cache)\n",
        KVT_RAG_DEFAULT_CHUNK_TOKENS, KVT_DEFAULT_BLOCK_SIZE, KVT_RAG_DEFAULT_K, KVT_RAG_RRF_K);
    usage_prewarm(f);
}

/* ---- index ------------------------------------------------------------------------------ */

char *kvt_cli_rag_slurp(int dfd, const char *name, size_t *len) {
    int fd = openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) return NULL;
    struct stat st;
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || (uint64_t)st.st_size > DOC_MAX_BYTES) {
        close(fd);
        errno = EINVAL;
        return NULL;
    }
    char *p = kvt_xmalloc((size_t)st.st_size + 1);
    size_t got = 0;
    while (got < (size_t)st.st_size) {
        ssize_t k = read(fd, p + got, (size_t)st.st_size - got);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) break;
        got += (size_t)k;
    }
    close(fd);
    p[got] = 0;
    *len = got;
    return p;
}

typedef struct {
    kvt_rag_builder *b;
    long docs;
    uint64_t bytes;
    double t_start, t_last;
} index_run;

/* Adds one document; `where` ("FILE:LINE: " or "") leads the error. */
static int add_doc(index_run *x, const char *where, const char *name, const char *text, size_t len) {
    if (kvt_rag_build_add(x->b, name, text, len)) {
        fprintf(stderr, "kvtier rag index: %s%s\n", where, kvt_errmsg());
        return -1;
    }
    x->docs++;
    x->bytes += len;
    double now = kvt_now();
    if (now - x->t_last >= PROGRESS_EVERY_S) {
        fprintf(stderr, "rag index: %ld documents, %d chunks, %.1f MB, %.0f s\n", x->docs, kvt_rag_build_chunks(x->b),
                (double)x->bytes / 1e6, now - x->t_start);
        x->t_last = now;
    }
    return 0;
}

static int name_cmp(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static int index_dir(index_run *x, const char *path) {
    int dfd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    DIR *d = dfd >= 0 ? fdopendir(dfd) : NULL;
    if (!d) {
        fprintf(stderr, "kvtier rag index: cannot open directory %s: %s\n", path, strerror(errno));
        if (dfd >= 0) close(dfd);
        return -1;
    }
    char **names = NULL;
    size_t n = 0, cap = 0;
    for (struct dirent *e; (e = readdir(d));) {
        if (e->d_name[0] == '.') continue;
        if (n == cap) names = kvt_xrealloc(names, (cap = cap ? 2 * cap : 64) * sizeof *names);
        names[n++] = kvt_xstrdup(e->d_name);
    }
    qsort(names, n, sizeof *names, name_cmp); /* a stable corpus order: the same directory, the same chunk numbers */
    int rc = 0;
    for (size_t i = 0; i < n && !rc; i++) {
        size_t len;
        char *text = kvt_cli_rag_slurp(dirfd(d), names[i], &len);
        if (!text) {
            fprintf(stderr, "kvtier rag index: skipping %s/%s: %s\n", path, names[i],
                    errno == ELOOP        ? "a symbolic link"
                        : errno == EINVAL ? "not a regular file (or over 256 MB)"
                                          : strerror(errno));
            continue;
        }
        rc = add_doc(x, "", names[i], text, len);
        free(text);
    }
    for (size_t i = 0; i < n; i++) free(names[i]);
    free(names);
    closedir(d);
    return rc;
}

static int index_jsonl(index_run *x, const char *path, char *text) {
    long lineno = 0;
    for (char *line = text, *next; line && *line; line = next) {
        lineno++;
        next = strchr(line, '\n');
        if (next) *next++ = 0;
        while (*line == ' ' || *line == '\t' || *line == '\r') line++;
        if (!*line) continue;
        char bad[400] = "";
        cJSON *j = kvt_cli_json(line, bad, sizeof bad);
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(j, "id"), *tx = cJSON_GetObjectItemCaseSensitive(j, "text");
        if (!cJSON_IsString(id) || !cJSON_IsString(tx) || !*id->valuestring) {
            fprintf(stderr, "kvtier rag index: %s:%ld: %s%sexpected {\"id\": \"non-empty\", \"text\": \"...\"}\n", path,
                    lineno, bad, *bad ? "; " : "");
            cJSON_Delete(j);
            return -1;
        }
        char where[512];
        snprintf(where, sizeof where, "%.400s:%ld: ", path, lineno);
        int rc = add_doc(x, where, id->valuestring, tx->valuestring, strlen(tx->valuestring));
        cJSON_Delete(j);
        if (rc) return -1;
    }
    return 0;
}

/* Adds the documents at docs to x's index: a directory's files, a .jsonl
 * file's lines, or one file (named by its base name). 0, or -1 after printing why. */
static int index_docs(index_run *x, const char *docs) {
    struct stat st;
    int rc = -1;
    if (lstat(docs, &st) < 0) {
        fprintf(stderr, "kvtier rag index: %s: %s\n", docs, strerror(errno));
    } else if (S_ISDIR(st.st_mode)) {
        rc = index_dir(x, docs);
    } else {
        size_t len;
        char *text = kvt_cli_rag_slurp(AT_FDCWD, docs, &len);
        size_t pl = strlen(docs);
        if (!text) {
            fprintf(stderr, "kvtier rag index: cannot read %s: %s\n", docs,
                    errno == ELOOP        ? "a symbolic link (give the file itself)"
                        : errno == EINVAL ? "not a regular file"
                                          : strerror(errno));
        } else if (pl > 6 && !strcmp(docs + pl - 6, ".jsonl")) {
            rc = index_jsonl(x, docs, text);
        } else {
            const char *base = strrchr(docs, '/');
            rc = add_doc(x, "", base ? base + 1 : docs, text, len);
        }
        free(text);
    }
    return rc;
}

typedef struct {
    const char *model, *embed_model, *docs, *out;
    long chunk, block, threads;
    int embed, pooling; /* pooling 0: the model's */
    int dev_given;
    kvt_cli_device dev; /* where --embed runs */
} index_args;

/* The flags of `rag index`. 0, or 2 after printing why. */
static int index_parse(int argc, char **argv, index_args *x) {
    *x = (index_args){.chunk = KVT_RAG_DEFAULT_CHUNK_TOKENS, .block = KVT_DEFAULT_BLOCK_SIZE};
    x->threads = kvt_cli_default_threads();
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i], *v;
        if (!strcmp(a, "-m") || !strcmp(a, "--model")) {
            if (!(x->model = kvt_cli_value(argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--device")) {
            if (kvt_cli_device_flag(argc, argv, &i, &x->dev_given, &x->dev) < 0) return 2;
        } else if (!strcmp(a, "--docs")) {
            if (!(x->docs = kvt_cli_value(argc, argv, &i))) return 2;
        } else if (!strcmp(a, "-o") || !strcmp(a, "--output")) {
            if (!(x->out = kvt_cli_value(argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--chunk-tokens")) {
            if (!(v = kvt_cli_value(argc, argv, &i)) || (x->chunk = kvt_cli_parse_long(a, v, 2, 1 << 20)) < 0) return 2;
        } else if (!strcmp(a, "--block-size")) {
            if (!(v = kvt_cli_value(argc, argv, &i)) ||
                (x->block = kvt_cli_parse_long(a, v, 1, KVT_BLOCK_TOKENS_MAX)) < 0)
                return 2;
        } else if (!strcmp(a, "--embed")) {
            x->embed = 1;
        } else if (!strcmp(a, "--embed-model")) {
            if (!(x->embed_model = kvt_cli_value(argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--pooling")) {
            if (!(v = kvt_cli_value(argc, argv, &i))) return 2;
            if ((x->pooling = kvt_rag_pooling_parse(v)) < 0) {
                fprintf(stderr, "kvtier rag: --pooling must be mean, last or cls, not '%s'\n", v);
                return 2;
            }
        } else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) {
            if (!(v = kvt_cli_value(argc, argv, &i)) ||
                (x->threads = kvt_cli_parse_long(a, v, 1, KVT_CLI_MAX_THREADS)) < 0)
                return 2;
        } else {
            fprintf(stderr, "kvtier rag index: unknown argument '%s'\n", a);
            return 2;
        }
    }
    if (!x->model || !x->docs || !x->out) {
        fprintf(stderr, "kvtier rag index: needs -m MODEL, --docs PATH and -o INDEX\n");
        kvt_usage_rag(stderr);
        return 2;
    }
    if ((x->pooling || x->embed_model || x->dev_given) && !x->embed) {
        fprintf(stderr, "kvtier rag index: %s needs --embed\n",
                x->pooling           ? "--pooling"
                    : x->embed_model ? "--embed-model"
                                     : "--device");
        return 2;
    }
    if (x->embed && !x->dev_given && kvt_cli_device_env(&x->dev)) return 2;
    if (x->embed && kvt_cli_device_auto("rag index", &x->dev)) return 2;
    return 0;
}

/* A model loaded whole (to run it), or NULL after printing why. */
static kvt_model *load_full(const char *what, const char *path) {
    kvt_model *m = NULL;
    if (kvt_model_load(path, kvt_model_default_params(), &m)) {
        fprintf(stderr, "kvtier %s: %s\n", what, kvt_errmsg());
        return NULL;
    }
    return m;
}

/* An embedder for m pooled as pool (0: the model's own pooling) on the engine device, or NULL after printing why. */
static kvt_rag_embedder *new_embedder(const char *what, const kvt_model *m, int pool, long threads, int32_t device) {
    kvt_rag_pooling p = (kvt_rag_pooling)pool;
    kvt_rag_embedder *e = NULL;
    if ((!pool && kvt_rag_pooling_default(m, &p)) || kvt_rag_embedder_new_on(m, p, (int32_t)threads, device, &e)) {
        fprintf(stderr, "kvtier %s: %s%s\n", what, kvt_errmsg(), pool ? "" : " (give --pooling mean|last|cls)");
        return NULL;
    }
    return e;
}

/* --embed: a vector per chunk of idx, with a progress line each second; *ms
 * gets the time the chunks took to embed. 0, or -1 after printing why. */
static int embed_chunks(kvt_rag_index *idx, const kvt_model *m, int pool, long threads, int32_t device, double *ms) {
    kvt_rag_embedder *e = new_embedder("rag index", m, pool, threads, device);
    if (!e) return -1;
    int32_t n = kvt_rag_n_chunks(idx), dim = kvt_rag_embedder_dim(e);
    float *vecs = kvt_xmalloc((size_t)n * (size_t)dim * sizeof *vecs);
    double t0 = kvt_now(), last = t0;
    int rc = 0;
    for (int32_t i = 0; i < n && !rc; i++) {
        const kvt_rag_chunk *c = kvt_rag_chunk_at(idx, i);
        if ((rc = kvt_rag_embed(e, c->text, strlen(c->text), vecs + (size_t)i * (size_t)dim)))
            fprintf(stderr, "kvtier rag index: cannot embed chunk %s: %s\n", c->id, kvt_errmsg());
        if (kvt_now() - last >= PROGRESS_EVERY_S) {
            fprintf(stderr, "rag index: embedded %d of %d chunks, %.0f s\n", i + 1, n, kvt_now() - t0);
            last = kvt_now();
        }
    }
    *ms = (kvt_now() - t0) * 1e3;
    /* the pooling the embedder used: the model's own when none was given */
    kvt_rag_pooling p = (kvt_rag_pooling)pool;
    if (!pool) (void)kvt_rag_pooling_default(m, &p);
    if (!rc) kvt_rag_set_vectors(idx, vecs, dim, m, p);
    free(vecs);
    kvt_rag_embedder_free(e);
    return rc ? -1 : 0;
}

static int cmd_index(int argc, char **argv) {
    index_args a;
    int prc = index_parse(argc, argv, &a);
    if (prc) return prc;
    /* the chunks' tokenizer: the model itself when it also embeds them */
    int same = a.embed && !a.embed_model;
    kvt_model *m = same ? load_full("rag index", a.model) : kvt_cli_load_vocab("rag index", a.model);
    kvt_model *em = a.embed && a.embed_model ? load_full("rag index", a.embed_model) : NULL;
    if (!m || (a.embed_model && !em)) {
        kvt_model_free(m);
        kvt_model_free(em);
        return 1;
    }
    index_run x = {.t_start = kvt_now(), .t_last = kvt_now()};
    if (kvt_rag_build_new(m, (int32_t)a.block, (int32_t)a.chunk, &x.b)) {
        fprintf(stderr, "kvtier rag index: %s\n", kvt_errmsg());
        kvt_model_free(m);
        kvt_model_free(em);
        return 2;
    }
    int rc = index_docs(&x, a.docs);
    kvt_rag_index *idx = NULL;
    if (!rc && kvt_rag_build_finish(x.b, &idx)) {
        fprintf(stderr, "kvtier rag index: %s\n", kvt_errmsg());
        rc = -1;
    } else if (rc) {
        kvt_rag_build_free(x.b);
    }
    double embed_ms = 0;
    if (!rc && a.embed)
        rc = embed_chunks(idx, em ? em : m, a.pooling, a.threads, kvt_cli_device_engine(&a.dev), &embed_ms);
    if (!rc && kvt_rag_save(idx, a.out)) {
        fprintf(stderr, "kvtier rag index: %s\n", kvt_errmsg());
        rc = -1;
    }
    if (!rc) {
        uint64_t tokens = 0;
        for (int32_t i = 0; i < kvt_rag_n_chunks(idx); i++) tokens += kvt_rag_chunk_at(idx, i)->tokens;
        kvt_rag_vec_info vi = kvt_rag_vectors(idx);
        char dense[160] = "";
        if (vi.dim) /* worded as rag query and rag prewarm report the questions' embedding */
            snprintf(dense, sizeof dense, ", vectors of %d floats (%s pooling), embedding the chunks took %.1f ms",
                     vi.dim, kvt_rag_pooling_name(vi.pooling), embed_ms);
        printf("indexed %ld documents (%.1f MB) into %d chunks (%llu tokens as blocks of %ld, at most %ld per chunk), "
               "%d terms%s, in %.1f s: %s\n",
               x.docs, (double)x.bytes / 1e6, kvt_rag_n_chunks(idx), (unsigned long long)tokens, a.block, a.chunk,
               kvt_rag_n_terms(idx), dense, kvt_now() - x.t_start, a.out);
    }
    kvt_rag_free(idx);
    kvt_model_free(m);
    kvt_model_free(em);
    return rc ? 1 : 0;
}

/* ---- query ---------------------------------------------------------------------------- */

int kvt_cli_rag_prompt(const kvt_model *m, int32_t block, const char *system, const char *user,
                       const kvt_document *docs, size_t n_docs, int32_t **out, size_t *n_out) {
    /* as `kvtier serve` renders: ChatML without a template, never a guess for one it does not recognise */
    kvt_chat_family fam = m->chat_template ? kvt_chat_detect(m->chat_template) : KVT_CHAT_CHATML;
    if (fam == KVT_CHAT_UNKNOWN)
        return kvt_fail(KVT_EUNSUPPORTED,
                        "the model's tokenizer.chat_template is not one kvtier recognises "
                        "(serve needs --chat-template NAME for it: " KVT_CLI_CHAT_NAMES ")");
    kvt_chat_msg msgs[2];
    size_t nm = 0, at = 0, nt = 0;
    if (system) msgs[nm++] = (kvt_chat_msg){"system", system};
    msgs[nm++] = (kvt_chat_msg){"user", user};
    int32_t *toks = NULL;
    int rc = kvt_chat_render_at(m->tok, fam, msgs, nm, NULL, NULL, SIZE_MAX, nm - 1, &at, &toks, &nt);
    if (!rc) rc = kvt_render_documents(m, block, toks, nt, at, docs, n_docs, out, n_out);
    free(toks);
    return rc;
}

/* --prompt: the prompt the RAG route builds for question over hits[0..n)
 * (planned for order, in place). 0 or -1 after printing why. */
static int rag_prompt(const char *model_path, const kvt_rag_index *idx, const char *system, const char *question,
                      kvt_rag_order order, kvt_rag_hit *hits, int32_t n, int32_t **out, size_t *n_out) {
    kvt_model *m = kvt_cli_load_vocab("rag query", model_path);
    if (!m) return -1;
    kvt_document docs[KVT_RAG_MAX_K];
    kvt_rag_plan(idx, order, hits, n, docs);
    int rc = kvt_cli_rag_prompt(m, kvt_rag_block_size(idx), system, question, docs, (size_t)n, out, n_out);
    if (rc) fprintf(stderr, "kvtier rag query: cannot build the prompt: %s\n", kvt_errmsg());
    kvt_model_free(m);
    return rc ? -1 : 0;
}

/* The hits of a query (and with --prompt, the planned prompt), as one JSON
 * line; ms: the retrieval's time and the question's embedding's (< 0: none). */
static void query_print_json(const kvt_rag_index *idx, const kvt_rag_hit *hits, const kvt_rag_hit *planned, int32_t n,
                             const double ms[2], int prompt, const int32_t *ptoks, size_t np) {
    cJSON *o = cJSON_CreateObject(), *arr = cJSON_AddArrayToObject(o, "chunks");
    cJSON_AddNumberToObject(o, "query_ms", ms[0]);
    if (ms[1] >= 0) cJSON_AddNumberToObject(o, "embed_ms", ms[1]);
    if (prompt) {
        cJSON *pa = cJSON_AddArrayToObject(o, "prompt_tokens"), *po = cJSON_AddArrayToObject(o, "prompt_chunks");
        for (size_t i = 0; i < np; i++) cJSON_AddItemToArray(pa, cJSON_CreateNumber(ptoks[i]));
        for (int32_t i = 0; i < n; i++)
            cJSON_AddItemToArray(po, cJSON_CreateString(kvt_rag_chunk_at(idx, planned[i].chunk)->id));
    }
    for (int32_t i = 0; i < n; i++) {
        const kvt_rag_chunk *c = kvt_rag_chunk_at(idx, hits[i].chunk);
        cJSON *e = cJSON_CreateObject();
        cJSON_AddNumberToObject(e, "rank", i);
        cJSON_AddNumberToObject(e, "chunk", hits[i].chunk);
        cJSON_AddStringToObject(e, "id", c->id);
        cJSON_AddStringToObject(e, "doc", c->doc);
        cJSON_AddNumberToObject(e, "seq", c->seq);
        cJSON_AddNumberToObject(e, "score", hits[i].score);
        cJSON_AddNumberToObject(e, "tokens", c->tokens);
        cJSON_AddStringToObject(e, "text", c->text);
        cJSON_AddItemToArray(arr, e);
    }
    char *s = cJSON_PrintUnformatted(o);
    printf("%s\n", s);
    free(s);
    cJSON_Delete(o);
}

/* The same as a table, one hit per line. */
static void query_print_text(const kvt_rag_index *idx, const char *question, const kvt_rag_hit *hits, int32_t n,
                             const double ms[2], int prompt, int order, const int32_t *ptoks, size_t np) {
    char emb[64] = "";
    if (ms[1] >= 0) snprintf(emb, sizeof emb, "; embedding the question %.2f ms", ms[1]);
    printf("%d chunk(s) for \"%s\" (%d in the index, %.2f ms%s)\n", n, question, kvt_rag_n_chunks(idx), ms[0], emb);
    for (int32_t i = 0; i < n; i++) {
        const kvt_rag_chunk *c = kvt_rag_chunk_at(idx, hits[i].chunk);
        char snip[SNIPPET + 1];
        size_t j = 0;
        for (const char *p = c->text; *p && j < SNIPPET; p++) snip[j++] = *p == '\n' || *p == '\t' ? ' ' : *p;
        snip[j] = 0;
        printf("%2d  %7.3f  chunk %-5d %-24s %4u tokens  %s%s\n", i + 1, hits[i].score, hits[i].chunk, c->id, c->tokens,
               snip, strlen(c->text) > SNIPPET ? "..." : "");
    }
    if (prompt) {
        printf("prompt (%s order): %zu tokens:", kvt_rag_order_name((kvt_rag_order)order), np);
        for (size_t i = 0; i < np; i++) printf(" %d", ptoks[i]);
        printf("\n");
    }
}

typedef struct {
    const char *path, *question, *model, *embed_model, *system;
    long k, rrf_k, threads;
    int json, prompt, order, retrieve, pooling; /* pooling 0: the index's */
} query_args;

/* The flags of `rag query`. 0, or 2 after printing why. */
static int query_parse(int argc, char **argv, query_args *x) {
    *x = (query_args){.k = KVT_RAG_DEFAULT_K, .rrf_k = KVT_RAG_RRF_K, .order = KVT_RAG_ORDER_SCORE};
    x->threads = kvt_cli_default_threads();
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i], *v;
        if (!strcmp(a, "-k")) {
            if (!(v = kvt_cli_value(argc, argv, &i)) || (x->k = kvt_cli_parse_long(a, v, 1, KVT_RAG_MAX_K)) < 0)
                return 2;
        } else if (!strcmp(a, "--json") || !strcmp(a, "--prompt")) {
            *(a[2] == 'j' ? &x->json : &x->prompt) = 1;
        } else if (!strcmp(a, "-m") || !strcmp(a, "--model") || !strcmp(a, "--system")) {
            if (!(*(a[2] == 's' ? &x->system : &x->model) = kvt_cli_value(argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--order")) {
            if (!(v = kvt_cli_value(argc, argv, &i))) return 2;
            x->order = kvt_rag_order_parse(v);
            if (x->order != KVT_RAG_ORDER_SCORE && x->order != KVT_RAG_ORDER_CANONICAL) {
                fprintf(stderr, "kvtier rag query: --order must be score or canonical\n");
                return 2;
            }
        } else if (!strcmp(a, "--retrieve")) {
            if (!(v = kvt_cli_value(argc, argv, &i))) return 2;
            if ((x->retrieve = kvt_rag_retrieve_parse(v)) < 0) {
                fprintf(stderr, "kvtier rag query: --retrieve must be bm25, dense or hybrid, not '%s'\n", v);
                return 2;
            }
        } else if (!strcmp(a, "--embed-model")) {
            if (!(x->embed_model = kvt_cli_value(argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--rrf-k")) {
            if (!(v = kvt_cli_value(argc, argv, &i)) || (x->rrf_k = kvt_cli_parse_long(a, v, 1, 1000000)) < 0) return 2;
        } else if (!strcmp(a, "--pooling")) {
            if (!(v = kvt_cli_value(argc, argv, &i))) return 2;
            if ((x->pooling = kvt_rag_pooling_parse(v)) < 0) {
                fprintf(stderr, "kvtier rag query: --pooling must be mean, last or cls, not '%s'\n", v);
                return 2;
            }
        } else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) {
            if (!(v = kvt_cli_value(argc, argv, &i)) ||
                (x->threads = kvt_cli_parse_long(a, v, 1, KVT_CLI_MAX_THREADS)) < 0)
                return 2;
        } else if (a[0] != '-' && !x->path) {
            x->path = a;
        } else if ((a[0] != '-' || !a[1]) && !x->question) {
            x->question = a;
        } else {
            fprintf(stderr, "kvtier rag query: unknown argument '%s'\n", a);
            return 2;
        }
    }
    int dense = x->retrieve != KVT_RAG_RETRIEVE_BM25;
    if (!x->path || !x->question || (x->prompt && !x->model) || (dense && !x->model && !x->embed_model)) {
        fprintf(stderr, "kvtier rag query: needs INDEX and a question%s\n",
                x->prompt && !x->model ? ", and -m MODEL for --prompt"
                    : dense ? ", and -m MODEL or --embed-model MODEL (the index's) for --retrieve dense or hybrid"
                            : "");
        kvt_usage_rag(stderr);
        return 2;
    }
    return 0;
}

int kvt_cli_rag_qembed_open(kvt_cli_rag_qembed *q, const char *what, const char *path, const kvt_rag_index *idx,
                            const char *model, int pool, long threads) {
    memset(q, 0, sizeof *q);
    if (!(q->m = load_full(what, model))) return -1;
    kvt_rag_vec_info vi = kvt_rag_vectors(idx);
    kvt_rag_pooling p = pool ? (kvt_rag_pooling)pool : vi.pooling;
    if (kvt_rag_check_embedder(idx, q->m, p)) {
        fprintf(stderr, "kvtier %s: %s: %s\n", what, path, kvt_errmsg());
    } else if ((q->e = new_embedder(what, q->m, p, threads, 0))) {
        q->dim = vi.dim;
        return 0;
    }
    kvt_cli_rag_qembed_close(q);
    return -1;
}

int kvt_cli_rag_qembed_run(kvt_cli_rag_qembed *q, const char *what, const char *text, float *out) {
    double t0 = kvt_now();
    int rc = kvt_rag_embed(q->e, text, strlen(text), out);
    q->ms += (kvt_now() - t0) * 1e3;
    if (rc) fprintf(stderr, "kvtier %s: cannot embed the question: %s\n", what, kvt_errmsg());
    return rc ? -1 : 0;
}

void kvt_cli_rag_qembed_close(kvt_cli_rag_qembed *q) {
    kvt_rag_embedder_free(q->e);
    kvt_model_free(q->m);
    memset(q, 0, sizeof *q);
}

/* The question's vector for dense or hybrid retrieval over idx (malloc'd), or
 * NULL after printing why; *ms: the time spent embedding it. */
static float *embed_question(const query_args *q, const kvt_rag_index *idx, double *ms) {
    kvt_cli_rag_qembed qe;
    if (kvt_cli_rag_qembed_open(&qe, "rag query", q->path, idx, q->embed_model ? q->embed_model : q->model, q->pooling,
                                q->threads))
        return NULL;
    float *v = kvt_xmalloc((size_t)qe.dim * sizeof *v);
    if (kvt_cli_rag_qembed_run(&qe, "rag query", q->question, v)) {
        free(v);
        v = NULL;
    }
    *ms = qe.ms;
    kvt_cli_rag_qembed_close(&qe);
    return v;
}

static int cmd_query(int argc, char **argv) {
    query_args q;
    int prc = query_parse(argc, argv, &q);
    if (prc) return prc;
    kvt_rag_index *idx = NULL;
    if (kvt_rag_load(q.path, &idx)) {
        fprintf(stderr, "kvtier rag query: %s\n", kvt_errmsg());
        return 1;
    }
    float *qvec = NULL;
    double embed_ms = -1; /* -1: bm25, nothing embedded */
    if (q.retrieve != KVT_RAG_RETRIEVE_BM25 && !(qvec = embed_question(&q, idx, &embed_ms))) {
        kvt_rag_free(idx);
        return 1;
    }
    kvt_rag_hit hits[KVT_RAG_MAX_K];
    double t0 = kvt_now();
    int32_t n = kvt_rag_retrieve_k(idx, (kvt_rag_retrieve)q.retrieve, q.question, qvec, (int32_t)q.k, (int32_t)q.rrf_k,
                                   hits);
    double ms = (kvt_now() - t0) * 1e3;
    free(qvec);
    int32_t *ptoks = NULL;
    size_t np = 0;
    kvt_rag_hit planned[KVT_RAG_MAX_K];
    memcpy(planned, hits, (size_t)n * sizeof *hits);
    if (q.prompt && rag_prompt(q.model, idx, q.system, q.question, (kvt_rag_order)q.order, planned, n, &ptoks, &np)) {
        kvt_rag_free(idx);
        return 1;
    }
    double times[2] = {ms, embed_ms};
    if (q.json) query_print_json(idx, hits, planned, n, times, q.prompt, ptoks, np);
    else query_print_text(idx, q.question, hits, n, times, q.prompt, q.order, ptoks, np);
    free(ptoks);
    kvt_rag_free(idx);
    return 0;
}

int kvt_cmd_rag(int argc, char **argv) {
    if (argc < 2 || kvt_cli_is_help(argv[1])) {
        kvt_usage_rag(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    for (int i = 2; i < argc; i++)
        if (kvt_cli_is_help(argv[i])) {
            kvt_usage_rag(stdout);
            return 0;
        }
    if (!strcmp(argv[1], "index")) return cmd_index(argc, argv);
    if (!strcmp(argv[1], "query")) return cmd_query(argc, argv);
    if (!strcmp(argv[1], "prewarm")) return kvt_cmd_rag_prewarm(argc, argv);
    fprintf(stderr, "kvtier rag: unknown subcommand '%s' (index, query, prewarm)\n", argv[1]);
    kvt_usage_rag(stderr);
    return 2;
}
