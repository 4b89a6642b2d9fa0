/* Tiny test harness: CHECK macros that report file:line and count failures,
 * paths to ../shared and the built binary, skip with exit code 77. */
#ifndef KVT_TESTUTIL_H
#define KVT_TESTUTIL_H

#include <stdio.h>
#include <stdlib.h>

extern int kvt_test_failures;
extern int kvt_test_checks;

#define CHECK(cond)                                                                   \
    do {                                                                              \
        kvt_test_checks++;                                                            \
        if (!(cond)) {                                                                \
            kvt_test_failures++;                                                      \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
        }                                                                             \
    } while (0)

#define CHECKF(cond, ...)                                                              \
    do {                                                                               \
        kvt_test_checks++;                                                             \
        if (!(cond)) {                                                                 \
            kvt_test_failures++;                                                       \
            fprintf(stderr, "%s:%d: CHECK failed: %s: ", __FILE__, __LINE__, #cond);  \
            fprintf(stderr, __VA_ARGS__);                                              \
            fputc('\n', stderr);                                                       \
        }                                                                              \
    } while (0)

/* Directory of the shared test assets (models/, reference/, vocab/), from
 * $KVT_SHARED, else "../shared" relative to the source tree. Never NULL. */
const char *kvt_test_shared(void);
/* Path of the kvtier binary ($KVT_BIN). */
const char *kvt_test_bin(void);
/* Joins dir and name into a static buffer (one of 8 rotating ones). */
const char *kvt_test_path(const char *dir, const char *name);
/* A fresh temporary directory (removed by the OS tmp cleaner, not by us). */
const char *kvt_test_tmpdir(void);
/* Reads a whole file; NULL if it cannot. Caller frees. */
char *kvt_test_read_file(const char *path, size_t *len);
/* Writes a tiny random-weight llama (dim 64, 2 layers, 4 heads / 2 kv heads,
 * ff 128, built-in vocabulary of n_vocab tokens) into the temporary directory
 * and loads it. Returns NULL after printing why if it cannot. */
struct kvt_model *kvt_test_tiny_model(const char *file_name, int n_vocab);
/* Records that part of a test could not run (e.g. ../shared is missing). */
void kvt_test_skip_part(const char *why);
/* Prints "N checks, M failed" and returns the process exit code: 1 on a
 * failure or when no check ran at all, 77 (CTest: skipped, with the reasons)
 * when a part was skipped, else 0. */
int kvt_test_done(const char *name);
/* Prints why and exits 77 (CTest: skipped). */
void kvt_test_skip(const char *why) __attribute__((noreturn));

#endif
