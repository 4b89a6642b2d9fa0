// SPDX-License-Identifier: MIT
/* `kvtier --man`: the manual page, kvtier.1, made of the same text as --help
 * (the top-level usage and every command's), so the two cannot drift apart.
 * run's and serve's options come from their tables as tagged paragraphs; the
 * hand-written help of the other commands is kept as preformatted text. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

/* Writes plain text as preformatted man(7) lines: a backslash, a minus sign
 * and a line that starts with a control character are escaped. */
static void man_plain(FILE *out, const char *s, size_t n) {
    if (!n) return;
    fputs(".PP\n.nf\n", out); /* .PP: back to the left margin after tagged paragraphs */
    int bol = 1;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (bol && (c == '.' || c == '\'')) fputs("\\&", out);
        bol = c == '\n';
        if (c == '\\') fputs("\\e", out);
        else if (c == '-') fputs("\\-", out);
        else fputc(c, out);
    }
    if (!bol) fputc('\n', out);
    fputs(".fi\n", out);
}

/* Runs one usage function into a buffer and writes it as markup: plain text
 * escaped, the markup of kvt_cli_print_opts (between KVT_CLI_MAN_BEGIN and
 * KVT_CLI_MAN_END) as is. */
static int man_usage(FILE *out, void (*usage)(FILE *f)) {
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f) return -1;
    kvt_cli_set_man_mode(1);
    usage(f);
    kvt_cli_set_man_mode(0);
    if (fclose(f)) {
        free(buf);
        return -1;
    }
    const char *p = buf, *end = buf + len;
    while (p < end) {
        const char *b = memchr(p, KVT_CLI_MAN_BEGIN, (size_t)(end - p));
        man_plain(out, p, (size_t)((b ? b : end) - p));
        if (!b) break;
        const char *e = memchr(b, KVT_CLI_MAN_END, (size_t)(end - b));
        if (!e) e = end;
        fwrite(b + 1, 1, (size_t)(e - b - 1), out);
        p = e < end ? e + 1 : end;
    }
    free(buf);
    return 0;
}

int kvt_cli_man(FILE *out) {
    /* no date: the page is the same bytes for the same sources */
    fprintf(out,
            ".\\\" kvtier.1, written by `kvtier --man` from the text of --help; do not edit.\n"
            ".TH KVTIER 1 \"\" \"kvtier %s\" \"User Commands\"\n"
            ".nh\n.ad l\n"
            ".SH NAME\nkvtier \\- LLM inference with a tiered, reusable KV cache\n"
            ".SH SYNOPSIS\n.B kvtier\n\\fIcommand\\fR [\\fIoptions\\fR]\n"
            ".SH DESCRIPTION\n"
            "kvtier runs GGUF models on the CPU and keeps the KV cache of the prompts it has seen in tiers "
            "(T0 active pages, T1 host RAM, T2 local disk, T3 a shared Redis), restoring a prompt's cached "
            "prefix block by block instead of recomputing it. Greedy output with a cache hit is "
            "bit\\-identical to a cold run.\n",
            KVT_VERSION);
    if (man_usage(out, kvt_cli_usage)) return -1;
    fputs(".SH COMMANDS\n", out);
    for (size_t i = 0; i < kvt_cli_n_commands; i++) {
        fprintf(out, ".SS \"kvtier %s\"\n", kvt_cli_commands[i].name);
        if (man_usage(out, kvt_cli_commands[i].usage)) return -1;
    }
    fputs(".SH \"SEE ALSO\"\n"
          "The README and docs/ of the kvtier sources: docs/api.md has the HTTP routes, the command line "
          "and the C API, whose header for embedders is kvtier.h "
          "(\\fBpkg\\-config \\-\\-cflags \\-\\-libs kvtier\\fR).\n",
          out);
    return ferror(out) ? -1 : 0;
}
