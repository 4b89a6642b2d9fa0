// SPDX-License-Identifier: MIT
/* A small Jinja2 interpreter for chat templates: the subset the
 * tokenizer.chat_template of real GGUF files uses (expressions, if/for/set,
 * macros, call and filter blocks, namespaces, loop controls, recursive loops,
 * the common filters, tests and string methods), with the settings Hugging
 * Face renders them with: trim_blocks, lstrip_blocks, its tojson (no ASCII
 * or HTML escaping unless asked), raise_exception and strftime_now as
 * globals.
 *
 * A template is untrusted input: parsing bounds its nesting, and rendering
 * bounds its output, its steps (statements run and loop iterations), its
 * call depth and the memory its values take, each with an error that says
 * which limit was hit and where.
 *
 * Thread-safety: a parsed template is read-only while rendering, so several
 * threads may render the same one at once. */
#ifndef KVT_JINJA_H
#define KVT_JINJA_H

#include <stddef.h>

struct cJSON;

typedef struct kvt_jinja kvt_jinja;

typedef struct {
    size_t max_output; /* bytes of rendered text */
    size_t max_steps;  /* statements run plus loop iterations */
    size_t max_depth;  /* nested macro calls */
    size_t max_memory; /* bytes of values made while rendering */
} kvt_jinja_limits;

/* Defaults fit a chat of thousands of messages: 16 MiB out, 10M steps, 64
 * calls deep, 256 MiB of values. */
kvt_jinja_limits kvt_jinja_default_limits(void);

/* Parses src[0..len). Returns 0 and *out (kvt_jinja_free), or KVT_EFORMAT with
 * kvt_errmsg() naming the line and what is wrong. */
int kvt_jinja_parse(const char *src, size_t len, kvt_jinja **out);
void kvt_jinja_free(kvt_jinja *t);

/* Renders t with the top-level variables of the JSON object vars (messages,
 * tools, add_generation_prompt, bos_token, ...; borrowed, not changed).
 * Returns 0 and a malloc'd NUL-terminated *out of *len bytes, or KVT_EFORMAT
 * (a runtime error, raise_exception's message included) or KVT_ELIMIT (a
 * limit of lim, NULL for the defaults) with kvt_errmsg(). */
int kvt_jinja_render(const kvt_jinja *t, const struct cJSON *vars, const kvt_jinja_limits *lim, char **out, size_t *len);

/* kvt_jinja_render that also says which bytes of the rendering are the
 * variables' text rather than the template's: a malloc'd *marks of *len
 * bytes, 1 where the byte is, or was made from (a case change, an escape), a
 * byte of a string of vars (keys included), 0 where the template wrote it.
 * The top-level variables named in trusted (NULL-terminated, or NULL), such
 * as bos_token, count as the template's. A caller tokenizes the marked bytes
 * as plain text, so no message can spell a control token. */
int kvt_jinja_render_marked(const kvt_jinja *t, const struct cJSON *vars, const char *const *trusted,
                            const kvt_jinja_limits *lim, char **out, size_t *len, unsigned char **marks);

#endif
