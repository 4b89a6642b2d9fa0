// SPDX-License-Identifier: MIT
/* The /infill prompt (api_infill.h). Its layout, as llama-server b4748 lays
 * it out (the repository-level FIM pattern of Qwen2.5-Coder's paper, where the
 * vocabulary has the repository and file-separator tokens):
 *
 *   [REP] "myproject\n"                       only with a REP token
 *   per extra chunk: [SEP] filename "\n"      with a SEP token, else the
 *                    text                     "\n\n--- snippet ---\n\n" line
 *   [SEP] "filename\n"                        only with a SEP token
 *   BOS (where the model adds one)
 *   [PRE] prefix prompt [SUF] suffix [MID]    (--spm-infill: [SUF] suffix
 *                                              [PRE] prefix prompt [MID])
 *
 * The extra chunks' tokens come first, before BOS, as llama-server places
 * them. Every part is tokenized on its own, without special tokens (a file's
 * "<|im_start|>" is text), except "prompt", whose special tokens count, as
 * llama-server reads it. */
#include "api_infill.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"

#define INVALID "invalid_request_error"
#define CHUNK_LINE "\n\n--- snippet ---\n\n" /* between extra chunks without a SEP token */

typedef struct {
    int32_t *v;
    size_t n, cap;
} ids_t;

static void push_n(ids_t *a, const int32_t *x, size_t n) {
    if (a->n + n > a->cap) {
        a->cap = KVT_MAX(a->n + n, a->cap ? 2 * a->cap : 256);
        a->v = kvt_xrealloc(a->v, a->cap * sizeof *a->v);
    }
    if (n) memcpy(a->v + a->n, x, n * sizeof *x);
    a->n += n;
}

static void push(ids_t *a, int32_t id) { push_n(a, &id, 1); }

/* Appends the tokens of text[0..len) (special tokens only where parse_special). 0, or KVT_EARG. */
static int push_text(const kvt_tokenizer *tok, ids_t *a, const char *text, size_t len, int parse_special,
                     const char *field, kvt_api_error *err) {
    int32_t *t = NULL;
    size_t n = 0;
    if (kvt_tokenize(tok, text, len, 0, parse_special, &t, &n))
        return kvt_api_errorf(err, 400, INVALID, field, "invalid_value", "'%s' could not be tokenized", field);
    push_n(a, t, n);
    free(t);
    return 0;
}

/* input_prefix or input_suffix: a string, or llama-server's mixed array of strings and token ids. */
static int push_part(const kvt_tokenizer *tok, ids_t *a, const cJSON *root, const char *field, kvt_api_error *err) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, field);
    if (!v || cJSON_IsNull(v))
        return kvt_api_errorf(err, 400, INVALID, field, "missing_required_parameter", "'%s' is required", field);
    if (cJSON_IsString(v)) return push_text(tok, a, v->valuestring, strlen(v->valuestring), 0, field, err);
    if (!cJSON_IsArray(v))
        return kvt_api_errorf(err, 400, INVALID, field, "invalid_type",
                              "'%s' must be a string or an array of strings and token ids", field);
    int32_t n_vocab = kvt_tokenizer_n_vocab(tok);
    for (const cJSON *e = v->child; e; e = e->next) {
        if (cJSON_IsString(e)) {
            if (push_text(tok, a, e->valuestring, strlen(e->valuestring), 0, field, err)) return KVT_EARG;
        } else if (cJSON_IsNumber(e) && e->valuedouble >= 0 && e->valuedouble < n_vocab &&
                   e->valuedouble == (int32_t)e->valuedouble) {
            push(a, (int32_t)e->valuedouble);
        } else {
            return kvt_api_errorf(err, 400, INVALID, field, "invalid_value",
                                  "'%s' holds an item that is neither a string nor a token id in [0, %d)", field,
                                  n_vocab);
        }
    }
    return 0;
}

/* The extra chunks' tokens (and the repository and file lines around them) in *a. 0, or KVT_EARG. */
static int push_extra(const kvt_tokenizer *tok, ids_t *a, const cJSON *root, kvt_api_error *err) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(root, "input_extra");
    if (x && !cJSON_IsNull(x) && !cJSON_IsArray(x))
        return kvt_api_errorf(err, 400, INVALID, "input_extra", "invalid_type",
                              "'input_extra' must be an array of {\"filename\": string, \"text\": string}");
    int32_t rep = kvt_tokenizer_fim(tok, KVT_FIM_REP), sep = kvt_tokenizer_fim(tok, KVT_FIM_SEP);
    if (rep >= 0) {
        push(a, rep);
        if (push_text(tok, a, "myproject\n", 10, 0, "input_extra", err)) return KVT_EARG;
    }
    size_t i = 0;
    for (const cJSON *c = cJSON_IsArray(x) ? x->child : NULL; c; c = c->next, i++) {
        const cJSON *text = cJSON_GetObjectItemCaseSensitive(c, "text");
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(c, "filename");
        if (!cJSON_IsString(text))
            return kvt_api_error_item(err, "input_extra", i, ".text", "invalid_type",
                                      "each input_extra chunk needs a \"text\" string (item %zu)", i);
        if (name && !cJSON_IsNull(name) && !cJSON_IsString(name))
            return kvt_api_error_item(err, "input_extra", i, ".filename", "invalid_type",
                                      "an input_extra chunk's \"filename\" must be a string (item %zu)", i);
        if (sep >= 0) {
            const char *fn = cJSON_IsString(name) ? name->valuestring : "tmp";
            size_t len = strlen(fn);
            char *line = kvt_xmalloc(len + 2);
            memcpy(line, fn, len);
            memcpy(line + len, "\n", 2);
            push(a, sep);
            int rc = push_text(tok, a, line, len + 1, 0, "input_extra", err);
            free(line);
            if (rc) return KVT_EARG;
        } else if (push_text(tok, a, CHUNK_LINE, strlen(CHUNK_LINE), 0, "input_extra", err)) {
            return KVT_EARG;
        }
        if (push_text(tok, a, text->valuestring, strlen(text->valuestring), 0, "input_extra", err)) return KVT_EARG;
    }
    if (sep >= 0) {
        push(a, sep);
        if (push_text(tok, a, "filename\n", 9, 0, "input_extra", err)) return KVT_EARG;
    }
    return 0;
}

/* The FIM tokens the layout needs: a 501 naming those the vocabulary lacks, as llama-server answers. */
static int check_tokens(const kvt_tokenizer *tok, kvt_api_error *err) {
    static const char *const names[] = {"prefix", "suffix", "middle"};
    char missing[64] = "";
    for (int k = KVT_FIM_PRE; k <= KVT_FIM_MID; k++)
        if (kvt_tokenizer_fim(tok, k) < 0)
            snprintf(missing + strlen(missing), sizeof missing - strlen(missing), "%s%s", *missing ? ", " : "",
                     names[k]);
    if (!*missing) return 0;
    return kvt_api_errorf(err, 501, "not_supported_error", NULL, "not_supported",
                          "infill is not supported by this model: its vocabulary has no fill-in-the-middle %s token "
                          "(tokenizer.ggml.fim_*_token_id, or a token such as <|fim_prefix|>)",
                          missing);
}

/* How many of the prefix's last, the suffix's first and the extra context's last tokens go in. */
typedef struct {
    int64_t pre, suf, extra;
} takes;

/* llama-server's shares of n_pre, n_suf and n_extra tokens, for a prompt of `fixed` other tokens (BOS, the
 * FIM tokens, "prompt"); where the context cannot hold them and a token to generate (llama-server's shares
 * may overflow it), fewer: of the extra context, then of the prefix's start, then of the suffix's end.
 * Without a batch (/v1/completions), the prefix and the suffix whole. */
static takes shares(const kvt_api_infill_shape *sh, size_t n_pre, size_t n_suf, size_t n_extra, size_t n_prompt,
                    int64_t fixed) {
    int64_t nb = sh->n_batch;
    if (nb <= 0) return (takes){(int64_t)n_pre, (int64_t)n_suf, 0};
    takes t = {KVT_MIN((int64_t)n_pre, 3 * (nb / 4)),
               KVT_MIN((int64_t)n_suf, KVT_MAX(0, nb / 4 - (2 + (int64_t)n_prompt))),
               KVT_MIN(KVT_MAX(0, (int64_t)sh->n_ctx - nb - 2 * (int64_t)sh->n_predict), (int64_t)n_extra)};
    int64_t room = KVT_MAX(0, (int64_t)sh->n_ctx - 1 - fixed), over = t.pre + t.suf - room;
    if (over > 0) {
        int64_t d = KVT_MIN(over, t.pre);
        t.pre -= d;
        t.suf -= KVT_MIN(over - d, t.suf);
    }
    t.extra = KVT_MIN(t.extra, KVT_MAX(0, room - t.pre - t.suf));
    return t;
}

int kvt_api_infill_ids(const kvt_tokenizer *tok, const cJSON *root, const kvt_api_infill_shape *sh, int32_t **ids,
                       size_t *n, kvt_api_error *err) {
    *ids = NULL;
    *n = 0;
    if (check_tokens(tok, err)) return KVT_EARG;
    ids_t prefix = {0}, suffix = {0}, prompt = {0}, extra = {0}, out = {0};
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(root, "prompt");
    int rc = 0;
    if (p && !cJSON_IsNull(p) && !cJSON_IsString(p))
        rc = kvt_api_errorf(err, 400, INVALID, "prompt", "invalid_type", "'prompt' must be a string");
    else if (cJSON_IsString(p)) rc = push_text(tok, &prompt, p->valuestring, strlen(p->valuestring), 1, "prompt", err);
    if (!rc) rc = push_part(tok, &prefix, root, "input_prefix", err);
    if (!rc) rc = push_part(tok, &suffix, root, "input_suffix", err);
    if (!rc && sh->n_batch > 0) rc = push_extra(tok, &extra, root, err);
    if (!rc) {
        int32_t bos = kvt_tokenizer_bos(tok);
        int add_bos = (kvt_tokenizer_add_special(tok) & KVT_TOK_ADD_BOS) && bos >= 0;
        takes t = shares(sh, prefix.n, suffix.n, extra.n, prompt.n, add_bos + 3 + (int64_t)prompt.n);
        ids_t head = {0}, tail = {0}; /* [PRE] prefix prompt and [SUF] suffix */
        push(&head, kvt_tokenizer_fim(tok, KVT_FIM_PRE));
        push_n(&head, prefix.v + prefix.n - t.pre, (size_t)t.pre);
        push_n(&head, prompt.v, prompt.n);
        push(&tail, kvt_tokenizer_fim(tok, KVT_FIM_SUF));
        push_n(&tail, suffix.v, (size_t)t.suf);
        push_n(&out, extra.v + extra.n - t.extra, (size_t)t.extra);
        if (add_bos) push(&out, bos);
        push_n(&out, sh->spm ? tail.v : head.v, sh->spm ? tail.n : head.n);
        push_n(&out, sh->spm ? head.v : tail.v, sh->spm ? head.n : tail.n);
        push(&out, kvt_tokenizer_fim(tok, KVT_FIM_MID));
        free(head.v);
        free(tail.v);
        *ids = out.v;
        *n = out.n;
    }
    free(prefix.v);
    free(suffix.v);
    free(prompt.v);
    free(extra.v);
    return rc;
}
