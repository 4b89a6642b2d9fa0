// SPDX-License-Identifier: MIT
/* serve's chat template flags (cli_chat_template.h), as llama-server names
 * them: --jinja, --chat-template-file, --reasoning-format. */
#include "cli_chat_template.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "common.h"
#include "server.h" /* KVT_REASONING_* */
#include "tokenizer.h"

#define MAX_TEMPLATE_BYTES (1u << 20)

enum { T_JINJA = KVT_CLI_TEMPLATE_ID_BASE, T_NO_JINJA, T_FILE, T_REASONING, T_KWARGS };

static const kvt_cli_opt template_opts[] = {
    {T_JINJA, 0, "jinja", NULL, NULL,
     "render chat prompts with the model's own tokenizer.chat_template\n(or --chat-template-file), run by kvtier's "
     "Jinja interpreter, as\nllama-server's --jinja does: message text is never read as control\ntokens, and "
     "replies and tool calls this server generated are reused\nas their exact tokens. On by default whenever there "
     "is a template\n(unless --chat-template NAME), with one exception: where the\nmodel's template is of a "
     "built-in family and never mentions tools,\nthe chats with tools, tool calls or tool results get the family's"
     "\nbuilt-in rendering, which writes them (kvtier.renderer \"builtin\"\nin the answer); given, --jinja renders "
     "those with the template too,\nwhich drops the tools. By default a template the interpreter cannot\nrun falls "
     "back on its family's built-in rendering with a warning;\ngiven, --jinja makes that an error",
     0, KVT_CLI_PLAIN},
    {T_NO_JINJA, 0, "no-jinja", NULL, NULL,
     "render every chat prompt with the built-in renderer of the\ntemplate's family (--chat-template NAME to name "
     "it) instead of the\ntemplate itself: tools and tool calls in the family's own style;\nchat_template_kwargs then "
     "take only enable_thinking (qwen3)",
     0, KVT_CLI_PLAIN},
    {T_FILE, 0, "chat-template-file", NULL, "FILE",
     "a Jinja chat template to use instead of the model's (not followed\nif a symbolic link; at most 1 MiB): "
     "rendered as the model's would be\n(with --no-jinja, its family is detected from it)",
     0, KVT_CLI_PLAIN},
    {T_REASONING, 0, "reasoning-format", NULL, "FORMAT",
     "deepseek (default; auto is the same): a chat reply's <think>...</think>\ngoes to message.reasoning_content "
     "(delta.reasoning_content when\nstreamed), the rest to content; none: everything stays in content.\nA "
     "request's reasoning_format overrides it",
     0, KVT_CLI_PLAIN},
    {T_KWARGS, 0, "chat-template-kwargs", NULL, "JSON",
     "a JSON object of extra chat template variables, e.g.\n'{\"enable_thinking\":false}': the default under a "
     "request's own\nchat_template_kwargs (its keys win); needs the Jinja rendering",
     0, KVT_CLI_PLAIN},
};

const kvt_cli_section kvt_cli_template_section = {"Chat templates", template_opts, KVT_ARRAY_LEN(template_opts)};

int kvt_cli_template_opt(int id, const kvt_cli_arg *a, kvt_cli_template_args *t) {
    switch (id) {
    case T_JINJA: t->jinja = 1; return 0;
    case T_NO_JINJA: t->jinja = 0; return 0;
    case T_KWARGS:
        cJSON_Delete(t->kwargs);
        char bad[400] = "";
        t->kwargs = kvt_cli_json(a->str, bad, sizeof bad);
        if (!cJSON_IsObject(t->kwargs)) {
            fprintf(stderr, "kvtier: %s must be a JSON object of template variables, got '%s'%s%s\n", a->flag, a->str,
                    *bad ? ": " : "", bad);
            return -1;
        }
        return 0;
    case T_FILE: t->file = a->str; return 0;
    case T_REASONING:
        if (!strcmp(a->str, "deepseek") || !strcmp(a->str, "auto")) t->reasoning_format = KVT_REASONING_DEEPSEEK;
        else if (!strcmp(a->str, "none")) t->reasoning_format = KVT_REASONING_NONE;
        else {
            fprintf(stderr, "kvtier: %s must be deepseek, auto or none, got '%s'\n", a->flag, a->str);
            return -1;
        }
        return 0;
    default: return -1;
    }
}

void kvt_cli_template_args_free(kvt_cli_template_args *t) {
    cJSON_Delete(t->kwargs);
    t->kwargs = NULL;
}

/* The whole of a regular file of at most MAX_TEMPLATE_BYTES, not through a
 * symbolic link, as a malloc'd string; NULL with errno (EFBIG: too large). */
static char *read_template(const char *path) {
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) return NULL;
    struct stat st;
    int bad = fstat(fd, &st) ? errno : !S_ISREG(st.st_mode) ? EINVAL : st.st_size > MAX_TEMPLATE_BYTES ? EFBIG : 0;
    if (bad) {
        close(fd);
        errno = bad;
        return NULL;
    }
    char *buf = kvt_xmalloc((size_t)st.st_size + 1);
    size_t n = 0;
    while (n < (size_t)st.st_size) {
        ssize_t k = read(fd, buf + n, (size_t)st.st_size - n);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) break;
        n += (size_t)k;
    }
    close(fd);
    buf[n] = 0;
    if (strlen(buf) != n) { /* a NUL inside: not a template */
        free(buf);
        errno = EINVAL;
        return NULL;
    }
    return buf;
}

int kvt_cli_template_text(const char *cmd, const kvt_cli_template_args *t, const char *model_template, char **text,
                          const char **tmpl) {
    *text = NULL;
    *tmpl = model_template;
    if (!t->file) return 0;
    if (!(*text = read_template(t->file))) {
        fprintf(stderr, "kvtier %s: --chat-template-file %s: %s\n", cmd, t->file,
                errno == EFBIG        ? "larger than 1 MiB"
                    : errno == ELOOP  ? "a symbolic link (not followed)"
                    : errno == EINVAL ? "not a regular text file"
                                      : strerror(errno));
        return -1;
    }
    *tmpl = *text;
    return 0;
}

/* The template tried on one user message: a start-up error beats a failure at every request, and a
 * template that does not write the message's text (an empty file) would drop every request's
 * messages from its prompt. 0, or an error code with kvt_errmsg(). */
static int trial_render(const kvt_jinja *j, const struct kvt_tokenizer *tok) {
    cJSON *v = cJSON_CreateObject();
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "role", "user");
    cJSON_AddStringToObject(m, "content", "Hello");
    cJSON_AddItemToArray(cJSON_AddArrayToObject(v, "messages"), m);
    cJSON_AddBoolToObject(v, "add_generation_prompt", 1);
    size_t len;
    const char *bos = kvt_tokenizer_bos(tok) >= 0 ? kvt_tokenizer_token_text(tok, kvt_tokenizer_bos(tok), &len) : NULL;
    char *b = kvt_xstrndup(bos ? bos : "", bos ? len : 0);
    cJSON_AddStringToObject(v, "bos_token", b);
    free(b);
    char *out = NULL;
    int rc = kvt_jinja_render(j, v, NULL, &out, &len);
    cJSON_Delete(v);
    if (!rc && !strstr(out, "Hello"))
        rc = kvt_fail(KVT_EFORMAT,
                      "it does not write the messages' text (one user message \"Hello\" renders as "
                      "\"%.80s\")",
                      out);
    free(out);
    return rc;
}

int kvt_cli_template_load(const char *cmd, const kvt_cli_template_args *t, const char *tmpl, int named,
                          const struct kvt_tokenizer *tok, kvt_jinja **out, int *object_args, int *toolless_only) {
    *out = NULL;
    *object_args = 0;
    *toolless_only = 0;
    /* by default a template is rendered as itself, as llama-server's --jinja does: the request's
     * text never reads as control tokens there, and generated replies and tool calls splice back
     * as their ids, as under the built-in families; --chat-template NAME asks for a family. A
     * model's template of a family that never mentions tools would drop a request's tools from
     * the prompt and cannot write tool calls or results: the chats that carry them get the
     * family's rendering, which writes them in the family's style, and every other chat the
     * template's own */
    kvt_chat_family fam = tmpl ? kvt_chat_detect(tmpl) : KVT_CHAT_UNKNOWN;
    int toolless = tmpl && !t->file && fam != KVT_CHAT_UNKNOWN && !strstr(tmpl, "tools");
    int want = t->jinja != KVT_CLI_JINJA_DEFAULT ? t->jinja : tmpl && !named;
    if (!want) return 0;
    if (!tmpl) {
        fprintf(stderr,
                "kvtier %s: --jinja needs a chat template: the model has none; give one with "
                "--chat-template-file FILE\n",
                cmd);
        return -1;
    }
    char why[512];
    int rc = kvt_jinja_parse(tmpl, strlen(tmpl), out), parsed = !rc;
    if (!rc) rc = trial_render(*out, tok);
    snprintf(why, sizeof why, "the chat template %s: %s", parsed ? "fails on a one-message chat" : "does not parse",
             rc ? kvt_errmsg() : "");
    if (rc && t->jinja == KVT_CLI_JINJA_DEFAULT && kvt_chat_detect(tmpl) != KVT_CHAT_UNKNOWN) {
        /* the default falls back on the family's built-in rendering, saying why */
        kvt_logk(KVT_LOG_WARN, "chat_template",
                 "%s: %s; chat prompts use the built-in %s rendering instead (--jinja makes this an error)", cmd, why,
                 kvt_chat_family_name(kvt_chat_detect(tmpl)));
        kvt_jinja_free(*out);
        *out = NULL;
        return 0;
    }
    if (rc && t->jinja == 1) {
        fprintf(stderr, "kvtier %s: %s (--jinja)\n", cmd, why);
    } else if (rc) {
        fprintf(stderr,
                "kvtier %s: %s. Neither kvtier's Jinja interpreter nor one of its built-in families renders this "
                "template: give one that works with --chat-template-file FILE, or name the family it follows "
                "with --chat-template NAME (" KVT_CLI_CHAT_NAMES ")\n",
                cmd, why);
    }
    if (rc) {
        kvt_jinja_free(*out);
        *out = NULL;
        return -1;
    }
    /* a template without tojson can only write arguments as the text they came as */
    *object_args = strstr(tmpl, "tojson") != NULL;
    if (t->jinja == KVT_CLI_JINJA_DEFAULT && toolless) {
        *toolless_only = 1;
        kvt_logk(KVT_LOG_INFO, "chat_template",
                 "%s: the model's chat template renders no tools; chats with tools, tool calls or tool results use "
                 "the built-in %s rendering, which writes them (answers say kvtier.renderer \"builtin\"), every "
                 "other chat the template itself (--jinja renders every chat with the template)",
                 cmd, kvt_chat_family_name(fam));
    }
    return 0;
}
