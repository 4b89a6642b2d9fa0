// SPDX-License-Identifier: MIT
/* Token samplers: greedy, or temperature with optional top-k, min-p, top-p
 * (nucleus), locally typical and XTC filtering, a dynamic temperature, or
 * Mirostat (1 and 2) in their place, drawing from a seeded PCG32 generator so
 * a seed always gives the same tokens for the same logits. Before either, the logits
 * may get a per-token bias (OpenAI's logit_bias) and penalties on the last
 * tokens of the prompt and the reply (OpenAI's presence and frequency
 * penalties, llama.cpp's repeat penalty, over llama.cpp's window). Every addition is off at its zero value, and then the
 * sampler's path and output are exactly those without it.
 *
 * The steps after the bias (penalties, top-k, top-p, min-p, temperature) run
 * in an order, kvtier's own by default or one given (llama.cpp's "samplers"
 * chain): each works on the candidates the steps before it left, with the
 * logits as they left them, so top-p and min-p after the temperature measure
 * the scaled distribution and before it the model's. */
#ifndef KVT_SAMPLER_H
#define KVT_SAMPLER_H

#include <stdint.h>

typedef struct kvt_sampler kvt_sampler;

/* The steps an order is made of. */
typedef enum {
    KVT_SAMPLE_PENALTIES = 0, /* presence, frequency and repeat penalties */
    KVT_SAMPLE_TOP_K,
    KVT_SAMPLE_TOP_P,
    KVT_SAMPLE_MIN_P,
    KVT_SAMPLE_TEMPERATURE,
    KVT_SAMPLE_TYPICAL, /* locally typical sampling (typical_p) */
    KVT_SAMPLE_XTC,     /* exclude top choices (xtc_probability, xtc_threshold) */
    KVT_SAMPLE_DRY,     /* "don't repeat yourself" (dry_multiplier, ...) */
    KVT_SAMPLE_INFILL,  /* llama.cpp's fill-in-the-middle filter (params.infill); only where an order names it */
    KVT_SAMPLE_STEP_COUNT
} kvt_sample_step;

#define KVT_SAMPLER_MAX_STEPS 32 /* steps in a given order (one may repeat, as in llama.cpp's chain) */

/* What llama.cpp's "infill" step needs of the vocabulary (kvt_infill_vocab_new). */
typedef struct {
    uint8_t *eog;  /* (n) 1 for a token that ends generation */
    uint32_t *off; /* (n + 1) token i's text (special tokens empty) is bytes[off[i]..off[i + 1]) */
    char *bytes;
    int32_t n;   /* ids covered; a candidate past them is text with no bytes */
    int32_t eot; /* the one token left where no text token is likely enough (EOT, else EOS); -1: none */
} kvt_infill_vocab;

typedef struct {
    float temp;    /* <= 0: greedy (argmax, ties to the lowest id) */
    int32_t top_k; /* keep the k most likely tokens; <= 0: all */
    float top_p;   /* keep the smallest set whose probability reaches p; >= 1: all */
    uint64_t seed; /* RNG seed; the same seed replays the same choices */
    /* The history below is the prompt (kvt_sampler_prompt) and the tokens this sampler returned, as
       llama.cpp's sampler is given the prompt before it samples. */
    float presence_penalty;   /* subtracted once from the logit of each token in the history (OpenAI); 0: off */
    float frequency_penalty;  /* subtracted from a token's logit once per occurrence in the history; 0: off */
    float repeat_penalty;     /* llama.cpp's: a token in the history has a positive logit divided by it, a
                                negative one multiplied; 0 or 1: off */
    int32_t penalty_last_n;   /* the penalties look at the last N tokens of the history; <= 0: all of it */
    float repetition_penalty; /* vLLM's: every token of the prompt (kvt_sampler_prompt) or the history has a
                                 positive logit divided by it, a negative one multiplied, once; applied with
                                 the penalties; 0 or 1: off */
    float min_p;              /* drop tokens whose probability is below min_p times the most likely one's (in
                                the default order at temperature 1, after top-k); <= 0: off */
    const int32_t *bias_id;   /* logit_bias: bias[i] is added to the logit of token bias_id[i] (ids outside */
    const float *bias;        /* the vocabulary are skipped); copied by kvt_sampler_new */
    int32_t n_bias;
    /* llama.cpp's other samplers; each is off at its zero value. */
    float typical_p;         /* keep the tokens whose surprise (-ln p) is nearest the entropy until their
                                probability exceeds typical_p; <= 0 or >= 1: off */
    float xtc_probability;   /* XTC: at this chance per token (drawn from the seed), drop every candidate whose
                                probability reaches xtc_threshold but the least likely of them; <= 0: off */
    float xtc_threshold;     /* XTC's threshold; above 0.5 XTC is off (no two candidates can reach it) */
    float dynatemp_range;    /* dynamic temperature: temp - range (at least 0) at entropy 0 up to temp + range
                                at the uniform distribution's, along normalized-entropy^dynatemp_exponent;
                                <= 0: the temperature is temp */
    float dynatemp_exponent; /* only with dynatemp_range */
    int32_t min_keep;        /* top-p, min-p, typical and XTC leave at least this many candidates; <= 1: one */
    int32_t mirostat;        /* 1 or 2: Mirostat picks instead of top-k, top-p, min-p, typical and XTC, after
                                the bias, the penalties and the temperature (not dynamic); 0: off */
    float mirostat_tau;      /* Mirostat's target surprise, in bits */
    float mirostat_eta;      /* Mirostat's learning rate */
    /* DRY: a token that would extend a repeat of n >= dry_allowed_length tokens of the history (the
     * prompt, given by kvt_sampler_prompt, and the reply) loses dry_multiplier * dry_base^(n -
     * dry_allowed_length) from its logit. A repeat never runs across a sequence breaker. */
    float dry_multiplier;           /* 0: off */
    float dry_base;                 /* below 1: off */
    int32_t dry_allowed_length;     /* repeats shorter than this are free */
    int32_t dry_penalty_last_n;     /* the last N tokens of the history are scanned; -1: all of it; 0: off */
    const uint8_t *dry_breaker;     /* (n_vocab) nonzero for a token whose text holds a sequence breaker; it is
                                   never penalized; NULL: none. Copied by kvt_sampler_new */
    const kvt_infill_vocab *infill; /* the infill step's vocabulary (not copied: it must outlive the
                                       sampler); NULL: the step keeps every candidate */
    /* The order of the steps. has_steps 0 (the default): penalties, DRY,
     * top-k, typical, min-p, XTC, temperature, top-p. Else steps[0..n_steps) (kvt_sample_step
     * values; n_steps may be 0): a step not listed is not applied, one listed
     * twice applies twice. Greedy (temp <= 0) stays greedy whatever the
     * order: the most likely token after the bias and, where the order
     * applies them, the penalties and DRY; except that typical and XTC (which may
     * drop the most likely token) and a dynamic temperature (which may be
     * above 0 at temp 0) apply as llama.cpp applies them: a temperature
     * at or below 0 then keeps the best candidate the steps before it left. */
    int has_steps;
    int32_t n_steps;
    uint8_t steps[KVT_SAMPLER_MAX_STEPS];
} kvt_sampler_params;

kvt_sampler_params kvt_sampler_default_params(void);

/* A sampler for a vocabulary of n_vocab tokens; owns its scratch and RNG.
 * Returns NULL for n_vocab < 1. Free with kvt_sampler_free(). */
kvt_sampler *kvt_sampler_new(kvt_sampler_params params, int32_t n_vocab);
void kvt_sampler_free(kvt_sampler *s);

/* llama.cpp's default DRY sequence breakers: newline, colon, double quote, asterisk. */
#define KVT_DRY_DEFAULT_BREAKERS 4
extern const char *const kvt_dry_default_breakers[KVT_DRY_DEFAULT_BREAKERS];

/* DRY's sequence breakers as text, as a command line gives them (the strings are not owned). */
#define KVT_DRY_MAX_BREAKERS 64
typedef struct {
    const char *s[KVT_DRY_MAX_BREAKERS];
    int32_t n;
    int given; /* 0: llama.cpp's defaults */
} kvt_dry_breakers;

/* Gives the penalties, DRY and repetition_penalty the prompt: the history
 * before the first token sampled (the penalties keep their last
 * penalty_last_n tokens, DRY its last dry_penalty_last_n). Does nothing
 * while all are off. */
void kvt_sampler_prompt(kvt_sampler *s, const int32_t *ids, int32_t n);

/* Picks a token from n_vocab logits (not modified); a token whose logit is
 * -inf is never picked unless all are. The order's steps narrow and reshape
 * the candidates (ranked by logit, ties to the lower id), and the draw is
 * from the softmax of what they leave. Deterministic given the
 * seed and the sequence of calls (the penalties' history is what earlier
 * calls returned). Not thread-safe per sampler. */
int32_t kvt_sampler_sample(kvt_sampler *s, const float *logits);

/* Log-probabilities for OpenAI's logprobs, from the logits the sampler is
 * given: log-softmax over all n_vocab logits at temperature 1, before any
 * logit bias, penalty, temperature, top-k, min-p or top-p (the model's own
 * distribution, as OpenAI reports it), computed in double (max-shifted log-sum-exp). *chosen_lp gets
 * chosen's; top_id/top_lp[0..n_top) get the n_top most likely tokens, most
 * likely first, ties to the lower id (n_top <= n_vocab; 0: none). */
void kvt_logprobs(const float *logits, int32_t n_vocab, int32_t chosen, int32_t n_top, double *chosen_lp,
                  int32_t *top_id, double *top_lp);

/* Index of the largest logit, ties to the lowest index. */
int32_t kvt_argmax(const float *logits, int32_t n);

/* The sampler's generator, exposed for tests: next 32 random bits. */
uint32_t kvt_sampler_rand(kvt_sampler *s);

/* The ranking the samplers use, exposed for tests: order[0..n) gets the ids
 * 0..n-1 of logits by logit, largest first, ties to the lower id (-0 equal
 * to +0; logits at -inf last, in id order too). */
void kvt_sampler_rank(const double *logits, int32_t n, int32_t *order);

/* Whether the order p runs (its own, or the default one) has step st. */
int kvt_sampler_order_has(const kvt_sampler_params *p, int st);

/* The infill step's view of tok for a sampler of n_ids logits (malloc'd; free
 * with kvt_infill_vocab_free). */
struct kvt_tokenizer;
kvt_infill_vocab *kvt_infill_vocab_new(const struct kvt_tokenizer *tok, int32_t n_ids);
void kvt_infill_vocab_free(kvt_infill_vocab *v);

/* llama.cpp's infill step on n candidates (ids, probabilities p that sum to 1,
 * most likely first): mostly end-of-generation tokens left, only they stay;
 * else a token whose text begins another's gives it its probability or takes
 * it (the likelier keeps both), and of the text tokens those at 0.2 and up,
 * then those at 1/(count + 1) and up after renormalizing, stay with every
 * end-of-generation token. Marks keep[i]; returns how many stay, or 0 where
 * no text token reached 0.2 (v->eot is then the one token). p is changed. */
int32_t kvt_infill_keep(const kvt_infill_vocab *v, const int32_t *ids, double *p, int32_t n, uint8_t *keep);

#endif
