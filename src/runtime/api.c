// SPDX-License-Identifier: MIT
/* The read-only views kvtier.h gives embedders (and the kvtier commands) of a
 * model, an engine and a cache: thin accessors over the layers' own headers,
 * so a program built on the public header alone needs nothing else. */
#include "cache.h"
#include "engine.h"
#include "explain.h"
#include "kvtier.h"
#include "model.h"
#include "tokenizer.h"

kvt_model_info kvt_model_get_info(const kvt_model *m) {
    const kvt_hparams *hp = &m->hp;
    int add = kvt_tokenizer_add_special(m->tok);
    return (kvt_model_info){
        .n_vocab = m->vocab_only ? kvt_tokenizer_n_vocab(m->tok) : hp->n_vocab,
        .n_ctx_train = hp->n_ctx_train,
        .n_embd = hp->n_embd,
        .n_layer = hp->n_layer,
        .n_head = hp->n_head,
        .n_head_kv = hp->n_head_kv,
        .head_dim = hp->head_dim,
        .bos = kvt_tokenizer_bos(m->tok),
        .eos = kvt_tokenizer_eos(m->tok),
        .add_bos = (add & KVT_TOK_ADD_BOS) != 0,
        .add_eos = (add & KVT_TOK_ADD_EOS) != 0,
        .chat_template = m->chat_template,
    };
}

int kvt_model_token_piece(const kvt_model *m, int32_t token, char *buf, size_t cap, int render_special) {
    return kvt_token_piece(m->tok, token, buf, cap, render_special);
}

int kvt_model_is_eog(const kvt_model *m, int32_t token) { return kvt_tokenizer_is_eog(m->tok, token) ? 1 : 0; }

kvt_engine_params kvt_engine_get_params(const kvt_engine *e) { return kvt_engine_params_of(e); }

size_t kvt_engine_page_bytes(const kvt_engine *e) { return kvt_page_bytes(e); }

void kvt_cache_capacity(const kvt_cache *c, uint64_t tokens[KVT_TIER_COUNT]) { kvt_cache_tier_capacity(c, tokens); }

char *kvt_reuse_stop_describe(const kvt_model *m, const kvt_reuse_stop *stop, char *buf, size_t cap) {
    return kvt_reuse_stop_line(m ? m->tok : NULL, stop, buf, cap);
}
