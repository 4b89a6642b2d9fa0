// SPDX-License-Identifier: MIT
/* Table-driven options for run and serve: one table per command parses its
 * command line (getopt_long), checks each value against the row's kind and
 * bounds, reads $KVTIER_<NAME> for what the command line did not give, and
 * writes --help (or, for the man page, man(7) markup). */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "cli.h"
#include "common.h"

#define OPT_COLUMN 26 /* --help: where the explanations start */
#define ENV_PREFIX "KVTIER_"
#define ENV_NAME_MAX 64
#define MAX_OPTS 128     /* options of one command, aliases included */
#define LONG_ID_BASE 256 /* getopt_long's value for a long-only option: past every char */

/* $KVTIER_<NAME> for a long option name. */
static void env_name(const char *name, char *out, size_t cap) {
    size_t o = snprintf(out, cap, "%s", ENV_PREFIX);
    for (const char *p = name; *p && o + 1 < cap; p++)
        out[o++] = *p == '-' ? '_' : (char)(*p >= 'a' && *p <= 'z' ? *p - 'a' + 'A' : *p);
    out[o] = 0;
}

static int man_mode;

void kvt_cli_set_man_mode(int on) { man_mode = on; }

/* Writes s for man(7): backslashes and minus signs escaped. */
static void man_text(FILE *f, const char *s) {
    for (; *s; s++) {
        if (*s == '\\') fputs("\\e", f);
        else if (*s == '-') fputs("\\-", f);
        else if (*s == '\n') fputc(' ', f);
        else fputc(*s, f);
    }
}

/* The sections as tagged paragraphs: .TP, the flags in bold and the value in
 * italics, then the help text and the environment variable. */
static void print_opts_man(FILE *f, const kvt_cli_section *secs, size_t n_secs) {
    fputc(KVT_CLI_MAN_BEGIN, f);
    for (size_t si = 0; si < n_secs; si++) {
        if (secs[si].title) {
            fputs(".PP\n.B \"", f);
            man_text(f, secs[si].title);
            fputs(":\"\n", f);
        }
        for (size_t i = 0; i < secs[si].n; i++) {
            const kvt_cli_opt *o = &secs[si].opts[i];
            fputs(".TP\n", f);
            if (o->short_name) fprintf(f, "\\fB\\-%c\\fR, ", o->short_name);
            fputs("\\fB\\-\\-", f);
            man_text(f, o->name);
            fputs("\\fR", f);
            if (o->alias) {
                fputs(", \\fB\\-\\-", f);
                man_text(f, o->alias);
                fputs("\\fR", f);
            }
            if (o->arg) {
                fputs(" \\fI", f);
                man_text(f, o->arg);
                fputs("\\fR", f);
            }
            fputs("\n\\&", f);
            man_text(f, o->help);
            if (!(o->flags & KVT_CLI_NO_ENV)) {
                char env[ENV_NAME_MAX];
                env_name(o->name, env, sizeof env);
                fputs(" [\\fB$", f);
                man_text(f, env);
                fputs("\\fR]", f);
            }
            fputc('\n', f);
        }
    }
    fputs(".TP\n\\fB\\-h\\fR, \\fB\\-\\-help\\fR\nthis help\n", f);
    fputc(KVT_CLI_MAN_END, f);
}

void kvt_cli_print_opts(FILE *f, const kvt_cli_section *secs, size_t n_secs) {
    if (man_mode) {
        print_opts_man(f, secs, n_secs);
        return;
    }
    for (size_t si = 0; si < n_secs; si++) {
        if (secs[si].title) fprintf(f, "\n%s:\n", secs[si].title);
        for (size_t i = 0; i < secs[si].n; i++) {
            const kvt_cli_opt *o = &secs[si].opts[i];
            char left[128];
            int l = snprintf(left, sizeof left, "  %s%c%s--%s%s%s%s%s", o->short_name ? "-" : "",
                             o->short_name ? o->short_name : ' ', o->short_name ? ", " : "", o->name,
                             o->alias ? ", --" : "", o->alias ? o->alias : "", o->arg ? " " : "", o->arg ? o->arg : "");
            if (!o->short_name) memmove(left + 2, left + 3, strlen(left + 3) + 1), l--; /* no "- " for a long-only */
            fputs(left, f);
            const char *h = o->help;
            if (l + 1 > OPT_COLUMN) fprintf(f, "\n%*s", OPT_COLUMN, "");
            else fprintf(f, "%*s", OPT_COLUMN - l, "");
            for (; *h; h++) {
                fputc(*h, f);
                if (*h == '\n') fprintf(f, "%*s", OPT_COLUMN, "");
            }
            if (!(o->flags & KVT_CLI_NO_ENV)) {
                char env[ENV_NAME_MAX];
                env_name(o->name, env, sizeof env);
                fprintf(f, " [$%s]", env);
            }
            fputc('\n', f);
        }
    }
    fprintf(f, "  -h, --help%*sthis help\n", OPT_COLUMN - 12, "");
}

/* Whether an environment value turns a switch on: anything but "", 0, false, no, off. */
static int env_true(const char *v) {
    return *v && strcmp(v, "0") && strcasecmp(v, "false") && strcasecmp(v, "no") && strcasecmp(v, "off");
}

/* The range of a row for messages: "[1, 512]", "(0, 1]", "at least 1". */
static void range_text(const kvt_cli_opt *o, char *buf, size_t cap) {
    if (o->kind == KVT_CLI_BYTES) {
        if (o->max >= 1e18) snprintf(buf, cap, ", at least %.0f byte%s", o->min, o->min == 1 ? "" : "s");
        else snprintf(buf, cap, ", in [%.0f, %.0f] bytes", o->min, o->max);
    } else if (o->kind == KVT_CLI_INT) {
        snprintf(buf, cap, "in [%.0f, %.0f]", o->min, o->max);
    } else if (isinf(o->min) && isinf(o->max)) {
        buf[0] = 0;
    } else if (isinf(o->max)) {
        snprintf(buf, cap, "%s %g", o->flags & KVT_CLI_MIN_OPEN ? ">" : ">=", o->min);
    } else {
        snprintf(buf, cap, "in %c%g, %g]", o->flags & KVT_CLI_MIN_OPEN ? '(' : '[', o->min, o->max);
    }
}

/* Checks val against the row's kind and bounds, then calls the handler.
 * Returns 0, or -1 after printing an error that names the flag and the range. */
static int deliver(const char *cmd, const kvt_cli_opt *o, const char *val, const char *flag, kvt_cli_handler fn,
                   void *ctx) {
    kvt_cli_arg a = {.str = val, .flag = flag};
    if (val && o->kind != KVT_CLI_TEXT) {
        static const char *const what[] = {"", "an integer", "a number", "a size like 512M or 4G"};
        char *end = NULL, range[96];
        double x;
        int ok;
        errno = 0;
        if (o->kind == KVT_CLI_BYTES) {
            ok = kvt_cli_bytes_value(val, &a.bytes) == 0;
            x = (double)a.bytes;
        } else if (o->kind == KVT_CLI_INT) {
            a.i = strtol(val, &end, 10);
            ok = !errno && end != val && !*end;
            x = (double)a.i;
        } else {
            a.d = x = strtod(val, &end);
            ok = !errno && end != val && !*end && isfinite(x);
        }
        if (ok) ok = (o->flags & KVT_CLI_MIN_OPEN ? x > o->min : x >= o->min) && x <= o->max;
        if (!ok) {
            range_text(o, range, sizeof range);
            fprintf(stderr, "kvtier %s: %s must be %s%s%s, got '%s'\n", cmd, flag, what[o->kind],
                    range[0] && range[0] != ',' ? " " : "", range, val);
            return -1;
        }
    }
    return fn(ctx, o->id, &a);
}

/* getopt_long's tables for the sections' options: rows[] (at most MAX_OPTS,
 * returned: how many), longs[] (each name and alias, then --help and the
 * end), shorts (":h" then each one-letter option, ':' after one taking a value). */
static size_t getopt_tables(const kvt_cli_section *secs, size_t n_secs, const kvt_cli_opt **rows, struct option *longs,
                            char *shorts) {
    size_t n_rows = 0, n_long = 0, n_short = 2;
    for (size_t si = 0; si < n_secs; si++)
        for (size_t i = 0; i < secs[si].n && n_rows < MAX_OPTS; i++) {
            const kvt_cli_opt *o = &secs[si].opts[i];
            int has = !o->arg ? no_argument : o->flags & KVT_CLI_OPT_VALUE ? optional_argument : required_argument;
            int val = o->short_name ? o->short_name : LONG_ID_BASE + (int)n_rows;
            longs[n_long++] = (struct option){o->name, has, NULL, val};
            if (o->alias) longs[n_long++] = (struct option){o->alias, has, NULL, val};
            if (o->short_name) {
                shorts[n_short++] = o->short_name;
                if (o->arg) shorts[n_short++] = ':';
            }
            rows[n_rows++] = o;
        }
    longs[n_long++] = (struct option){"help", no_argument, NULL, 'h'};
    longs[n_long] = (struct option){0, 0, 0, 0};
    shorts[n_short] = 0;
    return n_rows;
}

/* The options the command line did not give (given[r] 0), from their
 * environment variables (KVTIER_<NAME>); a switch is on when the variable is
 * true. Returns 0 or KVT_CLI_PARSE_USAGE (after printing why). */
static int apply_env(const char *cmd, const kvt_cli_opt **rows, size_t n_rows, unsigned char *given, kvt_cli_handler fn,
                     void *ctx) {
    int ret = 0;
    for (size_t r = 0; !ret && r < n_rows; r++) {
        if (given[r] || (rows[r]->flags & KVT_CLI_NO_ENV)) continue;
        char env[ENV_NAME_MAX], flag[ENV_NAME_MAX + 1];
        env_name(rows[r]->name, env, sizeof env);
        const char *v = getenv(env);
        if (!v) continue;
        for (size_t k = r; k < n_rows; k++) given[k] |= rows[k]->id == rows[r]->id;
        snprintf(flag, sizeof flag, "$%s", env);
        if (!rows[r]->arg && !env_true(v)) continue;
        if (deliver(cmd, rows[r], rows[r]->arg ? v : NULL, flag, fn, ctx)) ret = KVT_CLI_PARSE_USAGE;
    }
    return ret;
}

/* The long option named s[0..n) exactly, or NULL. */
static const struct option *long_named(const struct option *longs, const char *s, size_t n) {
    for (; longs->name; longs++)
        if (strlen(longs->name) == n && !strncmp(longs->name, s, n)) return longs;
    return NULL;
}

/* The arguments getopt_long reads (*av, *ac; strings joined here are in
 * owned[], NULL-ended): llama.cpp's several-letter options as their long
 * names, a value given after an option with an optional one joined to it
 * (--flash-attn on as --flash-attn=on), and every long option checked to be
 * a whole name, since getopt_long would take an abbreviation. Values are
 * skipped, not checked (a key may start with "--"). 0, or KVT_CLI_PARSE_USAGE
 * after naming the unknown option. */
static int prepare_args(const char *cmd, int argc, char **argv, const struct option *longs, const char *shorts,
                        char **av, int *ac, char **owned) {
    int n = 0, n_owned = 0;
    for (int i = 0; i < argc; i++) {
        char *a = av[n++] = argv[i];
        if (!i || a[0] != '-' || !a[1]) continue;
        if (!strcmp(a, "--")) {
            while (++i < argc) av[n++] = argv[i];
            break;
        }
        const char *to = kvt_cli_llama_long(a, 0); /* llama.cpp's -np, -cnv, ...: one option, not a cluster */
        if (to) {
            if (!long_named(longs, to + 2, strlen(to) - 2)) { /* this command has no such option */
                kvt_cli_unknown_option(cmd, a);
                return KVT_CLI_PARSE_USAGE;
            }
            a = av[n - 1] = (char *)to;
        }
        if (a[1] != '-') { /* a cluster of short options: one taking a value takes the rest, or the next argument */
            for (const char *p = a + 1; *p && *p != ':'; p++) {
                const char *sh = strchr(shorts + 1, *p);
                if (!sh) break; /* getopt_long names it */
                if (sh[1] == ':') {
                    if (!p[1] && i + 1 < argc) av[n++] = argv[++i];
                    break;
                }
            }
            continue;
        }
        size_t len = strcspn(a + 2, "=");
        const struct option *o = long_named(longs, a + 2, len);
        if (!o) {
            kvt_cli_unknown_option(cmd, a);
            return KVT_CLI_PARSE_USAGE;
        }
        if (a[2 + len] || i + 1 >= argc) continue;
        if (o->has_arg == required_argument) {
            av[n++] = argv[++i];
        } else if (o->has_arg == optional_argument && argv[i + 1][0] != '-') {
            size_t cap = strlen(a) + strlen(argv[i + 1]) + 2;
            char *j = owned[n_owned++] = kvt_xmalloc(cap);
            snprintf(j, cap, "%s=%s", a, argv[++i]);
            av[n - 1] = j;
        }
    }
    av[n] = NULL;
    owned[n_owned] = NULL;
    *ac = n;
    return 0;
}

/* Frees what prepare_args joined and its argument array. */
static void free_args(char **av, char **owned) {
    for (char **p = owned; *p; p++) free(*p);
    free(owned);
    free(av);
}

int kvt_cli_parse(const char *cmd, int argc, char **argv, const kvt_cli_section *secs, size_t n_secs,
                  kvt_cli_handler fn, void *ctx) {
    const kvt_cli_opt *rows[MAX_OPTS];
    struct option longs[2 * MAX_OPTS + 2];
    char shorts[3 * MAX_OPTS + 4] = ":h"; /* leading ':': a missing value is reported as ':', not '?' */
    size_t n_rows = getopt_tables(secs, n_secs, rows, longs, shorts);
    char **av = kvt_xcalloc((size_t)argc + 1, sizeof *av), **owned = kvt_xcalloc((size_t)argc + 1, sizeof *owned);
    if (prepare_args(cmd, argc, argv, longs, shorts, av, &argc, owned)) {
        free_args(av, owned);
        return KVT_CLI_PARSE_USAGE;
    }
    unsigned char given[MAX_OPTS] = {0};
    int ret = 0;
    optind = 0; /* glibc: 0 re-initialises getopt, so each parse starts afresh */
    opterr = 0; /* kvtier prints its own messages, naming the command */
    for (;;) {
        int li = -1;
        int c = getopt_long(argc, av, shorts, longs, &li);
        if (c == -1) break;
        if (c == 'h') {
            ret = KVT_CLI_PARSE_HELP;
            break;
        }
        if (c == '?' || c == ':') {
            /* a long option (or one given a value it does not take) is the argument just read; a short
             * one may sit inside a cluster (-xm), so optopt names it */
            const char *what = av[optind - 1];
            char one[3] = {'-', (char)optopt, 0};
            if (optopt > 0 && optopt < LONG_ID_BASE && strncmp(what, "--", 2)) what = one;
            if (c == '?') kvt_cli_unknown_option(cmd, what);
            else fprintf(stderr, "kvtier %s: option '%s' needs a value\n", cmd, what);
            ret = KVT_CLI_PARSE_USAGE;
            break;
        }
        size_t r = 0;
        if (c >= LONG_ID_BASE) r = (size_t)(c - LONG_ID_BASE);
        else
            while (r < n_rows && rows[r]->short_name != c) r++;
        char flag[ENV_NAME_MAX + 4];
        if (li >= 0) snprintf(flag, sizeof flag, "--%s", longs[li].name);
        else snprintf(flag, sizeof flag, "-%c", c);
        for (size_t k = 0; k < n_rows; k++) given[k] |= rows[k]->id == rows[r]->id;
        if (deliver(cmd, rows[r], rows[r]->arg ? optarg : NULL, flag, fn, ctx)) {
            ret = KVT_CLI_PARSE_USAGE;
            break;
        }
    }
    if (!ret && optind < argc) {
        fprintf(stderr, "kvtier %s: unexpected argument '%s' (options start with - or --)\n", cmd, av[optind]);
        ret = KVT_CLI_PARSE_USAGE;
    }
    if (!ret) ret = apply_env(cmd, rows, n_rows, given, fn, ctx);
    free_args(av, owned);
    return ret;
}