// SPDX-License-Identifier: MIT
/* The public API alone (kvtier.h): load, tokenize, complete twice with reuse,
 * lookup by salt, pin/release, statistics, error codes and messages. */
#include <stdlib.h>
#include <string.h>

#include "kvtier.h"
#include "testutil.h"

static int count_tokens(void *ctx, int32_t tok) {
    (void)tok;
    (*(int *)ctx)++;
    return 0;
}

int main(void) {
    kvt_model *made = kvt_test_tiny_model("api.gguf", 1000);
    CHECK(made != NULL);
    kvt_model_free(made); /* the file stays; below it is loaded through the public API */
    char path[4096];
    snprintf(path, sizeof path, "%s/api.gguf", kvt_test_tmpdir());

    kvt_model *m = NULL;
    CHECK(kvt_model_load("/no/such/model.gguf", kvt_model_default_params(), &m) < 0 && !m);
    CHECK(strstr(kvt_errmsg(), "/no/such/model.gguf") != NULL);
    CHECK(strcmp(kvt_strerror(KVT_EFORMAT), "malformed input") == 0);
    CHECK(strcmp(kvt_strerror(KVT_EPAGE), "KV page over the device's binding limit") == 0);
    CHECK(kvt_model_load(path, kvt_model_default_params(), &m) == 0 && m);
    if (!m) return kvt_test_done("test_api");
    kvt_fingerprint fp = kvt_model_fingerprint(m);
    CHECK(fp.lo || fp.hi);

    const char *text = "the system prompt stays fixed and the question comes last: what is a tier?";
    int32_t *toks = NULL;
    size_t n = 0;
    CHECK(kvt_model_tokenize(m, text, strlen(text), 1, 0, &toks, &n) == 0 && n > 40);

    kvt_engine_params ep = kvt_engine_default_params();
    ep.block_size = 8;
    ep.n_threads = 2;
    ep.n_ctx = 256;
    kvt_engine *e = NULL;
    CHECK(kvt_engine_new(m, ep, &e) == 0);
    kvt_cache_params cp = kvt_cache_default_params();
    cp.ram_bytes = 8 << 20;
    kvt_cache *c = NULL;
    CHECK(kvt_cache_new(e, cp, &c) == 0);
    if (!e || !c) return kvt_test_done("test_api");

    kvt_request req = kvt_request_default_params();
    req.max_tokens = 10;
    req.temp = 0;
    int seen = 0;
    req.on_token = count_tokens;
    req.ctx = &seen;
    kvt_request_stats s1, s2;
    int32_t *out1 = NULL, *out2 = NULL;
    CHECK(kvt_complete(c, toks, (int32_t)n, &req, &out1, &s1) == 0);
    CHECK(s1.n_prompt == (int32_t)n && s1.n_cached == 0 && s1.n_computed == (int32_t)n);
    CHECK(seen == s1.n_generated && s1.n_generated > 0);
    CHECK(kvt_complete(c, toks, (int32_t)n, &req, &out2, &s2) == 0);
    CHECK(s2.n_cached == ((int32_t)n - 1) / 8 * 8 && s2.tier_tokens[KVT_TIER_T0] == s2.n_cached);
    CHECK(s1.n_generated == s2.n_generated &&
          !memcmp(out1, out2, (size_t)(s1.n_prompt + s1.n_generated) * sizeof(int32_t)));

    kvt_cache_match mt;
    CHECK(kvt_cache_lookup(c, toks, (int32_t)n, NULL, 0, &mt) == 0);
    CHECK(mt.n_blocks == (int32_t)n / 8 && mt.tier_blocks[KVT_TIER_T0] == mt.n_blocks);
    CHECK(kvt_cache_lookup(c, toks, (int32_t)n, "other", 5, &mt) == 0 && mt.n_blocks == 0);

    kvt_pin *pin = NULL;
    CHECK(kvt_cache_pin(c, toks, (int32_t)n, NULL, 0, &pin) == (int32_t)n / 8 * 8 && pin);
    kvt_cache_stats st;
    kvt_cache_get_stats(c, &st);
    CHECK(st.t0_pages_cached > 0 && st.t0_pages_idle < st.t0_pages_cached);
    CHECK(st.lookups == 2 && st.hit_tokens == (uint64_t)s2.n_cached);
    kvt_cache_release(c, pin);
    kvt_cache_get_stats(c, &st);
    CHECK(st.t0_pages_idle == st.t0_pages_cached);

    free(out1);
    free(out2);
    free(toks);
    kvt_cache_free(c);
    kvt_engine_free(e);
    kvt_model_free(m);
    return kvt_test_done("test_api");
}
