// SPDX-License-Identifier: MIT
/* kvtier serve once its command line is read: the model, engine and cache it
 * opens, the start-up lines, the server until a stop signal and its drain,
 * and the cache's flush for the next start. */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "chat.h" /* chat template families: internal to the model layer; the server applies them */
#include "cli_serve_embed.h"
#include "cli_serve_impl.h"
#include "common.h"
#include "engine.h" /* the device the engine runs on, for the start-up line */

#define DRAIN_POLL_NS 100000000L /* how often a drain looks at the requests in flight */


/* The name /v1/models gives the model: the first --alias name, else the file's name without .gguf;
 * a request's "model" may also give the other alias names (comma-separated), the file's name
 * without .gguf and with it (rt->names). */
static void model_id_of(const char *model_path, const char *alias, serve_runtime *rt) {
    const char *base = strrchr(model_path, '/');
    base = base ? base + 1 : model_path;
    size_t n = strlen(base), l = strlen(".gguf"), at = 0, k = 0;
    if (n > l && !strcmp(base + n - l, ".gguf")) n -= l;
    char *t = rt->names_text;
    size_t cap = sizeof rt->names_text;
    /* the file's names; then every alias, the first of which is the id */
    at += (size_t)snprintf(t + at, cap - at, "%.*s", (int)n, base) + 1;
    rt->names[k++] = t;
    rt->names[k++] = t + at;
    at += (size_t)snprintf(t + at, cap - at, "%s", base) + 1;
    snprintf(rt->model_id, sizeof rt->model_id, "%.*s", (int)n, base);
    for (const char *p = alias; p && *p && at < cap && k < KVT_SERVE_MAX_MODEL_NAMES;) {
        size_t m = strcspn(p, ",");
        if (p == alias) snprintf(rt->model_id, sizeof rt->model_id, "%.*s", (int)m, p);
        rt->names[k++] = t + at;
        at += (size_t)snprintf(t + at, cap - at, "%.*s", (int)m, p) + 1;
        p += m + (p[m] == ',');
    }
    while (k < KVT_SERVE_MAX_MODEL_NAMES) rt->names[k++] = "";
}

int kvt_cli_serve_open(serve_args *x, const char *model_path, serve_runtime *rt) {
    kvt_server_params *sp = &x->sp;
    if (x->rag_path) {
        if (kvt_rag_load(x->rag_path, &rt->rag)) {
            fprintf(stderr, "kvtier serve: %s\n", kvt_errmsg());
            return -1;
        }
        sp->rag = rt->rag;
        kvt_logk(KVT_LOG_INFO, "rag_index,chunks,chunk_tokens,terms",
                 "serve: RAG index %s: %d chunks of at most %d tokens, %d terms", x->rag_path,
                 kvt_rag_n_chunks(rt->rag), kvt_rag_chunk_tokens(rt->rag), kvt_rag_n_terms(rt->rag));
    }
    if (kvt_model_load(model_path, kvt_model_default_params(), &rt->m)) {
        kvt_logk(KVT_LOG_ERROR, "error", "serve: %s", kvt_errmsg());
        return -1;
    }
    if (kvt_cli_serve_embed_finish(sp, rt->m)) return -1;
    kvt_model_info info = kvt_model_get_info(rt->m);
    const char *tmpl;
    if (kvt_cli_template_text("serve", &x->tmpl, info.chat_template, &rt->template_text, &tmpl) ||
        kvt_cli_template_load("serve", &x->tmpl, tmpl, x->template_name != NULL, rt->m->tok, &rt->jinja,
                              &sp->jinja_object_args, &sp->jinja_toolless))
        return -1;
    sp->jinja = rt->jinja;
    sp->jinja_text = rt->jinja ? tmpl : NULL;
    sp->template_kwargs = x->tmpl.kwargs;
    if (x->tmpl.kwargs && !rt->jinja) {
        kvt_logk(KVT_LOG_ERROR, "error",
                 "serve: --chat-template-kwargs needs the model's own template rendered (--jinja); the built-in "
                 "rendering takes no template variables");
        return -1;
    }
    sp->reasoning_format = x->tmpl.reasoning_format;
    /* under --jinja the family only reads tool calls back; one the template does not match reads ChatML's */
    if (rt->jinja && !x->template_name && kvt_chat_detect(tmpl) == KVT_CHAT_UNKNOWN) sp->chat = KVT_CHAT_CHATML;
    else if (kvt_cli_chat_family("serve", x->template_name, tmpl, &sp->chat)) return -1;
    if (!x->template_name && !tmpl)
        kvt_logk(KVT_LOG_WARN, "chat_template",
                 "serve: the model has no chat template; using chatml (--chat-template overrides)");
    model_id_of(model_path, x->alias, rt);
    sp->model_id = rt->model_id;
    sp->model_names = rt->names;
    sp->n_model_names = KVT_SERVE_MAX_MODEL_NAMES;
    long n_ctx = kvt_cli_ctx(x->n_ctx, info.n_ctx_train);
    kvt_engine_params ep = kvt_engine_default_params();
    ep.n_threads = x->threads;
    ep.n_ctx = (int32_t)n_ctx;
    ep.block_size = x->block;
    ep.max_seqs = sp->parallel + (sp->approximate_reuse ? 1 : 0); /* + where a missing stored document is computed */
    ep.kv_dtype = x->dt;
    kvt_cli_device_apply("serve", &x->dev, &ep);
    ep.n_batch = KVT_MAX(ep.n_batch, sp->parallel + sp->prefill_chunk);
    if (x->kv_active) {
        ep.kv_active_bytes = x->kv_active;
    } else if (ep.device) {
        ep.kv_active_bytes = 0; /* the GPU engine plans the pool from --gpu-memory-fraction */
    } else {
        long per_ctx = (n_ctx + ep.block_size - 1) / ep.block_size + 1;
        ep.n_pages = (int32_t)KVT_MIN((long)INT32_MAX, per_ctx * (sp->parallel + 1));
    }
    if (rt->rag && kvt_rag_block_size(rt->rag) != ep.block_size)
        kvt_logk(KVT_LOG_WARN, "rag_block_tokens,block_tokens",
                 "serve: the RAG index was cut for blocks of %d tokens, the cache uses %d: chunks still "
                 "start on block boundaries, but may take more blocks than they need; give serve --block-size %d, "
                 "or cut the index again with `kvtier rag index --block-size %d`",
                 kvt_rag_block_size(rt->rag), ep.block_size, kvt_rag_block_size(rt->rag), ep.block_size);
    if (kvt_engine_new(rt->m, ep, &rt->e)) {
        kvt_logk(KVT_LOG_ERROR, "error", "serve: %s", kvt_errmsg());
        return -1;
    }
    kvt_cache_params cp = x->cp;
    cp.ram_bytes = x->kv_ram;
    if (kvt_cache_new(rt->e, cp, &rt->cache)) {
        kvt_logk(KVT_LOG_ERROR, "error", "serve: %s", kvt_errmsg());
        return -1;
    }
    return 0;
}

void kvt_cli_serve_close(serve_runtime *rt) {
    kvt_cache_free(rt->cache);
    kvt_engine_free(rt->e);
    kvt_model_free(rt->m);
    kvt_rag_free(rt->rag);
    kvt_jinja_free(rt->jinja);
    free(rt->template_text);
}

/* Waits for SIGINT or SIGTERM (blocked in stop_set), then drains: no new
 * connections or requests, the ones in flight finish, for at most drain_s
 * seconds or until a second signal. */
static void serve_until_signal(kvt_server *srv, const sigset_t *stop_set, long drain_s) {
    int sig = 0;
    sigwait(stop_set, &sig);
    const char *sig_name = sig == SIGINT ? "SIGINT" : "SIGTERM";
    int32_t in_flight = kvt_server_in_flight(srv);
    if (!drain_s || !in_flight) {
        kvt_logk(KVT_LOG_INFO, "signal", "serve: %s received, stopping", sig_name);
        return;
    }
    kvt_logk(KVT_LOG_INFO, "signal,in_flight,drain_s",
             "serve: %s received, finishing %d request(s) in flight (at most %ld s; a second signal stops "
             "at once)",
             sig_name, in_flight, drain_s);
    kvt_server_quiesce(srv);
    double end = kvt_now() + (double)drain_s;
    const struct timespec slice = {0, DRAIN_POLL_NS};
    while ((in_flight = kvt_server_in_flight(srv)) > 0 && kvt_now() < end)
        if (sigtimedwait(stop_set, NULL, &slice) > 0) break;
    if (in_flight) kvt_logk(KVT_LOG_WARN, "in_flight", "serve: stopping with %d request(s) unfinished", in_flight);
    else kvt_log(KVT_LOG_INFO, "serve: every request finished, stopping");
}

int kvt_cli_serve_run(const serve_args *x, serve_runtime *rt) {
    const kvt_cache_params *cp = &x->cp;
    const kvt_server_params *sp = &x->sp;
    /* block the stop signals in every thread the server starts; this one waits for them */
    sigset_t stop_set;
    sigemptyset(&stop_set);
    sigaddset(&stop_set, SIGINT);
    sigaddset(&stop_set, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &stop_set, NULL);
    signal(SIGPIPE, SIG_IGN); /* a client that goes away mid-write is not fatal */
    /* the cache is the engine thread's once the server starts: describe it before */
    kvt_engine_params eff = kvt_engine_get_params(rt->e);
    kvt_logk(KVT_LOG_INFO,
             "model,chat_template,ctx,parallel,kv_type,t0_pages,block_tokens,page_bytes,t1_bytes,t2_dir,t3,api_keys,"
             "metrics",
             "serve: model %s (%s chat template), ctx %d, %d parallel sequences, KV %s, T0 %d pages of %d tokens "
             "(%zu bytes), T1 %llu bytes, T2 %s, T3 %s, %zu API key(s), /metrics %s",
             rt->model_id, sp->jinja ? "jinja" : kvt_chat_family_name(sp->chat), eff.n_ctx, sp->parallel,
             kvt_kv_dtype_name(eff.kv_dtype), eff.n_pages, eff.block_size, kvt_engine_page_bytes(rt->e),
             (unsigned long long)x->kv_ram, cp->disk_dir ? cp->disk_dir : "off", cp->remote_url ? "on" : "off",
             x->n_keys,
             x->metrics_key               ? "behind the metrics key"
                 : sp->hide_cached_tokens ? (x->admin_key ? "behind the admin key" : "closed (--hide-cached-tokens)")
                 : x->n_keys              ? "behind the API keys"
                                          : "open");
    if (eff.device) kvt_cli_log_device_memory("serve", rt->e);
    if (sp->explain_text || sp->hide_cached_tokens || x->admin_key)
        kvt_logk(KVT_LOG_INFO, "explain_text,hide_cached_tokens,admin_key",
                 "serve: cached prompt text in reuse reports %s, cache counts in answers %s, admin key %s",
                 sp->explain_text ? "shown (--explain-text)" : "hidden", sp->hide_cached_tokens ? "hidden" : "shown",
                 x->admin_key ? "set" : "none (the lint is refused)");
    kvt_cli_print_capacity(NULL, "serve", rt->cache, eff.n_ctx);
    kvt_server *srv = NULL;
    if (kvt_server_start(rt->m, rt->e, rt->cache, sp, &srv)) {
        kvt_logk(KVT_LOG_ERROR, "error", "serve: %s", kvt_errmsg());
        return 1;
    }
    kvt_logk(KVT_LOG_INFO, "address,port", "serve: listening on http://%s:%d", kvt_server_address(srv),
             kvt_server_port(srv));
    serve_until_signal(srv, &stop_set, x->drain_s);
    kvt_server_stop(srv);
    if (cp->disk_dir || cp->remote_url) { /* graceful shutdown: what T0 and T1 hold goes down for the next start */
        double t0 = kvt_now();
        if (kvt_cache_flush(rt->cache))
            kvt_logk(KVT_LOG_ERROR, "error", "serve: flushing the KV cache: %s", kvt_errmsg());
        else
            kvt_logk(KVT_LOG_INFO, "to,seconds", "serve: flushed the KV cache to %s in %.2f s",
                     cp->disk_dir ? cp->disk_dir : "the remote tier", kvt_now() - t0);
    }
    return 0;
}
