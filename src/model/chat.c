// SPDX-License-Identifier: MIT
/* Chat templates: detection by the special markers each family uses (not by
 * executing Jinja) and rendering conversations straight to token ids (the
 * reply map that lets a follow-up turn reuse the exact ids of a reply is in
 * reply_map.c).
 *
 * Rendering tokenizes markup and content separately so message text can never
 * produce control tokens. With SentencePiece vocabularies a piece gets the
 * tokenizer's prefix space only at the start and after a special token, as the
 * rendered text tokenized whole would (llama.cpp's ids); the result stays
 * stable from turn to turn, which is what prefix reuse needs. */
#include "chat.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"

kvt_chat_family kvt_chat_detect(const char *t) {
    if (!t) return KVT_CHAT_UNKNOWN;
    if (strstr(t, "<start_of_turn>")) return KVT_CHAT_GEMMA;
    if (strstr(t, "<|user|>") && strstr(t, "<|end|>")) return KVT_CHAT_PHI3;
    if (strstr(t, "<|im_start|>") && strstr(t, "<think>")) return KVT_CHAT_QWEN3;
    if (strstr(t, "<|im_start|>")) return KVT_CHAT_CHATML;
    if (strstr(t, "<|start_header_id|>")) return KVT_CHAT_LLAMA3;
    if (strstr(t, "[INST]")) return strstr(t, "<<SYS>>") ? KVT_CHAT_LLAMA2 : KVT_CHAT_MISTRAL;
    return KVT_CHAT_UNKNOWN;
}

const char *kvt_chat_family_name(kvt_chat_family f) {
    switch (f) {
    case KVT_CHAT_CHATML: return "chatml";
    case KVT_CHAT_LLAMA3: return "llama3";
    case KVT_CHAT_LLAMA2: return "llama2";
    case KVT_CHAT_MISTRAL: return "mistral";
    case KVT_CHAT_QWEN3: return "qwen3";
    case KVT_CHAT_GEMMA: return "gemma";
    case KVT_CHAT_PHI3: return "phi3";
    default: return "unknown";
    }
}

kvt_chat_family kvt_chat_family_parse(const char *name) {
    static const kvt_chat_family all[] = {KVT_CHAT_CHATML, KVT_CHAT_LLAMA3, KVT_CHAT_LLAMA2, KVT_CHAT_MISTRAL,
                                          KVT_CHAT_QWEN3,  KVT_CHAT_GEMMA,  KVT_CHAT_PHI3};
    for (size_t i = 0; i < KVT_ARRAY_LEN(all); i++)
        if (name && !strcmp(name, kvt_chat_family_name(all[i]))) return all[i];
    return KVT_CHAT_UNKNOWN;
}

/* ---- rendering ------------------------------------------------------------- */

typedef struct {
    const kvt_tokenizer *t;
    int32_t *ids;
    size_t n, cap;
    size_t max; /* ids at most (KVT_ELIMIT past it) */
    int rc;
    size_t mark_msg, mark_at; /* where message mark_msg's content starts (kvt_chat_render_at) */
    /* kvt_chat_render_from: while pre is set nothing is pushed; at the reply after `replies` more
     * assistant replies, pre's ids come in and rendering goes on from them */
    const kvt_chat_prefix *pre;
    size_t replies;
} ids_buf;

/* Records that message i's content starts here, if i is the marked one (not while skipping: no place). */
static void mark(ids_buf *b, size_t i) {
    if (i == b->mark_msg) b->mark_at = b->pre ? SIZE_MAX : b->n;
}

static void push_ids(ids_buf *b, const int32_t *ids, size_t n) {
    if (b->pre) return; /* skipping what a known beginning covers */
    if (n > b->max - b->n) {
        b->rc = kvt_fail(KVT_ELIMIT, "the conversation has more than %zu tokens", b->max);
        return;
    }
    if (b->n + n > b->cap) {
        b->cap = KVT_MAX(b->cap * 2, b->n + n + 64);
        b->ids = kvt_xrealloc(b->ids, b->cap * sizeof *b->ids);
    }
    memcpy(b->ids + b->n, ids, n * sizeof *ids);
    b->n += n;
}

/* Appends the tokens of text; special = 1 for template markup. Each piece gets
 * the ids it has in the whole rendering tokenized at once: on SentencePiece a
 * prefix space only at the start and after a special token, and no whitespace
 * right after a token that strips it (Phi-3's markers). */
static void push_text(ids_buf *b, const char *text, int special) {
    if (b->rc || b->pre || !*text) return;
    int32_t *ids = NULL;
    size_t n = 0, len = strlen(text);
    int32_t prev = b->n ? b->ids[b->n - 1] : -1;
    size_t skip = kvt_tokenizer_stripped_after(b->t, prev, text, len);
    if (skip == len) return;
    int add = kvt_tokenizer_continues(b->t, prev);
    /* a text past the room left stops tokenizing early (an 8 MB message costs little) */
    if ((b->rc = kvt_tokenize_max(b->t, text + skip, len - skip, add, special, b->max - b->n, &ids, &n))) {
        if (b->rc == KVT_ELIMIT) kvt_fail(KVT_ELIMIT, "the conversation has more than %zu tokens", b->max);
        return;
    }
    push_ids(b, ids, n);
    free(ids);
}

static void push_id(ids_buf *b, int32_t id) {
    if (!b->rc && id >= 0) push_ids(b, &id, 1);
}

/* At an assistant message's reply whose text the rendering holds, while
 * skipping a known beginning: 1 when it is the reply that beginning ends
 * with, whose ids then stand for everything so far (or, when the rendering
 * holds other text there, the rendering fails with KVT_ENOTFOUND); 0 for any
 * other reply, which the caller renders (a no-op while still skipping). */
static int resumed(ids_buf *b, const char *text) {
    if (!b->pre || b->rc) return 0;
    if (b->replies) {
        b->replies--;
        return 0;
    }
    const kvt_chat_prefix *p = b->pre;
    b->pre = NULL;
    if (strcmp(text, p->reply_text))
        b->rc = kvt_fail(KVT_ENOTFOUND, "the template renders the reply the known beginning ends with otherwise");
    else push_ids(b, p->ids, p->n);
    return 1;
}

/* Content of an assistant message: the ids kvtier generated for it if known. */
static void push_reply(ids_buf *b, const char *text, kvt_chat_reply_fn lookup, void *ctx) {
    if (resumed(b, text)) return;
    int32_t *ids = NULL;
    size_t n = lookup && !b->rc && !b->pre ? lookup(ctx, text, &ids) : 0;
    if (n) push_ids(b, ids, n);
    else push_text(b, text, 0);
    free(ids);
}

static int is_role(const kvt_chat_msg *m, const char *role) { return !strcmp(m->role, role); }

/* A ChatML turn's header, "<|im_start|>ROLE\n", in three pieces. The
 * generation header goes through here too, so it tokenizes exactly as the
 * same header does once it is history: on a vocabulary without the ChatML
 * specials (the fallback) the markup is plain text, and "<|im_start|>assistant\n"
 * as one piece would tokenize differently from its three pieces, so the next
 * turn's prompt would leave the cached reply behind at the header. */
static void chatml_header(ids_buf *b, const char *role) {
    push_text(b, "<|im_start|>", 1);
    push_text(b, role, 0);
    push_text(b, "\n", 1);
}

static void render_chatml(ids_buf *b, const kvt_chat_msg *msgs, size_t n, kvt_chat_reply_fn lookup, void *ctx) {
    for (size_t i = 0; i < n; i++) {
        chatml_header(b, msgs[i].role);
        mark(b, i);
        if (is_role(&msgs[i], "assistant")) push_reply(b, msgs[i].content, lookup, ctx);
        else push_text(b, msgs[i].content, 0);
        push_text(b, "<|im_end|>\n", 1);
    }
    chatml_header(b, "assistant");
}

static void render_llama3(ids_buf *b, const kvt_chat_msg *msgs, size_t n, kvt_chat_reply_fn lookup, void *ctx) {
    push_id(b, kvt_tokenizer_bos(b->t));
    for (size_t i = 0; i < n; i++) {
        push_text(b, "<|start_header_id|>", 1);
        push_text(b, msgs[i].role, 0);
        push_text(b, "<|end_header_id|>\n\n", 1);
        mark(b, i);
        if (is_role(&msgs[i], "assistant")) push_reply(b, msgs[i].content, lookup, ctx);
        else push_text(b, msgs[i].content, 0);
        push_text(b, "<|eot_id|>", 1);
    }
    push_text(b, "<|start_header_id|>assistant<|end_header_id|>\n\n", 1);
}

/* An [INST] family's reply: the ids kvtier generated for it right after
 * " [/INST]" as they were generated, else " " and its text, where Mistral's
 * tool calls ("[TOOL_CALLS][...]") have the marker as its control token. */
static void push_inst_reply(ids_buf *b, size_t i, const char *text, int mistral, kvt_chat_reply_fn lookup, void *ctx) {
    static const char marker[] = "[TOOL_CALLS]";
    if (resumed(b, text)) return;
    int32_t *ids = NULL;
    size_t n = lookup && !b->rc && !b->pre ? lookup(ctx, text, &ids) : 0;
    if (n) {
        mark(b, i);
        push_ids(b, ids, n);
        free(ids);
        return;
    }
    push_text(b, " ", 0);
    mark(b, i);
    const char *at = mistral ? strstr(text, marker) : NULL;
    if (!at) {
        push_text(b, text, 0);
        return;
    }
    char *before = kvt_xmalloc((size_t)(at - text) + 1);
    memcpy(before, text, (size_t)(at - text));
    before[at - text] = 0;
    push_text(b, before, 0);
    free(before);
    push_text(b, marker, 1);
    push_text(b, at + strlen(marker), 0);
}

/* Llama 2 and Mistral: [INST] user [/INST] assistant </s>, the system prompt
 * folded into the first user turn (Llama 2 inside <<SYS>>, Mistral as a
 * leading paragraph). Each [INST] opens with BOS as the reference templates do.
 * Mistral's tool turns (from the server's tool rendering): a "tools" message
 * goes as [AVAILABLE_TOOLS]...[/AVAILABLE_TOOLS] after the BOS of the next
 * user turn, a "tool" message as [TOOL_RESULTS]...[/TOOL_RESULTS]. */
static void render_inst(ids_buf *b, const kvt_chat_msg *msgs, size_t n, int llama2, kvt_chat_reply_fn lookup,
                        void *ctx) {
    const char *system = NULL, *tools = NULL;
    for (size_t i = 0; i < n; i++) {
        const kvt_chat_msg *m = &msgs[i];
        if (!llama2 && is_role(m, "tools")) { /* Mistral: shown before the next user turn */
            tools = m->content;
            mark(b, i);
            if (i == b->mark_msg) b->mark_msg = i + 1;
            continue;
        }
        if (!llama2 && is_role(m, "tool")) {
            push_text(b, "[TOOL_RESULTS]", 1);
            mark(b, i);
            push_text(b, m->content, 0);
            push_text(b, "[/TOOL_RESULTS]", 1);
            continue;
        }
        if (is_role(m, "system")) {
            system = m->content;
            mark(b, i); /* folded into the next user turn; marked where that turn starts */
            if (i == b->mark_msg) b->mark_msg = i + 1;
            continue;
        }
        if (is_role(m, "assistant")) {
            push_inst_reply(b, i, m->content, !llama2, lookup, ctx);
            push_id(b, kvt_tokenizer_eos(b->t));
            continue;
        }
        push_id(b, kvt_tokenizer_bos(b->t));
        if (tools) {
            push_text(b, "[AVAILABLE_TOOLS]", 1);
            push_text(b, tools, 0);
            push_text(b, "[/AVAILABLE_TOOLS]", 1);
            tools = NULL;
        }
        push_text(b, "[INST] ", 1);
        if (system) {
            if (llama2) {
                push_text(b, "<<SYS>>\n", 1);
                push_text(b, system, 0);
                push_text(b, "\n<</SYS>>\n\n", 1);
            } else {
                push_text(b, system, 0);
                push_text(b, "\n\n", 0);
            }
            system = NULL;
        }
        mark(b, i);
        push_text(b, m->content, 0);
        push_text(b, " [/INST]", 1);
    }
}

/* Qwen3: ChatML, but an assistant turn's reasoning ("<think>...</think>" in
 * its text) is kept only after the last user message, as the model's template
 * does; earlier turns keep their answer alone, so a conversation's cache is
 * reused up to the reply before the last question. A reply kvtier generated
 * whose text the template renders unchanged is spliced as its exact ids. */
static void render_qwen3(ids_buf *b, const kvt_chat_msg *msgs, size_t n, kvt_chat_reply_fn lookup, void *ctx) {
    size_t last_user = 0;
    for (size_t i = 0; i < n; i++)
        if (is_role(&msgs[i], "user")) last_user = i;
    for (size_t i = 0; i < n; i++) {
        chatml_header(b, msgs[i].role);
        mark(b, i);
        const char *c = msgs[i].content, *end = strstr(c, "</think>");
        if (!is_role(&msgs[i], "assistant")) {
            push_text(b, c, 0);
        } else if (!end) {
            push_reply(b, c, lookup, ctx);
        } else {
            /* as the template splits it: reasoning before the first </think>
             * (after the last <think> there), answer after the last </think>,
             * newlines trimmed at the seams */
            const char *last = end, *r = c, *p;
            while ((p = strstr(last + 1, "</think>"))) last = p;
            const char *answer = last + strlen("</think>");
            while (*answer == '\n') answer++;
            for (p = c; (p = strstr(p, "<think>")) && p < end; p++) r = p + strlen("<think>");
            const char *re = end;
            while (re > r && re[-1] == '\n') re--;
            while (r < re && *r == '\n') r++;
            if (i > last_user || i + 1 == n) {
                size_t rl = (size_t)(re - r), al = strlen(answer);
                char *full = kvt_xmalloc(rl + al + 32);
                snprintf(full, rl + al + 32, "<think>\n%.*s\n</think>\n\n%s", (int)rl, r, answer);
                int32_t *ids = NULL;
                int known = resumed(b, full);
                size_t k = lookup && !known && !b->pre && !b->rc ? lookup(ctx, full, &ids) : 0;
                if (k) {
                    push_ids(b, ids, k);
                } else if (!known) {
                    char *reason = kvt_xmalloc(rl + 1);
                    memcpy(reason, r, rl);
                    reason[rl] = 0;
                    push_text(b, "<think>\n", 1);
                    push_text(b, reason, 0);
                    push_text(b, "\n</think>\n\n", 1);
                    push_text(b, answer, 0);
                    free(reason);
                }
                free(ids);
                free(full);
            } else {
                push_reply(b, answer, lookup, ctx);
            }
        }
        push_text(b, "<|im_end|>\n", 1);
    }
    chatml_header(b, "assistant");
}

/* Gemma 2 and 3: BOS, then "<start_of_turn>ROLE\n" content "<end_of_turn>\n"
 * with the assistant as "model"; a leading system message is folded into the
 * first turn as its first paragraph; contents are trimmed of surrounding
 * whitespace as the template's trim filter does. */
static void render_gemma(ids_buf *b, const kvt_chat_msg *msgs, size_t n, kvt_chat_reply_fn lookup, void *ctx) {
    push_id(b, kvt_tokenizer_bos(b->t));
    size_t first = n > 0 && is_role(&msgs[0], "system") ? 1 : 0;
    for (size_t i = first; i < n; i++) {
        const int model = is_role(&msgs[i], "assistant");
        push_text(b, "<start_of_turn>", 1);
        push_text(b, model ? "model" : msgs[i].role, 0);
        push_text(b, "\n", 1);
        if (i == first && first) {
            mark(b, 0);
            push_text(b, msgs[0].content, 0);
            push_text(b, "\n\n", 0);
        }
        mark(b, i);
        const char *c = msgs[i].content;
        size_t len = strlen(c);
        while (len && strchr(" \t\n\r", c[len - 1])) len--;
        while (len && strchr(" \t\n\r", *c)) c++, len--;
        char *trimmed = kvt_xmalloc(len + 1);
        memcpy(trimmed, c, len);
        trimmed[len] = 0;
        if (model) push_reply(b, trimmed, lookup, ctx);
        else push_text(b, trimmed, 0);
        free(trimmed);
        push_text(b, "<end_of_turn>\n", 1);
    }
    push_text(b, "<start_of_turn>", 1);
    push_text(b, "model", 0);
    push_text(b, "\n", 1);
}

/* Phi-3: "<|system|>\n", "<|user|>\n" or "<|assistant|>\n", the content, "<|end|>\n". */
static void render_phi3(ids_buf *b, const kvt_chat_msg *msgs, size_t n, kvt_chat_reply_fn lookup, void *ctx) {
    for (size_t i = 0; i < n; i++) {
        const int asst = is_role(&msgs[i], "assistant");
        push_text(b, asst ? "<|assistant|>" : is_role(&msgs[i], "system") ? "<|system|>" : "<|user|>", 1);
        push_text(b, "\n", 1);
        mark(b, i);
        if (asst) push_reply(b, msgs[i].content, lookup, ctx);
        else push_text(b, msgs[i].content, 0);
        push_text(b, "<|end|>\n", 1);
    }
    push_text(b, "<|assistant|>", 1);
    push_text(b, "\n", 1);
}

int kvt_chat_render(const kvt_tokenizer *t, kvt_chat_family f, const kvt_chat_msg *msgs, size_t n,
                    kvt_chat_reply_fn lookup, void *lookup_ctx, size_t max_tokens, int32_t **out, size_t *n_out) {
    size_t at;
    return kvt_chat_render_at(t, f, msgs, n, lookup, lookup_ctx, max_tokens, SIZE_MAX, &at, out, n_out);
}

int kvt_chat_render_at(const kvt_tokenizer *t, kvt_chat_family f, const kvt_chat_msg *msgs, size_t n,
                       kvt_chat_reply_fn lookup, void *lookup_ctx, size_t max_tokens, size_t msg, size_t *at,
                       int32_t **out, size_t *n_out) {
    return kvt_chat_render_from(t, f, msgs, n, lookup, lookup_ctx, max_tokens, msg, at, NULL, out, n_out);
}

int kvt_chat_render_from(const kvt_tokenizer *t, kvt_chat_family f, const kvt_chat_msg *msgs, size_t n,
                         kvt_chat_reply_fn lookup, void *lookup_ctx, size_t max_tokens, size_t msg, size_t *at,
                         const kvt_chat_prefix *pre, int32_t **out, size_t *n_out) {
    *out = NULL;
    *n_out = 0;
    ids_buf b = {.t = t, .max = max_tokens, .mark_msg = msg, .mark_at = SIZE_MAX, .pre = pre};
    if (pre) { /* the replies before pre's go by uncounted: each renderer reaches every assistant message once */
        if (pre->reply >= n || !is_role(&msgs[pre->reply], "assistant"))
            return kvt_fail(KVT_ENOTFOUND, "message %zu is not the assistant reply the known beginning ends with",
                            pre->reply);
        for (size_t i = 0; i < pre->reply; i++) b.replies += is_role(&msgs[i], "assistant");
    }
    /* these templates write no BOS: the prompt gets the one the tokenizer adds to a text (llama.cpp's
     * add_special on the rendered prompt); the others write BOS themselves */
    if ((f == KVT_CHAT_CHATML || f == KVT_CHAT_QWEN3 || f == KVT_CHAT_PHI3) &&
        (kvt_tokenizer_add_special(t) & KVT_TOK_ADD_BOS))
        push_id(&b, kvt_tokenizer_bos(t));
    switch (f) {
    case KVT_CHAT_CHATML: render_chatml(&b, msgs, n, lookup, lookup_ctx); break;
    case KVT_CHAT_LLAMA3: render_llama3(&b, msgs, n, lookup, lookup_ctx); break;
    case KVT_CHAT_LLAMA2: render_inst(&b, msgs, n, 1, lookup, lookup_ctx); break;
    case KVT_CHAT_MISTRAL: render_inst(&b, msgs, n, 0, lookup, lookup_ctx); break;
    case KVT_CHAT_QWEN3: render_qwen3(&b, msgs, n, lookup, lookup_ctx); break;
    case KVT_CHAT_GEMMA: render_gemma(&b, msgs, n, lookup, lookup_ctx); break;
    case KVT_CHAT_PHI3: render_phi3(&b, msgs, n, lookup, lookup_ctx); break;
    default: return kvt_fail(KVT_EARG, "no chat template family to render with");
    }
    if (!b.rc && b.pre) b.rc = kvt_fail(KVT_ENOTFOUND, "the rendering never reached the known beginning's reply");
    if (b.rc) {
        free(b.ids);
        return b.rc;
    }
    *out = b.ids;
    *n_out = b.n;
    *at = b.mark_at == SIZE_MAX ? b.n : b.mark_at;
    return 0;
}
