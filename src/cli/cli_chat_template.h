// SPDX-License-Identifier: MIT
/* The chat template flags of serve (cli_chat_template.c): --jinja renders
 * the model's own tokenizer.chat_template with kvtier's Jinja interpreter,
 * --chat-template-file takes the template from a file instead, and
 * --reasoning-format says what becomes of a reply's <think> text. */
#ifndef KVT_CLI_CHAT_TEMPLATE_H
#define KVT_CLI_CHAT_TEMPLATE_H

#include "cli.h"
#include "jinja.h"

#define KVT_CLI_TEMPLATE_ID_BASE 1500
#define KVT_CLI_IS_TEMPLATE_ID(id) ((id) >= KVT_CLI_TEMPLATE_ID_BASE && (id) < KVT_CLI_TEMPLATE_ID_BASE + 100)
extern const kvt_cli_section kvt_cli_template_section;

#define KVT_CLI_JINJA_DEFAULT (-1) /* neither --jinja nor --no-jinja (kvt_cli_template_load) */

typedef struct {
    int jinja;            /* 1: --jinja, 0: --no-jinja, or KVT_CLI_JINJA_DEFAULT */
    const char *file;     /* --chat-template-file, or NULL */
    int reasoning_format; /* KVT_REASONING_* (server.h) */
    struct cJSON *kwargs; /* --chat-template-kwargs: an object (owned; kvt_cli_template_args_free), or NULL */
} kvt_cli_template_args;

/* Frees what t owns. */
void kvt_cli_template_args_free(kvt_cli_template_args *t);

/* The section's handler. 0, or -1 after printing why. */
int kvt_cli_template_opt(int id, const kvt_cli_arg *a, kvt_cli_template_args *t);

/* The template text a command renders with: --chat-template-file's (read
 * without following links, into a malloc'd *text) or else the model's
 * (*text NULL, *tmpl the model's, maybe NULL). 0, or -1 after printing why. */
int kvt_cli_template_text(const char *cmd, const kvt_cli_template_args *t, const char *model_template, char **text,
                          const char **tmpl);

/* The Jinja rendering of tmpl, when --jinja asks for it, or by default
 * wherever there is a template and no family is named (named:
 * --chat-template NAME): tmpl parsed and tried on a one-message chat, into
 * *out; *object_args: tool call arguments reach it as objects. A template that does not parse, or
 * fails or runs past a limit there, stops the start under --jinja, and by
 * default too unless it is of a family kvtier renders itself (a warning,
 * and *out = NULL). Otherwise *out = NULL. *toolless_only: by default, a
 * model's template of a built-in family that never mentions tools renders
 * only the chats without tools, tool calls and tool results (the family's
 * built-in rendering writes those). 0, or -1 after printing why. */
int kvt_cli_template_load(const char *cmd, const kvt_cli_template_args *t, const char *tmpl, int named,
                          const struct kvt_tokenizer *tok, kvt_jinja **out, int *object_args, int *toolless_only);

#endif
