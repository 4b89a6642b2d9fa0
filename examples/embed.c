// SPDX-License-Identifier: MIT
/* embed.c: kvtier as a library, through the public header alone.
 *
 * Loads a GGUF model, creates an engine and a KV cache, and runs two prompts
 * that share a long prefix. The second one finds the prefix's KV in the cache
 * and computes only the tokens after it; each request prints its cached
 * tokens per tier. With a disk directory, the cache is flushed there at the
 * end, so running the program again finds the prefix on disk (T2).
 *
 *   cc embed.c $(pkg-config --cflags --libs kvtier) -o embed
 *   ./embed MODEL.gguf [DISK_DIR]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <kvtier.h>

#define MAX_NEW_TOKENS 16
#define RAM_TIER_BYTES (64ull << 20) /* T1: host RAM for KV evicted from the page pool */

/* The shared prefix: long enough to fill several cache blocks (32 tokens each by default). */
static const char *const prefix =
    "You are a careful assistant for a hardware store. Answer in one short sentence, name the aisle, "
    "and never invent a product. The store sells tools, paint, garden supplies, lumber and fasteners. "
    "Opening hours are eight to six on weekdays and nine to five on Saturdays. Question: ";
static const char *const questions[] = {"where are the screws?", "do you sell rakes?"};

/* Prints each generated token's text as it comes (on_token of kvt_request). */
static int print_token(void *ctx, int32_t token) {
    const kvt_model *model = ctx;
    char piece[256];
    int n = kvt_model_token_piece(model, token, piece, sizeof piece, 0);
    if (n > 0) fwrite(piece, 1, (size_t)n < sizeof piece ? (size_t)n : sizeof piece, stdout);
    return 0; /* nonzero would stop generation */
}

/* Tokenizes prefix + question and runs it; prints the request's statistics. */
static int run_one(kvt_model *model, kvt_cache *cache, int k, const char *question) {
    char text[1024];
    snprintf(text, sizeof text, "%s%s", prefix, question);
    int32_t *tokens = NULL;
    size_t n = 0;
    int rc = kvt_model_tokenize(model, text, strlen(text), 1, 0, &tokens, &n);
    if (rc) {
        fprintf(stderr, "embed: tokenize: %s\n", kvt_errmsg());
        return rc;
    }
    kvt_request req = kvt_request_default_params();
    req.max_tokens = MAX_NEW_TOKENS;
    req.temp = 0; /* greedy: a cache hit gives the same tokens as a cold run */
    req.on_token = print_token;
    req.ctx = model;
    kvt_request_stats st;
    printf("request %d text:", k);
    rc = kvt_complete(cache, tokens, (int32_t)n, &req, NULL, &st);
    printf("\n");
    free(tokens);
    if (rc) {
        fprintf(stderr, "embed: request %d: %s (%s)\n", k, kvt_errmsg(), kvt_strerror(rc));
        return rc;
    }
    char why[320]; /* where reuse stopped and why: the reason, the block, the differing tokens' text */
    printf("request %d: prompt %d tokens, cached %d (T0 %d, T1 %d, T2 %d, T3 %d), computed %d, generated %d; "
           "reuse stopped: %s\n",
           k, st.n_prompt, st.n_cached, st.tier_tokens[KVT_TIER_T0], st.tier_tokens[KVT_TIER_T1],
           st.tier_tokens[KVT_TIER_T2], st.tier_tokens[KVT_TIER_T3], st.n_computed, st.n_generated,
           kvt_reuse_stop_describe(model, &st.reuse_stop, why, sizeof why));
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 2 || argc > 3) {
        fprintf(stderr, "usage: %s MODEL.gguf [DISK_DIR]\n", argv[0]);
        return 2;
    }
    kvt_model *model = NULL;
    kvt_engine *engine = NULL;
    kvt_cache *cache = NULL;
    int rc = kvt_model_load(argv[1], kvt_model_default_params(), &model);
    if (rc) {
        fprintf(stderr, "embed: %s\n", kvt_errmsg());
        return 1;
    }
    kvt_model_info info = kvt_model_get_info(model);
    printf("model: %d layers, vocabulary %d, trained context %d, %llu KV bytes per token (f16)\n", info.n_layer,
           info.n_vocab, info.n_ctx_train, (unsigned long long)kvt_model_kv_token_bytes(model, KVT_KV_F16));

    kvt_engine_params ep = kvt_engine_default_params();
    ep.n_ctx = 1024; /* tokens per sequence: these prompts need far fewer */
    ep.max_seqs = 1; /* kvt_complete runs one sequence at a time */
    kvt_cache_params cp = kvt_cache_default_params();
    cp.ram_bytes = RAM_TIER_BYTES;
    cp.disk_dir = argc > 2 ? argv[2] : NULL; /* created 0700 if missing */
    if ((rc = kvt_engine_new(model, ep, &engine)) || (rc = kvt_cache_new(engine, cp, &cache))) {
        fprintf(stderr, "embed: %s\n", kvt_errmsg());
        goto done;
    }
    for (int k = 0; k < 2 && !rc; k++) rc = run_one(model, cache, k + 1, questions[k]);
    if (!rc && cp.disk_dir && (rc = kvt_cache_flush(cache))) fprintf(stderr, "embed: flush: %s\n", kvt_errmsg());
    if (!rc) {
        kvt_cache_stats s;
        kvt_cache_get_stats(cache, &s);
        printf("cache: %llu of %llu prompt tokens reused; T0 %d of %d pages cached; T2 %llu records\n",
               (unsigned long long)s.hit_tokens, (unsigned long long)s.lookup_tokens, s.t0_pages_cached,
               s.t0_pages_total, (unsigned long long)s.t2_records);
    }
done:
    kvt_cache_free(cache); /* the cache first: it borrows the engine, the engine the model */
    kvt_engine_free(engine);
    kvt_model_free(model);
    return rc ? 1 : 0;
}
