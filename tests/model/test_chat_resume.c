// SPDX-License-Identifier: MIT
/* A conversation rendered after a known beginning (kvt_chat_render_from):
 * for every built-in family, the ids of an earlier turn's prompt and reply
 * stand for the history, and what follows renders to exactly the ids the
 * whole conversation renders to, the replies looked up only after that
 * beginning; a family that renders that reply otherwise (Qwen3 keeps only
 * the answer of a turn before the last user message), a reply text that
 * differs or a message that is no assistant reply is KVT_ENOTFOUND with
 * nothing out. The same for replies that are tool calls (the text a
 * generated call turn is written back as) followed by their results. A
 * template's text tokenized after such ids
 * (kvt_chat_tokenize_after) is the spliced tokenization of the whole text.
 * On mkmodel's vocabulary and, where ../shared has it, a SentencePiece one. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat.h"
#include "common.h"
#include "mkmodel.h"
#include "model.h"
#include "testutil.h"
#include "tokenizer.h"
#include "vocab_test.h"

#define REPLY1 "Hello! How can I help?"
#define REPLY2 "It went on for a while."

/* The replies kvtier "generated": their ids, and how many lookups there were. */
typedef struct {
    const char *r1, *r2;
    int calls;
} replies;

static size_t lookup(void *ctx, const char *text, int32_t **ids) {
    replies *r = ctx;
    r->calls++;
    static const int32_t a[] = {301, 302, 303}, b[] = {304, 305};
    const int32_t *src = !strcmp(text, r->r1) ? a : !strcmp(text, r->r2) ? b : NULL;
    size_t n = src == a ? 3 : src == b ? 2 : 0;
    if (!n) return 0;
    *ids = malloc(n * sizeof **ids);
    memcpy(*ids, src, n * sizeof **ids);
    return n;
}

static int same(const int32_t *a, size_t na, const int32_t *b, size_t nb) {
    return na == nb && (!na || !memcmp(a, b, na * sizeof *a));
}

/* msgs[0..6) of family f after the beginning that ends with the reply of msgs[reply] (the prompt of
 * msgs[0..reply) rendered, then that reply's ids) equals the whole rendering. */
static void check_resume(const kvt_tokenizer *t, kvt_chat_family f, const kvt_chat_msg *msgs, size_t reply,
                         const char *vocab) {
    const char *name = kvt_chat_family_name(f);
    replies rp = {msgs[2].content, msgs[4].content, 0};
    int32_t *whole = NULL, *head = NULL, *rid = NULL, *out = NULL;
    size_t nw = 0, nh = 0, nr = 0, n = 0, at_w = 0, at = 0;
    CHECK(kvt_chat_render_at(t, f, msgs, 6, lookup, &rp, SIZE_MAX, 5, &at_w, &whole, &nw) == 0);
    CHECK(kvt_chat_render(t, f, msgs, reply, lookup, &rp, SIZE_MAX, &head, &nh) == 0);
    nr = lookup(&rp, msgs[reply].content, &rid);
    int32_t *pre_ids = kvt_xmalloc((nh + nr) * sizeof *pre_ids);
    memcpy(pre_ids, head, nh * sizeof *head);
    memcpy(pre_ids + nh, rid, nr * sizeof *rid);
    kvt_chat_prefix pre = {.ids = pre_ids, .n = nh + nr, .reply = reply, .reply_text = msgs[reply].content};
    rp.calls = 0;
    int rc = kvt_chat_render_from(t, f, msgs, 6, lookup, &rp, SIZE_MAX, 5, &at, &pre, &out, &n);
    CHECKF(rc == 0, "%s, %s: %s", vocab, name, kvt_errmsg());
    CHECKF(same(out, n, whole, nw), "%s, %s after reply %zu: %zu ids, the whole rendering %zu", vocab, name, reply, n,
           nw);
    CHECKF(at == at_w, "%s, %s: the last user message at %zu, whole %zu", vocab, name, at, at_w);
    /* only the replies after the beginning are looked up */
    CHECKF(rp.calls == (reply < 4 ? 1 : 0), "%s, %s: %d lookups after reply %zu", vocab, name, rp.calls, reply);
    free(out);
    /* a beginning whose reply is not the text rendered there, or not an assistant message */
    pre.reply_text = "something else";
    out = (int32_t *)1;
    CHECK(kvt_chat_render_from(t, f, msgs, 6, lookup, &rp, SIZE_MAX, 5, &at, &pre, &out, &n) == KVT_ENOTFOUND && !out &&
          !n);
    pre.reply_text = msgs[reply].content;
    pre.reply = reply - 1;
    CHECK(kvt_chat_render_from(t, f, msgs, 6, lookup, &rp, SIZE_MAX, 5, &at, &pre, &out, &n) == KVT_ENOTFOUND && !out);
    free(pre_ids);
    free(whole);
    free(head);
    free(rid);
}

/* Tool-call turns as the server writes a generated one back (its text as the model wrote it, here
 * with a blank line before the call and compact JSON), each followed by its result. */
#define CALL1 \
    "Let me check.\n\n<tool_call>\n{\"name\":\"get_weather\",\"arguments\":{\"city\":\"Paris\"}}\n</tool_call>"
#define CALL2 "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Rome\"}}"

static void test_families(const kvt_tokenizer *t, const char *vocab) {
    static const kvt_chat_family all[] = {KVT_CHAT_CHATML, KVT_CHAT_LLAMA3, KVT_CHAT_LLAMA2, KVT_CHAT_MISTRAL,
                                          KVT_CHAT_QWEN3,  KVT_CHAT_GEMMA,  KVT_CHAT_PHI3};
    const kvt_chat_msg msgs[] = {{"system", "Be brief"}, {"user", "Hello there"}, {"assistant", REPLY1},
                                 {"user", "And then?"},  {"assistant", REPLY2},   {"user", "Bye"}};
    const kvt_chat_msg calls[] = {{"system", "Be brief"}, {"user", "Weather in Paris, then Rome?"},
                                  {"assistant", CALL1},   {"user", "<tool_response>\nsunny\n</tool_response>"},
                                  {"assistant", CALL2},   {"user", "<tool_response>\nrain\n</tool_response>"}};
    for (size_t i = 0; i < KVT_ARRAY_LEN(all); i++) {
        check_resume(t, all[i], msgs, 2, vocab);
        check_resume(t, all[i], msgs, 4, vocab);
        check_resume(t, all[i], calls, 2, vocab);
        check_resume(t, all[i], calls, 4, vocab);
    }
}

/* Qwen3 keeps an earlier turn's answer alone: a beginning that ends with a reply with reasoning
 * does not fit once a user message follows it. */
static void test_qwen3_rewrites(const kvt_tokenizer *t) {
    const char *think = "<think>\nplan\n</think>\n\nanswer";
    const kvt_chat_msg msgs[] = {{"user", "Hi"}, {"assistant", think}, {"user", "More"}};
    static const int32_t ids[] = {5, 6, 7};
    kvt_chat_prefix pre = {.ids = ids, .n = 3, .reply = 1, .reply_text = think};
    int32_t *out = (int32_t *)1;
    size_t n = 0, at = 0;
    CHECK(kvt_chat_render_from(t, KVT_CHAT_QWEN3, msgs, 3, NULL, NULL, SIZE_MAX, 2, &at, &pre, &out, &n) ==
              KVT_ENOTFOUND &&
          !out && !n);
    /* as the last turn (nothing after it) its reasoning is rendered: the beginning fits */
    CHECK(kvt_chat_render_from(t, KVT_CHAT_QWEN3, msgs, 2, NULL, NULL, SIZE_MAX, 2, &at, &pre, &out, &n) == 0 &&
          n > 3 && same(out, 3, ids, 3));
    free(out);
}

/* A template's text after given ids tokenizes as after a spliced reply. */
static void test_tokenize_after(const kvt_tokenizer *t) {
    const char *head = "<|im_start|>user\nhello there<|im_end|>\n<|im_start|>assistant\n", *reply = "General Kenobi",
               *tail = "<|im_end|>\n<|im_start|>user\n and then?<|im_end|>\n<|im_start|>assistant\n";
    char text[256];
    snprintf(text, sizeof text, "%s%s%s", head, reply, tail);
    static const int32_t rid[] = {7, 300, 12, 250};
    kvt_chat_splice sp = {.at = strlen(head), .len = strlen(reply), .ids = rid, .n = 4};
    int32_t *whole = NULL, *out = NULL;
    size_t nw = 0, n = 0;
    int add = KVT_TOK_ADD_BOS | KVT_TOK_ADD_EOS;
    CHECK(kvt_chat_tokenize_spliced(t, text, strlen(text), add, &sp, 1, SIZE_MAX, &whole, &nw) == 0 && nw > 4);
    size_t np = sp.tok_at + 4; /* the ids up to the reply's end */
    CHECK(kvt_chat_tokenize_after(t, whole, np, tail, NULL, strlen(tail), add, NULL, 0, SIZE_MAX, &out, &n) == 0);
    CHECKF(same(out, n, whole, nw), "%zu ids after, %zu spliced whole", n, nw);
    free(out);
    out = (int32_t *)1;
    CHECK(kvt_chat_tokenize_after(t, whole, np, tail, NULL, strlen(tail), add, NULL, 0, np - 1, &out, &n) == KVT_ELIMIT &&
          !out && !n);
    free(whole);
}

int main(void) {
    kvt_model *m = kvt_test_vocab_model(NULL, "resume.gguf");
    if (m) {
        test_families(m->tok, "mkmodel");
        test_qwen3_rewrites(m->tok);
        test_tokenize_after(m->tok);
    }
    kvt_model_free(m);
    kvt_tokenizer *spm = kvt_test_vocab("ggml-vocab-llama-spm.gguf");
    if (spm) {
        test_families(spm, "llama-spm");
        test_tokenize_after(spm);
        kvt_tokenizer_free(spm);
    } else {
        kvt_test_skip_part("ggml-vocab-llama-spm.gguf is not in ../shared: mkmodel's vocabulary only");
    }
    return kvt_test_done("test_chat_resume");
}
