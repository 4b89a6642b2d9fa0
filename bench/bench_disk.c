// SPDX-License-Identifier: MIT
/* Disk tier bandwidth: a plain O_DIRECT sequential read of the cache's
 * filesystem against kvtier's restore (get_many of a request's blocks, cold:
 * O_DIRECT or page cache dropped), plus the open-time header scan and a full
 * verify of a large cache. Prints numbers and ratios; never pass/fail.
 * --no-mac measures records without the keyed MAC (--kv-disk-no-mac), to
 * price the MAC against the default (GMAC where the CPU has AES-NI and
 * PCLMUL); KVT_DISK_MAC_SCHEME=blake2b in the environment measures the
 * portable BLAKE2b scheme instead.
 * --open-records N measures only the open: N records (--record-kib K each,
 * default 4: the most records per byte of disk) with a prefix index, opened
 * with the index checkpoint a clean close leaves; after a kill -9 that left
 * that checkpoint stale and N/10 records after it (batched, then one read per
 * header); and with no checkpoint at all (the full header scan, one read per
 * header as before batched scans, then batched), page cache dropped before
 * each. Prints seconds per million records. --keep leaves the directory, and
 * a run that finds one left so only times the open with its checkpoint and the
 * full scans again; --batched-only
 * skips the opens that read one header at a time; --checkpoint-only times
 * only the open after a clean close (and the close's checkpoint write), not
 * the kill -9 and full-scan opens, so it can be repeated on a kept directory.
 * usage: bench_disk [--dir DIR] [--payload-kib N] [--blocks N] [--sets N] [--scan-mib N] [--zstd] [--buffered]
 *                   [--no-mac] [--open-records N [--record-kib K] [--keep] [--batched-only]
 *                   [--checkpoint-only]] */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>
#include <dirent.h>
#include <signal.h>
#include <sys/wait.h>

#include "blockhash.h"
#include "common.h"
#include "prefix.h"
#include "tier_disk.h"

#define MIB (1024.0 * 1024.0)
#define SEQ_CHUNK (4u << 20) /* read size of the sequential baseline */
#define SEQ_FILE_MIB 1024

/* Evicts dir's files from the page cache (for buffered runs and scans). */
static void drop_cache(const char *dir) {
    int fd = open("/proc/sys/vm/drop_caches", O_WRONLY);
    sync();
    if (fd >= 0) {
        if (write(fd, "1\n", 2) != 2) { /* fall through to fadvise */
        }
        close(fd);
    }
    DIR *dh = opendir(dir);
    struct dirent *e;
    while (dh && (e = readdir(dh))) {
        char p[4096];
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        int f = open(p, O_RDONLY);
        if (f >= 0) {
            posix_fadvise(f, 0, 0, POSIX_FADV_DONTNEED);
            close(f);
        }
    }
    if (dh) closedir(dh);
}

static double seq_read(const char *dir) {
    char path[4096];
    snprintf(path, sizeof path, "%s/seqread.bin", dir);
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_DIRECT, 0644);
    int direct = fd >= 0;
    if (fd < 0) fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) {
        perror(path);
        exit(1);
    }
    void *buf;
    if (posix_memalign(&buf, KVT_DISK_ALIGN, SEQ_CHUNK)) exit(1);
    memset(buf, 0xA5, SEQ_CHUNK);
    uint64_t total = (uint64_t)SEQ_FILE_MIB << 20;
    for (uint64_t off = 0; off < total; off += SEQ_CHUNK)
        if (pwrite(fd, buf, SEQ_CHUNK, (off_t)off) != SEQ_CHUNK) exit(1);
    fsync(fd);
    drop_cache(dir);
    double t0 = kvt_now();
    for (uint64_t off = 0; off < total; off += SEQ_CHUNK)
        if (pread(fd, buf, SEQ_CHUNK, (off_t)off) != SEQ_CHUNK) exit(1);
    double dt = kvt_now() - t0;
    close(fd);
    unlink(path);
    free(buf);
    double bw = (double)total / MIB / dt;
    printf("sequential read (%s, %u MiB chunks): %.0f MiB/s\n", direct ? "O_DIRECT" : "buffered", SEQ_CHUNK >> 20, bw);
    return bw;
}

typedef struct {
    uint64_t records, bytes, bad;
} walk_count;

static int count_fn(void *ctx, const kvt_disk_walk_info *w) {
    walk_count *c = ctx;
    c->records++;
    c->bytes += w->bytes;
    c->bad += w->status != 0;
    return 0;
}

/* Opens p's directory with a fresh index, page cache dropped; prints and returns the open's seconds. */
static double timed_open(kvt_disk_params *p, const char *what) {
    drop_cache(p->dir);
    kvt_prefix *idx;
    if (kvt_prefix_new(p->block_tokens, &idx)) exit(1);
    p->index = idx;
    kvt_disk *d;
    struct rusage r0, r1;
    getrusage(RUSAGE_SELF, &r0);
    double t0 = kvt_now();
    if (kvt_disk_open(p, &d)) {
        fprintf(stderr, "open: %s\n", kvt_errmsg());
        exit(1);
    }
    double dt = kvt_now() - t0;
    getrusage(RUSAGE_SELF, &r1);
    double cpu = (double)(r1.ru_utime.tv_sec - r0.ru_utime.tv_sec + r1.ru_stime.tv_sec - r0.ru_stime.tv_sec) +
        (double)(r1.ru_utime.tv_usec - r0.ru_utime.tv_usec + r1.ru_stime.tv_usec - r0.ru_stime.tv_usec) * 1e-6;
    kvt_disk_stats st;
    kvt_disk_get_stats(d, &st);
    printf("open %s: %llu records (%llu from the checkpoint, %.0f MiB of headers scanned", what,
           (unsigned long long)st.records, (unsigned long long)st.checkpoint_records,
           (double)st.open_scanned_bytes / MIB);
    if (st.open_scan_reads)
        printf(" in %llu batched reads of %.0f MiB", (unsigned long long)st.open_scan_reads,
               (double)st.open_scan_read_bytes / MIB);
    printf(") in %.3f s (CPU %.3f s): %.2f s per million records (CPU %.2f s)\n", dt, cpu,
           st.records ? dt * 1e6 / (double)st.records : 0.0, st.records ? cpu * 1e6 / (double)st.records : 0.0);
    fflush(stdout);
    double c0 = kvt_now();
    kvt_disk_close(d);
    printf("  close (with the checkpoint write): %.3f s\n", kvt_now() - c0);
    kvt_prefix_free(idx);
    return st.records ? dt * 1e6 / (double)st.records : 0.0;
}

/* Puts records [a, b) (chains of 64 blocks), with a fresh index. */
static void put_records(kvt_disk_params *p, uint64_t a, uint64_t b, int die) {
    kvt_prefix *idx;
    if (kvt_prefix_new(p->block_tokens, &idx)) exit(1);
    p->index = idx;
    kvt_disk *d;
    if (kvt_disk_open(p, &d)) {
        fprintf(stderr, "open: %s\n", kvt_errmsg());
        exit(1);
    }
    uint8_t *pay = kvt_xmalloc(p->payload_bytes);
    int32_t tok[KVT_BLOCK_TOKENS_MAX];
    kvt_hash128 parent = p->ns;
    double t0 = kvt_now();
    for (uint64_t i = a; i < b; i++) {
        for (uint32_t t = 0; t < p->block_tokens; t++) tok[t] = (int32_t)(i * p->block_tokens + t);
        memset(pay, (int)(i & 0xff), p->payload_bytes);
        kvt_hash128 h = kvt_block_hash(parent, tok, p->block_tokens);
        while (kvt_disk_put(d, h, parent, tok, pay) == KVT_ELIMIT) kvt_disk_flush(d);
        parent = i % 64 == 63 ? p->ns : h;
    }
    kvt_disk_flush(d);
    printf("wrote %llu records of %llu KiB in %.1f s\n", (unsigned long long)(b - a),
           (unsigned long long)((KVT_DISK_HEADER_FIXED + 4ull * p->block_tokens + p->payload_bytes + KVT_DISK_ALIGN - 1) /
                                KVT_DISK_ALIGN * 4),
           kvt_now() - t0);
    fflush(stdout);
    free(pay);
    if (die) raise(SIGKILL); /* a crash: no checkpoint at close, the queue already written */
    double c0 = kvt_now();
    kvt_disk_close(d); /* writes the checkpoint */
    printf("close (with the checkpoint write): %.3f s\n", kvt_now() - c0);
    kvt_prefix_free(idx);
}

/* --open-records: open time after a clean close (the checkpoint), after a
 * kill -9 that left a stale checkpoint and a tail of a tenth more records,
 * and after a crash that left none (the full header scan), one read per
 * header (the path before batched scans) and batched. */
/* 1 if dir holds a segment file. */
static int has_records(const char *dir) {
    DIR *dh = opendir(dir);
    struct dirent *e;
    int found = 0;
    while (dh && (e = readdir(dh)) && !found) found = !strncmp(e->d_name, "seg-", 4);
    if (dh) closedir(dh);
    return found;
}

static int open_bench(const char *dir, uint64_t n, uint64_t record_kib, int keep, int serial_too, int ckpt_only) {
    const uint32_t B = 32;
    kvt_disk_params p = kvt_disk_default_params();
    p.dir = dir;
    p.block_tokens = B;
    p.payload_bytes = record_kib * 1024 - (KVT_DISK_HEADER_FIXED + 4 * B); /* with the header, one record_kib record */
    p.ns.lo = 0xBE7C;
    uint64_t tail = n / 10 ? n / 10 : 1;
    p.size_bytes = KVT_MAX((n + tail + n / 8 + 1024) * record_kib * 1024, 2 * p.segment_bytes);
    p.checkpoint_s = 0;
    if (keep && has_records(dir)) { /* a directory left by --keep: the opens again, on the same records */
        p.size_bytes = 1ull << 50;  /* whatever it holds: never let an open trim it to a budget */
        char ck[4096];
        snprintf(ck, sizeof ck, "%s/index", dir);
        struct stat sb;
        if (stat(ck, &sb) == 0) timed_open(&p, "with the checkpoint the last close left");
        if (ckpt_only) return 0;
        unlink(ck);
        p.scan_serial = serial_too;
        double full_s = serial_too ? timed_open(&p, "with no checkpoint (full scan, one read per header)") : 0;
        unlink(ck);
        p.scan_serial = 0;
        double full_b = timed_open(&p, "with no checkpoint (full scan, batched)");
        printf("s per million records: full scan: batched %.2f, one by one %.2f\n", full_b, full_s);
        return 0;
    }
    put_records(&p, 0, n, 0);
    double with = timed_open(&p, "after a clean close (checkpoint)");
    if (ckpt_only) {
        if (!keep) kvt_disk_clear(dir, NULL);
        return 0;
    }
    pid_t c = fork();
    if (c == 0) put_records(&p, n, n + tail, 1);
    int ws;
    if (c < 0 || waitpid(c, &ws, 0) != c || !WIFSIGNALED(ws)) {
        fprintf(stderr, "the kill -9 child did not die by its signal\n");
        return 1;
    }
    printf("kill -9 after %llu more records\n", (unsigned long long)tail);
    char ck[4096];
    snprintf(ck, sizeof ck, "%s/index", dir);
    /* keep the stale checkpoint for the batched open; the clean close after it writes a fresh one */
    char stale[4096];
    snprintf(stale, sizeof stale, "%s.stale-index", dir); /* beside the directory: no foreign file in it */
    if (link(ck, stale)) perror("link");
    double tail_b = timed_open(&p, "after kill -9 (stale checkpoint + tail, batched)");
    rename(stale, ck);
    p.scan_serial = 1;
    double tail_s = serial_too ? timed_open(&p, "after kill -9 (stale checkpoint + tail, one read per header)") : 0;
    unlink(ck);
    double full_s = serial_too ? timed_open(&p, "with no checkpoint (full scan, one read per header)") : 0;
    unlink(ck);
    p.scan_serial = 0;
    double full_b = timed_open(&p, "with no checkpoint (full scan, batched)");
    printf("s per million records: checkpoint %.2f; stale checkpoint + tail: batched %.2f, one by one %.2f; "
           "full scan: batched %.2f, one by one %.2f (%.1fx)\n",
           with, tail_b, tail_s, full_b, full_s, full_b > 0 ? full_s / full_b : 0.0);
    if (!keep) kvt_disk_clear(dir, NULL);
    return 0;
}

int main(int argc, char **argv) {
    const char *dir = "bench/out/disk";
    size_t payload = 1 << 20;
    int blocks = 64, sets = 8, scan_mib = 2048, zstd = 0, buffered = 0, mac = 1;
    uint64_t open_records = 0, record_kib = 4;
    int keep = 0, serial_too = 1, ckpt_only = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--dir") && i + 1 < argc) dir = argv[++i];
        else if (!strcmp(argv[i], "--payload-kib") && i + 1 < argc) payload = (size_t)atol(argv[++i]) << 10;
        else if (!strcmp(argv[i], "--blocks") && i + 1 < argc) blocks = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--sets") && i + 1 < argc) sets = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--scan-mib") && i + 1 < argc) scan_mib = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--zstd")) zstd = 1;
        else if (!strcmp(argv[i], "--buffered")) buffered = 1;
        else if (!strcmp(argv[i], "--no-mac")) mac = 0;
        else if (!strcmp(argv[i], "--open-records") && i + 1 < argc) open_records = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--record-kib") && i + 1 < argc) record_kib = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--keep")) keep = 1;
        else if (!strcmp(argv[i], "--batched-only")) serial_too = 0;
        else if (!strcmp(argv[i], "--checkpoint-only")) ckpt_only = 1;
        else {
            fprintf(
                stderr,
                "usage: %s [--dir DIR] [--payload-kib N] [--blocks N] [--sets N] [--scan-mib N] [--zstd] [--buffered] "
                "[--no-mac] [--open-records N [--record-kib K] [--keep] [--batched-only] [--checkpoint-only]]\n",
                argv[0]);
            return 2;
        }
    }
    mkdir("bench/out", 0755);
    mkdir(dir, 0755);
    if (!(open_records && keep)) kvt_disk_clear(dir, NULL);
    if (open_records) {
        if (record_kib < 1 || record_kib * 1024 > KVT_DISK_SEGMENT_DEFAULT) {
            fprintf(stderr, "--record-kib: 1..%llu\n", KVT_DISK_SEGMENT_DEFAULT >> 10);
            return 2;
        }
        return open_bench(dir, open_records, record_kib, keep, serial_too, ckpt_only);
    }
    double seq = seq_read(dir);

    const uint32_t B = 32;
    kvt_disk_params p = kvt_disk_default_params();
    p.dir = dir;
    p.payload_bytes = payload;
    p.block_tokens = B;
    p.ns.lo = 0xBE7C;
    p.size_bytes = 64ull << 30;
    p.codec = zstd ? KVT_DISK_CODEC_ZSTD : KVT_DISK_CODEC_RAW;
    p.use_o_direct = !buffered;
    p.queue_depth = 8;
    p.mac = mac;
    uint64_t total_blocks = (uint64_t)scan_mib * (1u << 20) / payload;
    if (total_blocks < (uint64_t)blocks * sets) total_blocks = (uint64_t)blocks * sets;
    kvt_hash128 *h = kvt_xmalloc(total_blocks * sizeof *h), *par = kvt_xmalloc(total_blocks * sizeof *par);
    int32_t *tok = kvt_xmalloc(total_blocks * B * sizeof *tok);
    uint8_t *pay = kvt_xmalloc(payload);
    for (size_t i = 0; i < payload; i++) pay[i] = (uint8_t)(i * 2654435761u >> 13);
    kvt_disk *d;
    if (kvt_disk_open(&p, &d)) {
        fprintf(stderr, "open: %s\n", kvt_errmsg());
        return 1;
    }
    double t0 = kvt_now();
    for (uint64_t i = 0; i < total_blocks; i++) {
        for (uint32_t t = 0; t < B; t++) tok[i * B + t] = (int32_t)(i * B + t);
        par[i] = i % (uint64_t)blocks ? h[i - 1] : p.ns;
        h[i] = kvt_block_hash(par[i], tok + i * B, B);
        memcpy(pay, &i, sizeof i); /* every payload differs */
        while (kvt_disk_put(d, h[i], par[i], tok + i * B, pay) == KVT_ELIMIT) kvt_disk_flush(d);
    }
    kvt_disk_flush(d);
    double wt = kvt_now() - t0;
    kvt_disk_stats st;
    kvt_disk_get_stats(d, &st);
    const char *scheme = !mac ? "off" : kvt_disk_mac_scheme_default() == KVT_DISK_SCHEME_GMAC ? "GMAC" : "BLAKE2b";
    printf("wrote %llu blocks of %zu KiB (%.0f MiB) in %.2f s: %.0f MiB/s; io_uring %d, O_DIRECT %d, zstd ratio %.2f, "
           "MAC %s\n",
           (unsigned long long)total_blocks, payload >> 10, (double)st.bytes_written / MIB, wt,
           (double)st.bytes_written / MIB / wt, st.io_uring, st.o_direct, st.compression_ratio, scheme);
    kvt_disk_close(d);

    /* open-time header scan of the whole cache, page cache dropped */
    drop_cache(dir);
    if (kvt_disk_open(&p, &d)) return 1;
    kvt_disk_get_stats(d, &st);
    printf("open scan: %llu records, %.0f MiB in %llu segments, %.3f s (headers only)\n", (unsigned long long)st.records,
           (double)st.bytes_used / MIB, (unsigned long long)st.segments, st.open_scan_seconds);

    /* restore: get_many of `blocks` consecutive blocks, cold */
    uint8_t *outs = kvt_xmalloc((size_t)blocks * payload);
    kvt_disk_read *rq = kvt_xcalloc((size_t)blocks, sizeof *rq);
    double best = 0, sum = 0, cpu_sum = 0, sys_sum = 0;
    long waits = 0, preempts = 0;
    for (int s = 0; s < sets; s++) {
        if (buffered) drop_cache(dir);
        uint64_t base = (uint64_t)s * blocks;
        for (int k = 0; k < blocks; k++)
            rq[k] = (kvt_disk_read){h[base + k], par[base + k], tok + (base + k) * B, outs + (size_t)k * payload, -1};
        struct rusage u0, u1; /* the restore runs on this thread: its CPU time and how often it slept or was preempted */
        getrusage(RUSAGE_THREAD, &u0);
        double r0 = kvt_now();
        size_t hits = kvt_disk_get_many(d, rq, (size_t)blocks);
        double dt = kvt_now() - r0;
        getrusage(RUSAGE_THREAD, &u1);
        double sys = (double)(u1.ru_stime.tv_sec - u0.ru_stime.tv_sec) +
            (double)(u1.ru_stime.tv_usec - u0.ru_stime.tv_usec) * 1e-6;
        cpu_sum += sys + (double)(u1.ru_utime.tv_sec - u0.ru_utime.tv_sec) +
            (double)(u1.ru_utime.tv_usec - u0.ru_utime.tv_usec) * 1e-6;
        sys_sum += sys;
        waits += u1.ru_nvcsw - u0.ru_nvcsw;
        preempts += u1.ru_nivcsw - u0.ru_nivcsw;
        if (hits != (size_t)blocks) printf("  set %d: only %zu hits\n", s, hits);
        double bw = (double)blocks * (double)payload / MIB / dt;
        sum += bw;
        if (bw > best) best = bw;
    }
    double mean = sum / sets;
    printf("restore (get_many of %d x %zu KiB, %s): mean %.0f MiB/s, best %.0f MiB/s\n", blocks, payload >> 10,
           buffered ? "page cache dropped" : "O_DIRECT", mean, best);
    printf("restore / sequential read: %.2f (target >= 0.70)\n", mean / seq);
    printf("restore CPU (calling thread): %.1f ms per set (%.1f ms of it in the kernel) = %.0f MiB/s of CPU time; "
           "%.1f sleeps and %.1f preemptions per set\n",
           1e3 * cpu_sum / sets, 1e3 * sys_sum / sets,
           cpu_sum > 0 ? (double)blocks * (double)payload / MIB * sets / cpu_sum : 0, (double)waits / sets,
           (double)preempts / sets);
    kvt_disk_close(d);

    drop_cache(dir);
    walk_count c = {0, 0, 0};
    double v0 = kvt_now();
    kvt_disk_walk(dir, 1, count_fn, &c);
    double vt = kvt_now() - v0;
    printf("full verify (read + CRC%s%s every record): %llu records, %.0f MiB in %.3f s: %.0f MiB/s\n", mac ? " + " : "",
           mac ? scheme : "", (unsigned long long)c.records, (double)c.bytes / MIB, vt, (double)c.bytes / MIB / vt);
    kvt_disk_clear(dir, NULL);
    free(h);
    free(par);
    free(tok);
    free(pay);
    free(outs);
    free(rq);
    return 0;
}
