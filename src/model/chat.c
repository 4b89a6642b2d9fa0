// SPDX-License-Identifier: MIT
/* Chat templates: detection by the special markers each family uses (not by
 * executing Jinja), rendering conversations straight to token ids, and the
 * reply map that lets a follow-up turn reuse the exact ids of a reply.
 *
 * Rendering tokenizes markup and content separately so message text can never
 * produce control tokens. With SentencePiece vocabularies a piece gets the
 * tokenizer's prefix space only at the start and after a special token, as the
 * rendered text tokenized whole would (llama.cpp's ids); the result stays
 * stable from turn to turn, which is what prefix reuse needs. */
#include "chat.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

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

/* ---- reply map ------------------------------------------------------------- */

typedef struct {
    XXH128_hash_t key;        /* of salt and text; text is compared too, so a collision is a miss */
    XXH128_hash_t split_key;  /* of salt, reasoning and answer (reasoning != NULL) */
    XXH128_hash_t answer_key; /* of salt and answer (reasoning != NULL) */
    char *text;
    char *reasoning, *answer; /* the reply as a client got it split, or both NULL */
    char *session;            /* the session whose request generated it, or NULL */
    int32_t *ids;
    size_t n;
} reply_entry;

struct kvt_reply_map {
    pthread_mutex_t mu;
    reply_entry *ring; /* FIFO: the oldest entry is overwritten first */
    size_t cap, next, max_ids;
};

kvt_reply_map *kvt_reply_map_new(size_t max_entries, size_t max_ids) {
    kvt_reply_map *m = kvt_xcalloc(1, sizeof *m);
    pthread_mutex_init(&m->mu, NULL);
    m->cap = KVT_MAX(max_entries, 1);
    m->ring = kvt_xcalloc(m->cap, sizeof *m->ring);
    m->max_ids = max_ids;
    return m;
}

static void entry_clear(reply_entry *e) {
    free(e->text);
    free(e->reasoning);
    free(e->answer);
    free(e->session);
    free(e->ids);
}

void kvt_reply_map_free(kvt_reply_map *m) {
    if (!m) return;
    for (size_t i = 0; i < m->cap; i++) entry_clear(&m->ring[i]);
    free(m->ring);
    pthread_mutex_destroy(&m->mu);
    free(m);
}

/* The key of salt and the strings a (and b, when not NULL) under kind: every
 * part goes in with its length first, so no two parts can trade bytes. */
static XXH128_hash_t reply_key_of(const void *salt, size_t salt_len, char kind, const char *a, const char *b) {
    XXH3_state_t *st = XXH3_createState();
    XXH3_128bits_reset(st);
    uint64_t sl = salt_len;
    XXH3_128bits_update(st, &sl, sizeof sl);
    if (salt_len) XXH3_128bits_update(st, salt, salt_len);
    if (kind) XXH3_128bits_update(st, &kind, 1);
    const char *parts[2] = {a, b};
    for (size_t i = 0; i < 2 && parts[i]; i++) {
        uint64_t pl = strlen(parts[i]);
        if (kind) XXH3_128bits_update(st, &pl, sizeof pl);
        XXH3_128bits_update(st, parts[i], pl);
    }
    XXH128_hash_t h = XXH3_128bits_digest(st);
    XXH3_freeState(st);
    return h;
}

static XXH128_hash_t reply_key(const void *salt, size_t salt_len, const char *text) {
    return reply_key_of(salt, salt_len, 0, text, NULL);
}

void kvt_reply_map_put(kvt_reply_map *m, const void *salt, size_t salt_len, const char *text, const int32_t *ids,
                       size_t n) {
    kvt_reply_map_put_split(m, salt, salt_len, text, NULL, NULL, ids, n);
}

void kvt_reply_map_put_split(kvt_reply_map *m, const void *salt, size_t salt_len, const char *text,
                             const char *reasoning, const char *answer, const int32_t *ids, size_t n) {
    kvt_reply_owner o = {salt, salt_len, NULL};
    kvt_reply_map_put_by(m, &o, text, reasoning, answer, ids, n);
}

void kvt_reply_map_put_by(kvt_reply_map *m, const kvt_reply_owner *o, const char *text, const char *reasoning,
                          const char *answer, const int32_t *ids, size_t n) {
    if (!n || n > m->max_ids || !*text) return;
    reply_entry ne = {.key = reply_key(o->salt, o->salt_len, text), .text = kvt_xstrdup(text), .n = n};
    if (o->session && *o->session) ne.session = kvt_xstrdup(o->session);
    if (reasoning && answer) {
        ne.split_key = reply_key_of(o->salt, o->salt_len, 's', reasoning, answer);
        ne.answer_key = reply_key_of(o->salt, o->salt_len, 'a', answer, NULL);
        ne.reasoning = kvt_xstrdup(reasoning);
        ne.answer = kvt_xstrdup(answer);
    }
    ne.ids = kvt_xmalloc(n * sizeof *ne.ids);
    memcpy(ne.ids, ids, n * sizeof *ne.ids);
    pthread_mutex_lock(&m->mu);
    reply_entry *e = &m->ring[m->next];
    m->next = (m->next + 1) % m->cap;
    reply_entry old = *e;
    *e = ne;
    pthread_mutex_unlock(&m->mu);
    entry_clear(&old);
}

/* Whether e is the reply of key k: text (match 0), reasoning and answer
 * (match 1), or answer alone with some reasoning (match 2). */
static int entry_is(const reply_entry *e, int match, XXH128_hash_t k, const char *text, const char *reasoning) {
    if (!e->text) return 0;
    if (match == 0) return XXH128_isEqual(e->key, k) && !strcmp(e->text, text);
    if (!e->answer || !XXH128_isEqual(match == 1 ? e->split_key : e->answer_key, k) || strcmp(e->answer, text))
        return 0;
    return match == 2 || !strcmp(e->reasoning, reasoning);
}

/* The newest entry of key k (see entry_is) that session generated or, when
 * it generated none, the newest of any session: its ids copied into *ids, its
 * text into *full when full is not NULL; the count of ids, or 0. The session
 * comes first because replies of different conversations can share a text but
 * not their ids (invalid bytes all print as U+FFFD, and one text has many
 * tokenizations): a conversation gets its own ids whatever other sessions
 * generated since, so its prompt does not depend on their timing. */
static size_t reply_find(kvt_reply_map *m, int match, XXH128_hash_t k, const char *text, const char *reasoning,
                         const char *session, char **full, int32_t **ids) {
    *ids = NULL;
    if (full) *full = NULL;
    const reply_entry *hit = NULL;
    pthread_mutex_lock(&m->mu);
    /* newest first: a reply generated twice maps to its latest ids */
    for (size_t i = 0; i < m->cap; i++) {
        const reply_entry *e = &m->ring[(m->next + m->cap - 1 - i) % m->cap];
        if (!entry_is(e, match, k, text, reasoning)) continue;
        int own = session && *session && e->session && !strcmp(e->session, session);
        if (!hit || own) hit = e;
        if (own || !session || !*session) break;
    }
    size_t n = hit ? hit->n : 0;
    if (hit) {
        *ids = kvt_xmalloc(n * sizeof **ids);
        memcpy(*ids, hit->ids, n * sizeof **ids);
        if (full) *full = kvt_xstrdup(hit->text);
    }
    pthread_mutex_unlock(&m->mu);
    return n;
}

size_t kvt_reply_map_get(kvt_reply_map *m, const void *salt, size_t salt_len, const char *text, int32_t **ids) {
    kvt_reply_owner o = {salt, salt_len, NULL};
    return kvt_reply_map_get_by(m, &o, text, ids);
}

size_t kvt_reply_map_get_split(kvt_reply_map *m, const void *salt, size_t salt_len, const char *reasoning,
                               const char *answer, char **text, int32_t **ids) {
    kvt_reply_owner o = {salt, salt_len, NULL};
    return kvt_reply_map_get_split_by(m, &o, reasoning, answer, text, ids);
}

size_t kvt_reply_map_get_by(kvt_reply_map *m, const kvt_reply_owner *o, const char *text, int32_t **ids) {
    return reply_find(m, 0, reply_key(o->salt, o->salt_len, text), text, NULL, o->session, NULL, ids);
}

size_t kvt_reply_map_get_split_by(kvt_reply_map *m, const kvt_reply_owner *o, const char *reasoning, const char *answer,
                                  char **text, int32_t **ids) {
    XXH128_hash_t k = reasoning ? reply_key_of(o->salt, o->salt_len, 's', reasoning, answer)
                                : reply_key_of(o->salt, o->salt_len, 'a', answer, NULL);
    return reply_find(m, reasoning ? 1 : 2, k, answer, reasoning, o->session, text, ids);
}
