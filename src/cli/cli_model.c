// SPDX-License-Identifier: MIT
/* `kvtier info` and `kvtier mkmodel`, and the default model used when no -m is given. */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "chat.h"
#include "cli.h"
#include "common.h"
#include "kv_quant.h"
#include "mkmodel.h"
#include "model.h"
#include "tokenizer.h"

/* Session length for the capacity line of `info`: the default context cap of run/serve. */
#define SESSION_TOKENS KVT_CLI_DEFAULT_CTX_CAP
#define DEFAULT_BLOCK_TOKENS 32
#define DEFAULT_MODEL_VOCAB 4096 /* built-in BPE with merges, so text is not one token per byte */

/* ---- mkmodel ---------------------------------------------------------------- */

void kvt_usage_mkmodel(FILE *f) {
    kvt_mkmodel_params d = kvt_mkmodel_default_params();
    fprintf(f,
            "usage: kvtier mkmodel -o OUT.gguf [options]\n\n"
            "Writes a GGUF model with random weights (deterministic for a seed) for tests,\n"
            "demos and benchmarks. It is not a trained model: its text is noise.\n\n"
            "options:\n"
            "  -o, --output PATH      file to write (atomically: temp file + fsync + rename)\n"
            "  --arch NAME            llama, qwen2 (q/k/v biases, NEOX rope), qwen3 (q/k norms),\n"
            "                         phi3 (fused qkv and gate-up, LongRoPE factors, sliding window),\n"
            "                         gemma2 (post-norms, GELU, soft-capping, sliding window on even\n"
            "                         layers), gemma3 (q/k norms, 5 sliding layers per global one) [%s]\n"
            "  --dim N                model width (embedding length) [%d]\n"
            "  --layers N             transformer blocks [%d]\n"
            "  --heads N              attention heads; dim must be a multiple unless --head-dim [%d]\n"
            "  --kv-heads N           key/value heads (GQA); heads must be a multiple [%d]\n"
            "  --head-dim N           one head's width (attention.key_length and value_length, and\n"
            "                         rope.dimension_count); q is heads x N wide and need not be\n"
            "                         dim, as in Qwen3 and Gemma; 0 = dim / heads, dim then a\n"
            "                         multiple of heads [%d]\n"
            "  --ff N                 feed-forward width [%d]\n"
            "  --vocab N              vocabulary rows; 0 = the tokenizer's size [%d]\n"
            "  --ctx N                context_length metadata [%d]\n"
            "  --type T               weight type: f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1,\n"
            "                         iq4_nl, q2_k, q3_k, q4_k, q5_k, q6_k, iq4_xs (every matrix\n"
            "                         that type), or a llama.cpp K-quant mix: q2_k_s, q3_k_s, q3_k_m,\n"
            "                         q3_k_l, q4_k_s, q4_k_m, q5_k_s, q5_k_m (per-tensor types\n"
            "                         as llama-quantize picks them). Quantized as llama.cpp's\n"
            "                         reference quantizers do for the legacy types. A K type\n"
            "                         or iq4_xs needs rows that are multiples of 256; other\n"
            "                         rows fall back as llama.cpp does (q4_k -> q5_0, q5_k ->\n"
            "                         q5_1, q6_k -> q8_0, q2_k/q3_k/iq4_xs -> iq4_nl; f16 if\n"
            "                         not a multiple of 32). The other quantized types (q8_0,\n"
            "                         q4_0, q4_1, q5_0, q5_1, iq4_nl) need dim, ff and heads x\n"
            "                         head dim to be multiples of 32 and refuse other shapes [f16]\n"
            "  --vocab-from FILE      copy the tokenizer (tokenizer.* metadata) from this GGUF;\n"
            "                         default: a built-in byte-level BPE vocabulary\n"
            "  --tied                 no output.weight: the output projection reuses token_embd\n"
            "  --fim                  the built-in vocabulary gets Qwen2.5-Coder's fill-in-the-middle\n"
            "                         tokens (<|fim_prefix|>, <|fim_middle|>, <|fim_suffix|>,\n"
            "                         <|fim_pad|>, <|repo_name|>, <|file_sep|>), for /infill\n"
            "  --outliers             plant massive activations, as trained LLMs have: %d channels of\n"
            "                         the residual stream (picked from the seed) carry values of about\n"
            "                         1e3 to 1e4 from the second layer on, the others about 1, by\n"
            "                         scaling those rows of the first layer's ffn_down by %g (and\n"
            "                         the post-FFN norm's weights there on gemma); for f16 overflow\n"
            "                         and precision tests\n"
            "  --rope-base F          rope theta; 0 = the architecture's (1e6 qwen3/gemma3, else 1e4) [%g]\n"
            "  --swa N                sliding window of phi3/gemma2/gemma3; 0 = the architecture's\n"
            "                         (phi3 2047, gemma2 4096, gemma3 512) [%d]\n"
            "  --rope-scaling TYPE    write rope.scaling.type: none, linear or yarn [not written]\n"
            "  --rope-factor F        write rope.scaling.factor, the context extension (positions\n"
            "                         scaled by 1/F) [not written]\n"
            "  --rope-orig-ctx N      write rope.scaling.original_context_length, the context the\n"
            "                         model was trained for before the extension (YaRN's ramp)\n"
            "                         [not written: the loader takes --ctx]\n"
            "  --rope-attn-factor F   write rope.scaling.attn_factor, which scales rope's cos and\n"
            "                         sin [not written: 1]\n"
            "  --rope-yarn-log-mul F  write rope.scaling.yarn_log_multiplier, YaRN's temperature\n"
            "                         slope (1 + F ln factor) [not written: 0.1]\n"
            "  --seed N               weights seed [%llu]\n"
            "  --name NAME            general.name [%s]\n"
            "  -h, --help             this help\n",
            d.arch, d.dim, d.layers, d.heads, d.kv_heads, d.head_dim, d.ff, d.vocab, d.ctx, KVT_MKMODEL_OUTLIERS,
            (double)KVT_MKMODEL_OUTLIER_GAIN, (double)d.rope_base, d.swa, (unsigned long long)d.seed, d.name);
}

/* A plain type, every matrix in it (q2_k and q6_k included: here they mean
 * the pure types, not llama.cpp's Q2_K mix), else a K-quant mix. */
static int parse_type(const char *s, uint32_t *out, kvt_quant_mix *mix) {
    static const struct {
        const char *name;
        uint32_t type;
    } types[] = {{"f32", KVT_TYPE_F32},   {"f16", KVT_TYPE_F16},       {"bf16", KVT_TYPE_BF16},
                 {"q8_0", KVT_TYPE_Q8_0}, {"q4_0", KVT_TYPE_Q4_0},     {"q4_1", KVT_TYPE_Q4_1},
                 {"q5_0", KVT_TYPE_Q5_0}, {"q5_1", KVT_TYPE_Q5_1},     {"q2_k", KVT_TYPE_Q2_K},
                 {"q3_k", KVT_TYPE_Q3_K}, {"q4_k", KVT_TYPE_Q4_K},     {"q5_k", KVT_TYPE_Q5_K},
                 {"q6_k", KVT_TYPE_Q6_K}, {"iq4_nl", KVT_TYPE_IQ4_NL}, {"iq4_xs", KVT_TYPE_IQ4_XS}};
    *mix = KVT_MIX_NONE;
    for (size_t i = 0; i < KVT_ARRAY_LEN(types); i++)
        if (!strcasecmp(s, types[i].name)) {
            *out = types[i].type;
            return 0;
        }
    if ((*mix = kvt_quant_mix_by_name(s)) != KVT_MIX_NONE) {
        *out = kvt_quant_mix_base(*mix);
        return 0;
    }
    fprintf(stderr,
            "kvtier mkmodel: --type must be f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, iq4_nl, q2_k..q6_k, "
            "iq4_xs or a K-quant mix (q4_k_m, ...), not '%s'\n",
            s);
    return -1;
}

/* The --rope-* options: 1 when a is one (its value stored), 0 when not, -1
 * on a bad value (said on stderr). */
static int parse_rope_opt(int argc, char **argv, int *i, kvt_mkmodel_params *p) {
    const char *a = argv[*i], *v;
    static const char *const fopts[] = {"--rope-factor", "--rope-attn-factor", "--rope-yarn-log-mul"};
    float *fdst[] = {&p->rope_factor, &p->rope_attn_factor, &p->rope_yarn_log_mul};
    if (!strcmp(a, "--rope-scaling")) return (p->rope_scaling = kvt_cli_value(argc, argv, i)) ? 1 : -1;
    if (!strcmp(a, "--rope-orig-ctx")) {
        long n;
        if (!(v = kvt_cli_value(argc, argv, i)) || (n = kvt_cli_parse_long(a, v, 1, 1 << 26)) < 0) return -1;
        p->rope_orig_ctx = (int32_t)n;
        return 1;
    }
    for (size_t k = 0; k < KVT_ARRAY_LEN(fopts); k++) {
        if (strcmp(a, fopts[k])) continue;
        double f;
        if (!(v = kvt_cli_value(argc, argv, i)) || isnan(f = kvt_cli_parse_double(a, v))) return -1;
        *fdst[k] = (float)f;
        return 1;
    }
    return 0;
}

/* Which channels carry the planted massive activations, on stderr. */
static void say_outliers(const kvt_mkmodel_params *p) {
    int32_t ch[KVT_MKMODEL_OUTLIERS];
    kvt_mkmodel_outlier_channels(p, ch);
    fprintf(stderr, "kvtier mkmodel: massive activations in channels");
    for (int i = 0; i < KVT_MKMODEL_OUTLIERS; i++) fprintf(stderr, " %d", ch[i]);
    fprintf(stderr, " of %d\n", p->dim);
}

int kvt_cmd_mkmodel(int argc, char **argv) {
    kvt_mkmodel_params p = kvt_mkmodel_default_params();
    const char *out = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        long n = 0;
        if (kvt_cli_is_help(a)) {
            kvt_usage_mkmodel(stdout);
            return 0;
        }
        struct {
            const char *opt;
            int32_t *dst;
            long min;
        } ints[] = {{"--dim", &p.dim, 2},           {"--layers", &p.layers, 1}, {"--heads", &p.heads, 1},
                    {"--kv-heads", &p.kv_heads, 1}, {"--ff", &p.ff, 1},         {"--vocab", &p.vocab, 0},
                    {"--ctx", &p.ctx, 1},           {"--swa", &p.swa, 0},       {"--head-dim", &p.head_dim, 0}};
        int matched = 0;
        for (size_t k = 0; k < KVT_ARRAY_LEN(ints); k++) {
            if (strcmp(a, ints[k].opt)) continue;
            if (!(v = kvt_cli_value(argc, argv, &i)) || (n = kvt_cli_parse_long(a, v, ints[k].min, 1 << 24)) < 0)
                return 2;
            *ints[k].dst = (int32_t)n;
            matched = 1;
        }
        if (matched) continue;
        int rope = parse_rope_opt(argc, argv, &i, &p);
        if (rope < 0) return 2;
        if (rope) continue;
        if (!strcmp(a, "-o") || !strcmp(a, "--output")) {
            if (!(out = kvt_cli_value(argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--arch")) {
            if (!(p.arch = kvt_cli_value(argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--type")) {
            if (!(v = kvt_cli_value(argc, argv, &i)) || parse_type(v, &p.type, &p.mix)) return 2;
        } else if (!strcmp(a, "--vocab-from")) {
            if (!(p.vocab_from = kvt_cli_value(argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--tied")) {
            p.tied = 1;
        } else if (!strcmp(a, "--outliers")) {
            p.outliers = 1;
        } else if (!strcmp(a, "--fim")) {
            p.fim = 1;
        } else if (!strcmp(a, "--rope-base")) {
            double f;
            if (!(v = kvt_cli_value(argc, argv, &i)) || isnan(f = kvt_cli_parse_double(a, v))) return 2;
            if (f != 0 && !(f >= KVT_HP_ROPE_BASE_MIN && f <= KVT_HP_ROPE_BASE_MAX)) {
                /* a theta the loader would refuse: say so now, not when the file is loaded */
                fprintf(stderr, "kvtier mkmodel: --rope-base must be 0 or from %g to %g, got '%s'\n",
                        KVT_HP_ROPE_BASE_MIN, KVT_HP_ROPE_BASE_MAX, v);
                return 2;
            }
            p.rope_base = (float)f;
        } else if (!strcmp(a, "--seed")) {
            if (!(v = kvt_cli_value(argc, argv, &i)) || (n = kvt_cli_parse_long(a, v, 0, LONG_MAX)) < 0) return 2;
            p.seed = (uint64_t)n;
        } else if (!strcmp(a, "--name")) {
            if (!(p.name = kvt_cli_value(argc, argv, &i))) return 2;
        } else {
            fprintf(stderr, "kvtier mkmodel: unknown option '%s' (see --help)\n", a);
            return 2;
        }
    }
    if (!out) {
        fprintf(stderr, "kvtier mkmodel: -o OUT.gguf is required (see --help)\n");
        return 2;
    }
    double t0 = kvt_now();
    int rc = kvt_mkmodel(&p, out);
    if (rc) {
        fprintf(stderr, "kvtier mkmodel: %s\n", kvt_errmsg());
        return 1;
    }
    struct stat st;
    stat(out, &st);
    fprintf(stderr, "kvtier mkmodel: wrote %s (%.1f MB, random weights) in %.1f s\n", out, (double)st.st_size / 1e6,
            kvt_now() - t0);
    if (p.outliers) say_outliers(&p);
    return 0;
}

/* ---- default model ------------------------------------------------------------ */

static int mkdir_p(const char *path) {
    char buf[4096];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/') continue;
        *p = 0;
        if (mkdir(buf, 0755) < 0 && errno != EEXIST) return -1;
        *p = '/';
    }
    return mkdir(buf, 0755) < 0 && errno != EEXIST ? -1 : 0;
}

int kvt_default_model_path(char *buf, size_t cap) {
    const char *env = getenv("KVT_DEFAULT_MODEL");
    if (env && *env) {
        snprintf(buf, cap, "%s", env);
        kvt_logk(KVT_LOG_INFO, "model", "no -m given: using $KVT_DEFAULT_MODEL = %s", buf);
        return 0;
    }
    char dir[3072];
    const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    if (xdg && *xdg) snprintf(dir, sizeof dir, "%s/kvtier", xdg);
    else snprintf(dir, sizeof dir, "%s/.cache/kvtier", home && *home ? home : "/tmp");
    kvt_mkmodel_params p = kvt_mkmodel_default_params();
    p.vocab = DEFAULT_MODEL_VOCAB;
    /* the name carries the generator's parameters so a change makes a new file */
    snprintf(buf, cap, "%s/random-%s-d%d-l%d-h%d-kv%d-ff%d-v%d-s%llu.gguf", dir, p.arch, p.dim, p.layers, p.heads,
             p.kv_heads, p.ff, p.vocab, (unsigned long long)p.seed);
    struct stat st;
    if (stat(buf, &st) == 0) {
        kvt_logk(KVT_LOG_INFO, "model",
                 "no -m given: using kvtier's generated RANDOM-WEIGHT model %s "
                 "(its text is noise; pass -m MODEL.gguf for a real model)",
                 buf);
        return 0;
    }
    if (mkdir_p(dir) < 0) {
        fprintf(stderr, "kvtier: cannot create %s: %s\n", dir, strerror(errno));
        return -1;
    }
    kvt_logk(KVT_LOG_INFO, "layers,dim,model",
             "no -m given: generating a RANDOM-WEIGHT llama model (%d layers, dim %d) at %s "
             "(its text is noise; pass -m MODEL.gguf for a real model)",
             p.layers, p.dim, buf);
    if (kvt_mkmodel(&p, buf)) {
        fprintf(stderr, "kvtier: cannot generate the default model: %s\n", kvt_errmsg());
        return -1;
    }
    return 0;
}

/* ---- info ------------------------------------------------------------------- */

void kvt_usage_info(FILE *f) {
    fprintf(f,
            "usage: kvtier info [-m MODEL.gguf] [--json]\n"
            "       kvtier info --devices\n\n"
            "Describes a GGUF model: architecture, shapes, weight types, context length,\n"
            "tokenizer, chat template family, fingerprint (the root of its cache keys) and\n"
            "the KV-cache bytes per token and per block for each --kv-type (f16, f32, q8_0).\n"
            "Vocab-only files print the tokenizer.\n\n"
            "options:\n"
            "  -m, --model PATH   the model (default: kvtier's generated random-weight model)\n"
            "  --json             one JSON object instead of text\n"
            "  --devices          list the Vulkan devices instead (index, name, type, vendor, driver,\n"
            "                     memory heaps, subgroup size, fp16/int8, the largest storage binding,\n"
            "                     timestamps: what --device vulkan:N picks; docs/gpu.md) or say why\n"
            "                     there are none; exits 1 when there is none\n"
            "  -h, --help         this help\n");
}

/* Counts tensors per ggml type, e.g. "F16 x 198, F32 x 65". */
static void weight_types(const kvt_gguf *g, char *buf, size_t cap) {
    size_t used = 0;
    buf[0] = 0;
    for (uint32_t t = 0; t < KVT_TYPE_COUNT; t++) {
        uint64_t n = 0;
        for (uint64_t i = 0; i < g->n_tensors; i++) n += g->tensors[i].type == t;
        if (!n) continue;
        int k = snprintf(buf + used, cap - used, "%s%s x %llu", used ? ", " : "", kvt_ggml_type_name(t),
                         (unsigned long long)n);
        if (k < 0 || (size_t)k >= cap - used) break;
        used += (size_t)k;
    }
}

/* What info prints of a loaded model besides its hparams. */
typedef struct {
    const char *name, *chat; /* general.name ("" if none), the chat template family */
    char fp[33], types[512]; /* the fingerprint in hex; the weight types with their counts */
    int vocab_only;
    uint64_t kv16, kv32, kvq8; /* KV bytes per token (0: vocab only; kvq8 0: head_dim does not allow q8_0) */
} info_facts;

/* info --json: one JSON object. */
static void print_info_json(const kvt_model *m, const char *path, const info_facts *f) {
    const kvt_hparams *hp = &m->hp;
    const kvt_tokenizer *tk = m->tok;
    printf("{\"path\":");
    kvt_cli_json_string(stdout, path);
    printf(",\"name\":");
    kvt_cli_json_string(stdout, f->name);
    printf(",\"vocab_only\":%s", f->vocab_only ? "true" : "false");
    if (!f->vocab_only) {
        /* the two rope numbers go through kvt_cli_json_number: never a bare nan in the JSON */
        printf(",\"arch\":\"%s\",\"n_layer\":%d,\"n_embd\":%d,\"n_head\":%d,\"n_head_kv\":%d,\"head_dim\":%d,"
               "\"n_ff\":%d,\"n_vocab\":%d,\"n_ctx_train\":%d,\"rope_base\":",
               hp->arch_name, hp->n_layer, hp->n_embd, hp->n_head, hp->n_head_kv, hp->head_dim, hp->n_ff, hp->n_vocab,
               hp->n_ctx_train);
        kvt_cli_json_number(stdout, (double)hp->rope_base, 6);
        printf(",\"rope_dim\":%d,\"rope_style\":\"%s\",\"rope_freq_scale\":", hp->rope_dim,
               hp->rope_style == KVT_ROPE_NEOX ? "neox" : "norm");
        kvt_cli_json_number(stdout, (double)hp->rope_freq_scale, 6);
        printf(",\"tied_output\":%s,\"n_params\":%llu,"
               "\"weight_bytes\":%llu,\"kv_bytes_per_token_f16\":%llu,\"kv_bytes_per_block_f16\":%llu,"
               "\"kv_bytes_per_token_f32\":%llu,\"kv_tokens_per_gib_f16\":%llu",
               hp->tied_output ? "true" : "false", (unsigned long long)m->n_params, (unsigned long long)m->weight_bytes,
               (unsigned long long)f->kv16, (unsigned long long)(f->kv16 * DEFAULT_BLOCK_TOKENS),
               (unsigned long long)f->kv32, (unsigned long long)(f->kv16 ? (1ull << 30) / f->kv16 : 0));
        char var[256];
        kvt_arch_describe(hp, var, sizeof var);
        printf(",\"variations\":");
        kvt_cli_json_string(stdout, var);
    }
    if (!f->vocab_only && f->kvq8)
        printf(",\"kv_bytes_per_token_q8_0\":%llu,\"kv_bytes_per_block_q8_0\":%llu,\"kv_tokens_per_gib_q8_0\":%llu",
               (unsigned long long)f->kvq8, (unsigned long long)(f->kvq8 * DEFAULT_BLOCK_TOKENS),
               (unsigned long long)((1ull << 30) / f->kvq8));
    else if (!f->vocab_only) printf(",\"kv_bytes_per_token_q8_0\":null");
    printf(",\"weight_types\":");
    kvt_cli_json_string(stdout, f->types);
    printf(",\"tokenizer\":\"%s\",\"pre\":", kvt_tokenizer_kind(tk));
    kvt_cli_json_string(stdout, kvt_tokenizer_pre(tk));
    printf(",\"vocab_tokens\":%d,\"bos\":%d,\"eos\":%d,\"chat_template\":\"%s\",\"fingerprint\":\"%s\"}\n",
           kvt_tokenizer_n_vocab(tk), kvt_tokenizer_bos(tk), kvt_tokenizer_eos(tk), f->chat, f->fp);
}

/* info: aligned "label   value" lines. */
static void print_info_text(const kvt_model *m, const char *path, const info_facts *f) {
    const kvt_hparams *hp = &m->hp;
    const kvt_tokenizer *tk = m->tok;
    printf("model          %s%s%s\n", path, *f->name ? "  name: " : "", f->name);
    if (f->vocab_only) {
        printf("contents       vocabulary only (no tensors)\n");
    } else {
        printf("architecture   %s\n", hp->arch_name);
        printf("shapes         %d layers, dim %d, %d heads / %d kv heads of %d, ff %d, vocab %d\n", hp->n_layer,
               hp->n_embd, hp->n_head, hp->n_head_kv, hp->head_dim, hp->n_ff, hp->n_vocab);
        printf("parameters     %.2fM (%.1f MB of weights)\n", (double)m->n_params / 1e6, (double)m->weight_bytes / 1e6);
        printf("weight types   %s\n", f->types);
        printf("output         %s\n", hp->tied_output ? "tied to token_embd" : "own output.weight");
        char var[256];
        kvt_arch_describe(hp, var, sizeof var);
        printf("variations     %s\n", var);
        printf("context        %d tokens (trained)\n", hp->n_ctx_train);
        printf("rope           %s, theta %g, %d dims, freq scale %g%s\n",
               hp->rope_style == KVT_ROPE_NEOX ? "neox" : "norm", (double)hp->rope_base, hp->rope_dim,
               (double)hp->rope_freq_scale,
               hp->has_freq_factors ? (hp->arch == KVT_ARCH_PHI3 ? ", LongRoPE freq factors" : ", llama3 freq factors")
                                    : "");
        if (hp->rope_scaling == KVT_ROPE_SCALING_YARN)
            printf("rope scaling   yarn, factor %g from an original context of %d, ramp over pairs %g..%g, "
                   "magnitude %g\n",
                   1.0 / (double)hp->rope_freq_scale, hp->rope_orig_ctx, (double)hp->rope_yarn_corr[0],
                   (double)hp->rope_yarn_corr[1], (double)hp->rope_yarn_mscale);
        printf("kv cache       %llu bytes/token f16 (%llu per %d-token block), %llu bytes/token f32, ",
               (unsigned long long)f->kv16, (unsigned long long)(f->kv16 * DEFAULT_BLOCK_TOKENS), DEFAULT_BLOCK_TOKENS,
               (unsigned long long)f->kv32);
        if (f->kvq8)
            printf("%llu bytes/token q8_0 (%llu per block)\n", (unsigned long long)f->kvq8,
                   (unsigned long long)(f->kvq8 * DEFAULT_BLOCK_TOKENS));
        else printf("no q8_0 (head_dim %d is not a multiple of %d)\n", hp->head_dim, KVT_KV_Q8_BLOCK);
        int32_t sess = hp->n_ctx_train < SESSION_TOKENS ? hp->n_ctx_train : SESSION_TOKENS;
        double per_gib = f->kv16 ? (double)(1ull << 30) / (double)f->kv16 : 0;
        double per_gib_q8 = f->kvq8 ? (double)(1ull << 30) / (double)f->kvq8 : 0;
        printf("kv per GiB     %.0f tokens f16 = %.1f sessions of %d tokens", per_gib, sess > 0 ? per_gib / sess : 0.0,
               sess);
        if (f->kvq8) printf("; %.0f tokens q8_0 = %.1f sessions", per_gib_q8, sess > 0 ? per_gib_q8 / sess : 0.0);
        printf(" (any tier: T0, RAM or disk)\n");
    }
    printf("tokenizer      %s, pre-tokenizer %s, %d tokens, bos %d, eos %d\n", kvt_tokenizer_kind(tk),
           kvt_tokenizer_pre(tk), kvt_tokenizer_n_vocab(tk), kvt_tokenizer_bos(tk), kvt_tokenizer_eos(tk));
    printf("chat template  %s\n", f->chat);
    printf("fingerprint    %s\n", f->fp);
}

int kvt_cmd_info(int argc, char **argv) {
    const char *path = NULL;
    int json = 0;
    char defpath[4096];
    for (int i = 1; i < argc; i++) {
        if (kvt_cli_is_help(argv[i])) {
            kvt_usage_info(stdout);
            return 0;
        } else if (!strcmp(argv[i], "-m") || !strcmp(argv[i], "--model")) {
            if (!(path = kvt_cli_value(argc, argv, &i))) return 2;
        } else if (!strcmp(argv[i], "--json")) {
            json = 1;
        } else if (!strcmp(argv[i], "--devices")) {
            return kvt_cli_print_devices(stdout);
        } else {
            fprintf(stderr, "kvtier info: unknown option '%s' (see --help)\n", argv[i]);
            return 2;
        }
    }
    if (!path) {
        if (kvt_default_model_path(defpath, sizeof defpath)) return 1;
        path = defpath;
    }
    kvt_gguf *g;
    if (kvt_gguf_open(path, &g)) {
        fprintf(stderr, "kvtier info: %s\n", kvt_errmsg());
        return 1;
    }
    int vocab_only = g->n_tensors == 0;
    kvt_gguf_close(g);
    kvt_model_params mp = kvt_model_default_params();
    mp.vocab_only = vocab_only;
    kvt_model *m;
    if (kvt_model_load(path, mp, &m)) {
        fprintf(stderr, "kvtier info: %s\n", kvt_errmsg());
        return 1;
    }
    info_facts f = {.name = "", .vocab_only = vocab_only};
    kvt_fingerprint_hex(m->fingerprint, f.fp);
    weight_types(m->gguf, f.types, sizeof f.types);
    kvt_gguf_get_str(m->gguf, "general.name", &f.name);
    f.chat = kvt_chat_family_name(kvt_chat_detect(m->chat_template));
    f.kv16 = vocab_only ? 0 : kvt_model_kv_token_bytes(m, KVT_KV_F16);
    f.kv32 = vocab_only ? 0 : kvt_model_kv_token_bytes(m, KVT_KV_F32);
    f.kvq8 = vocab_only ? 0 : kvt_model_kv_token_bytes(m, KVT_KV_Q8_0); /* 0: head_dim does not allow it */
    if (json) print_info_json(m, path, &f);
    else print_info_text(m, path, &f);
    kvt_model_free(m);
    return 0;
}
