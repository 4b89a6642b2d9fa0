// SPDX-License-Identifier: MIT
/* llama.cpp's option names as run and serve meet them on a command line that
 * came from llama-cli or llama-server: its short options of several letters
 * (read as one option, never as a cluster of one-letter ones), and, for the
 * ones kvtier does not take, what to use instead, so that the usage error
 * names the option as typed and says where its effect is found in kvtier. */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "common.h"

/* llama.cpp's options of several letters after one '-' and their long names.
 * getopt_long would read "-cnv" as "-c nv" and "-sys" as "-s ys"; each is
 * rewritten to its long name, which is an unknown option where the command
 * has no such name. */
static const char *const multi_letter[][2] = {
    {"-np", "--parallel"},
    {"-ngl", "--n-gpu-layers"},
    {"-cb", "--cont-batching"},
    {"-nocb", "--no-cont-batching"},
    {"-fa", "--flash-attn"},
    {"-ctk", "--cache-type-k"},
    {"-ctv", "--cache-type-v"},
    {"-hf", "--hf-repo"},
    {"-hfr", "--hf-repo"},
    {"-hff", "--hf-file"},
    {"-hft", "--hf-token"},
    {"-hfd", "--hf-repo-draft"},
    {"-hfrd", "--hf-repo-draft"},
    {"-hfv", "--hf-repo-v"},
    {"-hffv", "--hf-file-v"},
    {"-mu", "--model-url"},
    {"-to", "--timeout"},
    {"-tb", "--threads-batch"},
    {"-ub", "--ubatch-size"},
    {"-sm", "--split-mode"},
    {"-ts", "--tensor-split"},
    {"-mg", "--main-gpu"},
    {"-dev", "--device"},
    {"-cnv", "--conversation"},
    {"-no-cnv", "--no-conversation"},
    {"-sys", "--system-prompt"},
    {"-sysf", "--system-prompt-file"},
    {"-st", "--single-turn"},
    {"-mli", "--multiline-input"},
    {"-sp", "--special"},
    {"-lv", "--verbosity"},
    {"-ptc", "--print-token-count"},
    {"-kvu", "--kv-unified"},
    {"-cram", "--cache-ram"},
    {"-ctxcp", "--ctx-checkpoints"},
    {"-nkvo", "--no-kv-offload"},
    {"-dkvc", "--dump-kv-cache"},
    {"-dt", "--defrag-thold"},
    {"-nr", "--no-repack"},
    {"-ot", "--override-tensor"},
    {"-cmoe", "--cpu-moe"},
    {"-ncmoe", "--n-cpu-moe"},
    {"-md", "--model-draft"},
    {"-ngld", "--n-gpu-layers-draft"},
    {"-devd", "--device-draft"},
    {"-cd", "--ctx-size-draft"},
    {"-ctkd", "--cache-type-k-draft"},
    {"-ctvd", "--cache-type-v-draft"},
    {"-td", "--threads-draft"},
    {"-tbd", "--threads-batch-draft"},
    {"-mv", "--model-vocoder"},
    {"-mm", "--mmproj"},
    {"-mmu", "--mmproj-url"},
    {"-jf", "--json-schema-file"},
    {"-sps", "--slot-prompt-similarity"},
    {"-lcs", "--lookup-cache-static"},
    {"-lcd", "--lookup-cache-dynamic"},
    {"-gan", "--grp-attn-n"},
    {"-gaw", "--grp-attn-w"},
};

/* llama.cpp's one-letter options that run and serve do not have, by their
 * long names, so that the hint below finds them. */
static const char *const one_letter[][2] = {
    {"-b", "--batch-size"}, {"-e", "--escape"},      {"-i", "--interactive"}, {"-r", "--reverse-prompt"},
    {"-v", "--verbose"},    {"-j", "--json-schema"}, {"-l", "--logit-bias"},  {"-C", "--cpu-mask"},
};

/* Where the effect of a llama.cpp option kvtier lacks is found: names is a
 * list of long names (each followed by a space), run and serve the advice in
 * each command (one NULL: the other's). */
typedef struct {
    const char *names, *run, *serve;
} hint;

#define CHAT_IN_SERVE \
    "kvtier run completes -p (or each line of -f) once, as raw text without a chat template; for a chat, run " \
    "kvtier serve and send /v1/chat/completions"
#define NO_SHIFT \
    "kvtier never shifts or trims the context: a prompt that does not fit is refused, and generation stops at the " \
    "context's end; -c sets the context"
#define NO_DOWNLOAD "kvtier downloads nothing: fetch the GGUF file yourself and give it with -m FILE"

static const hint hints[] = {
    {"batch-size ubatch-size ", "kvtier sizes its prefill steps itself",
     "kvtier sizes its prefill steps itself; --prefill-chunk N sets the tokens one step takes"},
    {"threads-batch ", "-t N sets the threads of the prompt and the generation alike", NULL},
    {"mlock no-mmap ",
     "kvtier maps the model file read-only and leaves its pages to the kernel's page cache; nothing to set", NULL},
    {"log-disable ", "KVT_LOG=0 leaves only errors on stderr", NULL},
    {"verbose verbosity log-verbosity ", "KVT_LOG=0..3 sets how much is logged (3: debug)", NULL},
    {"special ", "kvtier never prints a control token's text", NULL},
    {"conversation interactive interactive-first multiline-input single-turn system-prompt system-prompt-file "
     "reverse-prompt in-prefix in-suffix ",
     CHAT_IN_SERVE, "a llama-cli option: kvtier serve takes each chat as a request"},
    {"chat-template chat-template-file jinja no-jinja reasoning-format ",
     "kvtier run completes raw text without a chat template; kvtier serve renders chats (--chat-template, --jinja)",
     NULL},
    {"cache-ram ", "kvtier's host-RAM tier is --kv-ram BYTES (for example --kv-ram 8G)", NULL},
    {"kv-unified ", "kvtier's KV pages are one pool for every sequence already; --kv-active sets its size", NULL},
    {"ctx-checkpoints cache-reuse ",
     "kvtier reuses every cached block of a prompt by itself; --kv-ram and --kv-disk add tiers to keep them", NULL},
    {"keep context-shift no-context-shift ", NO_SHIFT, NULL},
    {"defrag-thold ", "kvtier's KV pages need no defragmenting", NULL},
    {"model-draft n-gpu-layers-draft device-draft ctx-size-draft cache-type-k-draft cache-type-v-draft "
     "threads-draft threads-batch-draft hf-repo-draft draft-max draft-min draft-p-min ",
     "kvtier has no speculative decoding", NULL},
    {"mmproj mmproj-url hf-repo-v hf-file-v model-vocoder ", "kvtier runs text models only", NULL},
    {"lora lora-scaled ", "kvtier has no LoRA adapters: merge the adapter into the GGUF first", NULL},
    {"hf-repo hf-file hf-token model-url ", NO_DOWNLOAD, NULL},
    {"json-schema json-schema-file grammar grammar-file ",
     "kvtier run generates free text; kvtier serve constrains a request's output with its \"json_schema\", "
     "\"grammar\" or \"response_format\"",
     "a request's \"json_schema\", \"grammar\" or \"response_format\" constrains its output"},
    {"logit-bias ", "kvtier serve takes a request's \"logit_bias\"", "a request's \"logit_bias\""},
    {"escape no-escape ", NULL, "a llama-cli option: kvtier serve reads prompts from requests"},
};

const char *kvt_cli_llama_long(const char *arg, int one_letter_too) {
    for (size_t k = 0; k < KVT_ARRAY_LEN(multi_letter); k++)
        if (!strcmp(arg, multi_letter[k][0])) return multi_letter[k][1];
    for (size_t k = 0; one_letter_too && k < KVT_ARRAY_LEN(one_letter); k++)
        if (!strcmp(arg, one_letter[k][0])) return one_letter[k][1];
    return NULL;
}

/* The advice for llama.cpp's long option name (without its dashes) in cmd, or NULL. */
static const char *hint_for(const char *cmd, const char *name, size_t len) {
    for (size_t k = 0; k < KVT_ARRAY_LEN(hints); k++) {
        for (const char *p = hints[k].names; *p;) {
            size_t n = strcspn(p, " ");
            if (n == len && !strncmp(p, name, n)) {
                int serve = !strcmp(cmd, "serve");
                const char *h = serve ? hints[k].serve : hints[k].run;
                return h ? h : serve ? hints[k].run : hints[k].serve;
            }
            p += n + (p[n] == ' ');
        }
    }
    return NULL;
}

void kvt_cli_unknown_option(const char *cmd, const char *typed) {
    /* the long name: a several- or one-letter llama.cpp option's, or the typed one up to any "=value" */
    const char *name = kvt_cli_llama_long(typed, 1);
    int aliased = name != NULL;
    if (!name) name = typed;
    const char *h = NULL;
    size_t len = 0;
    if (!strncmp(name, "--", 2)) {
        len = strcspn(name + 2, "=");
        h = hint_for(cmd, name + 2, len);
    }
    fprintf(stderr, "kvtier %s: unknown option '%s'", cmd, typed);
    if (h && aliased) fprintf(stderr, " (llama.cpp's %s)", name);
    if (h) fprintf(stderr, ": %s", h);
    fprintf(stderr, " (see kvtier %s --help)\n", cmd);
}
