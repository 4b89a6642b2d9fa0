// SPDX-License-Identifier: MIT
/* `kvtier run`'s prompts file (-f), private to src/cli/: what each line asks
 * for, reading the file, and running the lines that act on the cache
 * (cli_run_file.c); cli_run.c generates the others. */
#ifndef KVT_CLI_RUN_H
#define KVT_CLI_RUN_H

#include <stddef.h>
#include <stdint.h>

#include "api_openai.h" /* the server's session and document parsers read a JSON line's "kvtier" */
#include "kvtier.h"

/* What one line of -f asks for. JSON lines may carry kvtier's session
 * controls, as the server's requests do: {"prompt", "kvtier": {session_id,
 * priority, keep_warm_s}} keeps that session's context warm after the line
 * runs; {"action": "prefetch" | "pin", "prompt"} restores / pins a prefix
 * (pins hold until the run ends or an {"action": "unpin", "prompt"} line);
 * {"action": "end_session", "kvtier": {"session_id"}} ends a warm session. */
typedef enum { LINE_GENERATE, LINE_PREFETCH, LINE_PIN, LINE_UNPIN, LINE_END_SESSION } line_action;

typedef struct {
    char *prompt; /* NULL for end_session */
    line_action action;
    kvt_api_session session;
    kvt_document *docs; /* "kvtier": {"documents": [...]}: fixed context blocks before the prompt */
    size_t n_docs;
    int approximate;       /* "kvtier": {"reuse": "approximate"}: documents may be placed from stored KV */
    float recompute_ratio; /* "kvtier": {"recompute_ratio"}, or < 0 for the default */
} run_line;

/* A pin made by a "pin" line, released by "unpin" with the same prompt or at the end. */
typedef struct {
    char *prompt;
    kvt_pin *pin;
} run_pin;

/* The prompts of path ("-": stdin), one per line; a line starting with '{' is
 * JSON (see run_line); empty lines are skipped. Returns the count and *out
 * (free with kvt_run_lines_free), or -1 after printing why (file and line). */
long kvt_run_read_lines(const char *path, run_line **out);
/* Frees v[0..n) and v (NULL-safe). */
void kvt_run_lines_free(run_line *v, size_t n);
/* The action's name as a JSON line spells it ("pin", ...). */
const char *kvt_run_action_name(line_action a);
/* Runs a non-generating line (prefetch, pin, unpin, end_session) on the cache
 * with the line's tokens (none for end_session) and salt (NULL: none), and
 * says on stderr what it did, as line k. A pin is added to *pins (*n_pins of
 * them, realloc'd; the caller releases them), and unpin releases the pin made
 * with the same prompt. */
void kvt_run_action(kvt_cache *cache, const run_line *l, const int32_t *toks, size_t n_tok, const char *salt,
                    run_pin **pins, size_t *n_pins, long k);

#endif
