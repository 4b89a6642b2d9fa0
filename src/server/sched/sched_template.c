// SPDX-License-Identifier: MIT
/* A chat request's prompt by the model's own Jinja chat template (--jinja,
 * --chat-template-file): the variables the template sees (messages with
 * their tool calls, tools, add_generation_prompt, bos_token, eos_token and
 * the request's chat_template_kwargs), the rendering, and its tokens: the
 * template's markup with control tokens read, the text that came from the
 * request (contents, tool calls and results, names, tools, kwargs) as plain
 * text, as the built-in renderings tokenize it. Also
 * which chat_template_kwargs a server without a Jinja template can honour:
 * enable_thinking on the Qwen3 family, nothing else. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>
#include <xxhash.h>

#include "common.h"
#include "jinja.h"
#include "server_impl.h"

#define NO_THINK "<think>\n\n</think>\n\n" /* Qwen3's empty thought: what enable_thinking false renders */

/* A special token's text ("<s>"), or "" when the vocabulary has none. */
static void add_token_text(cJSON *o, const char *name, const kvt_tokenizer *t, int32_t id) {
    size_t len = 0;
    const char *p = id >= 0 ? kvt_tokenizer_token_text(t, id, &len) : NULL;
    char *s = kvt_xstrndup(p ? p : "", p ? len : 0);
    cJSON_AddStringToObject(o, name, s);
    free(s);
}

/* The tool calls of an assistant message as the template gets them: OpenAI's
 * shape, the arguments an object when object_args and they parse as one. */
static cJSON *tool_calls(const cJSON *calls, int object_args) {
    cJSON *out = cJSON_Duplicate(calls, 1);
    cJSON *c;
    cJSON_ArrayForEach(c, out) {
        cJSON *fn = cJSON_GetObjectItemCaseSensitive(c, "function");
        cJSON *args = fn ? cJSON_GetObjectItemCaseSensitive(fn, "arguments") : NULL;
        if (!object_args || !cJSON_IsString(args)) continue;
        cJSON *obj = cJSON_Parse(args->valuestring);
        if (obj) cJSON_ReplaceItemInObjectCaseSensitive(fn, "arguments", obj);
    }
    return out;
}

/* The template's variables for request a's first n_msgs messages, followed by
 * the generation prompt: a new object the caller deletes. An assistant
 * message i with calls[i] (calls may be NULL) has that text as its content
 * and no tool calls: the reply with calls this server generated. */
static cJSON *template_vars(const kvt_server *s, const kvt_api_request *a, size_t n_msgs, char *const *calls) {
    /* the server's --chat-template-kwargs, the request's over them */
    cJSON *v = s->p.template_kwargs ? cJSON_Duplicate(s->p.template_kwargs, 1) : cJSON_CreateObject();
    const cJSON *k;
    cJSON_ArrayForEach(k, a->template_kwargs) {
        cJSON_DeleteItemFromObjectCaseSensitive(v, k->string);
        cJSON_AddItemToObject(v, k->string, cJSON_Duplicate(k, 1));
    }
    static const char *const ours[] = {"messages", "tools", "add_generation_prompt", "bos_token", "eos_token"};
    for (size_t i = 0; i < KVT_ARRAY_LEN(ours); i++) cJSON_DeleteItemFromObjectCaseSensitive(v, ours[i]);
    cJSON *msgs = cJSON_AddArrayToObject(v, "messages");
    for (size_t i = 0; i < n_msgs; i++) {
        cJSON *m = cJSON_CreateObject();
        cJSON_AddStringToObject(m, "role", a->msgs[i].role);
        const char *c = calls && calls[i] ? calls[i] : a->msgs[i].content;
        cJSON_AddStringToObject(m, "content", c ? c : "");
        const kvt_api_msg_tools *mt = a->msg_tools ? &a->msg_tools[i] : NULL;
        if (mt && mt->name) cJSON_AddStringToObject(m, "name", mt->name); /* as llama-server's --jinja passes it */
        if (mt && mt->tool_calls && !(calls && calls[i]))
            cJSON_AddItemToObject(m, "tool_calls", tool_calls(mt->tool_calls, s->p.jinja_object_args));
        if (mt && mt->tool_call_id) cJSON_AddStringToObject(m, "tool_call_id", mt->tool_call_id);
        if (mt && mt->reasoning) cJSON_AddStringToObject(m, "reasoning_content", mt->reasoning);
        cJSON_AddItemToArray(msgs, m);
    }
    if (a->tools) cJSON_AddItemToObject(v, "tools", cJSON_Duplicate(a->tools, 1));
    cJSON_AddBoolToObject(v, "add_generation_prompt", 1);
    add_token_text(v, "bos_token", s->tok, kvt_tokenizer_bos(s->tok));
    add_token_text(v, "eos_token", s->tok, kvt_tokenizer_eos(s->tok));
    return v;
}

/* Whether text ends with "<think>" and whitespace: the template opened the reply's reasoning. */
static int ends_in_think(const char *text, size_t n) {
    while (n && strchr(" \t\r\n", text[n - 1])) n--;
    return n >= 7 && !memcmp(text + n - 7, "<think>", 7);
}

/* The template's rendering of a's first n_msgs messages (calls: as
 * template_vars) into a malloc'd *text of *len bytes. 0, or an error code
 * with kvt_errmsg(). */
static int render(const kvt_server *s, const kvt_api_request *a, size_t n_msgs, char *const *calls, char **text,
                  size_t *len) {
    cJSON *vars = template_vars(s, a, n_msgs, calls);
    int rc = kvt_jinja_render(s->p.jinja, vars, NULL, text, len);
    cJSON_Delete(vars);
    return rc;
}

/* The reply this server generated for assistant message i of a, whose text
 * is c (its content, or the text of its tool calls), by that text
 * or, as a client that splits reasoning sends it back, by its content and
 * reasoning_content (none sent: an empty one): its full generated text into
 * *full and ids into *ids (malloc'd), their count; 0 when unknown, and then
 * *dropped tells whether the content is the answer of a reply that had
 * reasoning (the client or the template left that reasoning out). */
static size_t find_reply(kvt_server *s, const kvt_api_request *a, size_t i, const char *c, const srv_req *r,
                         char **full, int32_t **ids, int *dropped) {
    const char *rs = a->msg_tools && a->msg_tools[i].reasoning ? a->msg_tools[i].reasoning : "";
    kvt_reply_owner o = {r->salt, r->salt_len, r->session.session_id};
    size_t k = *c ? kvt_reply_map_get_by(s->replies, &o, c, ids) : 0;
    *full = k ? kvt_xstrdup(c) : NULL;
    *dropped = 0;
    if (!k) k = kvt_reply_map_get_split_by(s->replies, &o, rs, c, full, ids);
    if (!k && *c) { /* any reasoning with this answer: only to say why the turn is not reused */
        char *t = NULL;
        int32_t *x = NULL;
        *dropped = kvt_reply_map_get_split_by(s->replies, &o, NULL, c, &t, &x) > 0;
        free(t);
        free(x);
    }
    return k;
}

/* Whether text[0..len) holds str at pos. */
static int holds(const char *text, size_t len, size_t pos, const char *str) {
    size_t l = strlen(str);
    return pos <= len && l <= len - pos && !memcmp(text + pos, str, l);
}

/* The answer of a reply's text: after its last "</think>", leading whitespace
 * skipped, as templates that drop reasoning keep it (the whole text when it
 * has no reasoning). */
static const char *answer_of(const char *text) {
    const char *a = text, *p = text;
    while ((p = strstr(p, "</think>"))) a = p += strlen("</think>");
    if (a != text)
        while (strchr(" \t\r\n", *a) && *a) a++;
    return a;
}

/* The replies of a that this server generated, where the full rendering
 * text[0..len) has exactly their generated text (at pos or later) right after
 * the rendering of the messages before them (that turn's prompt): into spans
 * (the caller frees each ids), *n_spans of them. A reply spliced so continues
 * the sequence its turn left in the cache token for token; nothing else is
 * ever spliced, so the prompt's ids always spell the text rendered. The first
 * assistant turn that cannot be spliced goes to r->usage's report: "rewritten"
 * (the template renders the reply this server generated otherwise),
 * "reasoning_dropped" (the reply had reasoning, and the rendering holds its
 * answer without it: the template drops earlier turns' reasoning, or the
 * client did not send reasoning_content back), "tool_calls" (its calls are
 * rendered from their structure) or "unknown_reply" (not a reply this server
 * remembers for this tenant). A turn whose calls[i] (the tool calls this
 * server generated, rendered as their generated text) cannot be spliced gets
 * drop[i] set, and the count of those is returned: the caller renders it
 * from its structure instead. Messages before from are not looked at (a
 * stored history's ids stand for them). */
static size_t plan_splices(kvt_server *s, const kvt_api_request *a, char *const *calls, unsigned char *drop, srv_req *r,
                           const char *text, size_t len, size_t pos, size_t from, kvt_chat_splice *spans,
                           size_t *n_spans) {
    *n_spans = 0;
    r->usage.rerendered_why = NULL;
    size_t dropped_calls = 0;
    for (size_t i = from; i < a->n_msgs; i++) {
        if (strcmp(a->msgs[i].role, "assistant")) continue;
        const char *why = NULL;
        size_t k = 0, pl = 0, cl = 0;
        int32_t *ids = NULL;
        char *p = NULL, *full = NULL;
        int dropped = 0;
        const char *c = calls[i] ? calls[i] : a->msgs[i].content ? a->msgs[i].content : "";
        if (a->msg_tools && a->msg_tools[i].tool_calls && !calls[i]) why = "tool_calls";
        else if (!(k = find_reply(s, a, i, c, r, &full, &ids, &dropped)))
            why = dropped ? "reasoning_dropped" : "unknown_reply";
        else if (render(s, a, i, calls, &p, &pl) || pl < pos || pl > len || memcmp(text, p, pl)) why = "rewritten";
        else if (!holds(text, len, pl, full))
            why = holds(text, len, pl, answer_of(full)) ? "reasoning_dropped" : "rewritten";
        cl = strlen(full ? full : "");
        free(p);
        free(full);
        if (why) {
            free(ids);
            dropped_calls += calls[i] != NULL;
            if (calls[i]) drop[i] = 1;
            if (!r->usage.rerendered_why) {
                r->usage.rerendered_why = why;
                r->usage.rerendered_msg = (int32_t)i;
            }
            continue;
        }
        spans[(*n_spans)++] = (kvt_chat_splice){.at = pl, .len = cl, .ids = ids, .n = k};
        pos = pl + cl;
    }
    return dropped_calls;
}

/* Where the content of message `last` (the last user message) starts in the rendering
 * text[0..len) when no search finds it (an empty content, or one the template rewrites, such as a
 * trim): the request rendered again with a marker as that content, the marker's place, provided
 * that rendering's text before it is text's byte for byte. SIZE_MAX otherwise. */
static size_t user_place(const kvt_server *s, const kvt_api_request *a, size_t last, char *const *calls,
                         const char *text, size_t len) {
    static const char marker[] = "kvtier-documents-go-here-5f0c1e";
    const size_t ml = sizeof marker - 1;
    size_t at = SIZE_MAX, pl = 0;
    kvt_chat_msg *msgs = kvt_xmalloc(a->n_msgs * sizeof *msgs);
    memcpy(msgs, a->msgs, a->n_msgs * sizeof *msgs);
    msgs[last].content = marker;
    kvt_api_request probe = *a;
    probe.msgs = msgs;
    char *p = NULL;
    if (!render(s, &probe, a->n_msgs, calls, &p, &pl)) {
        const char *m = memmem(p, pl, marker, ml);
        size_t k = m ? (size_t)(m - p) : SIZE_MAX;
        if (m && k <= len && !memcmp(p, text, k)) at = k;
    }
    free(p);
    free(msgs);
    return at;
}

/* Where kvtier.documents go in the rendering text[from..len): before the last
 * user message's content, found as the last place the rendering holds that
 * text as sent (else by user_place). A place-marking span (no
 * text, no ids) is put there among spans[0..*n) in order. 0, or -1 with *err
 * filled. */
static int docs_place(const kvt_server *s, const kvt_api_request *a, char *const *calls, const char *text, size_t from,
                      size_t len, kvt_chat_splice *spans, size_t *n, kvt_api_error *err) {
    size_t last = SIZE_MAX;
    for (size_t i = 0; i < a->n_msgs; i++)
        if (!strcmp(a->msgs[i].role, "user")) last = i;
    const char *c = last != SIZE_MAX ? a->msgs[last].content : NULL;
    size_t cl = c ? strlen(c) : 0, at = SIZE_MAX;
    for (size_t p = len; cl && p >= from + cl && at == SIZE_MAX; p--)
        if (!memcmp(text + p - cl, c, cl)) at = p - cl;
    if (at == SIZE_MAX && last != SIZE_MAX) at = user_place(s, a, last, calls, text, len);
    if (at != SIZE_MAX && at < from) at = SIZE_MAX;
    size_t k = 0;
    while (at != SIZE_MAX && k < *n && spans[k].at < at) k++;
    if (at == SIZE_MAX || (k && spans[k - 1].at + spans[k - 1].len > at)) {
        kvt_api_errorf(err, 400, "invalid_request_error", "kvtier.documents", "unsupported_parameter",
                       "kvtier.documents go before the last user message's text, and the model's chat template "
                       "(--jinja) does not render that text as sent (or there is no user message)");
        return -1;
    }
    memmove(spans + k + 1, spans + k, (*n - k) * sizeof *spans);
    spans[k] = (kvt_chat_splice){.at = at};
    (*n)++;
    return 0;
}

/* The assistant turns of a with tool calls that are a reply this server
 * generated: calls[i] the reply's text (kvt_api_calls_turn), written in
 * place of the template's rendering of those calls so that the reply's
 * exact ids splice in, as the built-in rendering does; NULL for the rest. */
static char **generated_calls(kvt_server *s, const kvt_api_request *a, const srv_req *r) {
    char **calls = kvt_xcalloc(a->n_msgs + 1, sizeof *calls);
    for (size_t i = 0; i < a->n_msgs && !s->p.retokenize_replies && a->msg_tools; i++) {
        if (strcmp(a->msgs[i].role, "assistant") || !a->msg_tools[i].tool_calls) continue;
        char *t = kvt_api_calls_turn(a, i, s->p.chat, s->calls, r->salt, r->salt_len), *full = NULL;
        int32_t *ids = NULL;
        int dropped = 0;
        if (find_reply(s, a, i, t, r, &full, &ids, &dropped)) calls[i] = t;
        else free(t);
        free(full);
        free(ids);
    }
    return calls;
}

/* A request's rendering: its text, which bytes of it are the request's own
 * text, the BOS text the tokenizer's own BOS replaces and the splices. */
typedef struct {
    char *text;
    unsigned char *plain;
    size_t len, skip;
    kvt_chat_splice *spans; /* room for n_msgs + 2 */
    size_t n_spans;
} rendering;

static void rendering_clear(rendering *g) {
    for (size_t i = 0; i < g->n_spans; i++) free((int32_t *)g->spans[i].ids);
    free(g->text);
    free(g->plain);
    g->text = NULL;
    g->plain = NULL;
    g->n_spans = 0;
}

/* Renders a (calls: as template_vars) into g, with the BOS text to skip. 0, or 1 with *err filled (the
 * template failed). */
static int render_text(kvt_server *s, const kvt_api_request *a, char **calls, rendering *g, kvt_api_error *err) {
    static const char *const trusted[] = {"bos_token", "eos_token", NULL};
    cJSON *vars = template_vars(s, a, a->n_msgs, calls);
    int failed = kvt_jinja_render_marked(s->p.jinja, vars, trusted, NULL, &g->text, &g->len, &g->plain);
    cJSON_Delete(vars);
    if (failed) {
        kvt_api_errorf(err, 400, "invalid_request_error", "messages", "chat_template_error",
                       "the model's chat template cannot render these messages: %s", kvt_errmsg());
        return 1;
    }
    /* the template writes BOS as text; where the tokenizer adds one itself, that text goes */
    size_t bl = 0;
    int32_t bos = kvt_tokenizer_bos(s->tok);
    const char *bt = bos >= 0 ? kvt_tokenizer_token_text(s->tok, bos, &bl) : NULL;
    int add = kvt_tokenizer_add_special(s->tok);
    g->skip = add && bt && bl && g->len >= bl && !memcmp(g->text, bt, bl) ? bl : 0;
    return 0;
}

/* Renders a (calls: as template_vars) into g and plans the splices of the
 * replies. 0; 1 with *err filled (the template failed); 2: a turn of calls
 * cannot be spliced and was taken out of calls (render again). */
static int render_planned(kvt_server *s, const kvt_api_request *a, char **calls, srv_req *r, rendering *g,
                          kvt_api_error *err) {
    if (render_text(s, a, calls, g, err)) return 1;
    if (s->p.retokenize_replies) return 0;
    unsigned char *drop = kvt_xcalloc(a->n_msgs + 1, 1);
    size_t n_drop = plan_splices(s, a, calls, drop, r, g->text, g->len, g->skip, 0, g->spans, &g->n_spans);
    for (size_t i = 0; i < a->n_msgs && n_drop; i++) {
        if (!drop[i]) continue;
        free(calls[i]);
        calls[i] = NULL;
    }
    free(drop);
    if (!n_drop) return 0;
    rendering_clear(g);
    return 2;
}

/* The hash of the template's variables for a besides the messages (tools, chat_template_kwargs, BOS
 * and EOS): with the same messages, the same rendering. */
static void vars_hash(const kvt_server *s, const kvt_api_request *a, uint64_t out[2]) {
    cJSON *v = template_vars(s, a, 0, NULL);
    char *p = cJSON_PrintUnformatted(v);
    XXH128_hash_t h = XXH3_128bits(p, strlen(p));
    free(p);
    cJSON_Delete(v);
    out[0] = h.low64;
    out[1] = h.high64;
}

/* A follow-up of the stored response h (a->history) rendered into g: the whole conversation is
 * rendered (a template may write earlier turns otherwise once a later one comes, as Qwen3's drops
 * their reasoning), and h's ids stand for its beginning only where that rendering begins with h's
 * text (its prompt's rendering and reply) byte for byte, under the same template variables besides
 * the messages; the replies after it are planned as usual. The full path splits the tokenization at
 * the end of h's reply too (a spliced reply), so the rest tokenizes to the same ids. 0; 1 with *err
 * filled (the template failed); -1: h's ids do not fit (r->usage.history_rerendered says why, g is
 * clear). */
static int render_after(kvt_server *s, const kvt_api_request *a, char **calls, const kvt_resp_prefix *h, srv_req *r,
                        rendering *g, kvt_api_error *err) {
    const char *why = NULL;
    uint64_t hash[2];
    if (h->jinja < 0) why = "not_kept";
    else if (!h->jinja) why = "renderer";
    else if (a->n_docs) why = "documents";
    else if (h->n_msgs >= a->n_msgs || strcmp(a->msgs[h->n_msgs].role, "assistant")) why = "messages";
    else {
        vars_hash(s, a, hash);
        if (hash[0] != h->hash[0] || hash[1] != h->hash[1]) why = "messages";
    }
    if (why) {
        r->usage.history_rerendered = why;
        return -1;
    }
    if (render_text(s, a, calls, g, err)) return 1;
    unsigned char *drop = kvt_xcalloc(a->n_msgs + 1, 1);
    int fits = g->len >= h->text_len && h->text_len >= g->skip && !memcmp(g->text, h->text, h->text_len);
    if (fits &&
        plan_splices(s, a, calls, drop, r, g->text, g->len, h->text_len, (size_t)h->n_msgs + 1, g->spans, &g->n_spans))
        fits = 0; /* a later turn of calls that cannot be spliced: the full path renders it otherwise */
    free(drop);
    if (!fits) {
        r->usage.history_rerendered = "rewritten";
        r->usage.rerendered_why = NULL;
        rendering_clear(g);
        return -1;
    }
    kvt_srv_history_report(r, h); /* the history's turn not spliced, if any, comes first */
    return 0;
}

int kvt_srv_render_jinja(kvt_server *s, const kvt_api_request *a, size_t max_prompt, srv_req *r, size_t *at, size_t *n,
                         kvt_api_error *err) {
    rendering g = {.spans = kvt_xcalloc(a->n_msgs + 2, sizeof *g.spans)};
    char **calls = generated_calls(s, a, r);
    const kvt_resp_prefix *h = a->history;
    int rc = h ? render_after(s, a, calls, h, r, &g, err) : -1;
    if (rc < 0) { /* the whole conversation, rendered and tokenized */
        h = NULL;
        while ((rc = render_planned(s, a, calls, r, &g, err)) == 2) continue; /* each round drops a turn of calls */
    }
    if (!rc) {
        r->think_open = ends_in_think(g.text, g.len);
        rc = a->n_docs && docs_place(s, a, calls, g.text, g.skip, g.len, g.spans, &g.n_spans, err) ? 1 : 0;
    }
    for (size_t i = 0; i < a->n_msgs; i++) free(calls[i]);
    free(calls);
    size_t from = h ? h->text_len : g.skip; /* the text not tokenized (h's ids stand for it) */
    for (size_t i = 0; i < g.n_spans; i++) g.spans[i].at -= from;
    if (!rc)
        rc = kvt_chat_tokenize_after(s->tok, h ? h->ids : NULL, h ? h->n_ids : 0, g.text + from, g.plain + from,
                                     g.len - from, kvt_tokenizer_add_special(s->tok), g.spans, g.n_spans, max_prompt,
                                     &r->prompt, n);
    if (!rc && h) r->usage.history_tokens_reused = (int32_t)h->n_ids;
    /* kept for a follow-up, unless the tokenizer's EOS after the prompt would sit inside the next one */
    if (!rc && a->keep_history && !a->n_docs && !s->p.retokenize_replies &&
        !(kvt_tokenizer_add_special(s->tok) & KVT_TOK_ADD_EOS)) {
        uint64_t hash[2];
        vars_hash(s, a, hash);
        kvt_srv_keep_history(r, 1, a->n_msgs, hash, g.text, g.len);
    }
    *at = *n;
    for (size_t i = 0; i < g.n_spans; i++)
        if (a->n_docs && !g.spans[i].len && !g.spans[i].ids) *at = g.spans[i].tok_at;
    rendering_clear(&g);
    free(g.spans);
    return rc;
}

int kvt_srv_uses_jinja(const kvt_server *s, const kvt_api_request *a) {
    if (!s->p.jinja || a->kind != KVT_API_CHAT) return 0;
    if (!s->p.jinja_toolless) return 1;
    if (a->tools) return 0;
    for (size_t i = 0; i < a->n_msgs; i++)
        if (!strcmp(a->msgs[i].role, "tool") || (a->msg_tools && a->msg_tools[i].tool_calls)) return 0;
    return 1;
}

int kvt_srv_template_kwargs(const kvt_server *s, const kvt_api_request *a, int *no_think, kvt_api_error *err) {
    *no_think = 0;
    if (!a->template_kwargs || kvt_srv_uses_jinja(s, a)) return 0;
    const cJSON *k;
    cJSON_ArrayForEach(k, a->template_kwargs) {
        if (s->p.chat == KVT_CHAT_QWEN3 && !strcmp(k->string, "enable_thinking") && cJSON_IsBool(k)) {
            *no_think = cJSON_IsFalse(k);
            continue;
        }
        if (s->p.jinja) /* the template renders no tools: this chat's are the family's rendering */
            return kvt_api_errorf(err, 400, "invalid_request_error", "chat_template_kwargs", "unsupported_parameter",
                                  "'chat_template_kwargs.%.64s' needs the model's own template, which renders no "
                                  "tools: this chat carries tools, tool calls or tool results, so the built-in %s "
                                  "rendering renders it and takes no template variables (--jinja renders every "
                                  "chat with the template, dropping its tools)",
                                  k->string, kvt_chat_family_name(s->p.chat));
        kvt_api_errorf(err, 400, "invalid_request_error", "chat_template_kwargs", "unsupported_parameter",
                       "'chat_template_kwargs.%.64s' needs the model's own template: start the server with --jinja "
                       "(the built-in %s rendering honours only enable_thinking, on qwen3)",
                       k->string, kvt_chat_family_name(s->p.chat));
        return -1;
    }
    return 0;
}

int kvt_srv_append_no_think(kvt_server *s, srv_req *r, size_t *n, size_t max_prompt) {
    int32_t *ids = NULL;
    size_t k = 0;
    int rc = kvt_tokenize(s->tok, NO_THINK, strlen(NO_THINK), 0, 1, &ids, &k);
    if (!rc && *n + k > max_prompt) rc = KVT_ELIMIT;
    if (!rc) {
        r->prompt = kvt_xrealloc(r->prompt, (*n + k) * sizeof *r->prompt);
        memcpy(r->prompt + *n, ids, k * sizeof *ids);
        *n += k;
    }
    free(ids);
    return rc;
}
