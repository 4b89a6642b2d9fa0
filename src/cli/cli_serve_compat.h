// SPDX-License-Identifier: MIT
/* serve's section of llama-server's flags (cli_serve_compat.c): sampling
 * defaults for requests that set none (--temp, --top-k, --top-p, --seed),
 * flags accepted because kvtier already does what they ask (--flash-attn,
 * --cont-batching, --metrics), -nocb accepted with a warning, --hf-repo
 * refused (no downloads), and --version. */
#ifndef KVT_CLI_SERVE_COMPAT_H
#define KVT_CLI_SERVE_COMPAT_H

#include "cli.h"
#include "server.h"

#define KVT_CLI_COMPAT_ID_BASE 1300
#define KVT_CLI_IS_COMPAT_ID(id) ((id) >= KVT_CLI_COMPAT_ID_BASE && (id) < KVT_CLI_COMPAT_ID_BASE + 100)
extern const kvt_cli_section kvt_cli_serve_compat_section;
/* The section's handler: stores a value in sp, or *version = 1 for --version.
 * 0, or -1 after printing why (--hf-repo always). */
int kvt_cli_serve_compat_opt(int id, const kvt_cli_arg *a, kvt_server_params *sp, int *version);

#endif
