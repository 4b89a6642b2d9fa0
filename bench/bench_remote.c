// SPDX-License-Identifier: MIT
/* T3 read bandwidth at the tier level: stores a run of blocks in a Redis
 * server through kvt_remote_put, then times kvt_remote_get_many of the whole
 * run (one call, as a restore makes) several times and prints MB/s of value
 * bytes, next to which the caller puts `redis-benchmark -t get` at the same
 * value size (bench/remote.sh does). Payloads are random bytes (the
 * uncompressible worst case), or real KV pages from --kv FILE (pages one after
 * another, --payload-kib each, reused round-robin when fewer than --blocks;
 * bench/remote.sh's notes say how to extract them from a disk tier). Prints
 * numbers; never passes or fails on time.
 * --conns sets the tier's read connections (threads), --zstd LEVEL writes
 * zstd-compressed values (on random bytes they do not shrink: this prices
 * the attempt).
 * usage: bench_remote --url redis://127.0.0.1:PORT --key-file FILE [--payload-kib N] [--blocks N] [--reps N]
 *                     [--conns N] [--zstd LEVEL] [--kv FILE] */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "blockhash.h"
#include "common.h"
#include "tier_remote.h"

#define MB 1e6

/* CPU seconds this process has used, all threads, user and system. */
static double cpu_s(void) {
    struct rusage u;
    getrusage(RUSAGE_SELF, &u);
    return (double)u.ru_utime.tv_sec + u.ru_utime.tv_usec / 1e6 + (double)u.ru_stime.tv_sec + u.ru_stime.tv_usec / 1e6;
}

static void usage(void) {
    fprintf(stderr,
            "usage: bench_remote --url URL --key-file FILE [--payload-kib N] [--blocks N] [--reps N] "
            "[--conns N] [--zstd LEVEL] [--kv FILE]\n");
    exit(2);
}

int main(int argc, char **argv) {
    const char *url = NULL, *key_file = NULL, *kv = NULL;
    size_t payload_kib = 512, blocks = 64;
    int level = 0;
    int reps = 5, conns = 0;
    for (int i = 1; i < argc; i++) {
        if (i + 1 >= argc) usage();
        if (!strcmp(argv[i], "--url")) url = argv[++i];
        else if (!strcmp(argv[i], "--key-file")) key_file = argv[++i];
        else if (!strcmp(argv[i], "--payload-kib")) payload_kib = (size_t)atol(argv[++i]);
        else if (!strcmp(argv[i], "--blocks")) blocks = (size_t)atol(argv[++i]);
        else if (!strcmp(argv[i], "--reps")) reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--conns")) conns = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--zstd")) level = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--kv")) kv = argv[++i];
        else usage();
    }
    if (!url || !key_file || !payload_kib || !blocks || reps < 1) usage();
    const uint32_t B = KVT_BLOCK_TOKENS_DEFAULT;
    size_t pb = payload_kib * 1024;
    uint8_t *pay = kvt_xmalloc(blocks * pb), *out = kvt_xmalloc(blocks * pb);
    if (kv) {
        FILE *f = fopen(kv, "rb");
        size_t got = f ? fread(pay, 1, blocks * pb, f) / pb * pb : 0;
        if (f) fclose(f);
        if (!got) {
            fprintf(stderr, "bench_remote: %s holds no whole %zu-byte page\n", kv, pb);
            return 1;
        }
        for (size_t at = got; at < blocks * pb; at += got) memcpy(pay + at, pay, KVT_MIN(got, blocks * pb - at));
    } else {
        uint64_t s = 0x9e3779b97f4a7c15ull;
        for (size_t i = 0; i < blocks * pb; i++) {
            s ^= s << 13, s ^= s >> 7, s ^= s << 17;
            pay[i] = (uint8_t)s;
        }
    }
    int32_t *tokens = kvt_xmalloc(blocks * B * sizeof *tokens);
    for (size_t i = 0; i < blocks * B; i++) tokens[i] = (int32_t)(i * 7919 % 32000);
    kvt_remote_params p = kvt_remote_default_params();
    p.url = url;
    p.key_file = key_file;
    p.payload_bytes = pb;
    p.block_tokens = B;
    p.timeout_ms = 60000;
    p.write_timeout_ms = 60000;
    p.put_wait_ms = 60000;
#ifdef KVT_REMOTE_READ_CONNS_MAX /* builds before the parallel reader had neither */
    if (conns) p.read_conns = (uint32_t)conns;
    if (level) {
        p.compress = KVT_REMOTE_COMPRESS_ZSTD;
        p.zstd_level = level;
    }
#else
    (void)conns;
    (void)level;
#endif
    kvt_root_params rp = kvt_root_default_params();
    rp.numerics = "bench_remote";
    kvt_hash128 root;
    kvt_block_root(&rp, &root);
    root.lo ^= (uint64_t)kvt_now(); /* a fresh namespace per run */
    p.ns = root;
    kvt_remote *r;
    if (kvt_remote_open(&p, &r)) {
        fprintf(stderr, "bench_remote: %s\n", kvt_errmsg());
        return 1;
    }
    kvt_hash128 *h = kvt_xmalloc(blocks * sizeof *h);
    double t0 = kvt_now();
    for (size_t i = 0; i < blocks; i++) {
        h[i] = kvt_block_hash(i ? h[i - 1] : root, tokens + i * B, B);
        if (kvt_remote_put(r, h[i], i ? h[i - 1] : root, tokens + i * B, pay + i * pb) < 0) {
            fprintf(stderr, "bench_remote: put %zu failed\n", i);
            return 1;
        }
    }
    if (kvt_remote_flush(r)) {
        fprintf(stderr, "bench_remote: %s\n", kvt_errmsg());
        return 1;
    }
    double put_s = kvt_now() - t0;
    kvt_remote_stats st;
    kvt_remote_get_stats(r, &st);
    printf("stored %zu blocks of %zu KiB: %.0f MB/s of payload written, %.2f MB in Redis (payload/stored %.3f)\n",
           blocks, payload_kib, (double)(blocks * pb) / put_s / MB, (double)st.bytes_written / MB,
           (double)(blocks * pb) / (double)st.bytes_written);
    kvt_tier_read *reqs = kvt_xmalloc(blocks * sizeof *reqs);
    double best = 0, sum = 0, cpu = 0, wall = 0;
    uint64_t total = 0;
    uint64_t read_before = st.bytes_read;
    for (int k = 0; k < reps; k++) {
        for (size_t i = 0; i < blocks; i++)
            reqs[i] = (kvt_tier_read){.hash = h[i],
                                      .parent = i ? h[i - 1] : root,
                                      .tokens = tokens + i * B,
                                      .out = out + i * pb};
        double a = kvt_now(), c0 = cpu_s();
        size_t hits = kvt_remote_get_many(r, reqs, blocks);
        double dt = kvt_now() - a;
        cpu += cpu_s() - c0;
        wall += dt;
        if (hits != blocks || memcmp(out, pay, blocks * pb)) {
            fprintf(stderr, "bench_remote: %zu of %zu blocks read back, or wrong bytes\n", hits, blocks);
            return 1;
        }
        kvt_remote_get_stats(r, &st);
        double mbs = (double)(st.bytes_read - read_before) / dt / MB;
        total += st.bytes_read - read_before;
        read_before = st.bytes_read;
        double pmbs = (double)(blocks * pb) / dt / MB;
        printf("get_many %zu blocks: %.1f ms, %.0f MB/s of values, %.0f MB/s of payload\n", blocks, dt * 1e3, mbs, pmbs);
        best = mbs > best ? mbs : best;
        sum += mbs;
    }
    printf("value bytes %" PRIu64 "; restore: best %.0f MB/s, mean %.0f MB/s (value bytes); client CPU %.2f s per GB "
           "(all threads; %.0f%% of wall)\n",
           st.value_bytes, best, sum / reps, cpu / ((double)total / 1e9), 100 * cpu / wall);
    kvt_remote_close(r);
    return 0;
}
