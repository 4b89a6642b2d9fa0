// SPDX-License-Identifier: MIT
/* `kvtier mkmodel`: random-weight GGUFs of every architecture kvtier runs. Tensor data is generated
 * on the fly by the writer callback from a per-tensor seed, so a 250M-parameter
 * model never sits in memory and the bytes depend only on (seed, name, shape). */
#include "mkmodel.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "common.h"
#include "gguf.h"
#include "model.h"
#include "ops.h"
#include "quant_k.h"
#include "quant_legacy.h"

#define N_BYTE_TOKENS 256
#define GGUF_TOKEN_NORMAL 1
#define GGUF_TOKEN_CONTROL 3
#define BIAS_SCALE 0.02f
#define EMBD_SCALE 1.0f
#define NORM_SPREAD 0.25f       /* qwen3/phi3/gemma norms: 1 +- this */
#define ROPE_FACTOR_SPREAD 1.0f /* phi3 LongRoPE factors in [1, 3) */
#define ROPE_BASE 10000.0f
#define ROPE_BASE_LONG 1000000.0f /* qwen3, gemma3 */
#define PHI3_SWA 2047             /* the usual windows, as the released models have them */
#define GEMMA2_SWA 4096
#define GEMMA3_SWA 512
#define GEMMA2_ATTN_SOFTCAP 50.0f
#define GEMMA2_FINAL_SOFTCAP 30.0f
#define MAX_HEAD_DIM 4096     /* --head-dim: the loader's limit (model.c) */
#define MAX_Q_WIDTH (1 << 24) /* heads x head dim: the largest --dim */

static const char *const builtin_specials[] = {"<|endoftext|>", "<|im_start|>", "<|im_end|>"};
#define N_SPECIALS ((int32_t)KVT_ARRAY_LEN(builtin_specials))
/* --fim: Qwen2.5-Coder's fill-in-the-middle tokens, after the specials above */
static const char *const fim_specials[] = {"<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>",
                                           "<|fim_pad|>",    "<|repo_name|>",  "<|file_sep|>"};
#define N_FIM ((int32_t)KVT_ARRAY_LEN(fim_specials))

/* ChatML, the template the built-in specials are made for. */
static const char builtin_chat_template[] =
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + "
    "'<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

/* The templates of the families, written as their models ship them (short forms). */
static const char qwen3_chat_template[] =
    "{%- for message in messages %}{%- if message.role == 'assistant' %}{%- set content = message.content %}"
    "{%- if '</think>' in content %}{%- set content = content.split('</think>')[-1].lstrip('\n') %}{%- endif %}"
    "{{- '<|im_start|>' + message.role + '\n' + content + '<|im_end|>' + '\n' }}{%- else %}"
    "{{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>' + '\n' }}{%- endif %}"
    "{%- endfor %}{%- if add_generation_prompt %}{{- '<|im_start|>assistant\n' }}"
    "{%- if enable_thinking is defined and enable_thinking is false %}{{- '<think>\n\n</think>\n\n' }}{%- endif %}"
    "{%- endif %}";
static const char gemma_chat_template[] =
    "{{ bos_token }}{% if messages[0]['role'] == 'system' %}{% set first_user_prefix = messages[0]['content'] + "
    "'\n\n' %}{% set loop_messages = messages[1:] %}{% else %}{% set first_user_prefix = '' %}{% set loop_messages "
    "= messages %}{% endif %}{% for message in loop_messages %}{% if message['role'] == 'assistant' %}{% set role = "
    "'model' %}{% else %}{% set role = message['role'] %}{% endif %}{{ '<start_of_turn>' + role + '\n' + "
    "(first_user_prefix if loop.first else '') + message['content'] | trim + '<end_of_turn>\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<start_of_turn>model\n' }}{% endif %}";
static const char phi3_chat_template[] =
    "{% for message in messages %}{% if message['role'] == 'system' %}{{'<|system|>\n' + message['content'] + "
    "'<|end|>\n'}}{% elif message['role'] == 'user' %}{{'<|user|>\n' + message['content'] + '<|end|>\n'}}"
    "{% elif message['role'] == 'assistant' %}{{'<|assistant|>\n' + message['content'] + '<|end|>\n'}}{% endif %}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|assistant|>\n' }}{% else %}{{ eos_token }}{% endif %}";

static const char *chat_template_for(const char *arch) {
    if (!strcmp(arch, "qwen3")) return qwen3_chat_template;
    if (!strcmp(arch, "phi3")) return phi3_chat_template;
    if (!strcmp(arch, "gemma2") || !strcmp(arch, "gemma3")) return gemma_chat_template;
    return builtin_chat_template;
}

kvt_mkmodel_params kvt_mkmodel_default_params(void) {
    kvt_mkmodel_params p = {
        .arch = "llama",
        .dim = 256,
        .layers = 4,
        .heads = 8,
        .kv_heads = 4,
        .ff = 768,
        .vocab = 0,
        .ctx = 4096,
        .type = KVT_TYPE_F16,
        .vocab_from = NULL,
        .seed = 42,
        .tied = 0,
        .rope_base = 0.0f,
        .swa = 0,
        .name = "kvtier-random",
    };
    return p;
}

int32_t kvt_mkmodel_builtin_min_vocab(void) { return N_BYTE_TOKENS + N_SPECIALS; }

/* ---- built-in byte-level BPE vocabulary -------------------------------------
 * 256 byte tokens under GPT-2's byte-to-unicode map, then merges of letter
 * pairs, space+letter, space+pair, triples, space+triple until the requested
 * size: a valid BPE whose tokens are real strings. */

typedef struct {
    char **tokens;
    char **merges;
    int32_t n_tokens, n_merges;
} bpe_vocab;

static void utf8_put(char **p, uint32_t cp) {
    if (cp < 0x80) {
        *(*p)++ = (char)cp;
    } else if (cp < 0x800) {
        *(*p)++ = (char)(0xC0 | (cp >> 6));
        *(*p)++ = (char)(0x80 | (cp & 0x3F));
    } else {
        *(*p)++ = (char)(0xE0 | (cp >> 12));
        *(*p)++ = (char)(0x80 | ((cp >> 6) & 0x3F));
        *(*p)++ = (char)(0x80 | (cp & 0x3F));
    }
}

/* GPT-2 maps every byte to a printable code point; bytes that are already
 * printable keep their own, the rest take 256, 257, ... in order. */
static uint32_t byte_to_cp(int b) {
    if ((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255)) return (uint32_t)b;
    uint32_t n = 0;
    for (int i = 0; i < b; i++)
        if (!((i >= 33 && i <= 126) || (i >= 161 && i <= 172) || (i >= 174 && i <= 255))) n++;
    return 256 + n;
}

static void vocab_add_token(bpe_vocab *v, const char *s) { v->tokens[v->n_tokens++] = kvt_xstrdup(s); }

static void vocab_add_merge(bpe_vocab *v, const char *a, const char *b) {
    char buf[64];
    snprintf(buf, sizeof buf, "%s %s", a, b);
    v->merges[v->n_merges++] = kvt_xstrdup(buf);
    snprintf(buf, sizeof buf, "%s%s", a, b);
    vocab_add_token(v, buf);
}

static void build_builtin_vocab(bpe_vocab *v, int32_t size, int fim) {
    v->tokens = kvt_xcalloc((size_t)size, sizeof(char *));
    v->merges = kvt_xcalloc((size_t)size, sizeof(char *));
    char sp[4], *p = sp;
    utf8_put(&p, byte_to_cp(' '));
    *p = 0;
    for (int b = 0; b < N_BYTE_TOKENS; b++) {
        char buf[4];
        p = buf;
        utf8_put(&p, byte_to_cp(b));
        *p = 0;
        vocab_add_token(v, buf);
    }
    for (int32_t i = 0; i < N_SPECIALS; i++) vocab_add_token(v, builtin_specials[i]);
    for (int32_t i = 0; fim && i < N_FIM; i++) vocab_add_token(v, fim_specials[i]);
    static const char letters[] = "etaoinshrdlcumwfgypbvkjxqz";
    char a[2] = {0}, b[2] = {0}, c[2] = {0};
    /* five generations; each stops as soon as the vocabulary is full */
    for (int gen = 0; gen < 5 && v->n_tokens < size; gen++) {
        for (int i = 0; i < 26 && v->n_tokens < size; i++) {
            for (int j = 0; j < 26 && v->n_tokens < size; j++) {
                for (int k = 0; k < (gen >= 3 ? 26 : 1) && v->n_tokens < size; k++) {
                    a[0] = letters[i];
                    b[0] = letters[j];
                    c[0] = letters[k];
                    char ab[3] = {a[0], b[0], 0}, spab[8];
                    snprintf(spab, sizeof spab, "%s%s", sp, ab);
                    switch (gen) {
                    case 0: vocab_add_merge(v, a, b); break; /* "t h" */
                    case 1:
                        if (j == 0) vocab_add_merge(v, sp, a);
                        break; /* "Ġ t" */
                    case 2: {  /* "Ġt h" */
                        char spa[8];
                        snprintf(spa, sizeof spa, "%s%s", sp, a);
                        vocab_add_merge(v, spa, b);
                        break;
                    }
                    case 3: vocab_add_merge(v, ab, c); break;   /* "th e" */
                    case 4: vocab_add_merge(v, spab, c); break; /* "Ġth e" */
                    }
                }
            }
        }
    }
    /* a request beyond what the generations make is padded with unreachable tokens */
    while (v->n_tokens < size) {
        char buf[32];
        snprintf(buf, sizeof buf, "<|unused_%d|>", v->n_tokens);
        vocab_add_token(v, buf);
    }
}

static void free_vocab(bpe_vocab *v) {
    for (int32_t i = 0; i < v->n_tokens; i++) free(v->tokens[i]);
    for (int32_t i = 0; i < v->n_merges; i++) free(v->merges[i]);
    free(v->tokens);
    free(v->merges);
}

static void write_builtin_tokenizer(kvt_gguf_writer *w, int32_t size, const char *arch, int fim) {
    bpe_vocab v = {0};
    build_builtin_vocab(&v, size, fim);
    int32_t n_spec = N_SPECIALS + (fim ? N_FIM : 0);
    int32_t *types = kvt_xmalloc((size_t)size * sizeof *types);
    for (int32_t i = 0; i < size; i++) types[i] = GGUF_TOKEN_NORMAL;
    for (int32_t i = 0; i < n_spec; i++) types[N_BYTE_TOKENS + i] = GGUF_TOKEN_CONTROL;
    for (int32_t i = N_BYTE_TOKENS + n_spec; i < size; i++)
        if (!strncmp(v.tokens[i], "<|unused_", 9)) types[i] = GGUF_TOKEN_CONTROL;
    kvt_gguf_w_str(w, "tokenizer.ggml.model", "gpt2");
    kvt_gguf_w_str(w, "tokenizer.ggml.pre", "gpt-2");
    kvt_gguf_w_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)v.tokens, (uint64_t)size);
    kvt_gguf_w_arr(w, "tokenizer.ggml.token_type", KVT_GGUF_I32, types, (uint64_t)size);
    kvt_gguf_w_arr_str(w, "tokenizer.ggml.merges", (const char *const *)v.merges, (uint64_t)v.n_merges);
    kvt_gguf_w_u32(w, "tokenizer.ggml.bos_token_id", N_BYTE_TOKENS);
    kvt_gguf_w_u32(w, "tokenizer.ggml.eos_token_id", N_BYTE_TOKENS);
    kvt_gguf_w_u32(w, "tokenizer.ggml.eot_token_id", N_BYTE_TOKENS + 2);
    kvt_gguf_w_bool(w, "tokenizer.ggml.add_bos_token", 1);
    kvt_gguf_w_str(w, "tokenizer.chat_template", chat_template_for(arch));
    free(types);
    free_vocab(&v);
}

/* ---- weights ------------------------------------------------------------- */

typedef struct {
    uint64_t seed;
} fill_ctx;

static uint64_t splitmix64(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* uniform in [-1, 1) */
static float rand_unit(uint64_t *s) { return (float)((double)(splitmix64(s) >> 11) * 0x1.0p-53 * 2.0 - 1.0); }

static int ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && !strcmp(s + n - m, suffix);
}

/* Decides a tensor's type, shape and value scale from its name. */
typedef struct {
    uint32_t type;
    int64_t cols, rows; /* rows = 1 for vectors */
    float scale;
    int ones;     /* norms of llama/qwen2 */
    float offset; /* values are offset + scale * uniform[-1, 1) */
} tensor_plan;

static int fill_tensor(void *vctx, const char *name, void *buf, uint64_t nbytes);

typedef struct {
    kvt_mkmodel_params p;
    int64_t vocab;
} model_plan;

static model_plan plan; /* read by fill_tensor; kvt_mkmodel is not reentrant */

static int is_arch(const char *name) { return !strcmp(plan.p.arch, name); }
/* the architectures added after llama/qwen2 get norms that are not all ones,
 * so a norm applied in the wrong place shows; llama/qwen2 keep their bytes */
static int varied_norms(void) { return !is_arch("llama") && !is_arch("qwen2"); }

/* One head's width: --head-dim, else dim / heads as the released models of
 * every family but qwen3 and gemma have it. */
static int64_t head_dim_of(const kvt_mkmodel_params *p) { return p->head_dim ? p->head_dim : p->dim / p->heads; }

static tensor_plan plan_for(const char *name) {
    const kvt_mkmodel_params *p = &plan.p;
    int64_t hd = head_dim_of(p), kv = (int64_t)p->kv_heads * hd, qd = (int64_t)p->heads * hd;
    tensor_plan t = {p->type, p->dim, 1, 0, 0, 0.0f};
    if (ends_with(name, "norm.weight")) {
        t.type = KVT_TYPE_F32;
        if (strstr(name, "attn_q_norm") || strstr(name, "attn_k_norm")) t.cols = hd;
        t.ones = !varied_norms();
        t.offset = 1.0f;
        t.scale = NORM_SPREAD;
        return t;
    }
    if (strstr(name, "rope_factors_")) { /* LongRoPE factors: in [1, 1 + 2 * spread) */
        t.type = KVT_TYPE_F32;
        t.cols = hd / 2;
        t.offset = 1.0f + ROPE_FACTOR_SPREAD;
        t.scale = ROPE_FACTOR_SPREAD;
        return t;
    }
    if (ends_with(name, ".bias")) {
        t.type = KVT_TYPE_F32;
        t.cols = strstr(name, "attn_q") ? qd : kv;
        t.scale = BIAS_SCALE;
        return t;
    }
    if (!strcmp(name, "token_embd.weight") || !strcmp(name, "output.weight")) {
        t.rows = plan.vocab;
        t.scale = strcmp(name, "output.weight") ? EMBD_SCALE : sqrtf(3.0f / (float)p->dim);
        /* gemma scales the embeddings by sqrt(dim) and projects with them: keep both at unit scale */
        if (!strcmp(name, "token_embd.weight") && (is_arch("gemma2") || is_arch("gemma3")))
            t.scale = sqrtf(3.0f / (float)p->dim);
        return t;
    }
    if (strstr(name, "attn_qkv")) t.rows = qd + 2 * kv;
    else if (strstr(name, "attn_q.")) t.rows = qd;
    else if (strstr(name, "attn_k.") || strstr(name, "attn_v.")) t.rows = kv;
    else if (strstr(name, "ffn_up") && is_arch("phi3")) t.rows = 2 * (int64_t)p->ff; /* gate and up, fused */
    else if (strstr(name, "ffn_gate") || strstr(name, "ffn_up")) t.rows = p->ff;
    else if (strstr(name, "ffn_down")) {
        t.rows = p->dim;
        t.cols = p->ff;
    } else { /* attn_output: from the heads' width back to dim */
        t.rows = p->dim;
        t.cols = qd;
    }
    t.scale = sqrtf(3.0f / (float)t.cols); /* unit-variance outputs for unit-variance inputs */
    return t;
}

/* gemma projects with token_embd; phi3 always has its own output matrix */
static int has_output(const kvt_mkmodel_params *p) {
    if (!strcmp(p->arch, "gemma2") || !strcmp(p->arch, "gemma3")) return 0;
    return !p->tied || !strcmp(p->arch, "phi3");
}

/* The type a matrix is written in: the mix's recipe, or `type` with the K-type fallback. */
static uint32_t matrix_type(const char *name) {
    const kvt_mkmodel_params *p = &plan.p;
    tensor_plan t = plan_for(name);
    if (t.ones || t.rows == 1) return t.type;
    if (p->mix == KVT_MIX_NONE) return kvt_quant_fallback(t.type, t.cols);
    kvt_quant_model_info info = {.n_layer = p->layers, .n_gqa = p->heads / p->kv_heads, .has_output = has_output(p)};
    return kvt_quant_mix_type(p->mix, name, t.cols, &info);
}

void kvt_mkmodel_outlier_channels(const kvt_mkmodel_params *p, int32_t ch[KVT_MKMODEL_OUTLIERS]) {
    uint64_t s = p->seed ^ 0x6f75746c69657273ull; /* its own stream: the weights keep their bytes */
    for (int i = 0; i < KVT_MKMODEL_OUTLIERS; i++) {
        int dup;
        do {
            ch[i] = (int32_t)(splitmix64(&s) % (uint64_t)p->dim);
            dup = 0;
            for (int j = 0; j < i; j++) dup |= ch[j] == ch[i];
        } while (dup && p->dim > i);
    }
}

/* With outliers: scales row r of the first layer's ffn_down, or the channels of its post-FFN norm. */
static void plant_outliers(const char *name, int64_t r, float *row, int64_t cols) {
    if (!plan.p.outliers) return;
    int down = !strcmp(name, "blk.0.ffn_down.weight"), post = !strcmp(name, "blk.0.post_ffw_norm.weight");
    if (!down && !post) return;
    int32_t ch[KVT_MKMODEL_OUTLIERS];
    kvt_mkmodel_outlier_channels(&plan.p, ch);
    for (int i = 0; i < KVT_MKMODEL_OUTLIERS; i++) {
        if (down && ch[i] == r)
            for (int64_t c = 0; c < cols; c++) row[c] *= KVT_MKMODEL_OUTLIER_GAIN;
        if (post && ch[i] < cols) row[ch[i]] *= KVT_MKMODEL_OUTLIER_GAIN;
    }
}

static int fill_tensor(void *vctx, const char *name, void *buf, uint64_t nbytes) {
    fill_ctx *ctx = vctx;
    tensor_plan t = plan_for(name);
    t.type = matrix_type(name);
    uint64_t s = ctx->seed ^ XXH3_64bits(name, strlen(name));
    size_t row_bytes = kvt_ggml_row_bytes(t.type, (uint64_t)t.cols);
    float *row = kvt_xmalloc((size_t)t.cols * sizeof(float));
    for (int64_t r = 0; r < t.rows; r++) {
        for (int64_t c = 0; c < t.cols; c++) row[c] = t.ones ? 1.0f : t.offset + t.scale * rand_unit(&s);
        plant_outliers(name, r, row, t.cols);
        uint8_t *dst = (uint8_t *)buf + (size_t)r * row_bytes;
        switch (t.type) {
        case KVT_TYPE_F32: memcpy(dst, row, (size_t)t.cols * 4); break;
        case KVT_TYPE_Q2_K:
        case KVT_TYPE_Q3_K:
        case KVT_TYPE_Q4_K:
        case KVT_TYPE_Q5_K:
        case KVT_TYPE_Q6_K:
        case KVT_TYPE_IQ4_XS: kvt_qk_quantize_row(t.type, row, t.cols, dst); break;
        case KVT_TYPE_F16:
            for (int64_t c = 0; c < t.cols; c++) {
                uint16_t h = kvt_f32_to_f16(row[c]);
                memcpy(dst + 2 * c, &h, 2);
            }
            break;
        case KVT_TYPE_BF16:
            for (int64_t c = 0; c < t.cols; c++) {
                uint16_t h = kvt_f32_to_bf16(row[c]);
                memcpy(dst + 2 * c, &h, 2);
            }
            break;
        case KVT_TYPE_Q8_0:
            for (int64_t b = 0; b < t.cols / KVT_Q8_0_BLOCK; b++) {
                const float *x = row + b * KVT_Q8_0_BLOCK;
                float amax = 0;
                for (int i = 0; i < KVT_Q8_0_BLOCK; i++) amax = fmaxf(amax, fabsf(x[i]));
                float d = amax / 127.0f, id = d ? 1.0f / d : 0.0f;
                uint16_t dh = kvt_f32_to_f16(d);
                uint8_t *blk = dst + b * (2 + KVT_Q8_0_BLOCK);
                memcpy(blk, &dh, 2);
                for (int i = 0; i < KVT_Q8_0_BLOCK; i++) blk[2 + i] = (uint8_t)(int8_t)lrintf(x[i] * id);
            }
            break;
        default: /* the legacy types, as llama.cpp quantizes them (Q8_0 above keeps
                  * its own ties-to-even rounding: the committed references were
                  * made from those bytes) */
            kvt_ql_quantize_row(t.type, row, dst, t.cols);
            break;
        }
    }
    free(row);
    (void)nbytes;
    return 0;
}

static int check_params(const kvt_mkmodel_params *p) {
    if (!kvt_arch_known(p->arch))
        return kvt_fail(KVT_EARG, "--arch must be one of %s, not '%s'", kvt_arch_names(), p->arch);
    if (p->swa < 0) return kvt_fail(KVT_EARG, "--swa must be >= 0");
    if (p->rope_base < 0) return kvt_fail(KVT_EARG, "--rope-base must be >= 0");
    if (p->rope_scaling && strcmp(p->rope_scaling, "none") && strcmp(p->rope_scaling, "linear") &&
        strcmp(p->rope_scaling, "yarn"))
        return kvt_fail(KVT_EARG, "--rope-scaling must be none, linear or yarn, not '%s'", p->rope_scaling);
    if (p->rope_factor != 0 && !(p->rope_factor >= 0.01f && p->rope_factor <= 1000.0f))
        return kvt_fail(KVT_EARG, "--rope-factor must be 0 (absent) or from 0.01 to 1000");
    if (p->rope_orig_ctx < 0) return kvt_fail(KVT_EARG, "--rope-orig-ctx must be >= 0");
    if (p->rope_attn_factor != 0 && !(p->rope_attn_factor >= 0.01f && p->rope_attn_factor <= 100.0f))
        return kvt_fail(KVT_EARG, "--rope-attn-factor must be 0 (absent) or from 0.01 to 100");
    if (!(p->rope_yarn_log_mul >= 0.0f && p->rope_yarn_log_mul <= 10.0f))
        return kvt_fail(KVT_EARG, "--rope-yarn-log-mul must be from 0 (absent) to 10");
    if (!strcmp(p->arch, "phi3") && (p->rope_orig_ctx || p->rope_attn_factor))
        return kvt_fail(KVT_EARG,
                        "--rope-orig-ctx and --rope-attn-factor are not for phi3 (mkmodel writes its "
                        "LongRoPE keys)");
    if (p->dim <= 0 || p->layers <= 0 || p->heads <= 0 || p->kv_heads <= 0 || p->ff <= 0 || p->ctx <= 0)
        return kvt_fail(KVT_EARG, "dimensions must be positive");
    if (p->head_dim < 0 || p->head_dim > MAX_HEAD_DIM)
        return kvt_fail(KVT_EARG, "--head-dim must be 0 (dim / heads) or from 2 to %d, not %d", MAX_HEAD_DIM,
                        p->head_dim);
    if (!p->head_dim && p->dim % p->heads)
        return kvt_fail(KVT_EARG, "dim %d is not a multiple of heads %d (or give --head-dim)", p->dim, p->heads);
    if (p->heads % p->kv_heads)
        return kvt_fail(KVT_EARG, "heads %d is not a multiple of kv-heads %d", p->heads, p->kv_heads);
    if (head_dim_of(p) % 2) return kvt_fail(KVT_EARG, "head dim %d must be even for rope", (int)head_dim_of(p));
    if ((int64_t)p->heads * head_dim_of(p) > MAX_Q_WIDTH)
        return kvt_fail(KVT_EARG, "heads x head dim = %lld is over %d", (long long)p->heads * head_dim_of(p),
                        MAX_Q_WIDTH);
    if (!kvt_quant_can_write(p->type))
        return kvt_fail(
            KVT_EARG, "weight type must be f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, iq4_nl, q2_k..q6_k or iq4_xs");
    /* the K types fall back per matrix (quant_mix.h); the 32-blocks have no fallback */
    if ((p->type == KVT_TYPE_Q8_0 || kvt_ql_is_legacy(p->type)) &&
        (p->dim % KVT_Q8_0_BLOCK || p->ff % KVT_Q8_0_BLOCK || (p->heads * head_dim_of(p)) % KVT_Q8_0_BLOCK))
        return kvt_fail(KVT_EARG, "%s needs dim, ff and heads x head dim to be multiples of %d",
                        kvt_ggml_type_name(p->type), KVT_Q8_0_BLOCK);
    return 0;
}

static float arch_rope_base(const kvt_mkmodel_params *p) {
    if (p->rope_base > 0) return p->rope_base;
    return !strcmp(p->arch, "qwen3") || !strcmp(p->arch, "gemma3") ? ROPE_BASE_LONG : ROPE_BASE;
}

/* The keys llama.cpp reads for each family beyond the common ones. */
static void write_arch_metadata(kvt_gguf_writer *w, const kvt_mkmodel_params *p) {
    const char *a = p->arch;
    char key[128];
#define KEY(suffix) (snprintf(key, sizeof key, "%s." suffix, a), key)
    int32_t hd = (int32_t)head_dim_of(p);
    /* qwen3 and gemma always say it; the others when it is not dim / heads (and the
     * files of the default keep their bytes) */
    if (p->head_dim || !strcmp(a, "qwen3") || !strcmp(a, "gemma2") || !strcmp(a, "gemma3")) {
        kvt_gguf_w_u32(w, KEY("attention.key_length"), (uint32_t)hd);
        kvt_gguf_w_u32(w, KEY("attention.value_length"), (uint32_t)hd);
    }
    if (!strcmp(a, "phi3")) {
        kvt_gguf_w_u32(w, KEY("attention.sliding_window"), (uint32_t)(p->swa ? p->swa : PHI3_SWA));
        /* trained past its original context, so the long factors apply (model.c) */
        uint32_t orig = (uint32_t)(p->ctx / 2 > 0 ? p->ctx / 2 : 1);
        kvt_gguf_w_u32(w, KEY("rope.scaling.original_context_length"), orig);
        kvt_gguf_w_f32(w, KEY("rope.scaling.attn_factor"),
                       orig > 1 ? sqrtf(1.0f + logf((float)p->ctx / (float)orig) / logf((float)orig)) : 1.0f);
    } else if (!strcmp(a, "gemma2")) {
        kvt_gguf_w_u32(w, KEY("attention.sliding_window"), (uint32_t)(p->swa ? p->swa : GEMMA2_SWA));
        kvt_gguf_w_f32(w, KEY("attn_logit_softcapping"), GEMMA2_ATTN_SOFTCAP);
        kvt_gguf_w_f32(w, KEY("final_logit_softcapping"), GEMMA2_FINAL_SOFTCAP);
    } else if (!strcmp(a, "gemma3")) {
        kvt_gguf_w_u32(w, KEY("attention.sliding_window"), (uint32_t)(p->swa ? p->swa : GEMMA3_SWA));
    }
#undef KEY
}

/* The rope.scaling.* keys asked for, as llama.cpp's converters name them. */
static void write_rope_scaling(kvt_gguf_writer *w, const kvt_mkmodel_params *p) {
    char key[128];
#define KEY(suffix) (snprintf(key, sizeof key, "%s." suffix, p->arch), key)
    if (p->rope_scaling) kvt_gguf_w_str(w, KEY("rope.scaling.type"), p->rope_scaling);
    if (p->rope_factor != 0) kvt_gguf_w_f32(w, KEY("rope.scaling.factor"), p->rope_factor);
    if (p->rope_orig_ctx) kvt_gguf_w_u32(w, KEY("rope.scaling.original_context_length"), (uint32_t)p->rope_orig_ctx);
    if (p->rope_attn_factor != 0) kvt_gguf_w_f32(w, KEY("rope.scaling.attn_factor"), p->rope_attn_factor);
    if (p->rope_yarn_log_mul != 0) kvt_gguf_w_f32(w, KEY("rope.scaling.yarn_log_multiplier"), p->rope_yarn_log_mul);
#undef KEY
}

static void write_layer(kvt_gguf_writer *w, const kvt_mkmodel_params *p, int32_t l, fill_ctx *fc) {
    const char *a = p->arch;
    const int phi3 = !strcmp(a, "phi3"), gemma = !strcmp(a, "gemma2") || !strcmp(a, "gemma3");
    const int qk_norm = !strcmp(a, "qwen3") || !strcmp(a, "gemma3");
    int64_t hd = head_dim_of(p), kv = (int64_t)p->kv_heads * hd, qd = (int64_t)p->heads * hd;
    struct {
        const char *suffix;
        int64_t cols, rows;
        int vec, want;
    } const ts[] = {
        {"attn_norm.weight", p->dim, 1, 1, 1},
        {"attn_qkv.weight", p->dim, qd + 2 * kv, 0, phi3},
        {"attn_q.weight", p->dim, qd, 0, !phi3},
        {"attn_k.weight", p->dim, kv, 0, !phi3},
        {"attn_v.weight", p->dim, kv, 0, !phi3},
        {"attn_q_norm.weight", hd, 1, 1, qk_norm},
        {"attn_k_norm.weight", hd, 1, 1, qk_norm},
        {"attn_output.weight", qd, p->dim, 0, 1},
        {"post_attention_norm.weight", p->dim, 1, 1, gemma},
        {"ffn_norm.weight", p->dim, 1, 1, 1},
        {"ffn_gate.weight", p->dim, p->ff, 0, !phi3},
        {"ffn_up.weight", p->dim, phi3 ? 2 * (int64_t)p->ff : p->ff, 0, 1},
        {"ffn_down.weight", p->ff, p->dim, 0, 1},
        {"post_ffw_norm.weight", p->dim, 1, 1, gemma},
        {"attn_q.bias", qd, 1, 1, !strcmp(a, "qwen2")},
        {"attn_k.bias", kv, 1, 1, !strcmp(a, "qwen2")},
        {"attn_v.bias", kv, 1, 1, !strcmp(a, "qwen2")},
    };
    char name[96];
    uint64_t ne[2];
    for (size_t i = 0; i < KVT_ARRAY_LEN(ts); i++) {
        if (!ts[i].want) continue;
        snprintf(name, sizeof name, "blk.%d.%s", l, ts[i].suffix);
        ne[0] = (uint64_t)ts[i].cols;
        ne[1] = (uint64_t)ts[i].rows;
        kvt_gguf_w_tensor(w, name, ts[i].vec ? KVT_TYPE_F32 : matrix_type(name), ts[i].vec ? 1 : 2, ne, fill_tensor, fc);
    }
}

/* The vocabulary size, and with --vocab-from the GGUF whose tokenizer is
 * copied (*src, closed by the caller): p->vocab, or the tokenizer's (or the
 * built-in one's) size when 0; never fewer than the tokenizer has. 0, or an
 * error code with the reason (*src then NULL). */
static int resolve_vocab(const kvt_mkmodel_params *p, kvt_gguf **src, int64_t *vocab) {
    int rc;
    *src = NULL;
    *vocab = p->vocab;
    if (p->vocab_from && p->fim)
        return kvt_fail(KVT_EARG, "--fim adds tokens to the built-in vocabulary; --vocab-from copies that file's");
    if (p->vocab_from) {
        if ((rc = kvt_gguf_open(p->vocab_from, src))) return rc;
        const kvt_gguf_kv *toks;
        if ((rc = kvt_gguf_get_arr(*src, "tokenizer.ggml.tokens", &toks))) {
            kvt_gguf_close(*src);
            *src = NULL;
            return kvt_fail_prefix(rc, "%s: ", p->vocab_from);
        }
        if (*vocab == 0) *vocab = (int64_t)toks->arr_n;
        if (*vocab < (int64_t)toks->arr_n) {
            kvt_gguf_close(*src);
            *src = NULL;
            return kvt_fail(KVT_EARG, "--vocab %lld is smaller than the tokenizer's %llu tokens", (long long)*vocab,
                            (unsigned long long)toks->arr_n);
        }
    } else {
        int32_t min = kvt_mkmodel_builtin_min_vocab() + (p->fim ? N_FIM : 0);
        if (*vocab == 0) *vocab = min;
        if (*vocab < min) return kvt_fail(KVT_EARG, "--vocab must be at least %d for the built-in vocabulary", min);
    }
    return 0;
}

int kvt_mkmodel(const kvt_mkmodel_params *p, const char *path) {
    int rc = check_params(p);
    if (rc) return rc;
    kvt_gguf *src = NULL;
    int64_t vocab = 0;
    if ((rc = resolve_vocab(p, &src, &vocab))) return rc;
    plan.p = *p;
    plan.vocab = vocab;
    fill_ctx fc = {p->seed};
    kvt_gguf_writer *w = kvt_gguf_writer_new();
    const char *a = p->arch;
    char key[128];
#define KEY(suffix) (snprintf(key, sizeof key, "%s." suffix, a), key)
    kvt_gguf_w_str(w, "general.architecture", a);
    kvt_gguf_w_str(w, "general.name", p->name);
    kvt_gguf_w_str(w, "general.description", "random weights generated by kvtier mkmodel (not a trained model)");
    kvt_gguf_w_u32(w, "general.alignment", KVT_GGUF_DEFAULT_ALIGNMENT);
    kvt_gguf_w_u32(w, KEY("context_length"), (uint32_t)p->ctx);
    kvt_gguf_w_u32(w, KEY("embedding_length"), (uint32_t)p->dim);
    kvt_gguf_w_u32(w, KEY("block_count"), (uint32_t)p->layers);
    kvt_gguf_w_u32(w, KEY("feed_forward_length"), (uint32_t)p->ff);
    kvt_gguf_w_u32(w, KEY("attention.head_count"), (uint32_t)p->heads);
    kvt_gguf_w_u32(w, KEY("attention.head_count_kv"), (uint32_t)p->kv_heads);
    kvt_gguf_w_f32(w, KEY("rope.freq_base"), arch_rope_base(p));
    kvt_gguf_w_u32(w, KEY("rope.dimension_count"), (uint32_t)head_dim_of(p));
    kvt_gguf_w_f32(w, KEY("attention.layer_norm_rms_epsilon"), 1e-5f);
    kvt_gguf_w_u32(w, KEY("vocab_size"), (uint32_t)vocab);
#undef KEY
    write_arch_metadata(w, p);
    write_rope_scaling(w, p);
    if (src) {
        int has_template = 0;
        for (uint64_t i = 0; i < src->n_kv; i++) {
            if (strncmp(src->kv[i].key, "tokenizer.", 10)) continue;
            kvt_gguf_w_copy(w, &src->kv[i]);
            has_template |= !strcmp(src->kv[i].key, "tokenizer.chat_template");
        }
        /* the newer families carry their own template (llama/qwen2 files keep their bytes) */
        if (!has_template && strcmp(a, "llama") && strcmp(a, "qwen2"))
            kvt_gguf_w_str(w, "tokenizer.chat_template", chat_template_for(a));
    } else {
        write_builtin_tokenizer(w, (int32_t)vocab, a, p->fim);
    }
    int64_t hd = head_dim_of(p);
    uint64_t ne[2];
    ne[0] = (uint64_t)p->dim;
    ne[1] = (uint64_t)vocab;
    kvt_gguf_w_tensor(w, "token_embd.weight", matrix_type("token_embd.weight"), 2, ne, fill_tensor, &fc);
    ne[0] = (uint64_t)p->dim;
    kvt_gguf_w_tensor(w, "output_norm.weight", KVT_TYPE_F32, 1, ne, fill_tensor, &fc);
    if (has_output(p)) {
        ne[1] = (uint64_t)vocab;
        kvt_gguf_w_tensor(w, "output.weight", matrix_type("output.weight"), 2, ne, fill_tensor, &fc);
    }
    if (!strcmp(a, "phi3")) { /* LongRoPE: one pair for every layer */
        ne[0] = (uint64_t)(hd / 2);
        kvt_gguf_w_tensor(w, "rope_factors_long.weight", KVT_TYPE_F32, 1, ne, fill_tensor, &fc);
        kvt_gguf_w_tensor(w, "rope_factors_short.weight", KVT_TYPE_F32, 1, ne, fill_tensor, &fc);
    }
    for (int32_t l = 0; l < p->layers; l++) write_layer(w, p, l, &fc);
    rc = kvt_gguf_write(w, path);
    kvt_gguf_writer_free(w);
    kvt_gguf_close(src);
    return rc;
}
