// SPDX-License-Identifier: MIT
/* run's and serve's flags for llama.cpp's other samplers (cli_sampling.h). */
#include "cli_sampling.h"

#include <float.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "common.h"

enum {
    S_TYPICAL = KVT_CLI_SAMPLING_ID_BASE,
    S_XTC_PROBABILITY,
    S_XTC_THRESHOLD,
    S_DYNATEMP_RANGE,
    S_DYNATEMP_EXP,
    S_MIROSTAT,
    S_MIROSTAT_LR,
    S_MIROSTAT_ENT,
    S_MIN_KEEP,
    S_DRY_MULTIPLIER,
    S_DRY_BASE,
    S_DRY_ALLOWED_LENGTH,
    S_DRY_PENALTY_LAST_N,
    S_DRY_BREAKER,
};

#define MAX_DYNATEMP_RANGE 2.0 /* as a temperature */
#define MAX_DYNATEMP_EXPONENT 100.0
#define MAX_MIROSTAT_TAU 100.0
#define MAX_DRY_MULTIPLIER 100.0
#define MAX_DRY_BASE 100.0

static const kvt_cli_opt opts[] = {
    {S_TYPICAL, 0, "typical", NULL, "P",
     "locally typical sampling: keep the tokens whose surprise is nearest\nthe entropy until they reach P "
     "(default 1: off)",
     0, KVT_CLI_RANGE(KVT_CLI_NUM, 0, 1)},
    {S_XTC_PROBABILITY, 0, "xtc-probability", NULL, "P",
     "XTC: at this chance per token, drop the candidates at or above\n--xtc-threshold but the least likely of them "
     "(default 0: off)",
     0, KVT_CLI_RANGE(KVT_CLI_NUM, 0, 1)},
    {S_XTC_THRESHOLD, 0, "xtc-threshold", NULL, "T", "XTC's probability threshold (default 0.1; above 0.5: off)", 0,
     KVT_CLI_RANGE(KVT_CLI_NUM, 0, 1)},
    {S_DYNATEMP_RANGE, 0, "dynatemp-range", NULL, "R",
     "dynamic temperature: from temp - R for a certain token to temp + R\nfor a flat distribution, by the "
     "candidates' entropy (default 0:\noff; at temperature 0 it samples, as llama.cpp's)",
     0, KVT_CLI_RANGE(KVT_CLI_NUM, 0, MAX_DYNATEMP_RANGE)},
    {S_DYNATEMP_EXP, 0, "dynatemp-exp", NULL, "E", "the dynamic temperature follows normalized entropy^E (default 1)",
     0, KVT_CLI_RANGE(KVT_CLI_NUM, 0, MAX_DYNATEMP_EXPONENT)},
    {S_MIROSTAT, 0, "mirostat", NULL, "N",
     "Mirostat 1 or 2 in place of top-k, top-p, min-p, typical and XTC,\nafter the penalties and the temperature "
     "(default 0: off)",
     0, KVT_CLI_RANGE(KVT_CLI_INT, 0, 2)},
    {S_MIROSTAT_LR, 0, "mirostat-lr", NULL, "ETA", "Mirostat's learning rate (default 0.1)", 0,
     KVT_CLI_RANGE(KVT_CLI_NUM, 0, 1)},
    {S_MIROSTAT_ENT, 0, "mirostat-ent", NULL, "TAU", "Mirostat's target surprise in bits (default 5)", 0,
     KVT_CLI_RANGE(KVT_CLI_NUM, 0, MAX_MIROSTAT_TAU)},
    {S_MIN_KEEP, 0, "min-keep", NULL, "N", "top-p, min-p, typical and XTC keep at least N candidates\n(default 0: one)",
     0, KVT_CLI_RANGE(KVT_CLI_INT, 0, INT32_MAX)},
    {S_DRY_MULTIPLIER, 0, "dry-multiplier", NULL, "M",
     "DRY (\"don't repeat yourself\"): a token that would extend a repeat\nof n tokens of the prompt and reply loses "
     "M * base^(n - allowed\nlength) from its logit (default 0: off)",
     0, KVT_CLI_RANGE(KVT_CLI_NUM, 0, MAX_DRY_MULTIPLIER)},
    {S_DRY_BASE, 0, "dry-base", NULL, "B", "DRY's base (default 1.75; below 1: off)", 0,
     KVT_CLI_RANGE(KVT_CLI_NUM, 0, MAX_DRY_BASE)},
    {S_DRY_ALLOWED_LENGTH, 0, "dry-allowed-length", NULL, "N", "DRY leaves repeats shorter than N alone (default 2)", 0,
     KVT_CLI_RANGE(KVT_CLI_INT, 0, INT32_MAX)},
    {S_DRY_PENALTY_LAST_N, 0, "dry-penalty-last-n", NULL, "N",
     "DRY looks at the last N tokens (default -1: all of them; 0: off)", 0, KVT_CLI_RANGE(KVT_CLI_INT, -1, INT32_MAX)},
    {S_DRY_BREAKER, 0, "dry-sequence-breaker", NULL, "TEXT",
     "a repeat never runs across a token holding TEXT; give it once per\nbreaker, or \"none\" for no breakers "
     "(default: newline, ':', '\"', '*')",
     0, KVT_CLI_PLAIN},
};

const kvt_cli_section kvt_cli_sampling_section = {"llama.cpp's other samplers", opts, KVT_ARRAY_LEN(opts)};
const kvt_cli_section kvt_cli_sampling_defaults_section = {"llama.cpp's other samplers, for a request that sets none",
                                                           opts, KVT_ARRAY_LEN(opts)};

int kvt_cli_sampling_opt(int id, const kvt_cli_arg *a, kvt_sampler_params *sp, kvt_dry_breakers *brk) {
    switch (id) {
    case S_DRY_MULTIPLIER: sp->dry_multiplier = (float)a->d; return 0;
    case S_DRY_BASE: sp->dry_base = (float)a->d; return 0;
    case S_DRY_ALLOWED_LENGTH: sp->dry_allowed_length = (int32_t)a->i; return 0;
    case S_DRY_PENALTY_LAST_N: sp->dry_penalty_last_n = (int32_t)a->i; return 0;
    case S_DRY_BREAKER:
        if (!brk->given) brk->n = 0; /* the first one given replaces the defaults */
        brk->given = 1;
        if (!strcmp(a->str, "none")) {
            brk->n = 0;
            return 0;
        }
        if (!*a->str || brk->n == KVT_DRY_MAX_BREAKERS) {
            fprintf(stderr, "%s: %s takes a non-empty text, at most %d times\n", a->flag, a->flag, KVT_DRY_MAX_BREAKERS);
            return -1;
        }
        brk->s[brk->n++] = a->str;
        return 0;
    case S_TYPICAL: /* 0 keeps the most typical token alone, as llama.cpp's: the sampler's 0 is off */
        sp->typical_p = a->d > 0 ? (float)a->d : FLT_MIN;
        return 0;
    case S_XTC_PROBABILITY: sp->xtc_probability = (float)a->d; return 0;
    case S_XTC_THRESHOLD: sp->xtc_threshold = (float)a->d; return 0;
    case S_DYNATEMP_RANGE: sp->dynatemp_range = (float)a->d; return 0;
    case S_DYNATEMP_EXP: sp->dynatemp_exponent = (float)a->d; return 0;
    case S_MIROSTAT: sp->mirostat = (int32_t)a->i; return 0;
    case S_MIROSTAT_LR: sp->mirostat_eta = (float)a->d; return 0;
    case S_MIROSTAT_ENT: sp->mirostat_tau = (float)a->d; return 0;
    case S_MIN_KEEP: sp->min_keep = (int32_t)a->i; return 0;
    }
    return 0;
}
