// SPDX-License-Identifier: MIT
/* llama.cpp's sampler flags beyond top-k, top-p and min-p, shared by run
 * and serve (cli_sampling.c): --typical, --xtc-probability, --xtc-threshold,
 * --dynatemp-range, --dynatemp-exp, --mirostat, --mirostat-lr,
 * --mirostat-ent, --min-keep and DRY's --dry-*, under llama.cpp's names and
 * meanings. */
#ifndef KVT_CLI_SAMPLING_H
#define KVT_CLI_SAMPLING_H

#include "cli.h"
#include "sampler.h"

#define KVT_CLI_SAMPLING_ID_BASE 1600
#define KVT_CLI_IS_SAMPLING_ID(id) ((id) >= KVT_CLI_SAMPLING_ID_BASE && (id) < KVT_CLI_SAMPLING_ID_BASE + 100)
/* The section for run (its sampling) and for serve (the defaults of a request that sets none). */
extern const kvt_cli_section kvt_cli_sampling_section;
extern const kvt_cli_section kvt_cli_sampling_defaults_section;
/* The sections' handler: stores the value in sp, DRY's breakers in brk (values are checked by the
 * table). Returns 0, or -1 after printing why a breaker is refused. */
int kvt_cli_sampling_opt(int id, const kvt_cli_arg *a, kvt_sampler_params *sp, kvt_dry_breakers *brk);

#endif
