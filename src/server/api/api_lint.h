// SPDX-License-Identifier: MIT
/* The JSON of a prompt lint report (lint.h), shared by `kvtier lint --json`
 * and GET /v1/cache/lint so tooling reads one format. */
#ifndef KVT_API_LINT_H
#define KVT_API_LINT_H

#include "lint.h"

/* Returns a malloc'd NUL-terminated JSON object (caller frees):
 * {prompts, block_size, total_tokens, reusable_tokens, reusable_fraction,
 *  reusable_fraction_after_fixes, common_prefix_tokens,
 *  per_prompt: [{index, tokens, shared_prefix_tokens, shared_blocks, with,
 *                reusable_tokens, divergence?: {token_offset, block, cause,
 *                text_before, prompt_text, earlier_text}}],
 *  causes: [{cause, label, prompts, example}], advice: [strings]}.
 * Texts are sanitized to valid UTF-8. */
char *kvt_lint_json(const kvt_tokenizer *t, const kvt_lint_prompt *p, const kvt_lint_report *r);

#endif
