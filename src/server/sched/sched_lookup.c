// SPDX-License-Identifier: MIT
/* The answer of /v1/cache/lookup: a prompt's chained block keys under the
 * caller's namespace and, walked on the engine thread (the cache is its
 * alone), how many of its leading tokens each tier of this node holds. Keys
 * and counts only: the answer never carries prompt text or token ids. */
#include <stdlib.h>

#include <cjson/cJSON.h>

#include "common.h"
#include "server_impl.h"

char *kvt_srv_lookup_json(kvt_server *s, const srv_req *r, int tiers, int counts) {
    kvt_hash128 root;
    if (kvt_cache_root(s->cache, r->salt, r->salt_len, &root)) {
        kvt_api_error e;
        kvt_api_errorf(&e, 500, "server_error", NULL, NULL, "%s", kvt_errmsg());
        return kvt_api_error_json(&e);
    }
    size_t nb = (size_t)r->n_prompt / (size_t)s->block;
    kvt_hash128 *keys = kvt_xmalloc((nb ? nb : 1) * sizeof *keys);
    kvt_block_hashes(root, r->prompt, (size_t)r->n_prompt, (uint32_t)s->block, keys, nb);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "object", "cache.lookup");
    cJSON_AddNumberToObject(o, "prompt_tokens", r->n_prompt);
    cJSON_AddNumberToObject(o, "block_tokens", s->block);
    cJSON *ka = cJSON_AddArrayToObject(o, "block_keys");
    for (size_t i = 0; i < nb; i++) {
        char hex[33];
        kvt_hash128_hex(keys[i], hex);
        cJSON_AddItemToArray(ka, cJSON_CreateString(hex));
    }
    if (tiers && counts) {
        uint8_t *t = kvt_xmalloc(nb ? nb : 1);
        int32_t k = kvt_cache_block_tiers(s->cache, root, r->prompt, r->n_prompt, t, (int32_t)nb);
        int32_t by[KVT_TIER_COUNT] = {0};
        for (int32_t i = 0; i < k && (size_t)i < nb; i++) by[t[i]] += s->block;
        cJSON *c = cJSON_AddObjectToObject(o, "cached_tokens");
        for (int i = 0; i < KVT_TIER_COUNT; i++) cJSON_AddNumberToObject(c, kvt_tier_name((kvt_tier)i), by[i]);
        cJSON_AddNumberToObject(c, "total", (double)k * s->block);
        cJSON_AddNumberToObject(o, "matched_blocks", k);
        free(t);
    }
    free(keys);
    char *text = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return text;
}
