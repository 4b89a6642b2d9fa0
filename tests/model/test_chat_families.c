// SPDX-License-Identifier: MIT
/* Chat templates of the qwen3, gemma and phi3 families: mkmodel
 * writes each architecture's template, kvt_chat_detect recognises it (and the
 * released models' templates), and a conversation renders to exactly the text
 * the Jinja template gives, with Qwen3's reasoning kept only after the last
 * user message and a reply kvtier generated spliced back as its exact ids;
 * on SentencePiece vocabularies the rendered pieces get the ids of the
 * rendering's text tokenized whole. */
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

static kvt_model *vocab_model(const char *arch) {
    char file[64];
    snprintf(file, sizeof file, "chat-%s.gguf", arch);
    return kvt_test_vocab_model(arch, file);
}

/* Renders msgs and compares the text of the ids (after skip leading ids) with want. */
static void expect(const kvt_model *m, kvt_chat_family f, const kvt_chat_msg *msgs, size_t n, size_t skip,
                   const char *want) {
    int32_t *ids = NULL;
    size_t k = 0;
    char *text = NULL;
    size_t len = 0;
    int rc = kvt_chat_render(m->tok, f, msgs, n, NULL, NULL, SIZE_MAX, &ids, &k);
    CHECKF(rc == 0 && k >= skip, "render %s: %s", kvt_chat_family_name(f), kvt_errmsg());
    if (!rc && k >= skip && kvt_detokenize(m->tok, ids + skip, k - skip, 1, &text, &len) == 0) {
        CHECKF(!strcmp(text, want), "%s rendered\n---\n%s\n--- instead of\n%s\n---", kvt_chat_family_name(f), text,
               want);
    } else {
        CHECK(0);
    }
    free(text);
    free(ids);
}

static size_t reply_lookup(void *ctx, const char *text, int32_t **ids) {
    if (strcmp(text, (const char *)ctx)) return 0;
    *ids = malloc(3 * sizeof **ids);
    (*ids)[0] = 301, (*ids)[1] = 302, (*ids)[2] = 303;
    return 3;
}

static int contains_run(const int32_t *ids, size_t n, const int32_t *run, size_t k) {
    for (size_t i = 0; i + k <= n; i++)
        if (!memcmp(ids + i, run, k * sizeof *run)) return 1;
    return 0;
}

static void test_qwen3(void) {
    kvt_model *m = vocab_model("qwen3");
    if (!m) return;
    CHECK(kvt_chat_detect(m->chat_template) == KVT_CHAT_QWEN3);
    const char *think = "<think>\nweighing it\n</think>\n\nIt is 4.";
    kvt_chat_msg earlier[] = {{"system", "Be brief."}, {"user", "2+2?"}, {"assistant", think}, {"user", "3+3?"}};
    /* an answered question's reasoning is dropped from history */
    /* skip 1: the BOS the vocabulary adds to a prompt, which the template does not write */
    expect(m, KVT_CHAT_QWEN3, earlier, 4, 1,
           "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n2+2?<|im_end|>\n"
           "<|im_start|>assistant\nIt is 4.<|im_end|>\n<|im_start|>user\n3+3?<|im_end|>\n<|im_start|>assistant\n");
    /* after the last user message it stays, re-assembled as the template writes it */
    kvt_chat_msg latest[] = {{"user", "2+2?"}, {"assistant", "<think>\n\nweighing it\n\n</think>\nIt is 4."}};
    expect(m, KVT_CHAT_QWEN3, latest, 2, 1,
           "<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n<think>\nweighing it\n</think>\n\nIt is "
           "4.<|im_end|>\n<|im_start|>assistant\n");
    /* a reply kvtier generated, rendered unchanged by the template, keeps its exact ids */
    int32_t *ids = NULL;
    size_t n = 0;
    const int32_t run[] = {301, 302, 303};
    kvt_chat_msg spliced[] = {{"user", "2+2?"}, {"assistant", think}};
    CHECK(kvt_chat_render(m->tok, KVT_CHAT_QWEN3, spliced, 2, reply_lookup, (void *)think, SIZE_MAX, &ids, &n) == 0 &&
          contains_run(ids, n, run, 3));
    free(ids);
    kvt_model_free(m);
    /* the released Qwen3 template: ChatML markers and its think tags */
    CHECK(kvt_chat_detect("{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- if enable_thinking is "
                          "defined and enable_thinking is false %}{{- '<think>\\n\\n</think>\\n\\n' }}") ==
          KVT_CHAT_QWEN3);
    CHECK(kvt_chat_detect("{{'<|im_start|>' + message['role'] + '\\n'}}") == KVT_CHAT_CHATML);
}

static void test_gemma(void) {
    kvt_model *m = vocab_model("gemma2");
    if (!m) return;
    CHECK(kvt_chat_detect(m->chat_template) == KVT_CHAT_GEMMA);
    kvt_chat_msg msgs[] = {{"system", "Be brief."}, {"user", "  Hi there \n"}, {"assistant", "Hello."}, {"user", "Bye"}};
    int32_t *ids = NULL;
    size_t n = 0;
    CHECK(kvt_chat_render(m->tok, KVT_CHAT_GEMMA, msgs, 4, NULL, NULL, SIZE_MAX, &ids, &n) == 0 && n > 0 &&
          ids[0] == kvt_tokenizer_bos(m->tok));
    free(ids);
    expect(m, KVT_CHAT_GEMMA, msgs, 4, 1,
           "<start_of_turn>user\nBe brief.\n\nHi there<end_of_turn>\n<start_of_turn>model\nHello.<end_of_turn>\n"
           "<start_of_turn>user\nBye<end_of_turn>\n<start_of_turn>model\n");
    /* the system text's offset is where the first turn's content starts */
    size_t at = 0;
    CHECK(kvt_chat_render_at(m->tok, KVT_CHAT_GEMMA, msgs, 4, NULL, NULL, SIZE_MAX, 0, &at, &ids, &n) == 0 && at > 1 &&
          at < n);
    free(ids);
    kvt_model_free(m);
    m = vocab_model("gemma3");
    CHECK(m && kvt_chat_detect(m->chat_template) == KVT_CHAT_GEMMA);
    kvt_model_free(m);
}

static void test_phi3(void) {
    kvt_model *m = vocab_model("phi3");
    if (!m) return;
    CHECK(kvt_chat_detect(m->chat_template) == KVT_CHAT_PHI3);
    kvt_chat_msg msgs[] = {{"system", "Be brief."}, {"user", "Hi"}, {"assistant", "Hello."}, {"user", "Bye"}};
    expect(m, KVT_CHAT_PHI3, msgs, 4, 1,
           "<|system|>\nBe brief.<|end|>\n<|user|>\nHi<|end|>\n<|assistant|>\nHello.<|end|>\n<|user|>\nBye<|end|>\n"
           "<|assistant|>\n");
    CHECK(kvt_chat_family_parse("phi3") == KVT_CHAT_PHI3 && kvt_chat_family_parse("gemma") == KVT_CHAT_GEMMA &&
          kvt_chat_family_parse("qwen3") == KVT_CHAT_QWEN3);
    kvt_model_free(m);
}

/* Mistral's tool turns: the tools after the first user turn's BOS, a call
 * and the results outside [INST]. (The llama vocabulary has no Mistral
 * control tokens, so the markers are text here.) */
static void test_mistral_tools(void) {
    kvt_model *m = vocab_model("llama");
    if (!m) return;
    kvt_chat_msg msgs[] = {{"tools", "[{\"name\": \"f\"}]"},
                           {"system", "Be brief."},
                           {"user", "Hi"},
                           {"assistant", "[TOOL_CALLS][{\"name\": \"f\", \"arguments\": {}}]"},
                           {"tool", "{\"content\": 1, \"call_id\": \"a\"}"},
                           {"user", "Bye"}};
    expect(
        m, KVT_CHAT_MISTRAL, msgs, 6, 1,
        "[AVAILABLE_TOOLS][{\"name\": \"f\"}][/AVAILABLE_TOOLS][INST] Be brief.\n\nHi [/INST] "
        "[TOOL_CALLS][{\"name\": \"f\", \"arguments\": {}}]<|endoftext|>[TOOL_RESULTS]{\"content\": 1, \"call_id\": \"a\"}"
        "[/TOOL_RESULTS]<|endoftext|>[INST] Bye [/INST]");
    /* a reply kvtier generated follows the prompt it was generated after, as its exact ids */
    int32_t *p = NULL, *h = NULL;
    size_t np = 0, nh = 0;
    const char *call = msgs[3].content;
    CHECK(kvt_chat_render(m->tok, KVT_CHAT_MISTRAL, msgs, 3, NULL, NULL, SIZE_MAX, &p, &np) == 0 &&
          kvt_chat_render(m->tok, KVT_CHAT_MISTRAL, msgs, 6, reply_lookup, (void *)call, SIZE_MAX, &h, &nh) == 0);
    CHECK(nh > np + 3 && !memcmp(h, p, np * sizeof *p) && h[np] == 301 && h[np + 1] == 302 && h[np + 2] == 303);
    free(p);
    free(h);
    kvt_model_free(m);
}

/* On a SentencePiece vocabulary a rendering gets the ids of its text
 * tokenized whole with the BOS these vocabularies add to a prompt, as
 * llama.cpp tokenizes a rendered prompt (ChatML and Phi-3 write no BOS
 * themselves): the prefix space only at the start and after a special token,
 * never before each role name, newline or message ("<|user|>\nHi" is "\n",
 * "Hi", not "\n", " Hi"), and Phi-3's markers strip the whitespace after
 * them. (The texts end in letters: a piece cannot merge with the markup.) */
static void test_spm_pieces(void) {
    static const struct {
        const char *vocab;
        kvt_chat_family f;
    } cases[] = {{"ggml-vocab-phi-3.gguf", KVT_CHAT_PHI3},
                 {"ggml-vocab-llama-spm.gguf", KVT_CHAT_CHATML},
                 {"ggml-vocab-llama-spm.gguf", KVT_CHAT_PHI3}};
    kvt_chat_msg msgs[] = {{"system", "Be brief"}, {"user", "Hello there"}, {"assistant", "Hi"}, {"user", "Bye"}};
    for (size_t c = 0; c < KVT_ARRAY_LEN(cases); c++) {
        kvt_tokenizer *t = kvt_test_vocab(cases[c].vocab);
        if (!t) {
            printf("skip %s: not in the shared vocabularies\n", cases[c].vocab);
            continue;
        }
        int32_t *ids = NULL, *whole = NULL;
        size_t n = 0, nw = 0;
        char *text = NULL;
        CHECK(kvt_chat_render(t, cases[c].f, msgs, 4, NULL, NULL, SIZE_MAX, &ids, &n) == 0);
        CHECKF(n > 1 && ids[0] == kvt_tokenizer_bos(t), "%s, %s: the prompt starts with BOS", cases[c].vocab,
               kvt_chat_family_name(cases[c].f));
        CHECK(kvt_detokenize(t, ids + 1, n - 1, 1, &text, NULL) == 0);
        CHECK(kvt_tokenize(t, text, strlen(text), kvt_tokenizer_add_special(t), 1, &whole, &nw) == 0);
        CHECKF(nw == n && !memcmp(ids, whole, n * sizeof *ids), "%s, %s: %zu ids rendered, %zu for its text whole",
               cases[c].vocab, kvt_chat_family_name(cases[c].f), n, nw);
        CHECKF(!strstr(text, " Hello"), "%s: no space is added before a message: %s", cases[c].vocab, text);
        free(ids);
        free(whole);
        free(text);
        kvt_tokenizer_free(t);
    }
}

int main(void) {
    test_mistral_tools();
    test_qwen3();
    test_gemma();
    test_phi3();
    test_spm_pieces();
    return kvt_test_done("test_chat_families");
}
