// SPDX-License-Identifier: MIT
/* llama-server's own routes (see server_impl.h): POST /completion (and
 * /completions) with its fields and answer, POST /apply-template, GET /slots;
 * and the /v1/completions bodies that hold several prompts or ask for echo.
 * A body with several prompts becomes one engine request per prompt, queued
 * together; the answers come back in prompt order. */
#include "http_send.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "api_infill.h"
#include "api_llama.h"
#include "api_types.h"
#include "common.h"

#define MAX_PROMPTS KVT_API_MAX_N /* prompts in one request */
#define KVT_INFILL_BATCH 2048     /* llama-server's default -b, which bounds an /infill prompt's prefix and suffix */

static const char *const INVALID = "invalid_request_error";

/* A completion body cut into one body per prompt, and what the route reads besides. */
typedef struct {
    int native;        /* /completion: llama-server's answer */
    int echo, stream;  /* /v1/completions: the prompt goes before each choice's text */
    int prefill;       /* /completion with n_predict 0: the prompts are evaluated into the cache, nothing generated */
    int return_tokens; /* /completion: the answer's "tokens" are the generated ids */
    cJSON *fields;     /* /completion's response_fields: the paths the whole answer keeps, or NULL */
    int n;
    char *bodies[MAX_PROMPTS];
    srv_req *reqs[MAX_PROMPTS];
    char *echo_text[MAX_PROMPTS];
} batch;

static void batch_free(kvt_server *s, batch *b) {
    cJSON_Delete(b->fields);
    for (int i = 0; i < b->n; i++) {
        free(b->bodies[i]);
        free(b->echo_text[i]);
        if (b->reqs[i]) kvt_srv_unref_choices(s, b->reqs[i]);
    }
}

/* Whether a "prompt" value holds several prompts: an array of strings or token arrays. An array
 * that holds a string and a number is one prompt (llama-server's mixed form), not several. */
static int several_prompts(const cJSON *p) {
    return cJSON_IsArray(p) && p->child && (cJSON_IsString(p->child) || cJSON_IsArray(p->child)) &&
        (p->child->next || cJSON_IsArray(p->child)) && !kvt_api_prompt_is_mixed(p);
}

int kvt_srv_completion_is_multi(const conn_state *cs) {
    kvt_api_body_scan sc; /* from the raw text: a body of many token ids is refused before it is parsed */
    kvt_api_scan_body(cs->body ? cs->body : "", cs->len, &sc);
    return sc.echo_true || sc.suffix_text ||
        (!sc.prompt_mixed && (sc.prompt_first == '[' || (sc.prompt_first == '"' && sc.prompt_items > 1)));
}

/* The bounds kvt_api_parse puts on one prompt, for a body of up to MAX_PROMPTS of them, checked on the
 * raw text before it is parsed. 0, or -1 with *err. */
static int check_size(const kvt_server *s, const char *body, size_t len, kvt_api_error *err) {
    kvt_api_body_scan sc;
    kvt_api_scan_body(body, len, &sc);
    size_t max_values = (size_t)MAX_PROMPTS * (size_t)s->n_ctx + KVT_API_MAX_JSON_VALUES;
    if (sc.prompt_items >= (size_t)s->n_ctx)
        return kvt_api_errorf(err, 400, INVALID, "prompt", "context_length_exceeded",
                              "This model's maximum context length is %d tokens. However, your prompt array has %zu "
                              "items; shorten it (at least one token must be left to generate).",
                              s->n_ctx, sc.prompt_items);
    if (sc.values > max_values)
        return kvt_api_errorf(err, 400, INVALID, NULL, "too_many_values",
                              "the request body holds more than %zu JSON values", max_values);
    return 0;
}

/* n_predict 0 (when neither OpenAI name for the limit is given): llama-server evaluates the prompt
 * into the cache and generates nothing, so a client can warm a prefix; the request then runs as a
 * prefill (kvtier's /v1/cache/prefill) with an empty answer. Sets *prefill. 0, or -1 with *err. */
static int native_prefill(cJSON *root, int *prefill, kvt_api_error *err) {
    const cJSON *np = cJSON_GetObjectItemCaseSensitive(root, "n_predict");
    *prefill = cJSON_IsNumber(np) && np->valuedouble == 0 && !cJSON_GetObjectItemCaseSensitive(root, "max_tokens") &&
        !cJSON_GetObjectItemCaseSensitive(root, "max_completion_tokens");
    if (!*prefill) return 0;
    const cJSON *n = cJSON_GetObjectItemCaseSensitive(root, "n");
    if (cJSON_IsNumber(n) && n->valuedouble != 1)
        return kvt_api_errorf(err, 400, INVALID, "n_predict", "unsupported_value",
                              "'n_predict' 0 evaluates the prompt without generating: it takes no 'n'");
    cJSON_DeleteItemFromObjectCaseSensitive(root, "n_predict");
    return 0;
}

/* Reads (and removes) llama-server's fields kvt_api_parse does not know: n_probs becomes logprobs,
 * id_slot is checked (kvtier places requests itself), n_predict 0 sets b->prefill, return_tokens
 * b->return_tokens. 0, or -1 with *err. */
static int native_fields(kvt_server *s, cJSON *root, batch *b, kvt_api_error *err) {
    if (native_prefill(root, &b->prefill, err)) return -1;
    cJSON *v = cJSON_DetachItemFromObjectCaseSensitive(root, "return_tokens");
    int bad = v && !cJSON_IsNull(v) && !cJSON_IsBool(v);
    b->return_tokens = cJSON_IsTrue(v);
    cJSON_Delete(v);
    if (bad)
        return kvt_api_errorf(err, 400, INVALID, "return_tokens", "invalid_type", "'return_tokens' must be a boolean");
    v = cJSON_DetachItemFromObjectCaseSensitive(root, "n_probs");
    /* the range before the cast: converting a double outside int's range is undefined */
    bad = v && !cJSON_IsNull(v) &&
        (!cJSON_IsNumber(v) || !(v->valuedouble >= 0 && v->valuedouble <= KVT_API_MAX_TOP_LOGPROBS) ||
         v->valuedouble != (int)v->valuedouble);
    if (bad)
        kvt_api_errorf(err, 400, INVALID, "n_probs", "invalid_value", "'n_probs' must be an integer in [0, %d]",
                       KVT_API_MAX_TOP_LOGPROBS);
    else if (cJSON_IsNumber(v) && v->valuedouble > 0) {
        cJSON_DeleteItemFromObjectCaseSensitive(root, "logprobs");
        cJSON_AddNumberToObject(root, "logprobs", v->valuedouble);
    }
    cJSON_Delete(v);
    if (bad) return -1;
    v = cJSON_DetachItemFromObjectCaseSensitive(root, "response_fields");
    bad = v && !cJSON_IsNull(v) && !cJSON_IsArray(v);
    for (const cJSON *e = cJSON_IsArray(v) ? v->child : NULL; e && !bad; e = e->next) bad = !cJSON_IsString(e);
    if (bad) {
        cJSON_Delete(v);
        return kvt_api_errorf(err, 400, INVALID, "response_fields", "invalid_type",
                              "'response_fields' must be an array of field paths such as \"timings/prompt_n\"");
    }
    if (cJSON_IsArray(v) && v->child) b->fields = v;
    else cJSON_Delete(v);
    v = cJSON_DetachItemFromObjectCaseSensitive(root, "id_slot");
    bad = v && !cJSON_IsNull(v) &&
        (!cJSON_IsNumber(v) || !(v->valuedouble >= -1 && v->valuedouble < s->p.parallel) ||
         v->valuedouble != (int)v->valuedouble);
    cJSON_Delete(v);
    if (bad)
        return kvt_api_errorf(err, 400, INVALID, "id_slot", "invalid_value",
                              "'id_slot' must be -1 or a slot in [0, %d) (--parallel); kvtier picks the slot itself",
                              s->p.parallel);
    return 0;
}

/* Cuts body (cs's, or the /completion body of an /infill request) into b->bodies (one per prompt). 0, or -1
 * with *err. */
static int split(kvt_server *s, const char *body, size_t len, batch *b, kvt_api_error *err) {
    if (check_size(s, body, len, err)) return -1;
    cJSON *root = cJSON_ParseWithLength(body, len);
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return kvt_api_errorf(err, 400, INVALID, NULL, "invalid_json", "the request body must be a JSON object");
    }
    int rc = kvt_api_check_types(b->native ? KVT_BODY_LLAMA_COMPLETION : KVT_BODY_COMPLETION, root, err) ? -1 : 0;
    cJSON *echo = cJSON_DetachItemFromObjectCaseSensitive(root, "echo");
    const cJSON *st = cJSON_GetObjectItemCaseSensitive(root, "stream");
    const cJSON *lp = cJSON_GetObjectItemCaseSensitive(root, "logprobs");
    b->echo = cJSON_IsTrue(echo);
    b->stream = cJSON_IsTrue(st);
    if (!rc && b->echo && (b->stream || (lp && !cJSON_IsNull(lp))))
        rc = kvt_api_errorf(err, 400, INVALID, "echo", "unsupported_value",
                            "'echo' is supported without stream and logprobs (the prompt's own logprobs are not "
                            "computed)");
    else if (!rc && b->native) rc = native_fields(s, root, b, err);
    cJSON_Delete(echo);
    cJSON *p = cJSON_GetObjectItemCaseSensitive(root, "prompt");
    if (!rc)
        rc = kvt_api_check_prompt(p, "prompt", s->n_vocab, err) ? -1 : 0; /* the item at fault named in the whole */
    int multi = several_prompts(p);
    b->n = multi ? cJSON_GetArraySize(p) : 1;
    if (!rc && b->n > MAX_PROMPTS)
        rc = kvt_api_errorf(err, 400, INVALID, "prompt", "unsupported_value", "at most %d prompts per request",
                            MAX_PROMPTS);
    if (!rc && b->n > 1 && b->stream)
        rc = kvt_api_errorf(err, 400, INVALID, "prompt", "unsupported_value",
                            "several prompts are answered whole: send them without stream, or one per request");
    cJSON *all = multi ? cJSON_DetachItemFromObjectCaseSensitive(root, "prompt") : NULL;
    for (int i = 0; !rc && i < b->n; i++) {
        if (all) cJSON_AddItemToObject(root, "prompt", cJSON_Duplicate(cJSON_GetArrayItem(all, i), 1));
        b->bodies[i] = cJSON_PrintUnformatted(root);
        if (all) cJSON_DeleteItemFromObjectCaseSensitive(root, "prompt");
    }
    cJSON_Delete(all);
    if (rc) b->n = 0;
    cJSON_Delete(root);
    return rc;
}

/* Appends n bytes of x to the NUL-terminated *out of *len bytes. */
static void append(char **out, size_t *len, const char *x, size_t n) {
    *out = kvt_xrealloc(*out, *len + n + 1);
    memcpy(*out + *len, x, n);
    *len += n;
    (*out)[*len] = 0;
}

/* The text of a's mixed prompt: its strings as given, each run of ids between them detokenized. */
static char *mixed_text(kvt_server *s, const kvt_api_request *a) {
    char *out = kvt_xstrdup("");
    size_t len = 0, n_ids = 0;
    int32_t *ids = kvt_xmalloc((size_t)cJSON_GetArraySize(a->prompt_mixed) * sizeof *ids);
    for (const cJSON *e = a->prompt_mixed->child;; e = e->next) {
        if (e && !cJSON_IsString(e)) {
            ids[n_ids++] = (int32_t)e->valuedouble;
            continue;
        }
        char *text = NULL;
        size_t n = 0;
        if (n_ids && !kvt_detokenize(s->tok, ids, n_ids, 1, &text, &n)) {
            /* SPM drops the space a text's first token carries, right only at the prompt's start */
            char piece[8];
            if (len && n && text[0] != ' ' && kvt_token_piece(s->tok, ids[0], piece, sizeof piece, 1) > 0 &&
                piece[0] == ' ')
                append(&out, &len, " ", 1);
            append(&out, &len, text, n);
        }
        free(text);
        n_ids = 0;
        if (!e) break;
        append(&out, &len, e->valuestring, strlen(e->valuestring));
    }
    free(ids);
    char *clean = kvt_utf8_sanitize(out, len, NULL);
    free(out);
    return clean;
}

/* The text of a's prompt, for echo. */
static char *prompt_text(kvt_server *s, const kvt_api_request *a) {
    if (a->prompt) return kvt_xstrdup(a->prompt);
    if (a->prompt_mixed) return mixed_text(s, a);
    char *text = NULL;
    size_t n = 0;
    if (a->n_prompt_ids && kvt_detokenize(s->tok, a->prompt_ids, a->n_prompt_ids, 1, &text, &n)) return kvt_xstrdup("");
    char *clean = kvt_utf8_sanitize(text ? text : "", n, NULL);
    free(text);
    return clean;
}

/* Queues one engine request per body. 0, or -1 with *err (*status 503: the queue is full). */
static int submit(kvt_server *s, struct MHD_Connection *c, conn_state *cs, batch *b, kvt_api_error *err) {
    for (int i = 0; i < b->n; i++) {
        kvt_api_request a;
        if (kvt_srv_parse_body(s, b->native ? R_COMPLETIONS : cs->r, b->bodies[i], strlen(b->bodies[i]), &a, err))
            return -1;
        if (b->echo) b->echo_text[i] = prompt_text(s, &a);
        kvt_srv_session_default(s, cs, &a.session);
        srv_req *r = kvt_srv_make_request(s, &a, cs->key, err);
        if (r && kvt_srv_add_choices(s, &a, cs->key, r, err)) {
            kvt_srv_unref_engine_choices(s, r);
            kvt_srv_unref_choices(s, r);
            r = NULL;
        }
        kvt_api_request_free(&a);
        if (!r) return -1;
        snprintf(r->request_id, sizeof r->request_id, "%s", cs->request_id);
        r->native = b->native;
        r->prefill_only = b->prefill;
        r->return_tokens = b->return_tokens;
        for (int32_t k = 0; k < r->n_sib; k++) {
            r->sib[k]->native = b->native;
            r->sib[k]->return_tokens = b->return_tokens;
        }
        kvt_prompt_ring_put(s->recent, r->salt, r->salt_len, r->prompt, r->n_prompt);
        if (kvt_srv_enqueue(s, r)) {
            kvt_srv_unref_engine_choices(s, r);
            kvt_srv_unref_choices(s, r);
            return kvt_api_errorf(err, 503, "server_error", NULL, "overloaded",
                                  "the server is busy (%d requests queued) or shutting down; retry later", s->p.queue);
        }
        b->reqs[i] = r;
    }
    return 0;
}

/* The first failed choice of b's requests, or NULL. */
static srv_req *failed_of(const batch *b) {
    for (int i = 0; i < b->n; i++)
        for (int32_t k = 0; k <= b->reqs[i]->n_sib; k++) {
            srv_req *x = k ? b->reqs[i]->sib[k - 1] : b->reqs[i];
            if (x->err_status) return x;
        }
    return NULL;
}

void kvt_srv_llama_answer(kvt_server *s, const srv_req *r, const char *text, int stop, const kvt_api_logprobs *probs,
                          kvt_api_llama_completion *out) {
    const kvt_api_usage *u = &r->usage;
    double total_ms = (kvt_now() - r->t_arrival) * 1e3;
    *out = (kvt_api_llama_completion){.content = text,
                                      .model = s->p.model_id,
                                      .id_slot = r->id_slot,
                                      .stop = stop,
                                      .probs = probs,
                                      .stop_type = "eos",
                                      .n_evaluated = r->n_prompt};
    /* only the last event reads what the engine thread publishes at the end (finish_reason, usage):
     * the caller saw done under the server's lock by then, so these reads do not race its writes */
    if (!stop) return;
    /* a prefill (n_predict 0) stopped at its limit of no tokens */
    if (r->finish_reason && (!strcmp(r->finish_reason, "length") || !strcmp(r->finish_reason, "prefill")))
        out->stop_type = "limit";
    else if (r->stop_word > 0 && r->stop_word <= r->n_stop) {
        out->stop_type = "word";
        out->stopping_word = r->stop[r->stop_word - 1];
    }
    if (!r->stream) { /* a stream sent its ids with its pieces */
        out->tokens = r->gen_ids;
        out->n_tokens = r->n_gen_ids;
    }
    out->n_decoded = u->completion_tokens;
    out->sp = &r->sp;
    out->n_predict = r->prefill_only ? 0 : r->max_tokens; /* a prefill ran with its n_predict of 0 */
    out->n_probs = r->logprobs ? r->top_logprobs : 0;
    out->ignore_eos = r->ignore_eos;
    out->stream = r->stream;
    out->stop_words = r->stop;
    out->n_stop_words = r->n_stop;
    out->usage = u;
    /* hidden cache counts (--hide-cached-tokens): the whole prompt shows as computed */
    out->cache_n = u->hide_report ? 0 : u->cached_tokens;
    out->prompt_n = u->prompt_tokens - out->cache_n;
    out->predicted_n = u->completion_tokens;
    out->prompt_ms = KVT_MAX(u->ttft_ms - u->queued_ms, 0.0);
    out->predicted_ms = KVT_MAX(total_ms - u->ttft_ms, 0.0);
}

char *kvt_srv_prompt_text(kvt_server *s, const srv_req *r) {
    char *text = NULL;
    size_t n = 0;
    if (kvt_detokenize(s->tok, r->prompt, (size_t)r->n_prompt, 1, &text, &n)) {
        free(text);
        return kvt_xstrdup("");
    }
    char *clean = kvt_utf8_sanitize(text ? text : "", n, NULL);
    free(text);
    return clean;
}

/* /completion's answer: one object per prompt (an array when there are several). */
/* llama-server's response_fields: an object of the paths ("timings/prompt_n") answer holds, each under its
 * path as a key. Takes answer. */
static cJSON *only_fields(cJSON *answer, const cJSON *fields) {
    cJSON *out = cJSON_CreateObject();
    for (const cJSON *f = fields->child; f; f = f->next) {
        const cJSON *at = answer;
        for (const char *k = f->valuestring; at && *k;) {
            size_t len = strcspn(k, "/");
            const cJSON *next = NULL;
            for (const cJSON *c = cJSON_IsObject(at) ? at->child : NULL; c && !next; c = c->next)
                if (strlen(c->string) == len && !memcmp(c->string, k, len)) next = c;
            at = next;
            k += len + (k[len] == '/');
        }
        if (at && !cJSON_GetObjectItemCaseSensitive(out, f->valuestring))
            cJSON_AddItemToObject(out, f->valuestring, cJSON_Duplicate(at, 1));
    }
    cJSON_Delete(answer);
    return out;
}

static char *native_json(kvt_server *s, const batch *b) {
    cJSON *arr = cJSON_CreateArray();
    for (int i = 0; i < b->n; i++) {
        const srv_req *r = b->reqs[i];
        kvt_api_logprobs lp = {.items = r->lp, .n = r->n_lp, .tok = s->tok};
        kvt_api_llama_completion a;
        kvt_srv_llama_answer(s, r, r->text ? r->text : "", 1, r->logprobs ? &lp : NULL, &a);
        a.index = i;
        char *prompt = kvt_srv_prompt_text(s, r); /* the client's own prompt, as llama-server gives it back */
        a.prompt = prompt;
        cJSON *obj = kvt_api_llama_completion_obj(&a);
        cJSON_AddItemToArray(arr, b->fields ? only_fields(obj, b->fields) : obj);
        free(prompt);
    }
    cJSON *out = b->n == 1 ? cJSON_DetachItemFromArray(arr, 0) : arr;
    if (out != arr) cJSON_Delete(arr);
    char *json = cJSON_PrintUnformatted(out);
    cJSON_Delete(out);
    return json;
}

/* Adds the numbers of usage object from into to (prompt, completion and total tokens, cached tokens). */
static void add_usage(cJSON *to, const cJSON *from) {
    static const char *const keys[] = {"prompt_tokens", "completion_tokens", "total_tokens"};
    for (size_t k = 0; k < KVT_ARRAY_LEN(keys); k++) {
        cJSON *t = cJSON_GetObjectItemCaseSensitive(to, keys[k]);
        const cJSON *f = cJSON_GetObjectItemCaseSensitive(from, keys[k]);
        if (cJSON_IsNumber(t) && cJSON_IsNumber(f)) cJSON_SetNumberValue(t, t->valuedouble + f->valuedouble);
    }
    cJSON *td = cJSON_GetObjectItemCaseSensitive(to, "prompt_tokens_details");
    const cJSON *fd = cJSON_GetObjectItemCaseSensitive(from, "prompt_tokens_details");
    cJSON *t = cJSON_GetObjectItemCaseSensitive(td, "cached_tokens");
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(fd, "cached_tokens");
    if (cJSON_IsNumber(t) && cJSON_IsNumber(f)) cJSON_SetNumberValue(t, t->valuedouble + f->valuedouble);
}

/* /v1/completions with several prompts or echo: one response whose choices are each prompt's, in
 * order (index = prompt * n + choice), usage summed; the "kvtier" report is the first prompt's. */
static char *openai_json(kvt_server *s, const batch *b) {
    cJSON *out = NULL, *choices = NULL;
    int index = 0;
    for (int i = 0; i < b->n; i++) {
        char *one = kvt_srv_response_json(s, b->reqs[i], NULL);
        cJSON *o = cJSON_Parse(one);
        free(one);
        cJSON *ch;
        cJSON_ArrayForEach(ch, cJSON_GetObjectItemCaseSensitive(o, "choices")) {
            cJSON_SetNumberValue(cJSON_GetObjectItemCaseSensitive(ch, "index"), index++);
            cJSON *text = cJSON_GetObjectItemCaseSensitive(ch, "text");
            if (b->echo && cJSON_IsString(text)) {
                size_t n = strlen(b->echo_text[i]) + strlen(text->valuestring) + 1;
                char *joined = kvt_xmalloc(n);
                snprintf(joined, n, "%s%s", b->echo_text[i], text->valuestring);
                cJSON_SetValuestring(text, joined);
                free(joined);
            }
        }
        if (!out) {
            out = o;
            choices = cJSON_GetObjectItemCaseSensitive(out, "choices");
            continue;
        }
        cJSON *c;
        while ((c = cJSON_DetachItemFromArray(cJSON_GetObjectItemCaseSensitive(o, "choices"), 0)))
            cJSON_AddItemToArray(choices, c);
        add_usage(cJSON_GetObjectItemCaseSensitive(out, "usage"), cJSON_GetObjectItemCaseSensitive(o, "usage"));
        cJSON_Delete(o);
    }
    char *json = cJSON_PrintUnformatted(out);
    cJSON_Delete(out);
    return json;
}

/* POST /completion and the /v1/completions bodies kvt_srv_completion_is_multi picks. */
/* A /v1/completions request's prompt and suffix as the fields of an /infill body, in *parts: the prompt
 * must be one string. 0, or -1 with *err. */
static int suffix_parts(const cJSON *root, cJSON **parts, kvt_api_error *err) {
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(root, "prompt"),
                *x = cJSON_GetObjectItemCaseSensitive(root, "suffix");
    if (!cJSON_IsString(p))
        return kvt_api_errorf(err, 400, INVALID, "suffix", "unsupported_value",
                              "'suffix' fills in the middle after one prompt given as a string");
    if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(root, "echo")))
        return kvt_api_errorf(err, 400, INVALID, "echo", "unsupported_value", "'echo' is not supported with 'suffix'");
    *parts = cJSON_CreateObject();
    cJSON_AddStringToObject(*parts, "input_prefix", p->valuestring);
    cJSON_AddStringToObject(*parts, "input_suffix", x->valuestring);
    return 0;
}

/* An /infill body, or a /v1/completions body with a suffix, as the completion body it runs as: its
 * "prompt" the FIM prompt's ids, without the fields that made it (malloc'd, in *out). /v1/completions
 * takes its prompt and suffix whole, with no extra context. 0, or -1 with *err. */
static int infill_body(kvt_server *s, const conn_state *cs, char **out, kvt_api_error *err) {
    *out = NULL;
    cJSON *root = cJSON_ParseWithLength(cs->body ? cs->body : "", cs->len), *parts = NULL;
    int rc = 0, openai = cs->r == R_COMPLETIONS;
    if (!cJSON_IsObject(root))
        rc = kvt_api_errorf(err, 400, INVALID, NULL, "invalid_json", "the request body must be a JSON object");
    if (!rc) rc = kvt_api_check_types(openai ? KVT_BODY_COMPLETION : KVT_BODY_INFILL, root, err) ? -1 : 0;
    if (!rc && openai) rc = suffix_parts(root, &parts, err);
    int32_t *ids = NULL;
    size_t n = 0;
    kvt_api_infill_shape sh = {.n_ctx = s->n_ctx,
                               .n_batch = openai ? 0 : KVT_INFILL_BATCH,
                               .n_predict = s->p.default_max_tokens > 0 ? s->p.default_max_tokens : -1,
                               .spm = s->p.spm_infill};
    if (!rc) rc = kvt_api_infill_ids(s->tok, parts ? parts : root, &sh, &ids, &n, err) ? -1 : 0;
    cJSON_Delete(parts);
    if (!rc) {
        cJSON_DeleteItemFromObjectCaseSensitive(root, "input_prefix");
        cJSON_DeleteItemFromObjectCaseSensitive(root, "input_suffix");
        cJSON_DeleteItemFromObjectCaseSensitive(root, "input_extra");
        cJSON_DeleteItemFromObjectCaseSensitive(root, "suffix");
        cJSON_DeleteItemFromObjectCaseSensitive(root, "prompt");
        cJSON *arr = cJSON_AddArrayToObject(root, "prompt");
        for (size_t i = 0; i < n; i++) cJSON_AddItemToArray(arr, cJSON_CreateNumber(ids[i]));
        *out = cJSON_PrintUnformatted(root);
    }
    free(ids);
    cJSON_Delete(root);
    return rc;
}

static enum MHD_Result handle_completion(kvt_server *s, struct MHD_Connection *c, conn_state *cs) {
    batch b = {.native = cs->r == R_LLAMA_COMPLETION || cs->r == R_INFILL};
    kvt_api_error err;
    char *infill = NULL;
    kvt_api_body_scan sc = {0}; /* /v1/completions with a suffix fills in the middle: the only route scanned here */
    if (cs->r == R_COMPLETIONS) kvt_api_scan_body(cs->body ? cs->body : "", cs->len, &sc);
    int rc = cs->r == R_INFILL || sc.suffix_text ? infill_body(s, cs, &infill, &err) : 0;
    const char *body = infill ? infill : cs->body ? cs->body : "";
    rc = rc || split(s, body, infill ? strlen(infill) : cs->len, &b, &err) || submit(s, c, cs, &b, &err);
    free(infill);
    if (rc) {
        for (int i = 0; i < b.n; i++)
            if (b.reqs[i]) kvt_srv_cancel(s, b.reqs[i]);
        batch_free(s, &b);
        return kvt_srv_send_error(s, c, cs->label, &err, err.status == 503 ? MHD_HTTP_HEADER_RETRY_AFTER : NULL,
                                  RETRY_AFTER_S);
    }
    if (b.stream) { /* one prompt (split refuses several): the stream takes over its references */
        srv_req *r = b.reqs[0];
        b.reqs[0] = NULL;
        batch_free(s, &b);
        struct MHD_Response *resp = kvt_srv_stream_response(s, r, c, &cs->usage, &cs->has_usage, NULL);
        if (!resp) return MHD_NO;
        return kvt_srv_send_response(s, c, cs->label, MHD_HTTP_OK, resp);
    }
    if (kvt_srv_wait_done(s, c, b.reqs, b.n, b.reqs, b.n)) { /* every prompt is queued: none is NULL */
        batch_free(s, &b);
        cs->status = STATUS_CLIENT_GONE;
        kvt_metrics_count_request(s->metrics, cs->label, STATUS_CLIENT_GONE);
        return MHD_NO;
    }
    cs->usage = kvt_srv_total_usage(b.reqs[0]);
    for (int i = 1; i < b.n; i++) {
        kvt_api_usage u = kvt_srv_total_usage(b.reqs[i]);
        cs->usage.prompt_tokens += u.prompt_tokens;
        cs->usage.completion_tokens += u.completion_tokens;
        cs->usage.cached_tokens += u.cached_tokens;
        cs->usage.computed_tokens += u.computed_tokens;
    }
    cs->has_usage = 1;
    enum MHD_Result ret;
    srv_req *failed = failed_of(&b);
    if (failed) {
        kvt_api_errorf(&err, failed->err_status, failed->err_status >= 500 ? "server_error" : INVALID, NULL, NULL, "%s",
                       failed->err_msg);
        ret = kvt_srv_send_error(s, c, cs->label, &err, failed->err_status == 503 ? MHD_HTTP_HEADER_RETRY_AFTER : NULL,
                                 RETRY_AFTER_S);
    } else {
        char *json = b.native ? native_json(s, &b) : openai_json(s, &b);
        ret = kvt_srv_send_text(s, c, cs->label, MHD_HTTP_OK, "application/json", json, NULL, NULL);
    }
    batch_free(s, &b);
    return ret;
}

/* POST /apply-template {"messages": [...]}: {"prompt": TEXT, "tokens": [IDS]}, the prompt a chat
 * request with these messages (and tools) gets, as text with its control tokens and as token ids. */
static enum MHD_Result handle_apply_template(kvt_server *s, struct MHD_Connection *c, conn_state *cs) {
    kvt_api_request a;
    kvt_api_error err;
    if (kvt_srv_parse(s, cs, &a, &err)) return kvt_srv_send_error(s, c, cs->label, &err, NULL, NULL);
    srv_req *r = kvt_srv_make_request(s, &a, cs->key, &err);
    kvt_api_request_free(&a);
    if (!r) return kvt_srv_send_error(s, c, cs->label, &err, NULL, NULL);
    char *text = NULL;
    size_t n = 0;
    int rc = kvt_detokenize(s->tok, r->prompt, (size_t)r->n_prompt, 1, &text, &n);
    /* the ids too: with replies spliced as generated, the text alone does not give them back */
    cJSON *o = cJSON_CreateObject(), *ids = cJSON_CreateArray();
    for (int32_t i = 0; i < r->n_prompt; i++) cJSON_AddItemToArray(ids, cJSON_CreateNumber(r->prompt[i]));
    kvt_srv_req_unref(s, r);
    if (rc) {
        free(text);
        cJSON_Delete(o);
        cJSON_Delete(ids);
        kvt_api_errorf(&err, 500, "server_error", NULL, NULL, "cannot render the prompt: %s", kvt_errmsg());
        return kvt_srv_send_error(s, c, cs->label, &err, NULL, NULL);
    }
    char *clean = kvt_utf8_sanitize(text ? text : "", n, NULL);
    free(text);
    cJSON_AddStringToObject(o, "prompt", clean);
    cJSON_AddItemToObject(o, "tokens", ids);
    free(clean);
    char *json = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return kvt_srv_send_text(s, c, cs->label, MHD_HTTP_OK, "application/json", json, NULL, NULL);
}

/* Slot i of GET /slots, running r (NULL: idle) with decoded tokens so far. An idle slot has params
 * and next_token too, as llama-server's, so a dashboard reads every slot alike: the server's defaults,
 * and nothing decoded. The prompt text and request id are other tenants': the admin key's only. */
static cJSON *slot_obj(kvt_server *s, int32_t i, const srv_req *r, int32_t decoded, int admin) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "id", i);
    cJSON_AddNumberToObject(o, "n_ctx", s->n_ctx);
    cJSON_AddBoolToObject(o, "speculative", 0);
    cJSON_AddBoolToObject(o, "is_processing", r != NULL);
    cJSON_AddBoolToObject(o, "non_causal", 0);
    cJSON_AddNumberToObject(o, "n_prompt_tokens", r ? r->n_prompt : 0);
    cJSON *p = cJSON_AddObjectToObject(o, "params");
    int32_t n_predict = s->p.default_max_tokens ? s->p.default_max_tokens : -1;
    cJSON_AddNumberToObject(p, "n_predict", r ? r->max_tokens : n_predict);
    cJSON_AddNumberToObject(p, "temperature", r ? r->sp.temp : s->p.default_temperature);
    cJSON_AddNumberToObject(p, "top_k", r ? r->sp.top_k : s->p.default_top_k);
    cJSON_AddNumberToObject(p, "top_p", r ? r->sp.top_p : s->p.default_top_p);
    cJSON *nt = cJSON_AddObjectToObject(o, "next_token");
    cJSON_AddBoolToObject(nt, "has_next_token", r != NULL);
    cJSON_AddBoolToObject(nt, "has_new_line", 0);
    cJSON_AddStringToObject(nt, "stopping_word", "");
    cJSON_AddNumberToObject(nt, "n_remain", r ? r->max_tokens - decoded : -1);
    cJSON_AddNumberToObject(nt, "n_decoded", r ? decoded : 0);
    if (!r || !admin) {
        cJSON_AddStringToObject(o, "prompt", "");
        return o;
    }
    char *text = kvt_srv_prompt_text(s, r);
    cJSON_AddStringToObject(o, "prompt", text);
    free(text);
    cJSON_AddStringToObject(o, "id_task", kvt_srv_log_id(r));
    return o;
}

/* GET /slots: each of the --parallel sequence slots, busy or not (slot_obj). */
static enum MHD_Result handle_slots(kvt_server *s, struct MHD_Connection *c, conn_state *cs) {
    int32_t np = s->p.parallel;
    srv_req **held = kvt_xcalloc((size_t)np, sizeof *held);
    int32_t *decoded = kvt_xcalloc((size_t)np, sizeof *decoded);
    pthread_mutex_lock(&s->mu);
    for (int32_t i = 0; i < np; i++)
        if ((held[i] = s->slot_reqs[i])) {
            held[i]->refs++;
            decoded[i] = held[i]->n_decoded;
        }
    pthread_mutex_unlock(&s->mu);
    cJSON *arr = cJSON_CreateArray();
    for (int32_t i = 0; i < np; i++) cJSON_AddItemToArray(arr, slot_obj(s, i, held[i], decoded[i], cs->admin));
    for (int32_t i = 0; i < np; i++)
        if (held[i]) kvt_srv_req_unref(s, held[i]);
    free(held);
    free(decoded);
    char *json = cJSON_PrintUnformatted(arr);
    cJSON_Delete(arr);
    return kvt_srv_send_text(s, c, cs->label, MHD_HTTP_OK, "application/json", json, NULL, NULL);
}

enum MHD_Result kvt_srv_handle_llama(kvt_server *s, struct MHD_Connection *c, conn_state *cs) {
    if (cs->r == R_APPLY_TEMPLATE) return handle_apply_template(s, c, cs);
    if (cs->r == R_SLOTS) return handle_slots(s, c, cs);
    return handle_completion(s, c, cs);
}
