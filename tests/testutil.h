// SPDX-License-Identifier: MIT
/* Tiny test harness: CHECK macros that report file:line and count failures,
 * paths to ../shared and the built binary, skip with exit code 77. */
#ifndef KVT_TESTUTIL_H
#define KVT_TESTUTIL_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "mkmodel.h"

extern int kvt_test_failures;
extern int kvt_test_checks;

#define CHECK(cond) \
    do { \
        kvt_test_checks++; \
        if (!(cond)) { \
            kvt_test_failures++; \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
        } \
    } while (0)

#define CHECKF(cond, ...) \
    do { \
        kvt_test_checks++; \
        if (!(cond)) { \
            kvt_test_failures++; \
            fprintf(stderr, "%s:%d: CHECK failed: %s: ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__); \
            fputc('\n', stderr); \
        } \
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
/* mkmodel's parameters of the tiny llama below: dim 64, 2 layers, 4 heads /
 * 2 kv heads, ff 128; a test changes what it needs. */
kvt_mkmodel_params kvt_test_tiny_params(void);
/* Writes a tiny random-weight llama (dim 64, 2 layers, 4 heads / 2 kv heads,
 * ff 128, built-in vocabulary of n_vocab tokens) into the temporary directory
 * and loads it. Returns NULL after printing why if it cannot. */
struct kvt_model *kvt_test_tiny_model(const char *file_name, int n_vocab);
/* The same with weights of type (a KVT_TYPE_*). */
struct kvt_model *kvt_test_tiny_model_typed(const char *file_name, int n_vocab, uint32_t type);
/* ---- cache tests: greedy generation compared bit for bit ---- */
#include "generate.h"

/* One greedy run through kvt_generate. */
typedef struct {
    int rc;          /* kvt_generate's */
    int32_t *tokens; /* prompt + generated */
    int32_t n;       /* 0 when rc is not 0 */
    float *logits;   /* at the prompt's last position (the first sampled token's) */
    int32_t n_vocab;
    kvt_gen_result res;
} kvt_test_gen;

/* An engine over model with these params; NULL (and a failed check) if it cannot be made. */
kvt_engine *kvt_test_engine_new(const struct kvt_model *model, kvt_engine_params ep);
/* The engine device a test asks for with $KVT_TEST_DEVICE: 0 (unset or
 * "cpu") or 1 ("vulkan": Vulkan device 0); a test that asks for vulkan where
 * there is none skips (77), saying why. */
int32_t kvt_test_device(void);
/* Puts ep on kvt_test_device() (with $KVT_TEST_NGL there: that many layers
 * on the device, the rest on the CPU). */
void kvt_test_engine_on_device(kvt_engine_params *ep);
/* Skips (77) a GPU variant test ($KVT_GPU_VARIANT set) under the sanitizers
 * ($KVT_SANITIZED set), saying why. */
void kvt_test_gpu_variant(void);
/* An engine over model with B-token pages, n_pages of them, context n_ctx,
 * 2 threads, on kvt_test_device() (with $KVT_TEST_NGL there: that many layers
 * on the device, the rest on the CPU); NULL (and a failed check) if it cannot
 * be made. */
kvt_engine *kvt_test_engine(const struct kvt_model *model, int32_t block, int32_t n_pages, int32_t n_ctx);
/* A cache over e: a T1 of ram_bytes and, with dir, a 64 MiB disk tier there
 * that admits every block and restores whatever it holds (KVT_RESTORE_ALWAYS);
 * NULL (and a failed check) if it cannot be made. */
kvt_cache *kvt_test_cache(kvt_engine *e, const char *dir, uint64_t ram_bytes);
/* Greedy generation of n_gen tokens after prompt[0..n) (cache may be NULL;
 * salt NULL: shared). A failure is a failed check and an empty result. */
kvt_test_gen kvt_test_generate(kvt_engine *e, kvt_cache *c, const int32_t *prompt, int32_t n, int32_t n_gen,
                               const char *salt);
/* The same for a run that may fail on purpose: the failure is only in .rc. */
kvt_test_gen kvt_test_generate_rc(kvt_engine *e, kvt_cache *c, const int32_t *prompt, int32_t n, int32_t n_gen,
                                  const char *salt);
/* kvt_test_generate(_rc) with approximate reuse (bp non-NULL) of the documents
 * at doc_starts (n_docs + 1 entries). */
kvt_test_gen kvt_test_generate_blend(kvt_engine *e, kvt_cache *c, const int32_t *prompt, int32_t n, int32_t n_gen,
                                     const char *salt, const kvt_blend_params *bp, const size_t *doc_starts,
                                     size_t n_docs);
kvt_test_gen kvt_test_generate_blend_rc(kvt_engine *e, kvt_cache *c, const int32_t *prompt, int32_t n, int32_t n_gen,
                                        const char *salt, const kvt_blend_params *bp, const size_t *doc_starts,
                                        size_t n_docs);
/* 1 if both runs succeeded and produced the same tokens and bit-identical logits. */
int kvt_test_same(const kvt_test_gen *a, const kvt_test_gen *b);
void kvt_test_gen_free(kvt_test_gen *g);
/* n random ids in [300, n_vocab) (clear of the built-in vocabulary's specials). */
void kvt_test_random_tokens(int32_t *t, int32_t n, int32_t n_vocab, unsigned *seed);

/* Records that part of a test could not run (e.g. ../shared is missing). */
void kvt_test_skip_part(const char *why);
/* Prints "N checks, M failed" and returns the process exit code: 1 on a
 * failure or when no check ran at all, 77 (CTest: skipped, with the reasons)
 * when a part was skipped, else 0. */
int kvt_test_done(const char *name);
/* Prints why and exits 77 (CTest: skipped). */
void kvt_test_skip(const char *why) __attribute__((noreturn));

#endif
