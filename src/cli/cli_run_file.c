// SPDX-License-Identifier: MIT
/* `kvtier run -f`: the prompts file, one prompt per line or JSON lines with
 * kvtier's session controls and cache actions (cli_run.h), and the lines that
 * act on the cache instead of generating. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "cli_run.h"
#include "common.h"

static const char *const line_actions[] = {"generate", "prefetch", "pin", "unpin", "end_session"};

const char *kvt_run_action_name(line_action a) { return line_actions[a]; }

void kvt_run_lines_free(run_line *v, size_t n) {
    for (size_t i = 0; i < n && v; i++) {
        free(v[i].prompt);
        kvt_api_documents_free(v[i].docs, v[i].n_docs);
    }
    free(v);
}

/* Parses one JSON line into *out. Returns 0, or -1 after printing why. */
static int parse_json_line(const char *path, long lineno, const char *line, run_line *out) {
    char bad[400] = "";
    cJSON *j = kvt_cli_json(line, bad, sizeof bad);
    const char *why = NULL;
    kvt_api_error err;
    if (!j) why = bad;
    else if (!cJSON_IsObject(j)) why = "expected a JSON object with a \"prompt\" string";
    for (const cJSON *f = j ? j->child : NULL; f && !why; f = f->next)
        if (strcmp(f->string, "prompt") && strcmp(f->string, "kvtier") && strcmp(f->string, "action") &&
            strcmp(f->string, "id"))
            why = "unknown field (known: prompt, kvtier, action, id)";
    const cJSON *act = j ? cJSON_GetObjectItemCaseSensitive(j, "action") : NULL;
    if (!why && act) {
        size_t a = 0;
        while (a < KVT_ARRAY_LEN(line_actions) && !(cJSON_IsString(act) && !strcmp(act->valuestring, line_actions[a])))
            a++;
        if (a == KVT_ARRAY_LEN(line_actions)) why = "\"action\" must be generate, prefetch, pin, unpin or end_session";
        else out->action = (line_action)a;
    }
    if (!why &&
        (kvt_api_parse_session(cJSON_GetObjectItemCaseSensitive(j, "kvtier"), &out->session, &err) ||
         kvt_api_parse_documents(cJSON_GetObjectItemCaseSensitive(j, "kvtier"), &out->docs, &out->n_docs, &err) ||
         kvt_api_parse_reuse(cJSON_GetObjectItemCaseSensitive(j, "kvtier"), 0, &out->approximate, &out->recompute_ratio,
                             &err)))
        why = err.message;
    const cJSON *pr = j ? cJSON_GetObjectItemCaseSensitive(j, "prompt") : NULL;
    if (!why && out->action != LINE_END_SESSION && !cJSON_IsString(pr)) why = "expected a \"prompt\" string";
    if (!why && out->action == LINE_END_SESSION && !out->session.session_id[0])
        why = "end_session needs \"kvtier\": {\"session_id\": ...}";
    if (why) {
        fprintf(stderr, "kvtier run: %s:%ld: %s\n", path, lineno, why);
        kvt_api_documents_free(out->docs, out->n_docs);
        out->docs = NULL;
        out->n_docs = 0;
    } else if (cJSON_IsString(pr)) {
        out->prompt = kvt_xstrdup(pr->valuestring);
    }
    cJSON_Delete(j);
    return why ? -1 : 0;
}

/* Reads the prompts of -f: one per line; a line starting with '{' is JSON
 * (see run_line). Empty lines are skipped. Returns the count or -1. */
long kvt_run_read_lines(const char *path, run_line **out) {
    FILE *f = !strcmp(path, "-") ? stdin : fopen(path, "r");
    if (!f) {
        fprintf(stderr, "kvtier run: cannot open %s: %s\n", path, strerror(errno));
        return -1;
    }
    run_line *v = NULL;
    char *line = NULL;
    size_t cap = 0, n = 0, alloc = 0;
    ssize_t len;
    long lineno = 0;
    int bad = 0;
    while (!bad && (len = getline(&line, &cap, f)) >= 0) {
        lineno++;
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r')) line[--len] = 0;
        if (!len) continue;
        if (n == alloc) v = kvt_xrealloc(v, (alloc = alloc ? alloc * 2 : 16) * sizeof *v);
        run_line *l = &v[n];
        memset(l, 0, sizeof *l);
        l->session.keep_warm_s = -1;
        if (line[0] == '{') bad = parse_json_line(path, lineno, line, l);
        else l->prompt = kvt_xstrdup(line);
        n += !bad;
    }
    free(line);
    if (f != stdin) fclose(f);
    if (bad) {
        kvt_run_lines_free(v, n);
        return -1;
    }
    *out = v;
    return (long)n;
}

/* Runs a non-generating line (prefetch, pin, unpin, end_session) against the cache. */
void kvt_run_action(kvt_cache *cache, const run_line *l, const int32_t *toks, size_t n_tok, const char *salt,
                    run_pin **pins, size_t *n_pins, long k) {
    size_t sl = salt ? strlen(salt) : 0;
    int rc = 0;
    switch (l->action) {
    case LINE_PREFETCH:
        rc = kvt_cache_prefetch(cache, toks, (int32_t)n_tok, salt, sl);
        if (rc >= 0) fprintf(stderr, "kvtier run: [%ld] prefetch: %d of %zu tokens resident\n", k, rc, n_tok);
        break;
    case LINE_PIN: {
        kvt_pin *pin = NULL;
        rc = kvt_cache_pin(cache, toks, (int32_t)n_tok, salt, sl, &pin);
        if (rc >= 0) {
            fprintf(stderr, "kvtier run: [%ld] pin: %d of %zu tokens pinned in T0\n", k, rc, n_tok);
            *pins = kvt_xrealloc(*pins, (*n_pins + 1) * sizeof **pins);
            (*pins)[(*n_pins)++] = (run_pin){kvt_xstrdup(l->prompt), pin};
        }
        break;
    }
    case LINE_UNPIN:
        for (size_t i = 0; i < *n_pins; i++)
            if (!strcmp((*pins)[i].prompt, l->prompt)) {
                kvt_cache_release(cache, (*pins)[i].pin);
                free((*pins)[i].prompt);
                (*pins)[i] = (*pins)[--*n_pins];
                fprintf(stderr, "kvtier run: [%ld] unpinned\n", k);
                return;
            }
        fprintf(stderr, "kvtier run: [%ld] unpin: no pin for that prompt\n", k);
        return;
    case LINE_END_SESSION:
        rc = kvt_cache_end_session(cache, l->session.session_id);
        fprintf(stderr, "kvtier run: [%ld] end_session %s: %s\n", k, l->session.session_id,
                rc ? "not warm" : "released");
        return;
    case LINE_GENERATE: return;
    }
    if (rc < 0) fprintf(stderr, "kvtier run: [%ld] %s: %s\n", k, line_actions[l->action], kvt_errmsg());
}
