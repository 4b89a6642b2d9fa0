// SPDX-License-Identifier: MIT
/* serve's --api-key and --api-key-file (cli_serve_keys.h): the keys a flag
 * or a file holds, read so that the server never starts with other keys than
 * the command line meant. */
#include "cli_serve_keys.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common.h"

#define MAX_KEY_LINE 4096 /* bytes of one line, its newline included */

int kvt_cli_add_key_list(const char *flag, const char *list, char **keys, size_t *n, size_t max) {
    size_t added = 0;
    for (const char *p = list;; p++) {
        size_t len = strcspn(p, ",");
        if (len && *n == max) {
            fprintf(stderr, "kvtier serve: %s: more than %zu keys in all\n", flag, max);
            return -1;
        }
        if (len) keys[(*n)++] = kvt_xstrndup(p, len), added++;
        p += len;
        if (!*p) break;
    }
    if (!added) fprintf(stderr, "kvtier serve: %s needs a non-empty key (KEY or KEY,KEY,...)\n", flag);
    return added ? 0 : -1;
}

int kvt_cli_read_key_file(const char *path, char **keys, size_t *n, size_t max) {
    /* O_NONBLOCK and a regular file only: a FIFO would otherwise hold the start for ever */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) || !S_ISREG(st.st_mode)) {
        fprintf(stderr, "kvtier serve: cannot read --api-key-file %s: %s\n", path,
                fd < 0 ? strerror(errno) : "not a regular file");
        if (fd >= 0) close(fd);
        return -1;
    }
    FILE *f = fdopen(fd, "r");
    if (!f) {
        fprintf(stderr, "kvtier serve: cannot read --api-key-file %s: %s\n", path, strerror(errno));
        close(fd);
        return -1;
    }
    char line[MAX_KEY_LINE];
    size_t before = *n, lineno = 0;
    int rc = 0;
    while (fgets(line, sizeof line, f)) {
        size_t l = strcspn(line, "\r\n");
        lineno++;
        int c = l == sizeof line - 1 ? getc(f) : EOF; /* the buffer is full: is there more of this line? */
        if (c != EOF && c != '\n' && c != '\r') {
            fprintf(stderr, "kvtier serve: --api-key-file %s: line %zu is longer than %d bytes\n", path, lineno,
                    MAX_KEY_LINE - 1);
            rc = -1;
            break;
        }
        while (l && (line[l - 1] == ' ' || line[l - 1] == '\t')) l--; /* a header value loses them too */
        line[l] = 0;
        char *k = line;
        while (*k == ' ' || *k == '\t') k++;
        if (!*k || *k == '#') continue;
        if (*n == max) {
            fprintf(stderr, "kvtier serve: more than %zu API keys\n", max);
            rc = -1;
            break;
        }
        keys[(*n)++] = kvt_xstrdup(k);
    }
    fclose(f);
    if (!rc && *n == before) {
        fprintf(stderr,
                "kvtier serve: --api-key-file %s holds no key (only blank lines or # comments): the server would be "
                "open to everyone; put a key in it, or leave the flag out\n",
                path);
        rc = -1;
    }
    return rc;
}
