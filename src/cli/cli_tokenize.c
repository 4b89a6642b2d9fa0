// SPDX-License-Identifier: MIT
/* `kvtier tokenize`: prints the token ids of a text using only a GGUF's
 * tokenizer metadata (tensors are not needed, so vocab-only files work). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "common.h"
#include "kvtier.h"

/* Piece rendering buffer; longer pieces get a heap buffer. */
#define PIECE_BUF 256

void kvt_usage_tokenize(FILE *f) {
    fprintf(f,
            "usage: kvtier tokenize -m MODEL [--no-bos] [--special] [--pieces] (TEXT | -f FILE)\n\n"
            "Prints the token ids of TEXT on one line, separated by spaces.\n\n"
            "  -m, --model MODEL  GGUF file to take the tokenizer from (vocab-only files work)\n"
            "  -f, --file FILE    read the text from FILE (all bytes, as is) instead of TEXT\n"
            "  --no-bos           do not prepend the BOS token. By default BOS and EOS are\n"
            "                     added as llama.cpp does: tokenizer.ggml.add_bos_token /\n"
            "                     add_eos_token, else BOS for SPM and llama3-style BPE only\n"
            "  --special          parse control-token text such as <|im_start|> into those\n"
            "                     tokens (otherwise it is tokenized as plain text)\n"
            "  --pieces           after the ids line, print one token per line: id, then\n"
            "                     its text in quotes\n"
            "                     (special tokens shown, bytes other than printable ASCII\n"
            "                     escaped as \\xNN)\n"
            "  -h, --help         show this help\n\n"
            "Exit status: 0 ok, 1 the model or text cannot be read or tokenized, 2 usage error.\n");
}

static char *read_all(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 4096, n = 0;
    char *buf = kvt_xmalloc(cap);
    size_t k;
    while ((k = fread(buf + n, 1, cap - n, f)) > 0) {
        n += k;
        if (n == cap) buf = kvt_xrealloc(buf, cap *= 2);
    }
    int err = ferror(f);
    fclose(f);
    if (err) {
        free(buf);
        return NULL;
    }
    *len = n;
    return buf;
}

static void print_piece(const kvt_model *t, int32_t id) {
    char small[PIECE_BUF];
    char *buf = small;
    int n = kvt_model_token_piece(t, id, buf, sizeof small, 1);
    if (n > (int)sizeof small) {
        buf = kvt_xmalloc((size_t)n);
        kvt_model_token_piece(t, id, buf, (size_t)n, 1);
    }
    printf("%d '", id);
    for (int i = 0; i < n; i++) {
        unsigned char c = (unsigned char)buf[i];
        if (c == '\\' || c == '\'') printf("\\%c", c);
        else if (c >= ' ' && c < 0x7f) putchar(c);
        else printf("\\x%02x", c);
    }
    printf("'\n");
    if (buf != small) free(buf);
}

/* What tokenize's command line sets. */
typedef struct {
    const char *model, *file, *text;
    int no_bos, special, pieces;
} tokenize_args;

/* Parses tokenize's command line into *x. Returns 0, -1 after --help, or 2
 * after printing a usage error. */
static int tokenize_parse(int argc, char **argv, tokenize_args *x) {
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (kvt_cli_is_help(a)) {
            kvt_usage_tokenize(stdout);
            return -1;
        } else if (!strcmp(a, "-m") || !strcmp(a, "--model")) {
            if (!(x->model = kvt_cli_value(argc, argv, &i))) return 2;
        } else if (!strcmp(a, "-f") || !strcmp(a, "--file")) {
            if (!(x->file = kvt_cli_value(argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--no-bos")) {
            x->no_bos = 1;
        } else if (!strcmp(a, "--special")) {
            x->special = 1;
        } else if (!strcmp(a, "--pieces")) {
            x->pieces = 1;
        } else if (a[0] == '-' && a[1] && strcmp(a, "--")) {
            fprintf(stderr, "kvtier tokenize: unknown option '%s'\n", a);
            kvt_usage_tokenize(stderr);
            return 2;
        } else {
            if (!strcmp(a, "--")) {
                if (++i >= argc) break;
                a = argv[i];
            }
            if (x->text) {
                fprintf(stderr, "kvtier tokenize: one TEXT only (quote it)\n");
                return 2;
            }
            x->text = a;
        }
    }
    if (!x->model) {
        fprintf(stderr, "kvtier tokenize: -m MODEL is required\n");
        kvt_usage_tokenize(stderr);
        return 2;
    }
    if (!x->text == !x->file) {
        fprintf(stderr, "kvtier tokenize: give either TEXT or -f FILE\n");
        kvt_usage_tokenize(stderr);
        return 2;
    }
    return 0;
}

int kvt_cmd_tokenize(int argc, char **argv) {
    tokenize_args x = {0};
    int prc = tokenize_parse(argc, argv, &x);
    if (prc) return prc < 0 ? 0 : prc;
    const char *model = x.model, *file = x.file, *text = x.text;
    int no_bos = x.no_bos, special = x.special, pieces = x.pieces;
    size_t len;
    char *buf = NULL;
    if (file) {
        buf = read_all(file, &len);
        if (!buf) {
            fprintf(stderr, "kvtier tokenize: cannot read %s: %s\n", file, strerror(errno));
            return 1;
        }
        text = buf;
    } else {
        len = strlen(text);
    }

    kvt_model *t = kvt_cli_load_vocab("tokenize", model); /* the tokenizer's metadata is enough */
    if (!t) {
        free(buf);
        return 1;
    }
    int32_t *ids;
    size_t n;
    int rc = kvt_model_tokenize(t, text, len, KVT_TOKENIZE_ADD_SPECIAL | (no_bos ? KVT_TOKENIZE_NO_BOS : 0), special,
                                &ids, &n);
    free(buf);
    if (rc) {
        fprintf(stderr, "kvtier tokenize: %s\n", kvt_errmsg());
        kvt_model_free(t);
        return 1;
    }
    for (size_t i = 0; i < n; i++) printf(i ? " %d" : "%d", ids[i]);
    printf("\n");
    if (pieces)
        for (size_t i = 0; i < n; i++) print_piece(t, ids[i]);
    free(ids);
    kvt_model_free(t);
    return fflush(stdout) == 0 ? 0 : 1;
}
