/* Token samplers: greedy, or temperature with optional top-k and top-p
 * (nucleus) filtering, drawing from a seeded PCG32 generator so a seed always
 * gives the same tokens for the same logits. */
#ifndef KVT_SAMPLER_H
#define KVT_SAMPLER_H

#include <stdint.h>

typedef struct kvt_sampler kvt_sampler;

typedef struct {
    float temp;    /* <= 0: greedy (argmax, ties to the lowest id) */
    int32_t top_k; /* keep the k most likely tokens; <= 0: all */
    float top_p;   /* keep the smallest set whose probability reaches p; >= 1: all */
    uint64_t seed; /* RNG seed; the same seed replays the same choices */
} kvt_sampler_params;

kvt_sampler_params kvt_sampler_default_params(void);

/* A sampler for a vocabulary of n_vocab tokens; owns its scratch and RNG.
 * Returns NULL for n_vocab < 1. Free with kvt_sampler_free(). */
kvt_sampler *kvt_sampler_new(kvt_sampler_params params, int32_t n_vocab);
void kvt_sampler_free(kvt_sampler *s);

/* Picks a token from n_vocab logits (not modified). Deterministic given the
 * seed and the sequence of calls. Not thread-safe per sampler. */
int32_t kvt_sampler_sample(kvt_sampler *s, const float *logits);

/* Log-probabilities for OpenAI's logprobs, from the logits the sampler is
 * given: log-softmax over all n_vocab logits at temperature 1, before any
 * temperature, top-k or top-p (the model's own distribution, as OpenAI
 * reports it), computed in double (max-shifted log-sum-exp). *chosen_lp gets
 * chosen's; top_id/top_lp[0..n_top) get the n_top most likely tokens, most
 * likely first, ties to the lower id (n_top <= n_vocab; 0: none). */
void kvt_logprobs(const float *logits, int32_t n_vocab, int32_t chosen, int32_t n_top, double *chosen_lp,
                  int32_t *top_id, double *top_lp);

/* Index of the largest logit, ties to the lowest index. */
int32_t kvt_argmax(const float *logits, int32_t n);

/* The sampler's generator, exposed for tests: next 32 random bits. */
uint32_t kvt_sampler_rand(kvt_sampler *s);

#endif
