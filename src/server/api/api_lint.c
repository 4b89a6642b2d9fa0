// SPDX-License-Identifier: MIT
/* kvt_lint_json: a lint report as JSON (cJSON). */
#include "api_lint.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "api_utf8.h"
#include "common.h"

#define TEXT_CAP 160
#define CONTEXT_TOKENS 8 /* tokens of text shown before and after a divergence */

static void add_text(cJSON *o, const char *name, const kvt_tokenizer *t, const kvt_lint_prompt *p, int32_t from,
                     int32_t to) {
    char buf[TEXT_CAP];
    kvt_lint_text(t, p, from, to, buf, sizeof buf);
    char *clean = kvt_utf8_sanitize(buf, strlen(buf), NULL);
    cJSON_AddStringToObject(o, name, clean);
    free(clean);
}

static double frac(int64_t a, int64_t b) { return b > 0 ? (double)a / (double)b : 0; }

char *kvt_lint_json(const kvt_tokenizer *t, const kvt_lint_prompt *p, const kvt_lint_report *r) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "prompts", r->n_prompts);
    cJSON_AddNumberToObject(o, "block_size", r->block);
    cJSON_AddNumberToObject(o, "total_tokens", (double)r->total_tokens);
    cJSON_AddNumberToObject(o, "reusable_tokens", (double)r->reusable_tokens);
    cJSON_AddNumberToObject(o, "reusable_fraction", frac(r->reusable_tokens, r->total_tokens));
    cJSON_AddNumberToObject(o, "reusable_tokens_after_fixes", (double)r->reusable_after);
    cJSON_AddNumberToObject(o, "reusable_fraction_after_fixes", frac(r->reusable_after, r->total_after));
    cJSON_AddNumberToObject(o, "common_prefix_tokens", r->common_prefix);
    cJSON *rows = cJSON_AddArrayToObject(o, "per_prompt");
    for (int32_t i = 0; i < r->n_prompts; i++) {
        const kvt_lint_row *w = &r->rows[i];
        cJSON *x = cJSON_CreateObject();
        cJSON_AddNumberToObject(x, "index", i);
        cJSON_AddNumberToObject(x, "tokens", w->n_tokens);
        cJSON_AddNumberToObject(x, "shared_prefix_tokens", w->shared);
        cJSON_AddNumberToObject(x, "shared_blocks", w->shared / r->block);
        cJSON_AddNumberToObject(x, "with", w->with);
        cJSON_AddNumberToObject(x, "reusable_tokens", w->reusable);
        if (w->cause != KVT_LINT_NONE) {
            cJSON *d = cJSON_AddObjectToObject(x, "divergence");
            cJSON_AddNumberToObject(d, "token_offset", w->shared);
            cJSON_AddNumberToObject(d, "block", w->shared / r->block);
            cJSON_AddStringToObject(d, "cause", kvt_lint_cause_name(w->cause));
            add_text(d, "text_before", t, &p[i], w->span_start - CONTEXT_TOKENS, w->span_start);
            add_text(d, "prompt_text", t, &p[i], w->span_start, KVT_MAX(w->span_end, w->shared + CONTEXT_TOKENS));
            if (w->with >= 0)
                add_text(d, "earlier_text", t, &p[w->with], w->with_start,
                         KVT_MAX(w->with_end, w->shared + CONTEXT_TOKENS));
        }
        cJSON_AddItemToArray(rows, x);
    }
    cJSON *causes = cJSON_AddArrayToObject(o, "causes");
    for (int c = KVT_LINT_NONE + 1; c < KVT_LINT_CAUSE_COUNT; c++) {
        if (!r->cause_count[c]) continue;
        cJSON *x = cJSON_CreateObject();
        cJSON_AddStringToObject(x, "cause", kvt_lint_cause_name((kvt_lint_cause)c));
        cJSON_AddStringToObject(x, "label", kvt_lint_cause_label((kvt_lint_cause)c));
        cJSON_AddNumberToObject(x, "prompts", r->cause_count[c]);
        cJSON_AddNumberToObject(x, "example", r->cause_example[c]);
        cJSON_AddItemToArray(causes, x);
    }
    int32_t na;
    char **adv = kvt_lint_advice(t, p, r, &na);
    cJSON *a = cJSON_AddArrayToObject(o, "advice");
    for (int32_t k = 0; k < na; k++) {
        char *clean = kvt_utf8_sanitize(adv[k], strlen(adv[k]), NULL);
        cJSON_AddItemToArray(a, cJSON_CreateString(clean));
        free(clean);
    }
    kvt_lint_advice_free(adv, na);
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return s;
}
