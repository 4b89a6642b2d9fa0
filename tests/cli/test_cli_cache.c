// SPDX-License-Identifier: MIT
/* `kvtier cache`: stats and ls describe the records (and stats sizes its
 * progress from the segment files), verify finds a corrupted
 * payload (exit 1) that a header scan cannot, and a record whose MAC was
 * stripped and payload changed in a directory with a key (exit 1, counted
 * unauthenticated), gc removes it and foreign namespaces, clear honours the
 * lock, --help documents every flag. */
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "common.h"
#include "disk_forge.h"
#include "prefix.h"
#include "testutil.h"
#include "tier_disk.h"

#define PAYLOAD 5000

static char out_path[512];

/* Runs kvt_cmd_cache with stdout captured; returns its exit code, output in *text (caller frees). */
static int run(char **text, int argc, char **argv) {
    fflush(stdout);
    int saved = dup(1), fd = open(out_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, 1);
    close(fd);
    int rc = kvt_cmd_cache(argc, argv);
    fflush(stdout);
    dup2(saved, 1);
    close(saved);
    *text = kvt_test_read_file(out_path, NULL);
    return rc;
}

static void fill(kvt_disk *d, kvt_hash128 ns, int n, int first) {
    uint8_t pay[PAYLOAD];
    int32_t tok[4];
    for (int i = 0; i < n; i++) {
        memset(pay, first + i, sizeof pay);
        for (int t = 0; t < 4; t++) tok[t] = first + i + t;
        kvt_hash128 h = kvt_block_hash(ns, tok, 4);
        while (kvt_disk_put(d, h, ns, tok, pay) == KVT_ELIMIT) kvt_disk_flush(d);
    }
    kvt_disk_flush(d);
}

static int stripped;

/* The forger's edit of the first record only: the MAC flag, key id and MAC
 * cleared (a record that claims it was written with MAC off), the payload
 * changed; forge_segment_edit then recomputes both CRCs. */
static void strip_mac_edit(uint8_t *rec, const kvt_disk_record *r) {
    if (stripped++) return;
    memset(rec + FORGE_FLAGS, 0, FORGE_MAC + KVT_DISK_MAC_BYTES - FORGE_FLAGS);
    memset(rec + r->header_bytes, 0x5A, 64);
}

/* A directory with a key file: verify must not count a MAC-less record valid,
 * since the store (which wants a MAC under that key) never serves it; a
 * directory written with MAC off (no key) still verifies. */
static void test_unauthenticated(const kvt_disk_params *base) {
    const char *dir = kvt_test_path(kvt_test_tmpdir(), "stripped");
    kvt_disk_params p = *base;
    p.dir = dir;
    kvt_disk *d;
    CHECK(kvt_disk_open(&p, &d) == 0);
    fill(d, p.ns, 4, 0);
    kvt_disk_close(d);
    char seg[600];
    snprintf(seg, sizeof seg, "%s/seg-0000000000000000.kvt", dir);
    stripped = 0;
    CHECK(forge_segment_edit(seg, strip_mac_edit) == 4); /* every record rewritten, the first one changed */
    char *t;
    char *a_verify[] = {"cache", "verify", "--kv-disk", (char *)dir};
    CHECK(run(&t, 4, a_verify) == 1);
    CHECKF(t && strstr(t, "3 valid, 0 corrupt") && strstr(t, "3 verified with the directory's key") &&
               strstr(t, "1 unauthenticated"),
           "%s", t);
    free(t);
    /* the store agrees: three records, the stripped one not among them */
    CHECK(kvt_disk_open(&p, &d) == 0);
    kvt_disk_stats st;
    kvt_disk_get_stats(d, &st);
    CHECKF(st.records == 3, "%llu records", (unsigned long long)st.records);
    kvt_disk_close(d);

    /* MAC off from the start: no key file, nothing to authenticate against */
    const char *ndir = kvt_test_path(kvt_test_tmpdir(), "nomac");
    p.dir = ndir;
    p.mac = 0;
    CHECK(kvt_disk_open(&p, &d) == 0);
    fill(d, p.ns, 2, 0);
    kvt_disk_close(d);
    char *a_nverify[] = {"cache", "verify", "--kv-disk", (char *)ndir};
    CHECK(run(&t, 4, a_nverify) == 0);
    CHECKF(t && strstr(t, "2 valid") && strstr(t, "2 records without one") && !strstr(t, "unauthenticated"), "%s", t);
    free(t);
}

/* Writes the first len bytes of data over the file at path, in place: the
 * same inode, as a truncation leaves it. */
static void cut_file(const char *path, const char *data, size_t len) {
    int fd = open(path, O_WRONLY | O_TRUNC);
    CHECK(fd >= 0 && (len == 0 || write(fd, data, len) == (ssize_t)len));
    if (fd >= 0) close(fd);
}

/* A segment cut to a few bytes, or to nothing: verify names the file, says
 * what is wrong and exits 1 at every length from 0 to a record header's fixed
 * part. Without the index checkpoint only the bytes left can tell: a cut to
 * nothing then reads as an empty segment (what a crash right after starting a
 * segment leaves), every other length is still found. The store opens the
 * directory with the records that are left, and gc removes what is damaged. */
static void test_cut_segment(const kvt_disk_params *base) {
    const char *dir = kvt_test_path(kvt_test_tmpdir(), "cut");
    kvt_disk_params p = *base;
    p.dir = dir;
    kvt_prefix *idx;
    CHECK(kvt_prefix_new(p.block_tokens, &idx) == 0);
    p.index = idx; /* a clean close writes the index checkpoint */
    kvt_disk *d;
    CHECK(kvt_disk_open(&p, &d) == 0);
    fill(d, p.ns, 10, 0); /* 8 records of 8 KiB fill segment 0, 2 go to segment 1 */
    kvt_disk_close(d);
    char seg[600], ckpt[600], *t;
    snprintf(seg, sizeof seg, "%s/seg-0000000000000001.kvt", dir);
    snprintf(ckpt, sizeof ckpt, "%s/index", dir);
    size_t seg_len, ckpt_len;
    char *seg_data = kvt_test_read_file(seg, &seg_len), *ckpt_data = kvt_test_read_file(ckpt, &ckpt_len);
    CHECKF(seg_data && seg_len == 2 * 8192 && ckpt_data, "segment 1: %zu bytes", seg_len);
    char *a_verify[] = {"cache", "verify", "--kv-disk", (char *)dir};
    for (int with_ckpt = 1; with_ckpt >= 0 && seg_data && ckpt_data; with_ckpt--) {
        if (!with_ckpt) unlink(ckpt);
        for (size_t len = 0; len <= KVT_DISK_HEADER_FIXED; len++) {
            cut_file(seg, seg_data, len);
            int rc = run(&t, 4, a_verify);
            if (!with_ckpt && len == 0) {
                CHECKF(rc == 0 && t && strstr(t, "8 valid, 0 corrupt") && strstr(t, "segments: 2,"),
                       "an empty segment, no checkpoint: %s", t);
            } else {
                const char *why = len == KVT_DISK_HEADER_FIXED ? "record header truncated"
                    : len && len < KVT_DISK_HEADER_FIXED       ? "too few for a record header"
                                                               : "index checkpoint recorded 16384";
                CHECKF(rc == 1 && t && strstr(t, "damaged: seg-0000000000000001.kvt") && strstr(t, why) &&
                           strstr(t, "8 valid") && strstr(t, "segments: 2,"),
                       "cut to %zu bytes%s: rc %d: %s", len, with_ckpt ? "" : " (no checkpoint)", rc, t);
                if (with_ckpt)
                    CHECKF(t && strstr(t, "index checkpoint recorded 16384"), "cut to %zu bytes: %s", len, t);
            }
            free(t);
        }
    }
    /* the store opens it with the 8 records left; gc drops the damaged bytes, and verify passes again */
    if (ckpt_data) {
        int fd = open(ckpt, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        CHECK(fd >= 0 && write(fd, ckpt_data, ckpt_len) == (ssize_t)ckpt_len);
        if (fd >= 0) close(fd);
    }
    if (seg_data) cut_file(seg, seg_data, 5);
    CHECK(kvt_disk_open(&p, &d) == 0);
    kvt_disk_stats st;
    kvt_disk_get_stats(d, &st);
    CHECKF(st.records == 8 && st.corrupt >= 1, "%llu records, %llu corrupt", (unsigned long long)st.records,
           (unsigned long long)st.corrupt);
    kvt_disk_close(d);
    kvt_prefix_free(idx);
    char *a_gc[] = {"cache", "gc", "--kv-disk", (char *)dir};
    CHECK(run(&t, 4, a_gc) == 0);
    CHECKF(t && strstr(t, "kept 8 records; dropped 1 corrupt"), "%s", t);
    free(t);
    CHECK(run(&t, 4, a_verify) == 0);
    CHECKF(t && strstr(t, "8 valid, 0 corrupt") && !strstr(t, "damaged"), "%s", t);
    free(t);
    free(seg_data);
    free(ckpt_data);
}

/* A fresh directory of 4 records under name (MAC on, so with a key file); returns its path. */
static const char *odd_dir(const kvt_disk_params *base, const char *name) {
    const char *dir = kvt_test_path(kvt_test_tmpdir(), name);
    kvt_disk_params p = *base;
    p.dir = dir;
    kvt_disk *d;
    CHECK(kvt_disk_open(&p, &d) == 0);
    fill(d, p.ns, 4, 0);
    kvt_disk_close(d);
    return dir;
}

/* Overwrites dir/name with len bytes of c (len 0: empties it). */
static void fill_file(const char *dir, const char *name, int c, size_t len) {
    char path[600], buf[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    memset(buf, c, sizeof buf);
    int fd = open(path, O_WRONLY | O_TRUNC);
    CHECKF(fd >= 0, "%s", path);
    for (size_t done = 0; fd >= 0 && done < len;) {
        size_t n = len - done < sizeof buf ? len - done : sizeof buf;
        CHECK(write(fd, buf, n) == (ssize_t)n);
        done += n;
    }
    if (fd >= 0) close(fd);
}

/* `cache CMD --kv-disk dir`: its exit code, and whether what it printed (stdout and kvt_errmsg) holds want. */
static int cache_says(const char *cmd, const char *dir, int want_rc, const char *want) {
    char *t, *a[] = {"cache", (char *)cmd, "--kv-disk", (char *)dir};
    kvt_fail(0, "%s", "");
    int rc = run(&t, 4, a);
    int ok = rc == want_rc && ((t && strstr(t, want)) || strstr(kvt_errmsg(), want));
    if (!ok)
        fprintf(stderr, "  cache %s %s: rc %d (want %d), lacks '%s': %s / %s\n", cmd, dir, rc, want_rc, want,
                t ? t : "", kvt_errmsg());
    free(t);
    return ok;
}

/* A zeroed key file is refused by verify, gc and the store: gc would otherwise drop every record as signed
 * under another key, and the store sign new ones with a key anyone can guess. */
static void test_zero_key(const kvt_disk_params *base) {
    const char *kz = odd_dir(base, "zerokey");
    fill_file(kz, "key", 0, KVT_DISK_KEY_BYTES);
    CHECK(cache_says("verify", kz, 1, "all zeros"));
    CHECK(cache_says("gc", kz, 1, "all zeros"));
    CHECK(cache_says("stats", kz, 0, "4 valid")); /* gc dropped nothing */
    kvt_disk_params p = *base;
    p.dir = kz;
    kvt_disk *d = NULL;
    CHECKF(kvt_disk_open(&p, &d) != 0 && strstr(kvt_errmsg(), "all zeros"), "%s", kvt_errmsg());
    if (d) kvt_disk_close(d);
}

/* Odd directories: each cache command gives a clear error or a clear report, never a pass over damage or a
 * loss. A header that is not kvtier's or is missing beside segments fails verify (the store refuses such a
 * directory); a zero-filled segment is named and gc removes it; a damaged index checkpoint costs only a
 * slower open, so verify passes; a link or a file in place of the directory is refused by every command. */
static void test_odd_dirs(const kvt_disk_params *base) {
    kvt_disk_params p = *base;
    kvt_disk *d;
    const char *hz = odd_dir(base, "zerohdr");
    fill_file(hz, "header", 0, 71);
    CHECK(cache_says("verify", hz, 1, "is not a kvtier header"));
    CHECK(cache_says("stats", hz, 0, "is not a kvtier header"));
    CHECK(cache_says("gc", hz, 1, "no kvtier cache"));
    const char *hn = odd_dir(base, "nohdr");
    char path[600];
    snprintf(path, sizeof path, "%s/header", hn);
    unlink(path);
    CHECK(cache_says("verify", hn, 1, "a server refuses this directory"));
    CHECK(cache_says("clear", hn, 1, "no kvtier cache"));
    CHECK(cache_says("stats", hn, 0, "4 valid")); /* clear removed nothing */

    const char *sz = odd_dir(base, "zeroseg");
    fill_file(sz, "seg-0000000000000000.kvt", 0, 4 * 8192);
    CHECK(cache_says("verify", sz, 1, "damaged: seg-0000000000000000.kvt at byte 0 (32768 bytes, 8 bad slots): not a"));
    CHECK(cache_says("gc", sz, 0, "dropped 8 corrupt"));
    CHECK(cache_says("verify", sz, 0, "0 corrupt"));

    static const int idx_fill[] = {-1, 0, 'x'}; /* emptied, zero-filled, garbage */
    const char *ix = odd_dir(base, "badindex");
    for (size_t i = 0; i < sizeof idx_fill / sizeof idx_fill[0]; i++) {
        kvt_prefix *idx;
        CHECK(kvt_prefix_new(base->block_tokens, &idx) == 0);
        p.dir = ix;
        p.index = idx;
        CHECK(kvt_disk_open(&p, &d) == 0); /* a clean close writes the checkpoint */
        kvt_disk_close(d);
        kvt_prefix_free(idx);
        fill_file(ix, "index", idx_fill[i] < 0 ? 0 : idx_fill[i], idx_fill[i] < 0 ? 0 : 200);
        CHECKF(cache_says("verify", ix, 0, "4 valid, 0 corrupt"), "index %zu", i);
    }

    char link[600];
    snprintf(link, sizeof link, "%s/linkdir", kvt_test_tmpdir());
    CHECK(symlink(ix, link) == 0);
    char fileish[600];
    snprintf(fileish, sizeof fileish, "%s/afile", kvt_test_tmpdir());
    int fd = open(fileish, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    CHECK(fd >= 0 && write(fd, "x", 1) == 1);
    if (fd >= 0) close(fd);
    const char *cmds[] = {"stats", "ls", "verify", "gc", "clear"};
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) {
        CHECK(cache_says(cmds[i], link, 1, "symbolic link"));
        CHECK(cache_says(cmds[i], fileish, 1, "Not a directory"));
    }
    CHECK(cache_says("verify", ix, 0, "4 valid")); /* through none of them was anything removed */

    char *t, *a_pos[] = {"cache", "verify", (char *)ix};
    CHECKF(run(&t, 3, a_pos) == 2, "a directory without --kv-disk is a usage error");
    free(t);
}

int main(void) {
    const char *dir = kvt_test_path(kvt_test_tmpdir(), "cache");
    snprintf(out_path, sizeof out_path, "%s/out.txt", kvt_test_tmpdir());
    kvt_disk_params p = kvt_disk_default_params();
    p.dir = dir;
    p.payload_bytes = PAYLOAD;
    p.block_tokens = 4;
    p.segment_bytes = 1 << 16;
    p.size_bytes = 1 << 22;
    p.ns = (kvt_hash128){0x1111, 0x2222};
    kvt_disk *d;
    CHECK(kvt_disk_open(&p, &d) == 0);
    fill(d, p.ns, 10, 0);
    kvt_disk_close(d);
    kvt_disk_params q = p;
    q.ns = (kvt_hash128){0x3333, 0x4444};
    CHECK(kvt_disk_open(&q, &d) == 0);
    fill(d, q.ns, 3, 100);
    kvt_disk_close(d);
    /* the header now names q.ns; corrupt one payload byte of the first record */
    char seg[600];
    snprintf(seg, sizeof seg, "%s/seg-0000000000000000.kvt", dir);
    int fd = open(seg, O_RDWR);
    uint8_t b = 0xEE;
    CHECK(pwrite(fd, &b, 1, 3000) == 1);
    close(fd);

    char *t;
    char *a_stats[] = {"cache", "stats", "--kv-disk", (char *)dir};
    CHECK(run(&t, 4, a_stats) == 0);
    CHECKF(t && strstr(t, "13 valid") && strstr(t, "namespace 00000000000022220000000000001111: 10 records") &&
               strstr(t, "namespace 00000000000044440000000000003333: 3 records"),
           "%s", t);
    /* 10 records of 8 KiB fill one 64 KiB segment and start a second; the next
     * session starts a third: every segment is counted, not just the first */
    CHECKF(t && strstr(t, "segments: 3,"), "%s", t);
    free(t);
    /* the progress total of stats and verify: the segments' sizes, without a walk */
    uint64_t seg_bytes = 0, want_bytes = 0;
    for (int i = 0; i < 4; i++) {
        char sp[600];
        struct stat sb;
        snprintf(sp, sizeof sp, "%s/seg-%016x.kvt", dir, i);
        if (stat(sp, &sb) == 0) want_bytes += (uint64_t)sb.st_size;
    }
    CHECK(kvt_disk_segment_bytes(dir, &seg_bytes, NULL) == 0);
    CHECKF(seg_bytes == want_bytes && want_bytes > 3 * 8192, "%llu bytes of segments, want %llu",
           (unsigned long long)seg_bytes, (unsigned long long)want_bytes);
    char *a_ls[] = {"cache", "ls", "--kv-disk", (char *)dir, "--limit", "2"};
    CHECK(run(&t, 6, a_ls) == 0);
    int lines = 0;
    for (char *c = t; c && *c; c++) lines += *c == '\n';
    CHECKF(lines == 2 && strstr(t, "hash="), "%s", t);
    free(t);
    /* --opt=VALUE, as run and serve take it: the same listing */
    char eq_dir[620];
    snprintf(eq_dir, sizeof eq_dir, "--kv-disk=%s", dir);
    char *a_ls_eq[] = {"cache", "ls", eq_dir, "--limit=2"};
    CHECK(run(&t, 4, a_ls_eq) == 0);
    lines = 0;
    for (char *c = t; c && *c; c++) lines += *c == '\n';
    CHECKF(lines == 2 && strstr(t, "hash="), "%s", t);
    free(t);
    char *a_sw_eq[] = {"cache", "gc", eq_dir, "--all-namespaces=1"};
    CHECKF(run(&t, 4, a_sw_eq) == 2, "a switch given a value is a usage error");
    free(t);
    char *a_verify[] = {"cache", "verify", "--kv-disk", (char *)dir};
    CHECK(run(&t, 4, a_verify) == 1);
    CHECKF(t && strstr(t, "12 valid, 1 corrupt"), "%s", t);
    free(t);
    /* a namespace is 32 hex digits: a sign, spaces or 0x are refused, not read as another */
    const char *bad_ns[] = {"-0000000000022220000000000001111", "+0000000000022220000000000001111",
                            " 0000000000022220000000000001111", "0x00000000000222200000000000011"};
    for (size_t i = 0; i < sizeof bad_ns / sizeof bad_ns[0]; i++) {
        char *a_ns[] = {"cache", "gc", "--kv-disk", (char *)dir, "--namespace", (char *)bad_ns[i]};
        CHECKF(run(&t, 6, a_ns) != 0, "--namespace '%s' is refused", bad_ns[i]);
        free(t);
    }
    /* flags that ask for two things, or for what the command does not do, are usage errors that touch
     * nothing: clear --kv-disk with --namespace would remove every namespace */
    const char *ns2 = "00000000000022220000000000001111";
    char *a_c1[] = {"cache", "clear", "--kv-disk", (char *)dir, "--namespace", (char *)ns2};
    char *a_c2[] = {"cache",       "clear",    "--kv-disk", (char *)dir, "--kv-remote", "redis://127.0.0.1:1",
                    "--namespace", (char *)ns2};
    char *a_c3[] = {"cache", "gc", "--kv-disk", (char *)dir, "--namespace", (char *)ns2, "--all-namespaces"};
    char *a_c4[] = {"cache", "stats", "--kv-disk", (char *)dir, "--all-namespaces"};
    CHECK(run(&t, 6, a_c1) == 2);
    free(t);
    CHECK(run(&t, 8, a_c2) == 2);
    free(t);
    CHECK(run(&t, 7, a_c3) == 2);
    free(t);
    CHECK(run(&t, 5, a_c4) == 2);
    free(t);
    CHECK(run(&t, 4, a_verify) == 1);
    CHECKF(t && strstr(t, "12 valid, 1 corrupt"), "nothing was removed: %s", t);
    free(t);
    /* gc keeps the header's namespace (q.ns) by default; --namespace picks another */
    char *a_gc[] = {"cache", "gc", "--kv-disk", (char *)dir, "--namespace", "00000000000022220000000000001111"};
    CHECK(run(&t, 6, a_gc) == 0);
    CHECKF(t && strstr(t, "kept 9 records; dropped 1 corrupt, 3 foreign"), "%s", t);
    free(t);
    CHECK(run(&t, 4, a_verify) == 0);
    free(t);
    /* clear and gc refuse while the store is open (gc without a summary of work it did not do), then work */
    CHECK(kvt_disk_open(&p, &d) == 0);
    char *a_clear[] = {"cache", "clear", "--kv-disk", (char *)dir};
    CHECK(run(&t, 4, a_clear) == 1);
    free(t);
    CHECK(run(&t, 6, a_gc) == 1);
    CHECKF(t && !strstr(t, "kept"), "%s", t);
    free(t);
    kvt_disk_close(d);
    CHECK(run(&t, 4, a_clear) == 0);
    free(t);
    CHECK(run(&t, 4, a_stats) == 0);
    CHECKF(t && strstr(t, "0 valid"), "%s", t);
    free(t);
    char *a_help[] = {"cache", "--help"};
    CHECK(run(&t, 2, a_help) == 0);
    CHECK(t && strstr(t, "--kv-disk") && strstr(t, "--namespace") && strstr(t, "--all-namespaces") &&
          strstr(t, "--limit"));
    free(t);
    char *a_bad[] = {"cache", "stats"};
    CHECK(kvt_cmd_cache(2, a_bad) == 2);
    test_unauthenticated(&p);
    test_cut_segment(&p);
    test_zero_key(&p);
    test_odd_dirs(&p);
    return kvt_test_done("test_cli_cache");
}
