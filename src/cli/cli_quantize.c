// SPDX-License-Identifier: MIT
/* `kvtier quantize IN.gguf OUT.gguf TYPE`: the command line over
 * kvt_quantize_file (model/quantize.h), with a progress line per tensor. */
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"
#include "common.h"
#include "gguf.h"
#include "quantize.h"

#define MIB (1024.0 * 1024.0)

void kvt_usage_quantize(FILE *f) {
    char names[256];
    kvt_quant_ftype_names(names, sizeof names);
    fprintf(f,
            "usage: kvtier quantize IN.gguf OUT.gguf TYPE [--threads N]\n\n"
            "Rewrites a GGUF model whose weights are F32, F16 or BF16 with its weight\n"
            "matrices in TYPE, keeping every metadata key and tensor. Which tensors change\n"
            "follows llama.cpp's llama-quantize: 1-D tensors (norms, biases) and norm weights\n"
            "stay as they are; output.weight (token_embd.weight when the model has no\n"
            "output.weight) gets Q6_K under every quantized type but q8_0 (Q8_0 if its rows\n"
            "are not a multiple of 256). The K-quant types (q2_k ... q6_k) follow\n"
            "llama.cpp's per-layer recipe: some attn_v and ffn_down matrices get more bits,\n"
            "and rows that are not a multiple of 256 fall back (q4_k -> q5_0, q5_k -> q5_1,\n"
            "q6_k -> q8_0, q2_k/q3_k -> iq4_nl). The legacy quantizers (q4_0 ... q8_0) round\n"
            "as llama.cpp's do, so those files have llama-quantize's bytes for the same\n"
            "input; the K, IQ4_NL and IQ4_XS quantizers are kvtier's own (same per-tensor\n"
            "types as llama-quantize, other bytes). iq4_nl and iq4_xs put every matrix in\n"
            "that type (llama.cpp's IQ4_NL and IQ4_XS file types give some attn_v and\n"
            "ffn_down matrices Q5_K); iq4_xs rows that are not a multiple of 256 fall back\n"
            "to iq4_nl.\n\n"
            "TYPE: %s (case-insensitive; q3_k, q4_k, q5_k mean the _m mixes).\n"
            "q2_k_s is refused: llama.cpp requires an importance matrix for it.\n\n"
            "OUT is written to a temporary file beside it, synced, then renamed over it, so\n"
            "a failure (bad input, disk full) leaves OUT as it was. IN and OUT must differ.\n"
            "A progress line per tensor goes to stderr: index/count, name, types, sizes,\n"
            "elapsed time.\n\n"
            "options:\n"
            "  -t, --threads N   threads that quantize rows [%d: the online CPUs]\n"
            "  -h, --help        this help\n",
            names, kvt_cli_default_threads());
}

static void progress(void *ctx, const kvt_quant_progress *p) {
    (void)ctx;
    fprintf(stderr, "kvtier quantize: [%*llu/%llu] %-32s %-4s -> %-4s %9.3f -> %9.3f MiB  %6.1f s\n",
            p->count >= 1000      ? 4
                : p->count >= 100 ? 3
                                  : 2,
            (unsigned long long)p->index, (unsigned long long)p->count, p->name, kvt_ggml_type_name(p->from),
            kvt_ggml_type_name(p->to), (double)p->in_bytes / MIB, (double)p->out_bytes / MIB, p->elapsed);
}

int kvt_cmd_quantize(int argc, char **argv) {
    const char *pos[3];
    int n_pos = 0;
    kvt_quantize_params p = kvt_quantize_default_params();
    p.threads = kvt_cli_default_threads();
    p.progress = progress;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        if (kvt_cli_is_help(a)) {
            kvt_usage_quantize(stdout);
            return 0;
        }
        if (!strcmp(a, "-t") || !strcmp(a, "--threads")) {
            long n;
            if (!(v = kvt_cli_value(argc, argv, &i)) || (n = kvt_cli_parse_long(a, v, 1, KVT_CLI_MAX_THREADS)) < 0)
                return 2;
            p.threads = (int)n;
        } else if (a[0] == '-' && a[1]) {
            fprintf(stderr, "kvtier quantize: unknown option '%s' (see --help)\n", a);
            return 2;
        } else if (n_pos < 3) {
            pos[n_pos++] = a;
        } else {
            fprintf(stderr, "kvtier quantize: unexpected argument '%s' (see --help)\n", a);
            return 2;
        }
    }
    if (n_pos != 3) {
        fprintf(stderr, "kvtier quantize: needs IN.gguf OUT.gguf TYPE (see --help)\n");
        return 2;
    }
    double t0 = kvt_now();
    int rc = kvt_quantize_file(pos[0], pos[1], pos[2], p);
    if (rc) {
        fprintf(stderr, "kvtier quantize: %s\n", kvt_errmsg());
        return rc == KVT_EARG || rc == KVT_EUNSUPPORTED ? 2 : 1;
    }
    struct stat si, so;
    if (stat(pos[0], &si) == 0 && stat(pos[1], &so) == 0)
        fprintf(stderr, "kvtier quantize: wrote %s (%.2f MiB, from %.2f MiB) in %.1f s\n", pos[1],
                (double)so.st_size / MIB, (double)si.st_size / MIB, kvt_now() - t0);
    return 0;
}
