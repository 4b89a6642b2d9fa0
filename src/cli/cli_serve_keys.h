// SPDX-License-Identifier: MIT
/* serve's --api-key-file (cli_serve_keys.c). */
#ifndef KVT_CLI_SERVE_KEYS_H
#define KVT_CLI_SERVE_KEYS_H

#include <stddef.h>

/* Appends the comma-separated keys of --api-key (list), as llama-server
 * splits them, to keys[*n..max), each malloc'd; empty names between commas
 * are skipped. Refused: a list without a key, and more than max keys in all.
 * Returns 0, or -1 after printing why, naming flag. */
int kvt_cli_add_key_list(const char *flag, const char *list, char **keys, size_t *n, size_t max);

/* Appends the keys in path (one per line; spaces and tabs around a key, blank
 * lines and # comments ignored) to keys[*n..max), each malloc'd (the caller
 * frees them). Only a regular file is read (a FIFO would hold the start for
 * ever). Refused, so that the server never starts with other keys than the
 * file meant: a file holding no key (the server would be open to everyone),
 * a line too long to read whole (its tail would be a key of its own), and
 * more than max keys in all. Returns 0, or -1 after printing why. */
int kvt_cli_read_key_file(const char *path, char **keys, size_t *n, size_t max);

#endif
