/* `kvtier serve`: loads the model, builds the engine and the cache, starts the
 * OpenAI-compatible server (server.h) and waits for SIGINT/SIGTERM. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cache.h"
#include "chat.h"
#include "cli.h"
#include "common.h"
#include "engine.h"
#include "kv_quant.h"
#include "model.h"
#include "server.h"

#define PATH_MAX_LEN 4096
#define MAX_PARALLEL 256
#define MAX_QUEUE 65536
#define MAX_API_KEYS 1024
#define MAX_KEY_LINE 4096
#define MAX_TIMEOUT_S 86400
#define MAX_CONNS_PER_IP 65536
#define DRAIN_POLL_NS 100000000L /* how often a drain looks at the requests in flight */
#define MAX_CTX (1L << 24)
#define MODEL_ID_MAX PATH_MAX_LEN

static void serve_usage(FILE *f) {
    kvt_server_params d = kvt_server_default_params();
    fprintf(f,
            "usage: kvtier serve [-m MODEL] [options]\n\n"
            "Serves an OpenAI-compatible HTTP API with continuous batching; every response\n"
            "reports the prompt tokens reused from the KV cache (usage.prompt_tokens_details.\n"
            "cached_tokens and a per-tier breakdown under \"kvtier\").\n\n"
            "Endpoints: POST /v1/completions, POST /v1/chat/completions (\"stream\": true for\n"
            "server-sent events), GET /v1/models, GET /health, GET /metrics (Prometheus).\n\n"
            "  -m, --model FILE      GGUF model (default: kvtier's generated RANDOM-WEIGHT model,\n"
            "                        or $KVT_DEFAULT_MODEL; its text is noise)\n"
            "  --host ADDR           IPv4 address to bind (default %s: this machine only)\n"
            "  --port N              TCP port (default %d; 0 = any free port, printed at start)\n"
            "  --parallel N          sequences decoded together in one batch (default %d)\n"
            "  --queue N             requests waiting for a sequence at most; more get 503 (default %d)\n"
            "  --ctx N               context length per sequence: prompt + generated (default: the model's,\n"
            "                        at most 8192)\n"
            "  --kv-active BYTES     T0: the engine's KV page pool, e.g. 256M (default: --parallel full\n"
            "                        contexts plus one more to keep finished prompts cached)\n"
            "  --kv-ram BYTES        T1: host-RAM budget for KV evicted from T0, e.g. 2G (default 0: off)\n"
            "  -t, --threads N       worker threads for the forward pass (default: all CPUs)\n"
            "  --api-key KEY         require 'Authorization: Bearer KEY' on /v1/* (repeatable); each key\n"
            "                        gets its own cache namespace (tenants never share cached KV).\n"
            "                        Arguments show in ps: prefer --api-key-file or $KVTIER_API_KEY\n"
            "  --api-key-file FILE   more keys, one per line (blank lines and # comments ignored)\n"
            "  --metrics-key KEY     the only key that opens /metrics, which shows every tenant's\n"
            "                        counters (also $KVTIER_METRICS_KEY). Without it, /metrics needs an\n"
            "                        API key when there are any, else it is open. /health is always open\n"
            "  --chat-template NAME  chatml, llama3, llama2 or mistral (default: detected from the\n"
            "                        model's tokenizer.chat_template; chatml if it has none)\n"
            "  --max-body BYTES      largest request body; larger gets 413 (default %zu)\n"
            "  --max-inflight-bytes BYTES\n"
            "                        request body bytes held in memory by all requests in flight\n"
            "                        together; a request past it gets 503 + Retry-After (default %llu,\n"
            "                        or --max-body if larger; at least --max-body)\n"
            "  --max-tokens-limit N  largest max_tokens a request may ask for (default %d)\n"
            "  --prefill-chunk N     prompt tokens per engine step, so long prompts do not stall\n"
            "                        running sequences (default %d)\n"
            "  --timeout S           close connections idle (or stalled mid-request) for S seconds\n"
            "                        (default %u)\n"
            "  --request-timeout S   close a connection that has not sent a whole request (headers and\n"
            "                        body) S seconds after it opened or after its previous response,\n"
            "                        however steadily it trickles bytes (default %u; 0 = no deadline)\n"
            "  --max-conns-per-ip N  open connections from one IP address at most; more are closed at\n"
            "                        once (default %u; 0 = no limit; behind a proxy every client\n"
            "                        shares the proxy's address)\n"
            "  --drain-timeout S     on SIGINT/SIGTERM, wait up to S seconds for the requests in flight\n"
            "                        (default %d; 0 = end them at once with 503)\n"
            "  --alias NAME          model name in /v1/models and responses (default: the file name)\n"
            "  --session-keep-warm S  a request that names its agent session (X-Session-Id header or\n"
            "                        \"kvtier\": {\"session_id\": ...}) without its own keep_warm_s keeps its\n"
            "                        context warm in T0 for S seconds after the reply (default %g; 0: off)\n"
            "  -h, --help            this help\n\n"
            "Requests may carry \"cache_salt\" to keep their cached KV apart from other requests', and\n"
            "\"kvtier\": {\"session_id\": S, \"priority\": P, \"keep_warm_s\": T}: the agent session they belong\n"
            "to, how much its KV matters against other sessions' (higher is kept longer and scheduled\n"
            "first), and how long to keep its context warm in T0 while the agent runs a tool.\n"
            "Cache admin (behind the API key when set): POST /v1/cache/pin, /v1/cache/unpin,\n"
            "/v1/cache/prefetch (a \"prompt\" or \"messages\" body), /v1/cache/flush, GET /v1/cache/stats.\n"
            "$KVTIER_API_KEY, if set, is one more API key. A missing or wrong key is 401 whatever the\n"
            "method.\n"
            "Each request gets one access line on stderr (method, path, status, request id, tenant as a\n"
            "hash of its key, prompt/cached/computed/generated tokens, TTFT, total ms; KVT_LOG=1 hides\n"
            "them). A client's X-Request-Id ([A-Za-z0-9._:-], up to 64) is kept, else one is made; every\n"
            "response carries it.\n"
            "SIGINT or SIGTERM stops the server gracefully: new connections are refused, requests on open\n"
            "ones get 503, the requests in flight finish (for --drain-timeout seconds at most; a second\n"
            "signal stops at once), and with --kv-disk the cache is flushed to disk; the exit status is 0.\n\n"
            "KV type:\n",
            d.host, d.port, d.parallel, d.queue, d.max_body, (unsigned long long)d.max_inflight_bytes,
            d.max_tokens_limit, d.prefill_chunk, d.timeout_s, d.request_timeout_s, d.max_conns_per_ip,
            KVT_SERVER_DEFAULT_DRAIN_S, d.session_keep_warm_s);
    kvt_cli_kv_type_help(f);
    fprintf(f, "\ndisk tier:\n");
    kvt_cli_cache_flags_help(f);
}

/* Appends the keys in path (one per line) to keys. Returns 0 or -1 after printing why. */
static int read_key_file(const char *path, char **keys, size_t *n) {
    /* O_NONBLOCK and a regular file only: a FIFO would otherwise hold the start for ever */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) || !S_ISREG(st.st_mode)) {
        fprintf(stderr, "kvtier serve: cannot read --api-key-file %s: %s\n", path,
                fd < 0 ? strerror(errno) : "not a regular file");
        if (fd >= 0) close(fd);
        return -1;
    }
    FILE *f = fdopen(fd, "r");
    if (!f) {
        fprintf(stderr, "kvtier serve: cannot read --api-key-file %s: %s\n", path, strerror(errno));
        close(fd);
        return -1;
    }
    char line[MAX_KEY_LINE];
    while (fgets(line, sizeof line, f)) {
        size_t l = strcspn(line, "\r\n");
        line[l] = 0;
        char *k = line;
        while (*k == ' ' || *k == '\t') k++;
        if (!*k || *k == '#') continue;
        if (*n == MAX_API_KEYS) {
            fprintf(stderr, "kvtier serve: more than %d API keys\n", MAX_API_KEYS);
            fclose(f);
            return -1;
        }
        keys[(*n)++] = kvt_xstrdup(k);
    }
    fclose(f);
    return 0;
}

int kvt_cmd_serve(int argc, char **argv) {
    kvt_server_params sp = kvt_server_default_params();
    const char *model_path = NULL, *template_name = NULL, *alias = NULL, *metrics_key = getenv("KVTIER_METRICS_KEY");
    long n_ctx = 0, l, drain_s = KVT_SERVER_DEFAULT_DRAIN_S;
    uint64_t kv_active = 0, kv_ram = 0, max_body = sp.max_body, max_inflight = 0;
    int threads = kvt_cli_default_threads();
    kvt_cache_params cp = kvt_cache_default_params();
    kvt_kv_dtype dt = KVT_KV_F16;
    char **keys = kvt_xcalloc(MAX_API_KEYS, sizeof *keys);
    size_t n_keys = 0;
    int ret = 2;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = NULL;
        if (kvt_cli_is_help(a)) {
            serve_usage(stdout);
            ret = 0;
            goto done;
        }
        int cf = kvt_cli_cache_flag(argc, argv, &i, &cp);
        if (cf == 0) cf = kvt_cli_kv_type_flag(argc, argv, &i, &dt);
        if (cf < 0) goto done;
        if (cf > 0) continue;
        int takes_value = a[0] == '-' && strcmp(a, "-h");
        if (takes_value && !(v = kvt_cli_value(argc, argv, &i))) goto done;
        if (!strcmp(a, "-m") || !strcmp(a, "--model")) model_path = v;
        else if (!strcmp(a, "--host")) sp.host = v;
        else if (!strcmp(a, "--port")) {
            if ((l = kvt_cli_parse_long(a, v, 0, 65535)) < 0) goto done;
            sp.port = (int)l;
        } else if (!strcmp(a, "--parallel")) {
            if ((l = kvt_cli_parse_long(a, v, 1, MAX_PARALLEL)) < 0) goto done;
            sp.parallel = (int32_t)l;
        } else if (!strcmp(a, "--queue")) {
            if ((l = kvt_cli_parse_long(a, v, 1, MAX_QUEUE)) < 0) goto done;
            sp.queue = (int32_t)l;
        } else if (!strcmp(a, "--ctx")) {
            if ((n_ctx = kvt_cli_parse_long(a, v, 2, MAX_CTX)) < 0) goto done;
        } else if (!strcmp(a, "--kv-active")) {
            if (kvt_cli_parse_bytes(a, v, &kv_active)) goto done;
        } else if (!strcmp(a, "--kv-ram")) {
            if (kvt_cli_parse_bytes(a, v, &kv_ram)) goto done;
        } else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) {
            if ((l = kvt_cli_parse_long(a, v, 1, KVT_CLI_MAX_THREADS)) < 0) goto done;
            threads = (int)l;
        } else if (!strcmp(a, "--api-key")) {
            if (!*v || n_keys == MAX_API_KEYS) {
                fprintf(stderr, "kvtier serve: --api-key needs a non-empty key (at most %d keys)\n", MAX_API_KEYS);
                goto done;
            }
            keys[n_keys++] = kvt_xstrdup(v);
        } else if (!strcmp(a, "--api-key-file")) {
            if (read_key_file(v, keys, &n_keys)) goto done;
        } else if (!strcmp(a, "--metrics-key")) {
            metrics_key = v;
        } else if (!strcmp(a, "--chat-template")) {
            template_name = v;
            if (kvt_chat_family_parse(v) == KVT_CHAT_UNKNOWN) {
                fprintf(stderr, "kvtier serve: --chat-template must be chatml, llama3, llama2 or mistral, got '%s'\n",
                        v);
                goto done;
            }
        } else if (!strcmp(a, "--max-body")) {
            if (kvt_cli_parse_bytes(a, v, &max_body)) goto done;
            if (max_body == 0) {
                fprintf(stderr, "kvtier serve: --max-body must be at least 1 byte\n");
                goto done;
            }
        } else if (!strcmp(a, "--max-inflight-bytes")) {
            if (kvt_cli_parse_bytes(a, v, &max_inflight)) goto done;
            if (max_inflight == 0) {
                fprintf(stderr, "kvtier serve: --max-inflight-bytes must be at least 1 byte\n");
                goto done;
            }
        } else if (!strcmp(a, "--max-tokens-limit")) {
            if ((l = kvt_cli_parse_long(a, v, 1, MAX_CTX)) < 0) goto done;
            sp.max_tokens_limit = (int32_t)l;
        } else if (!strcmp(a, "--prefill-chunk")) {
            if ((l = kvt_cli_parse_long(a, v, 1, MAX_CTX)) < 0) goto done;
            sp.prefill_chunk = (int32_t)l;
        } else if (!strcmp(a, "--timeout")) {
            if ((l = kvt_cli_parse_long(a, v, 1, MAX_TIMEOUT_S)) < 0) goto done;
            sp.timeout_s = (unsigned)l;
        } else if (!strcmp(a, "--request-timeout")) {
            if ((l = kvt_cli_parse_long(a, v, 0, MAX_TIMEOUT_S)) < 0) goto done;
            sp.request_timeout_s = (unsigned)l;
        } else if (!strcmp(a, "--max-conns-per-ip")) {
            if ((l = kvt_cli_parse_long(a, v, 0, MAX_CONNS_PER_IP)) < 0) goto done;
            sp.max_conns_per_ip = (unsigned)l;
        } else if (!strcmp(a, "--drain-timeout")) {
            if ((drain_s = kvt_cli_parse_long(a, v, 0, MAX_TIMEOUT_S)) < 0) goto done;
        } else if (!strcmp(a, "--alias")) {
            alias = v;
        } else if (!strcmp(a, "--session-keep-warm")) {
            char *end;
            sp.session_keep_warm_s = strtod(v, &end);
            if (end == v || *end || !(sp.session_keep_warm_s >= 0) || sp.session_keep_warm_s > 86400) {
                fprintf(stderr, "kvtier serve: --session-keep-warm expects seconds in 0..86400, got '%s'\n", v);
                goto done;
            }
        } else {
            fprintf(stderr, "kvtier serve: unknown argument '%s'\n", a);
            serve_usage(stderr);
            goto done;
        }
    }
    const char *env_key = getenv("KVTIER_API_KEY");
    if (env_key && *env_key) {
        if (n_keys == MAX_API_KEYS) {
            fprintf(stderr, "kvtier serve: more than %d API keys\n", MAX_API_KEYS);
            goto done;
        }
        keys[n_keys++] = kvt_xstrdup(env_key);
    }
    if (metrics_key && !*metrics_key) {
        fprintf(stderr, "kvtier serve: the metrics key (--metrics-key or $KVTIER_METRICS_KEY) is empty\n");
        goto done;
    }
    sp.metrics_key = metrics_key;
    sp.max_body = (size_t)max_body;
    if (!max_inflight) {
        max_inflight = KVT_MAX(sp.max_inflight_bytes, max_body);
    } else if (max_inflight < max_body) {
        fprintf(stderr, "kvtier serve: --max-inflight-bytes (%llu) must be at least --max-body (%llu)\n",
                (unsigned long long)max_inflight, (unsigned long long)max_body);
        goto done;
    }
    sp.max_inflight_bytes = max_inflight;
    sp.api_keys = (const char *const *)keys;
    sp.n_api_keys = n_keys;

    ret = 1;
    char default_path[PATH_MAX_LEN];
    if (!model_path) {
        if (kvt_default_model_path(default_path, sizeof default_path)) goto done;
        model_path = default_path;
    }
    kvt_model *m = NULL;
    kvt_engine *e = NULL;
    kvt_cache *cache = NULL;
    kvt_server *srv = NULL;
    if (kvt_model_load(model_path, kvt_model_default_params(), &m)) {
        fprintf(stderr, "kvtier serve: %s\n", kvt_errmsg());
        goto done;
    }
    if (template_name) {
        sp.chat = kvt_chat_family_parse(template_name);
    } else if ((sp.chat = kvt_chat_detect(m->chat_template)) == KVT_CHAT_UNKNOWN) {
        sp.chat = KVT_CHAT_CHATML;
        kvt_log(KVT_LOG_WARN, "serve: the model's chat template is %s; using chatml (--chat-template overrides)",
                m->chat_template ? "not recognised" : "missing");
    }
    char model_id[MODEL_ID_MAX];
    if (alias) {
        snprintf(model_id, sizeof model_id, "%s", alias);
    } else {
        const char *base = strrchr(model_path, '/');
        snprintf(model_id, sizeof model_id, "%s", base ? base + 1 : model_path);
        char *dot = strstr(model_id, ".gguf");
        if (dot && !dot[strlen(".gguf")]) *dot = 0;
    }
    sp.model_id = model_id;
    if (n_ctx == 0) n_ctx = kvt_cli_default_ctx(m->hp.n_ctx_train);
    kvt_engine_params ep = kvt_engine_default_params();
    ep.n_threads = threads;
    ep.n_ctx = (int32_t)n_ctx;
    ep.max_seqs = sp.parallel;
    ep.kv_dtype = dt;
    ep.n_batch = KVT_MAX(ep.n_batch, sp.parallel + sp.prefill_chunk);
    if (kv_active) {
        ep.kv_active_bytes = kv_active;
    } else {
        long per_ctx = (n_ctx + ep.block_size - 1) / ep.block_size + 1;
        ep.n_pages = (int32_t)KVT_MIN((long)INT32_MAX, per_ctx * (sp.parallel + 1));
    }
    if (kvt_engine_new(m, ep, &e)) {
        fprintf(stderr, "kvtier serve: %s\n", kvt_errmsg());
        goto free_all;
    }
    cp.ram_bytes = kv_ram;
    if (kvt_cache_new(e, &cp, &cache)) {
        fprintf(stderr, "kvtier serve: %s\n", kvt_errmsg());
        goto free_all;
    }
    /* block the stop signals in every thread the server starts; this one waits for them */
    sigset_t stop_set;
    sigemptyset(&stop_set);
    sigaddset(&stop_set, SIGINT);
    sigaddset(&stop_set, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &stop_set, NULL);
    signal(SIGPIPE, SIG_IGN); /* a client that goes away mid-write is not fatal */
    kvt_engine_params eff = kvt_engine_params_of(e);
    /* the capacity line reads the tiers' statistics: taken before the engine
     * thread starts using them (the cache is single-threaded), printed after */
    char *capacity = NULL;
    size_t capacity_len = 0;
    FILE *cap_f = open_memstream(&capacity, &capacity_len);
    if (cap_f) {
        kvt_cli_print_capacity(cap_f, "kvtier serve", cache, eff.n_ctx);
        fclose(cap_f);
    }
    if (kvt_server_start(m, e, cache, &sp, &srv)) {
        fprintf(stderr, "kvtier serve: %s\n", kvt_errmsg());
        free(capacity);
        goto free_all;
    }
    fprintf(stderr,
            "kvtier serve: model %s (%s chat template), ctx %d, %d parallel sequences, KV %s, T0 %d pages of %zu "
            "bytes, T1 %llu bytes, T2 %s, %zu API key(s), /metrics %s\n",
            model_id, kvt_chat_family_name(sp.chat), eff.n_ctx, sp.parallel, kvt_kv_dtype_name(eff.kv_dtype),
            eff.n_pages, kvt_page_bytes(e), (unsigned long long)kv_ram, cp.disk_dir ? cp.disk_dir : "off", n_keys,
            metrics_key ? "behind the metrics key" : n_keys ? "behind the API keys" : "open");
    if (capacity) fputs(capacity, stderr);
    free(capacity);
    fprintf(stderr, "kvtier serve: listening on http://%s:%d\n", sp.host, kvt_server_port(srv));
    int sig = 0;
    sigwait(&stop_set, &sig);
    const char *sig_name = sig == SIGINT ? "SIGINT" : "SIGTERM";
    int32_t in_flight = kvt_server_in_flight(srv);
    if (drain_s && in_flight) {
        /* drain: no new connections or requests; the ones in flight finish, up to the deadline */
        fprintf(stderr,
                "kvtier serve: %s received, finishing %d request(s) in flight (at most %ld s; a second signal stops "
                "at once)\n",
                sig_name, in_flight, drain_s);
        kvt_server_quiesce(srv);
        double end = kvt_now() + (double)drain_s;
        const struct timespec slice = {0, DRAIN_POLL_NS};
        while ((in_flight = kvt_server_in_flight(srv)) > 0 && kvt_now() < end)
            if (sigtimedwait(&stop_set, NULL, &slice) > 0) break;
        if (in_flight) fprintf(stderr, "kvtier serve: stopping with %d request(s) unfinished\n", in_flight);
        else fprintf(stderr, "kvtier serve: every request finished, stopping\n");
    } else {
        fprintf(stderr, "kvtier serve: %s received, stopping\n", sig_name);
    }
    kvt_server_stop(srv);
    ret = 0;
    if (cp.disk_dir) { /* graceful shutdown: what T0 and T1 hold goes to disk for the next start */
        double t0 = kvt_now();
        if (kvt_cache_flush(cache)) fprintf(stderr, "kvtier serve: flushing the disk cache: %s\n", kvt_errmsg());
        else fprintf(stderr, "kvtier serve: flushed the KV cache to %s in %.2f s\n", cp.disk_dir, kvt_now() - t0);
    }
free_all:
    kvt_cache_free(cache);
    kvt_engine_free(e);
    kvt_model_free(m);
done:
    for (size_t i = 0; i < n_keys; i++) free(keys[i]);
    free(keys);
    return ret;
}
