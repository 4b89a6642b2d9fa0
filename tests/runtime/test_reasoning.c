// SPDX-License-Identifier: MIT
/* The reasoning splitter: whole replies split into reasoning and answer as
 * llama-server's deepseek format does, and the same replies fed a byte at a
 * time (tags cut anywhere) join to exactly the same two parts. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "reasoning.h"
#include "testutil.h"

/* Splits text fed in pieces of step bytes (0: whole) into r and c. */
static void split(const char *text, int opened, size_t step, char *r, char *c) {
    kvt_reasoning st = kvt_reasoning_start(opened);
    size_t n = strlen(text), done = 0, avail = 0;
    r[0] = c[0] = 0;
    while (done < n || avail < n) {
        avail = step ? (avail + step < n ? avail + step : n) : n;
        int final = avail == n;
        size_t ro, rl, co, cl;
        size_t used = kvt_reasoning_feed(&st, text + done, avail - done, final, &ro, &rl, &co, &cl);
        strncat(r, text + done + ro, rl);
        strncat(c, text + done + co, cl);
        done += used;
        if (final) {
            CHECK(done == n);
            break;
        }
    }
}

static void expect(const char *text, int opened, const char *want_r, const char *want_c) {
    char r[512], c[512];
    for (size_t step = 0; step < 4; step++) {
        split(text, opened, step, r, c);
        CHECKF(!strcmp(r, want_r) && !strcmp(c, want_c), "'%s' (step %zu): reasoning '%s' answer '%s'", text, step, r,
               c);
    }
}

int main(void) {
    expect("<think>\nfirst add\n</think>\n\n4", 0, "first add", "4");
    expect("  <think>a</think>b <think> c", 0, "a", "b <think> c");
    expect("plain answer", 0, "", "plain answer");
    expect("<thin", 0, "", "<thin");
    expect("<thinking>x", 0, "", "<thinking>x");
    expect("reason only\n</think>\nanswer\n", 1, "reason only", "answer\n");
    expect("never closed </thi", 1, "never closed </thi", "");
    expect("<think></think>", 0, "", "");
    expect("", 1, "", "");
    return kvt_test_done("test_reasoning");
}
