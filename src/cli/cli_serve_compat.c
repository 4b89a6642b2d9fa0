// SPDX-License-Identifier: MIT
/* serve's llama-server flags (cli_serve_compat.h): the ones a llama-server
 * command line carries over, each taken at its meaning in kvtier, accepted
 * where kvtier already does what it asks, or refused saying why. */
#include "cli_serve_compat.h"

#include <stdio.h>
#include <string.h>

#include "common.h"
#include "metrics.h" /* KVT_METRICS_LLAMACPP, KVT_METRICS_VLLM */

#define MAX_TEMPERATURE 2.0     /* as a request's temperature */
#define MAX_REPEAT_PENALTY 10.0 /* as a request's repeat_penalty */
#define MAX_PENALTY 2.0         /* presence and frequency penalties, as a request's (OpenAI's bounds) */

enum {
    C_FLASH_ATTN = KVT_CLI_COMPAT_ID_BASE,
    C_CONT_BATCHING,
    C_NO_CONT_BATCHING,
    C_METRICS,
    C_TEMP,
    C_TOP_K,
    C_TOP_P,
    C_SEED,
    C_HF_REPO,
    C_VERSION,
    C_METRICS_NAMES,
    C_SLOTS,
    C_SAMPLERS,
    C_MIN_P,
    C_REPEAT_PENALTY,
    C_REPEAT_LAST_N,
    C_PRESENCE_PENALTY,
    C_FREQUENCY_PENALTY,
    C_NO_WARMUP,
    C_SPM_INFILL,
};

static const kvt_cli_opt compat_opts[] = {
    {C_TEMP, 0, "temp", NULL, "T",
     "temperature of a request that sets none (default 1, OpenAI's; 0 is\ngreedy). A request's own temperature wins", 0,
     KVT_CLI_RANGE(KVT_CLI_NUM, 0, MAX_TEMPERATURE)},
    {C_TOP_K, 0, "top-k", NULL, "K", "top_k of a request that sets none (default 0: off)", 0,
     KVT_CLI_RANGE(KVT_CLI_INT, 0, INT32_MAX)},
    {C_TOP_P, 0, "top-p", NULL, "P", "top_p of a request that sets none (default 1: off)", KVT_CLI_MIN_OPEN,
     KVT_CLI_RANGE(KVT_CLI_NUM, 0, 1)},
    {C_SEED, 's', "seed", NULL, "N",
     "seed of a request that sets none, so sampled replies repeat\n(default, or -1 as llama.cpp's \"random\": a fresh seed per request)",
     0, KVT_CLI_RANGE(KVT_CLI_INT, -1, 9007199254740991.0)},
    {C_MIN_P, 0, "min-p", NULL, "P", "min_p of a request that sets none (default 0: off)", 0,
     KVT_CLI_RANGE(KVT_CLI_NUM, 0, 1)},
    {C_REPEAT_PENALTY, 0, "repeat-penalty", NULL, "R", "repeat_penalty of a request that sets none (default 1: off)",
     KVT_CLI_MIN_OPEN, KVT_CLI_RANGE(KVT_CLI_NUM, 0, MAX_REPEAT_PENALTY)},
    {C_REPEAT_LAST_N, 0, "repeat-last-n", NULL, "N",
     "repeat_last_n of a request that sets none: the last tokens of the\nprompt and the reply the penalties look at "
     "(default 64, as\nllama-server's; -1: all; 0: penalties off)",
     0, KVT_CLI_RANGE(KVT_CLI_INT, -1, INT32_MAX)},
    {C_PRESENCE_PENALTY, 0, "presence-penalty", NULL, "P", "presence_penalty of a request that sets none (default 0)",
     0, KVT_CLI_RANGE(KVT_CLI_NUM, -MAX_PENALTY, MAX_PENALTY)},
    {C_FREQUENCY_PENALTY, 0, "frequency-penalty", NULL, "F", "frequency_penalty of a request that sets none (default 0)",
     0, KVT_CLI_RANGE(KVT_CLI_NUM, -MAX_PENALTY, MAX_PENALTY)},
    {C_SAMPLERS, 0, "samplers", "sampling-seq", "LIST",
     "the sampler order of a request that sends no \"samplers\": names\nseparated by ';' or ',' (penalties, dry, top_k, "
     "typ_p, top_p,\nmin_p, xtc, temperature, infill) or their letters (\"kpt\"), read as a\nrequest's \"samplers\" is "
     "(default: penalties, dry, top_k,\ntyp_p, min_p, xtc, temperature, top_p). A request's own samplers win",
     0, KVT_CLI_PLAIN},
    {C_SPM_INFILL, 0, "spm-infill", NULL, NULL,
     "/infill writes the suffix before the prefix ([SUF] suffix [PRE]\nprefix [MID]), the order some code models are "
     "trained with\n(default: [PRE] prefix [SUF] suffix [MID])",
     0, KVT_CLI_PLAIN},
    {C_FLASH_ATTN, 0, "flash-attn", NULL, "[on|off|auto]",
     "accepted for llama-server command lines (also -fa): kvtier's\nattention is always fused, one pass over the KV "
     "pages without the\nscore matrix, so there is nothing to turn on or off",
     KVT_CLI_OPT_VALUE, KVT_CLI_PLAIN},
    {C_CONT_BATCHING, 0, "cont-batching", NULL, NULL,
     "accepted (also -cb): continuous batching is always on; --parallel\nsets how many sequences share a batch", 0,
     KVT_CLI_PLAIN},
    {C_NO_CONT_BATCHING, 0, "no-cont-batching", NULL, NULL,
     "accepted with a warning (also -nocb): batching cannot be turned off;\n--parallel 1 serves one request at a "
     "time",
     0, KVT_CLI_PLAIN},
    {C_NO_WARMUP, 0, "no-warmup", NULL, NULL, "accepted: kvtier does no warm-up pass at start", KVT_CLI_NO_ENV,
     KVT_CLI_PLAIN},
    {C_METRICS, 0, "metrics", NULL, NULL,
     "accepted: /metrics is always served, with kvtier's and llama-server's\nmetric names (who may read it: "
     "--metrics-key)",
     0, KVT_CLI_PLAIN},
    {C_SLOTS, 0, "slots", NULL, NULL,
     "accepted: GET /slots is always served (a request's prompt text\nthere only to --admin-key)", 0, KVT_CLI_PLAIN},
    {C_METRICS_NAMES, 0, "metrics-names", NULL, "LIST",
     "which other servers' names /metrics gives its figures besides\nkvtier's own: llamacpp (llama-server's "
     "llamacpp:*, the default),\nvllm (vLLM's vllm:*: prefix-cache hits, KV usage, TTFT and\ninter-token "
     "histograms), both (llamacpp,vllm) or none (kvtier)",
     0, KVT_CLI_PLAIN},
    {C_HF_REPO, 0, "hf-repo", NULL, "REPO",
     "refused (also -hf): kvtier downloads nothing. Fetch the GGUF file\nyourself and give it with -m FILE", 0,
     KVT_CLI_PLAIN},
    {C_VERSION, 0, "version", NULL, NULL, "print kvtier's version and exit", KVT_CLI_NO_ENV, KVT_CLI_PLAIN},
};

const kvt_cli_section kvt_cli_serve_compat_section = {"sampling defaults and llama-server flags", compat_opts,
                                                      KVT_ARRAY_LEN(compat_opts)};

/* --metrics-names: a comma-separated list of llamacpp, vllm; kvtier alone turns the others off. */
static int metrics_names(const kvt_cli_arg *a, kvt_server_params *sp) {
    int names = 0;
    for (const char *p = a->str;;) {
        size_t n = strcspn(p, ",");
        if (n == strlen("llamacpp") && !strncmp(p, "llamacpp", n)) names |= KVT_METRICS_LLAMACPP;
        else if (n == strlen("vllm") && !strncmp(p, "vllm", n)) names |= KVT_METRICS_VLLM;
        else if (n != strlen("kvtier") || strncmp(p, "kvtier", n)) {
            fprintf(stderr, "kvtier serve: %s takes llamacpp, vllm or kvtier (comma-separated), got '%.*s'\n", a->flag,
                    (int)n, p);
            return -1;
        }
        if (!p[n]) break;
        p += n + 1;
    }
    sp->metrics_names = names;
    return 0;
}

int kvt_cli_serve_compat_opt(int id, const kvt_cli_arg *a, kvt_server_params *sp, int *version) {
    const char *v = a->str;
    switch (id) {
    case C_TEMP: sp->default_temperature = (float)a->d; return 0;
    case C_TOP_K: sp->default_top_k = (int32_t)a->i; return 0;
    case C_TOP_P: sp->default_top_p = (float)a->d; return 0;
    case C_MIN_P: sp->default_min_p = (float)a->d; return 0;
    case C_REPEAT_PENALTY: sp->default_repeat_penalty = (float)a->d; return 0;
    case C_REPEAT_LAST_N: sp->default_penalty_last_n = (int32_t)a->i; return 0;
    case C_PRESENCE_PENALTY: sp->default_presence_penalty = (float)a->d; return 0;
    case C_FREQUENCY_PENALTY: sp->default_frequency_penalty = (float)a->d; return 0;
    case C_SEED:
        sp->default_seed = (uint64_t)a->i;
        sp->has_default_seed = a->i >= 0; /* -1: llama.cpp's "random", a fresh seed per request */
        return 0;
    case C_FLASH_ATTN: return kvt_cli_flash_attn("serve", a);
    case C_CONT_BATCHING:
    case C_NO_WARMUP:
    case C_SLOTS:
    case C_METRICS: return 0;
    case C_NO_CONT_BATCHING:
        fprintf(stderr,
                "kvtier serve: %s is ignored: continuous batching is always on (--parallel 1 serves one "
                "request at a time)\n",
                a->flag);
        return 0;
    case C_HF_REPO:
        fprintf(stderr,
                "kvtier serve: %s %s: kvtier downloads no models; fetch the GGUF file yourself (for example "
                "from the repository's web page) and give it with -m FILE\n",
                a->flag, v);
        return -1;
    case C_VERSION: *version = 1; return 0;
    case C_SPM_INFILL: sp->spm_infill = 1; return 0;
    case C_METRICS_NAMES: return metrics_names(a, sp);
    case C_SAMPLERS:
        sp->has_default_steps = 1;
        return kvt_cli_samplers("serve", a, &sp->n_default_steps, sp->default_steps);
    default: return -1;
    }
}
