// SPDX-License-Identifier: MIT
/* `kvtier lint`: how cacheable a set of prompts is (lint.h), as text or JSON.
 * Prompts are read and tokenized as `kvtier run -f` reads them: one per line,
 * a line starting with '{' is JSON ({"prompt"} or chat {"messages"}, rendered
 * with the model's chat template, and "kvtier": {"documents"} rendered as
 * fixed context blocks, where the server puts them). */
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api_lint.h"
#include "api_openai.h"
#include "chat.h"
#include "cli.h"
#include "common.h"
#include "lint.h"
#include "model.h"
#include "tokenizer.h"

#define LINT_TEXT_MAX 120

void kvt_usage_lint(FILE *f) {
    fprintf(f,
            "usage: kvtier lint -m MODEL PROMPTS.jsonl|txt [--json] [--block-size B] [--chat-template NAME]\n\n"
            "Reports how much of the prompts kvtier would reuse if they ran in order through an\n"
            "unbounded cache: the longest prefix each prompt shares with an earlier one (tokens and\n"
            "whole blocks), where and why it stops sharing (a timestamp, a per-user id, reordered\n"
            "tools/documents, a prompt shorter than a block), the reusable fraction now and after\n"
            "the suggested fixes, and advice.\n\n"
            "  -m, --model MODEL   the model whose tokenizer and chat template to use\n"
            "  PROMPTS             one prompt per line; JSON lines {\"prompt\": ...} or {\"messages\": [...]}\n"
            "                      (chat, rendered with the model's template); '-' reads stdin\n"
            "  --json              one JSON object (the format of GET /v1/cache/lint)\n"
            "  --block-size B      tokens per cache block (default %d)\n"
            "  --chat-template F   chatml, llama3, llama2, mistral, qwen3, gemma or phi3\n"
            "                      (default: from the model; chatml if it has none)\n"
            "  -h, --help          this help\n",
            KVT_DEFAULT_BLOCK_SIZE);
}

/* Tokenizes one line; returns 0 or -1 after printing why. */
static int line_tokens(const kvt_model *m, kvt_chat_family fam, int32_t block, const char *path, long lineno,
                       const char *line, int32_t **toks, size_t *n) {
    const kvt_tokenizer *t = m->tok;
    if (line[0] != '{') return kvt_tokenize(t, line, strlen(line), kvt_tokenizer_add_special(t), 1, toks, n) ? -1 : 0;
    char bad[400] = "";
    cJSON *j = kvt_cli_json(line, bad, sizeof bad);
    if (!j) {
        fprintf(stderr, "kvtier lint: %s:%ld: %s\n", path, lineno, bad);
        return -1;
    }
    const cJSON *pr = cJSON_GetObjectItemCaseSensitive(j, "prompt"),
                *ms = cJSON_GetObjectItemCaseSensitive(j, "messages");
    int rc = -1;
    size_t at = 0; /* where kvtier.documents go, as the server puts them */
    if (cJSON_IsString(pr)) {
        rc = kvt_tokenize(t, pr->valuestring, strlen(pr->valuestring), kvt_tokenizer_add_special(t), 1, toks, n) ? -1
                                                                                                                 : 0;
        if (!rc && *n && (*toks)[0] == kvt_tokenizer_bos(t)) at = 1;
    } else if (cJSON_IsArray(ms)) {
        int k = cJSON_GetArraySize(ms), ok = k > 0;
        kvt_chat_msg *msgs = kvt_xcalloc((size_t)(k ? k : 1), sizeof *msgs);
        for (int i = 0; i < k && ok; i++) {
            const cJSON *e = cJSON_GetArrayItem(ms, i);
            const cJSON *ro = cJSON_GetObjectItemCaseSensitive(e, "role"),
                        *co = cJSON_GetObjectItemCaseSensitive(e, "content");
            ok = cJSON_IsString(ro) && cJSON_IsString(co);
            if (ok) msgs[i] = (kvt_chat_msg){ro->valuestring, co->valuestring};
        }
        size_t last_user = (size_t)k;
        for (int i = 0; i < k && ok; i++)
            if (!strcmp(msgs[i].role, "user")) last_user = (size_t)i;
        if (ok)
            rc = kvt_chat_render_at(t, fam, msgs, (size_t)k, NULL, NULL, SIZE_MAX, last_user, &at, toks, n) ? -1 : 0;
        free(msgs);
    }
    kvt_document *docs = NULL;
    size_t nd = 0;
    kvt_api_error err;
    if (!rc && kvt_api_parse_documents(cJSON_GetObjectItemCaseSensitive(j, "kvtier"), &docs, &nd, &err)) {
        fprintf(stderr, "kvtier lint: %s:%ld: %s\n", path, lineno, err.message);
        free(*toks);
        *toks = NULL;
        cJSON_Delete(j);
        return -1;
    }
    if (!rc && nd) {
        int32_t *with = NULL;
        size_t nw = 0;
        rc = kvt_render_documents(m, block, *toks, *n, at, docs, nd, &with, &nw) ? -1 : 0;
        free(*toks);
        *toks = with;
        *n = nw;
    }
    kvt_api_documents_free(docs, nd);
    if (rc)
        fprintf(stderr, "kvtier lint: %s:%ld: %s\n", path, lineno,
                j ? (pr || ms ? kvt_errmsg() : "expected \"prompt\" or \"messages\"") : "not valid JSON");
    cJSON_Delete(j);
    return rc;
}

static void print_text(const kvt_tokenizer *t, const kvt_lint_prompt *p, const kvt_lint_report *r) {
    char a[LINT_TEXT_MAX], b[LINT_TEXT_MAX], c[LINT_TEXT_MAX];
    double f0 = r->total_tokens ? (double)r->reusable_tokens / (double)r->total_tokens : 0;
    double f1 = r->total_after ? (double)r->reusable_after / (double)r->total_after : 0;
    printf("%d prompts, %lld tokens, block %d: reusable %lld tokens (%.1f%%) in order through an unbounded cache; "
           "after the fixes below %lld (%.1f%%)\n",
           r->n_prompts, (long long)r->total_tokens, r->block, (long long)r->reusable_tokens, 100 * f0,
           (long long)r->reusable_after, 100 * f1);
    printf("all prompts share their first %d tokens (%d blocks)\n\n", r->common_prefix, r->common_prefix / r->block);
    printf("per prompt: shared prefix with an earlier prompt (tokens / whole blocks), first divergence\n");
    for (int32_t i = 0; i < r->n_prompts; i++) {
        const kvt_lint_row *w = &r->rows[i];
        if (w->with < 0) printf("  [%d] %d tokens: first prompt", i + 1, w->n_tokens);
        else
            printf("  [%d] %d tokens: shares %d / %d blocks with [%d]", i + 1, w->n_tokens, w->shared,
                   w->shared / r->block, w->with + 1);
        if (w->cause != KVT_LINT_NONE) {
            printf("; diverges at token %d (block %d): %s", w->shared, w->shared / r->block,
                   kvt_lint_cause_label(w->cause));
            if (w->with >= 0 && w->cause != KVT_LINT_SHORT)
                printf(": ...%s[%s] vs [%s]", kvt_lint_text(t, &p[i], w->span_start - 6, w->span_start, c, sizeof c),
                       kvt_lint_text(t, &p[i], w->span_start, KVT_MAX(w->span_end, w->shared + 4), a, sizeof a),
                       kvt_lint_text(t, &p[w->with], w->with_start, KVT_MAX(w->with_end, w->shared + 4), b, sizeof b));
        }
        printf("\n");
    }
    printf("\ncauses:\n");
    for (int k = KVT_LINT_NONE + 1; k < KVT_LINT_CAUSE_COUNT; k++)
        if (r->cause_count[k])
            printf("  %-44s %d prompt(s), e.g. [%d]\n", kvt_lint_cause_label((kvt_lint_cause)k), r->cause_count[k],
                   r->cause_example[k] + 1);
    int32_t na;
    char **adv = kvt_lint_advice(t, p, r, &na);
    printf("\nadvice:\n");
    for (int32_t k = 0; k < na; k++) printf("  - %s\n", adv[k]);
    if (!na) printf("  (none: the prompts already share what they can)\n");
    kvt_lint_advice_free(adv, na);
}

/* The prompts of path ("-": stdin), one a line (empty lines skipped), each
 * tokenized by line_tokens; the first KVT_LINT_MAX_PROMPTS of them. Returns 0,
 * or 1 after printing why; either way *out holds *n_out prompts the caller
 * frees. */
static int read_lint_prompts(kvt_model *m, kvt_chat_family fam, int32_t block, const char *path, kvt_lint_prompt **out,
                             int32_t *n_out) {
    *out = NULL;
    *n_out = 0;
    FILE *f = !strcmp(path, "-") ? stdin : fopen(path, "r");
    if (!f) {
        fprintf(stderr, "kvtier lint: cannot open %s: %s\n", path, strerror(errno));
        return 1;
    }
    kvt_lint_prompt *ps = NULL;
    int32_t n = 0, cap = 0, bad = 0;
    char *line = NULL;
    size_t lcap = 0;
    ssize_t len;
    long lineno = 0;
    while (!bad && (len = getline(&line, &lcap, f)) >= 0) {
        lineno++;
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r')) line[--len] = 0;
        if (!len) continue;
        if (n == KVT_LINT_MAX_PROMPTS) {
            fprintf(stderr, "kvtier lint: only the first %d prompts are linted\n", KVT_LINT_MAX_PROMPTS);
            break;
        }
        int32_t *toks = NULL;
        size_t nt = 0;
        if (line_tokens(m, fam, block, path, lineno, line, &toks, &nt)) {
            bad = 1;
            break;
        }
        if (n == cap) ps = kvt_xrealloc(ps, (size_t)(cap = cap ? 2 * cap : 16) * sizeof *ps);
        ps[n++] = (kvt_lint_prompt){toks, (int32_t)nt};
    }
    free(line);
    if (f != stdin) fclose(f);
    *out = ps;
    *n_out = n;
    return bad;
}

int kvt_cmd_lint(int argc, char **argv) {
    const char *model_path = NULL, *path = NULL, *tmpl = NULL;
    int json = 0;
    long block = KVT_DEFAULT_BLOCK_SIZE;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (kvt_cli_is_help(a)) {
            kvt_usage_lint(stdout);
            return 0;
        } else if (!strcmp(a, "-m") || !strcmp(a, "--model")) {
            if (!(model_path = kvt_cli_value(argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--json")) {
            json = 1;
        } else if (!strcmp(a, "--block-size")) {
            const char *v = kvt_cli_value(argc, argv, &i);
            if (!v || (block = kvt_cli_parse_long("--block-size", v, 1, 4096)) < 0) return 2;
        } else if (!strcmp(a, "--chat-template")) {
            if (!(tmpl = kvt_cli_value(argc, argv, &i))) return 2;
            if (kvt_chat_family_parse(tmpl) == KVT_CHAT_UNKNOWN) {
                fprintf(stderr, "kvtier lint: unknown chat template '%s'\n", tmpl);
                return 2;
            }
        } else if ((a[0] != '-' || !strcmp(a, "-")) && !path) {
            path = a;
        } else {
            fprintf(stderr, "kvtier lint: unknown argument '%s'\n", a);
            kvt_usage_lint(stderr);
            return 2;
        }
    }
    if (!model_path || !path) {
        fprintf(stderr, "kvtier lint: needs -m MODEL and a prompts file\n");
        kvt_usage_lint(stderr);
        return 2;
    }
    kvt_model *m = kvt_cli_load_vocab("lint", model_path);
    if (!m) return 1;
    kvt_chat_family fam;
    if (kvt_cli_chat_family("lint", tmpl, m->chat_template, &fam)) {
        kvt_model_free(m);
        return 1;
    }
    kvt_lint_prompt *ps = NULL;
    int32_t n = 0;
    int bad = read_lint_prompts(m, fam, (int32_t)block, path, &ps, &n);
    int rc = bad ? 1 : 0;
    if (!bad && n == 0) {
        fprintf(stderr, "kvtier lint: %s holds no prompts\n", path);
        rc = 1;
    }
    kvt_lint_report r;
    if (!rc && kvt_lint_run(m->tok, ps, n, (int32_t)block, &r) == 0) {
        if (json) {
            char *s = kvt_lint_json(m->tok, ps, &r);
            printf("%s\n", s);
            free(s);
        } else {
            print_text(m->tok, ps, &r);
        }
        kvt_lint_free(&r);
    } else if (!rc) {
        fprintf(stderr, "kvtier lint: %s\n", kvt_errmsg());
        rc = 1;
    }
    for (int32_t i = 0; i < n; i++) free((void *)ps[i].tokens);
    free(ps);
    kvt_model_free(m);
    return rc;
}
