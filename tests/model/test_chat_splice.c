// SPDX-License-Identifier: MIT
/* A template's rendering tokenized with generated replies spliced in
 * (kvt_chat_tokenize_spliced): without spans it is the plain tokenization;
 * a span becomes its ids exactly, the text around it tokenized piece by
 * piece with BOS once at the start and EOS once at the end; so a turn's
 * sequence (its prompt and the reply's ids) is a prefix of the next turn's
 * rendering, token for token. Spans out of order or outside the text, and a
 * result past max_tokens, are errors that leave nothing behind. */
#include <stdlib.h>
#include <string.h>

#include "chat.h"
#include "common.h"
#include "model.h"
#include "testutil.h"
#include "vocab_test.h"

#define P1 "<|im_start|>user\nhello there<|im_end|>\n<|im_start|>assistant\n"
#define REPLY "General Kenobi"
#define TAIL "<|im_end|>\n<|im_start|>user\nand then?<|im_end|>\n<|im_start|>assistant\n"

static int same(const int32_t *a, size_t na, const int32_t *b, size_t nb) {
    return na == nb && (!na || !memcmp(a, b, na * sizeof *a));
}

static void test_splice(const kvt_tokenizer *t) {
    const char *text = P1 REPLY TAIL;
    size_t len = strlen(text), at = strlen(P1);
    int32_t *plain = NULL, *out = NULL, *head = NULL, *tail = NULL;
    size_t np = 0, n = 0, nh = 0, nt = 0;
    /* no spans: the tokenization of the whole */
    CHECK(kvt_tokenize(t, text, len, KVT_TOK_ADD_BOS, 1, &plain, &np) == 0);
    CHECK(kvt_chat_tokenize_spliced(t, text, len, KVT_TOK_ADD_BOS, NULL, 0, SIZE_MAX, &out, &n) == 0);
    CHECK(same(out, n, plain, np));
    free(out);
    /* one span: the prompt's ids, the reply's ids, the tail's */
    static const int32_t reply[] = {7, 300, 12, 250};
    kvt_chat_splice sp = {.at = at, .len = strlen(REPLY), .ids = reply, .n = 4};
    CHECK(kvt_chat_tokenize_spliced(t, text, len, KVT_TOK_ADD_BOS | KVT_TOK_ADD_EOS, &sp, 1, SIZE_MAX, &out, &n) == 0);
    CHECK(kvt_tokenize(t, P1, at, KVT_TOK_ADD_BOS, 1, &head, &nh) == 0);
    CHECK(kvt_tokenize(t, TAIL, strlen(TAIL), KVT_TOK_ADD_EOS, 1, &tail, &nt) == 0);
    CHECKF(n == nh + 4 + nt, "%zu ids, want %zu", n, nh + 4 + nt);
    if (n == nh + 4 + nt) {
        /* turn 1's sequence (its prompt as tokenized then, and its reply) is where turn 2 starts */
        CHECK(same(out, nh, head, nh));
        CHECK(same(out + nh, 4, reply, 4));
        CHECK(same(out + nh + 4, nt, tail, nt));
    }
    free(out);
    /* the limit counts spliced ids too; a failure leaves nothing */
    out = (int32_t *)1;
    CHECK(kvt_chat_tokenize_spliced(t, text, len, 0, &sp, 1, nh + 3, &out, &n) == KVT_ELIMIT && !out && !n);
    CHECK(kvt_chat_tokenize_spliced(t, text, len, 0, &sp, 1, nh + 4 + nt, &out, &n) == 0);
    free(out);
    /* spans out of order or past the text */
    kvt_chat_splice two[2] = {sp, sp};
    CHECK(kvt_chat_tokenize_spliced(t, text, len, 0, two, 2, SIZE_MAX, &out, &n) == KVT_EARG && !out);
    kvt_chat_splice past = {.at = len - 2, .len = 3, .ids = reply, .n = 4};
    CHECK(kvt_chat_tokenize_spliced(t, text, len, 0, &past, 1, SIZE_MAX, &out, &n) == KVT_EARG && !out);
    /* a span at the very end (an empty last piece) */
    kvt_chat_splice end = {.at = len, .len = 0, .ids = reply, .n = 4};
    CHECK(kvt_chat_tokenize_spliced(t, text, len, 0, &end, 1, SIZE_MAX, &out, &n) == 0);
    CHECK(n >= 4 && same(out + n - 4, 4, reply, 4));
    free(out);
    free(plain);
    free(head);
    free(tail);
}

int main(void) {
    kvt_model *m = kvt_test_vocab_model(NULL, "splice.gguf");
    if (m) test_splice(m->tok);
    kvt_model_free(m);
    return kvt_test_done("test_chat_splice");
}
