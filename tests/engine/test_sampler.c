/* Sampler tests: greedy is argmax, filters narrow the choice as specified, a
 * seed replays the same tokens, and draws follow the softmax probabilities. */
#include <math.h>
#include <string.h>

#include "sampler.h"
#include "testutil.h"

#define V 8
#define DRAWS 20000

static const float logits[V] = {1.0f, 3.0f, 2.0f, 3.0f, -1.0f, 0.5f, 2.5f, 0.0f};

static kvt_sampler *make(float temp, int top_k, float top_p, uint64_t seed) {
    kvt_sampler_params p = {temp, top_k, top_p, seed};
    kvt_sampler *s = kvt_sampler_new(p, V);
    CHECK(s != NULL);
    return s;
}

int main(void) {
    CHECK(kvt_argmax(logits, V) == 1); /* tie between 1 and 3 goes to the lower id */
    CHECK(kvt_sampler_new(kvt_sampler_default_params(), 0) == NULL);

    kvt_sampler *s = make(0.0f, 0, 1.0f, 1);
    for (int i = 0; i < 10; i++) CHECK(kvt_sampler_sample(s, logits) == 1);
    kvt_sampler_free(s);

    /* top-k 1 and a tiny top-p leave only the best candidate */
    s = make(1.0f, 1, 1.0f, 2);
    for (int i = 0; i < 50; i++) CHECK(kvt_sampler_sample(s, logits) == 1);
    kvt_sampler_free(s);
    s = make(1.0f, 0, 1e-6f, 3);
    for (int i = 0; i < 50; i++) CHECK(kvt_sampler_sample(s, logits) == 1);
    kvt_sampler_free(s);

    /* top-k 3 keeps ids 1, 3, 6 (logits 3, 3, 2.5) */
    s = make(1.0f, 3, 1.0f, 4);
    for (int i = 0; i < 500; i++) {
        int t = kvt_sampler_sample(s, logits);
        CHECKF(t == 1 || t == 3 || t == 6, "top-k 3 drew %d", t);
    }
    kvt_sampler_free(s);

    /* same seed, same tokens; another seed differs somewhere */
    kvt_sampler *a = make(1.0f, 0, 1.0f, 42), *b = make(1.0f, 0, 1.0f, 42), *c = make(1.0f, 0, 1.0f, 43);
    int same_ab = 1, same_ac = 1;
    for (int i = 0; i < 200; i++) {
        int ta = kvt_sampler_sample(a, logits), tb = kvt_sampler_sample(b, logits), tc = kvt_sampler_sample(c, logits);
        same_ab &= ta == tb;
        same_ac &= ta == tc;
    }
    CHECK(same_ab);
    CHECK(!same_ac);
    kvt_sampler_free(a);
    kvt_sampler_free(b);
    kvt_sampler_free(c);

    /* frequencies at temperature 1 follow softmax(logits) within 4 sigma */
    s = make(1.0f, 0, 1.0f, 7);
    int count[V] = {0};
    for (int i = 0; i < DRAWS; i++) count[kvt_sampler_sample(s, logits)]++;
    double z = 0;
    for (int i = 0; i < V; i++) z += exp(logits[i]);
    for (int i = 0; i < V; i++) {
        double p = exp(logits[i]) / z, sd = sqrt(p * (1 - p) / DRAWS);
        CHECKF(fabs((double)count[i] / DRAWS - p) <= 4 * sd + 1e-9, "id %d: %.4f vs %.4f", i, (double)count[i] / DRAWS, p);
    }
    kvt_sampler_free(s);

    /* logprobs: the log-softmax of the same logits, top list most likely first, ties to the lower id */
    double lp, top_lp[3];
    int32_t top_id[3];
    kvt_logprobs(logits, V, 2, 3, &lp, top_id, top_lp);
    CHECKF(fabs(lp - (logits[2] - log(z))) < 1e-12, "logprob %.17g", lp);
    CHECK(top_id[0] == 1 && top_id[1] == 3 && fabs(top_lp[0] - (logits[1] - log(z))) < 1e-12);
    for (int i = 0; i < V; i++) CHECK(i == 1 || i == 3 || logits[i] <= logits[top_id[2]]);
    double total = 0;
    for (int i = 0; i < V; i++) {
        kvt_logprobs(logits, V, i, 0, &lp, top_id, top_lp);
        total += exp(lp);
    }
    CHECKF(fabs(total - 1) < 1e-12, "probabilities add up to %.17g", total);
    return kvt_test_done("test_sampler");
}
