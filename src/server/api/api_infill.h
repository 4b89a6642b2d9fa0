// SPDX-License-Identifier: MIT
/* llama-server's /infill: the fill-in-the-middle prompt of a code model,
 * built from a request's input_prefix, input_suffix, input_extra and prompt
 * with the vocabulary's FIM tokens, token for token as llama-server b4748
 * builds it (docs/from-llama-server.md "/infill"). The request then runs as a
 * /completion of those ids.
 *
 * Thread-safety: reentrant. */
#ifndef KVT_API_INFILL_H
#define KVT_API_INFILL_H

#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "api_error.h"
#include "tokenizer.h"

/* What bounds the parts: llama-server keeps the prefix's last 3/4 of a batch and the suffix's first
 * quarter less the prompt, and fills what the context leaves past a batch and two replies with the
 * extra chunks' last tokens. */
typedef struct {
    int32_t n_ctx;     /* tokens of a sequence's context */
    int32_t n_batch;   /* llama-server's batch (its -b, 2048 by default); 0: the prefix and suffix whole and
                          no extra context (/v1/completions' suffix) */
    int32_t n_predict; /* the server's default reply length (-n; -1: none) */
    int spm;           /* --spm-infill: the suffix before the prefix, as some models are trained */
} kvt_api_infill_shape;

/* The FIM prompt of body root (a JSON object) in *ids (malloc'd, *n of them). The FIM tokens missing
 * from the vocabulary are a 501 naming them; a missing or mistyped field a 400 naming it. 0, or
 * KVT_EARG with *err. */
int kvt_api_infill_ids(const kvt_tokenizer *tok, const cJSON *root, const kvt_api_infill_shape *sh, int32_t **ids,
                       size_t *n, kvt_api_error *err);

#endif
