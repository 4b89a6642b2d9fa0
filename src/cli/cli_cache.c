// SPDX-License-Identifier: MIT
/* `kvtier cache`: inspect and maintain a disk-tier cache directory (stats, ls,
 * verify, gc, clear), or the shared remote tier (stats, clear). Reading
 * commands work beside a running server; gc and clear take the directory's
 * lock. */
#include <errno.h>
#include <inttypes.h>
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "common.h"
#include "progress.h"
#include "reply_journal.h"
#include "tier_disk.h"
#include "tier_remote.h"

#define MAX_NAMESPACES 64
#define PROGRESS_INTERVAL_S 0.5
#define LS_DEFAULT_LIMIT 0 /* 0: no limit */
#define DAMAGE_LINES 20    /* verify: damaged stretches listed, the rest counted */

void kvt_usage_cache(FILE *f) {
    fprintf(f,
            "usage: kvtier cache <stats|ls|verify|gc|clear> --kv-disk DIR [options]\n"
            "       kvtier cache stats --kv-remote URL [--kv-remote-password-file FILE]\n"
            "       kvtier cache clear --kv-remote URL [--kv-remote-password-file FILE] --namespace HEX\n\n"
            "Inspect or maintain a disk-tier (T2) cache directory, or the shared remote tier (T3).\n\n"
            "commands:\n"
            "  stats    segment files, bytes, records (valid / corrupt / other format), usage per namespace,\n"
            "           and lifetime counters: disk hit rate of prompt blocks, writes, drops, I/O\n"
            "  ls       one line per record: segment, offset, bytes, namespace, hash, parent, B, codec, sizes,\n"
            "           MAC scheme (no, gmac or blake2b)\n"
            "  verify   read every record and check its CRC and its MAC under the directory's key file (and\n"
            "           decode it); exit status 1 if any is bad, carries a MAC that cannot be checked, or has\n"
            "           no MAC although the directory has a key file (counted \"unauthenticated\"), or when the\n"
            "           header is damaged, not kvtier's, or missing beside segments; names each damaged stretch.\n"
            "           Also checks the server's reply journal (side-replies), if any: its records, how many\n"
            "           are good, and the first bad one; one whose CRC or MAC fails, or a journal that cannot\n"
            "           be checked (no key file, another key, a link), fails it too; one without MACs\n"
            "           (--kv-disk-no-mac) is checked on its CRCs, and fails it where there is a key file\n"
            "  gc       rewrite segments without corrupt records, records of other formats or namespaces,\n"
            "           and duplicate copies; needs the directory's lock (no server running on it)\n"
            "  clear    remove every segment file; needs the lock; keeps the header\n\n"
            "options (a value as --opt VALUE or --opt=VALUE):\n"
            "  --kv-disk DIR        the cache directory (required for the disk tier)\n"
            "  --kv-remote URL      the remote tier's Redis: redis://[user:pass@]host:port[/db] or unix:///path,\n"
            "                       or a cluster, redis-cluster://host:port[,host:port...] (every primary);\n"
            "                       stats: values and bytes per namespace (SCAN, never KEYS); clear: UNLINK every\n"
            "                       value of --namespace (other namespaces and other data are left alone)\n"
            "  --kv-remote-password-file FILE  Redis's password, read from FILE (one line, mode 0600, not a\n"
            "                       link) instead of the URL, sent with the URL's user if any (redis://user@host:port);\n"
            "                       also $KVTIER_KV_REMOTE_PASSWORD_FILE\n"
            "  --kv-remote-key-file FILE  accepted for symmetry with serve; stats and clear read only key names\n"
            "                       and lengths, so they need no key\n"
            "  --namespace HEX      gc: keep only this namespace (32 hex digits, as `stats` prints it);\n"
            "                       default: the namespace in the directory's header\n"
            "  --all-namespaces     gc: keep every namespace (drop only corrupt, foreign-format and duplicates)\n"
            "  --limit N            ls: print at most N records\n"
            "  -h, --help           this help\n");
}

/* 32 hex digits and nothing else: strtoull alone would also take a sign,
 * spaces or 0x, and read "-000000000000001" as another namespace. */
static int parse_ns(const char *s, kvt_hash128 *out) {
    if (strlen(s) != 32) return -1;
    for (int i = 0; i < 32; i++)
        if (!isxdigit((unsigned char)s[i])) return -1;
    char hi[17], lo[17];
    memcpy(hi, s, 16);
    hi[16] = 0;
    memcpy(lo, s + 16, 16);
    lo[16] = 0;
    char *e1, *e2;
    out->hi = strtoull(hi, &e1, 16);
    out->lo = strtoull(lo, &e2, 16);
    return *e1 || *e2 ? -1 : 0;
}

typedef struct {
    kvt_hash128 ns;
    uint64_t records, bytes;
} ns_usage;

typedef struct {
    uint64_t records, valid, corrupt, foreign, bytes, payload, stored;
    int verify;
    uint64_t mac_ok, no_mac, unverified; /* verify: MAC checked, absent, present but not checkable here */
    uint64_t unauthenticated;            /* verify: no MAC though the directory has a key: not valid */
    ns_usage ns[MAX_NAMESPACES];
    size_t n_ns, ns_overflow;
    /* ls */
    int ls;
    long limit, printed;
    /* stats and verify progress */
    int progress;
    kvt_progress prog;
    uint64_t total_bytes;
    uint64_t segments; /* segment files, from the listing: one without a record counts too */
    /* verify: the damaged stretch being gathered (bad slots next to each other, for the same reason) */
    char dmg_segment[64], dmg_why[256];
    uint64_t dmg_off, dmg_end, dmg_slots;
    uint64_t dmg_listed, dmg_unlisted;
} walk_state;

/* verify: prints the gathered damaged stretch (the file, where, and what is wrong), or counts it past
 * DAMAGE_LINES. */
static void damage_flush(walk_state *s) {
    if (!s->dmg_slots) return;
    if (s->dmg_listed < DAMAGE_LINES) {
        s->dmg_listed++;
        printf("damaged: %s at byte %" PRIu64 " (%" PRIu64 " bytes", s->dmg_segment, s->dmg_off,
               s->dmg_end - s->dmg_off);
        if (s->dmg_slots > 1) printf(", %" PRIu64 " bad slots", s->dmg_slots);
        printf("): %s\n", s->dmg_why);
    } else {
        s->dmg_unlisted++;
    }
    s->dmg_slots = 0;
}

/* verify: adds a bad slot to the stretch being gathered, or starts another. */
static void damage_add(walk_state *s, const kvt_disk_walk_info *w) {
    const char *why = w->why && *w->why ? w->why : "corrupt";
    if (s->dmg_slots && (strcmp(s->dmg_segment, w->segment) || s->dmg_end != w->offset || strcmp(s->dmg_why, why)))
        damage_flush(s);
    if (!s->dmg_slots) {
        snprintf(s->dmg_segment, sizeof s->dmg_segment, "%s", w->segment);
        snprintf(s->dmg_why, sizeof s->dmg_why, "%s", why);
        s->dmg_off = w->offset;
    }
    s->dmg_end = w->offset + w->bytes;
    s->dmg_slots++;
}

static int walk_fn(void *ctx, const kvt_disk_walk_info *w) {
    walk_state *s = ctx;
    s->bytes += w->bytes;
    if (w->status == KVT_EUNSUPPORTED) {
        s->foreign++;
        return 0;
    }
    if (w->status) {
        s->corrupt++;
        if (s->ls)
            printf("%s %10" PRIu64 " %9" PRIu64 " CORRUPT %s\n", w->segment, w->offset, w->bytes, w->why ? w->why : "");
        if (s->verify) damage_add(s, w);
        return 0;
    }
    if (s->verify && w->mac == KVT_DISK_MAC_UNCHECKED) { /* no key, or no way to compute its MAC: cannot vouch */
        s->unverified++;
        return 0;
    }
    /* the MAC stripped (and the payload then free to change, CRCs recomputed): nothing vouches for it */
    if (s->verify && w->keyed && w->mac == KVT_DISK_MAC_NONE) {
        s->unauthenticated++;
        return 0;
    }
    s->mac_ok += w->mac == KVT_DISK_MAC_OK;
    s->no_mac += w->mac == KVT_DISK_MAC_NONE;
    s->records++;
    s->valid++;
    s->payload += w->rec.payload_bytes;
    s->stored += w->rec.stored_bytes;
    size_t i;
    for (i = 0; i < s->n_ns; i++)
        if (kvt_hash128_eq(s->ns[i].ns, w->rec.ns)) break;
    if (i == s->n_ns) {
        if (s->n_ns < MAX_NAMESPACES) s->ns[s->n_ns++].ns = w->rec.ns;
        else s->ns_overflow++;
    }
    if (i < s->n_ns) {
        s->ns[i].records++;
        s->ns[i].bytes += w->bytes;
    }
    if (s->ls && (!s->limit || s->printed < s->limit)) {
        s->printed++;
        printf("%s %10" PRIu64 " %9" PRIu64 " ns=%016" PRIx64 "%016" PRIx64 " hash=%016" PRIx64 "%016" PRIx64
               " parent=%016" PRIx64 "%016" PRIx64 " B=%u %s payload=%" PRIu64 " stored=%" PRIu64 " mac=%s\n",
               w->segment, w->offset, w->bytes, w->rec.ns.hi, w->rec.ns.lo, w->rec.hash.hi, w->rec.hash.lo,
               w->rec.parent.hi, w->rec.parent.lo, w->rec.block_tokens,
               w->rec.codec == KVT_DISK_CODEC_ZSTD ? "zstd" : "raw", w->rec.payload_bytes, w->rec.stored_bytes,
               w->mac == KVT_DISK_MAC_NONE                        ? "no"
                   : w->rec.mac_scheme == KVT_DISK_SCHEME_GMAC    ? "gmac"
                   : w->rec.mac_scheme == KVT_DISK_SCHEME_BLAKE2B ? "blake2b"
                                                                  : "other");
    }
    if (s->progress) kvt_progress_update(&s->prog, s->bytes >> 20);
    return 0;
}

/* Prints the directory's header line. Returns 1 when the header is damage verify must report: unreadable,
 * not kvtier's, or missing beside segment files (the store refuses such a directory, or rewrites a damaged
 * header of its own), else 0. */
static int print_header(const char *dir, uint64_t segments) {
    uint32_t v;
    kvt_hash128 ns;
    int rc = kvt_disk_read_header(dir, &v, &ns);
    if (rc == 0)
        printf("header: format version %u%s, namespace %016" PRIx64 "%016" PRIx64 "\n", v,
               v == KVT_DISK_FORMAT_VERSION ? "" : " (NOT this build's)", ns.hi, ns.lo);
    else if (rc == KVT_ENOTFOUND && segments)
        printf("header: none, beside %" PRIu64 " segment files: a server refuses this directory\n", segments);
    else printf("header: %s\n", rc == KVT_ENOTFOUND ? "none" : kvt_errmsg()); /* not ours, or ours but damaged */
    return rc && !(rc == KVT_ENOTFOUND && !segments);
}

#define REMOTE_TIMEOUT_MS 5000 /* maintenance may wait longer than a request would */

/* stats / clear on the remote tier. */
static int remote_cmd(const char *cmd, const char *url, const char *pass_file, const char *ns_text) {
    if (!strcmp(cmd, "stats")) {
        kvt_remote_ns_usage u[MAX_NAMESPACES], other;
        size_t n;
        if (kvt_remote_scan(url, pass_file, REMOTE_TIMEOUT_MS, u, MAX_NAMESPACES, &n, &other)) {
            fprintf(stderr, "kvtier cache: %s\n", kvt_errmsg());
            return 1;
        }
        uint64_t values = other.values, bytes = other.bytes;
        for (size_t i = 0; i < n; i++) values += u[i].values, bytes += u[i].bytes;
        printf("remote: %" PRIu64 " values, %.1f MiB in %zu namespace(s)\n", values, (double)bytes / 1048576.0, n);
        for (size_t i = 0; i < n; i++)
            printf("namespace %016" PRIx64 "%016" PRIx64 ": %" PRIu64 " values, %.1f MiB\n", u[i].ns.hi, u[i].ns.lo,
                   u[i].values, (double)u[i].bytes / 1048576.0);
        if (other.values) printf("(%" PRIu64 " values in further namespaces not itemised)\n", other.values);
        return 0;
    }
    if (!strcmp(cmd, "clear")) {
        kvt_hash128 ns;
        if (!ns_text || parse_ns(ns_text, &ns)) {
            fprintf(stderr,
                    "kvtier cache: clear --kv-remote needs --namespace with 32 hex digits (as stats prints it)\n");
            return 2;
        }
        uint64_t removed;
        if (kvt_remote_clear(url, pass_file, REMOTE_TIMEOUT_MS, ns, &removed)) {
            fprintf(stderr, "kvtier cache: clear: %s\n", kvt_errmsg());
            return 1;
        }
        printf("clear: unlinked %" PRIu64 " values of namespace %s\n", removed, ns_text);
        return 0;
    }
    fprintf(stderr, "kvtier cache: %s is not available for --kv-remote (stats, clear)\n", cmd);
    return 2;
}

/* The summary of a stats or verify walk over dir: header, segments, records,
 * MACs, compression, namespaces, lifetime counters. Returns print_header's
 * verdict on the header. */
static int print_summary(const char *dir, const walk_state *s, int verify) {
    int bad_header = print_header(dir, s->segments);
    printf("segments: %" PRIu64 ", %.1f MiB\n", s->segments, (double)s->total_bytes / 1048576.0);
    printf("records: %" PRIu64 " valid, %" PRIu64 " %s, %" PRIu64 " of another format version\n", s->valid, s->corrupt,
           verify ? "corrupt (CRC, MAC, length or decode)" : "corrupt headers", s->foreign);
    if (verify) {
        printf("MAC: %" PRIu64 " verified with the directory's key, %" PRIu64 " records without one", s->mac_ok,
               s->no_mac);
        if (s->unverified)
            printf(", %" PRIu64 " that cannot be checked (no key file, signed under another key, or under a "
                   "MAC scheme this machine cannot compute): not valid",
                   s->unverified);
        if (s->unauthenticated)
            printf(", %" PRIu64 " unauthenticated (no MAC though the directory has a key file: the server never "
                   "serves them): not valid",
                   s->unauthenticated);
        printf("\n");
    }
    if (s->stored)
        printf("payload: %.1f MiB stored for %.1f MiB (compression ratio %.2f)\n", (double)s->stored / 1048576.0,
               (double)s->payload / 1048576.0, (double)s->payload / (double)s->stored);
    for (size_t i = 0; i < s->n_ns; i++)
        printf("namespace %016" PRIx64 "%016" PRIx64 ": %" PRIu64 " records, %.1f MiB\n", s->ns[i].ns.hi,
               s->ns[i].ns.lo, s->ns[i].records, (double)s->ns[i].bytes / 1048576.0);
    if (s->ns_overflow) printf("(%zu records in further namespaces not itemised)\n", s->ns_overflow);
    kvt_disk_lifetime lt;
    if (kvt_disk_read_lifetime(dir, &lt) == 0) {
        printf("lifetime (%" PRIu64 " sessions): %" PRIu64 " of %" PRIu64 " prompt blocks looked up were served "
               "from disk (hit rate %.1f%%); %" PRIu64 " records written, %" PRIu64 " writes dropped, %" PRIu64
               " evicted, %" PRIu64 " corrupt; %.1f MiB read, %.1f MiB written\n",
               lt.sessions, lt.lookup_hits, lt.lookup_blocks,
               lt.lookup_blocks ? 100.0 * (double)lt.lookup_hits / (double)lt.lookup_blocks : 0.0, lt.records_written,
               lt.writes_dropped, lt.evicted, lt.corrupt, (double)lt.bytes_read / 1048576.0,
               (double)lt.bytes_written / 1048576.0);
    }
    return bad_header;
}

/* verify: reports the server's reply journal in dir, if any. Returns 1 when
 * it is a problem by the rules of the records (damage, a MAC that does not
 * verify or cannot be checked), else 0. */
static int verify_journal(const char *dir) {
    kvt_reply_journal_report r;
    if (kvt_reply_journal_verify(dir, &r) == KVT_ENOTFOUND) return 0;
    printf("reply journal %s: ", KVT_REPLY_JOURNAL_NAME);
    if (r.records || !r.why[0]) printf("%zu records, %zu good", r.records, r.good);
    if (r.records > r.good) printf(", the first bad one at offset %zu (%s)", r.bad_at, r.why);
    else if (r.why[0]) printf("%s%s", r.records ? "; " : "", r.why);
    if (r.unsigned_records && !r.problem) printf(", without a MAC (written under --kv-disk-no-mac)");
    if (r.old_format) printf(": not checked; a server's next start replaces it");
    printf("%s\n", r.problem ? ": not valid" : "");
    return r.problem;
}

/* stats, ls or verify (cmd) over the disk tier in dir. Returns the exit code:
 * verify fails when a record is corrupt, cannot be checked, or lacks the MAC
 * the directory's key calls for, and when the header is damaged, not
 * kvtier's, or missing beside segments. */
static int walk_cmd(const char *dir, const char *cmd, long limit) {
    walk_state *s = kvt_xcalloc(1, sizeof *s);
    int rc = 0;
    int verify = !strcmp(cmd, "verify");
    s->ls = !strcmp(cmd, "ls");
    s->verify = verify;
    s->limit = limit;
    if (!s->ls) { /* the total and the count from the files' sizes: no walk of its own */
        kvt_disk_segment_bytes(dir, &s->total_bytes, &s->segments);
        s->progress = 1;
        kvt_progress_begin(&s->prog, verify ? "cache verify" : "cache stats", s->total_bytes >> 20, "MiB");
    }
    int wrc = kvt_disk_walk(dir, verify, walk_fn, s);
    if (s->progress) kvt_progress_end(&s->prog, s->bytes >> 20);
    damage_flush(s);
    if (s->dmg_unlisted) printf("damaged: %" PRIu64 " more stretches not listed\n", s->dmg_unlisted);
    if (wrc) {
        fprintf(stderr, "kvtier cache: %s\n", kvt_errmsg());
        rc = 1;
    } else if (!s->ls) {
        int bad_header = print_summary(dir, s, verify);
        if (verify) rc = bad_header || s->corrupt || s->unverified || s->unauthenticated ? 1 : 0;
        if (verify && verify_journal(dir)) rc = 1;
    }
    free(s);
    return rc;
}

/* gc: rewrites dir keeping the records of one namespace (--namespace, or the
 * header's; every one with --all-namespaces or no usable header). Returns
 * the exit code. */
static int gc_cmd(const char *dir, const char *ns_text, int all_ns) {
    kvt_hash128 ns;
    const kvt_hash128 *keep = NULL;
    if (ns_text) {
        if (parse_ns(ns_text, &ns)) {
            fprintf(stderr, "kvtier cache: --namespace expects 32 hex digits, got '%s'\n", ns_text);
            return 2;
        }
        keep = &ns;
    } else if (!all_ns) {
        uint32_t v;
        if (kvt_disk_read_header(dir, &v, &ns) == 0 && v == KVT_DISK_FORMAT_VERSION) keep = &ns;
    }
    kvt_disk_gc_report rep;
    int grc = kvt_disk_compact(dir, keep, &rep);
    if (grc) { /* refused (lock, ownership, no kvtier directory) or failed: no summary of work not done */
        fprintf(stderr, "kvtier cache: gc: %s\n", kvt_errmsg());
        return 1;
    }
    if (!keep && !all_ns && rep.bytes_before)
        fprintf(stderr, "kvtier cache: gc: no usable header: kept every namespace\n");
    printf("gc: kept %" PRIu64 " records; dropped %" PRIu64 " corrupt, %" PRIu64 " foreign, %" PRIu64
           " duplicate; %.1f -> %.1f MiB\n",
           rep.kept, rep.dropped_corrupt, rep.dropped_foreign, rep.dropped_dup, (double)rep.bytes_before / 1048576.0,
           (double)rep.bytes_after / 1048576.0);
    return 0;
}

/* Flags that ask for two things at once, or for something the command does not do, are refused
 * rather than one of them silently ignored: cache clear --kv-disk with --namespace would remove
 * every namespace's segments, gc with --namespace and --all-namespaces keep only the one. 1 after
 * printing why. */
static int flags_conflict(const char *cmd, const char *dir, const char *remote, const char *ns_text, int all_ns) {
    const char *why = NULL;
    int gc = cmd && !strcmp(cmd, "gc"), clear = cmd && !strcmp(cmd, "clear");
    if (dir && remote) why = "give --kv-disk DIR or --kv-remote URL, not both";
    else if (ns_text && all_ns) why = "--namespace keeps one namespace and --all-namespaces every one: give one";
    else if (ns_text && !(dir ? gc : clear))
        why = "--namespace applies to gc --kv-disk and clear --kv-remote (clear --kv-disk removes every segment)";
    else if (all_ns && !(dir && gc)) why = "--all-namespaces applies to gc --kv-disk only";
    if (why) fprintf(stderr, "kvtier cache: %s\n\n", why);
    return why != NULL;
}

/* The value of the option argv[*i] ends: what follows its '=' (--kv-disk=DIR), else the next
 * argument. NULL after saying it is missing. */
static const char *opt_value(int argc, char **argv, int *i, const char *eq) {
    return eq ? eq + 1 : kvt_cli_value(argc, argv, i);
}

int kvt_cmd_cache(int argc, char **argv) {
    const char *cmd = NULL, *dir = NULL, *ns_text = NULL, *remote = NULL;
    const char *pass_file = getenv("KVTIER_KV_REMOTE_PASSWORD_FILE"); /* the flag wins, as with serve */
    int all_ns = 0;
    long limit = LS_DEFAULT_LIMIT;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        /* --opt=VALUE as run and serve take it: the name compared up to the '=' */
        const char *eq = !strncmp(a, "--", 2) ? strchr(a, '=') : NULL;
        char name[32];
        if (eq && (size_t)(eq - a) < sizeof name) {
            snprintf(name, sizeof name, "%.*s", (int)(eq - a), a);
            a = name;
        } else {
            eq = NULL;
        }
        if (eq && (!strcmp(a, "--all-namespaces") || kvt_cli_is_help(a))) {
            fprintf(stderr, "kvtier cache: %s takes no value\n", a);
            return 2;
        } else if (kvt_cli_is_help(a)) {
            kvt_usage_cache(stdout);
            return 0;
        } else if (!strcmp(a, "--kv-disk")) {
            if (!(dir = opt_value(argc, argv, &i, eq))) return 2;
        } else if (!strcmp(a, "--kv-remote")) {
            if (!(remote = opt_value(argc, argv, &i, eq))) return 2;
        } else if (!strcmp(a, "--kv-remote-password-file")) {
            if (!(pass_file = opt_value(argc, argv, &i, eq))) return 2;
        } else if (!strcmp(a, "--kv-remote-key-file")) {
            if (!opt_value(argc, argv, &i, eq)) return 2;
        } else if (!strcmp(a, "--namespace")) {
            if (!(ns_text = opt_value(argc, argv, &i, eq))) return 2;
        } else if (!strcmp(a, "--all-namespaces")) {
            all_ns = 1;
        } else if (!strcmp(a, "--limit")) {
            const char *v = opt_value(argc, argv, &i, eq);
            if (!v || (limit = kvt_cli_parse_long("--limit", v, 1, 1L << 40)) < 0) return 2;
        } else if (a[0] != '-' && !cmd) {
            cmd = a;
        } else if (a[0] != '-') { /* `cache verify DIR`: the directory is named by a flag, say which */
            fprintf(stderr, "kvtier cache: unexpected argument '%s': give the directory as --kv-disk %s\n\n", a, a);
            kvt_usage_cache(stderr);
            return 2;
        } else {
            fprintf(stderr, "kvtier cache: unknown option '%s'\n\n", argv[i]);
            kvt_usage_cache(stderr);
            return 2;
        }
    }
    if (flags_conflict(cmd, dir, remote, ns_text, all_ns)) {
        kvt_usage_cache(stderr);
        return 2;
    }
    if (cmd && remote && !dir) return remote_cmd(cmd, remote, pass_file, ns_text);
    if (!cmd || !dir) {
        fprintf(stderr, "kvtier cache: %s\n\n",
                !cmd ? "which command? (stats, ls, verify, gc, clear)" : "--kv-disk DIR is required");
        kvt_usage_cache(stderr);
        return 2;
    }
    if (access(dir, R_OK) != 0) {
        fprintf(stderr, "kvtier cache: cannot read %s: %s\n", dir, strerror(errno));
        return 1;
    }
    if (!strcmp(cmd, "stats") || !strcmp(cmd, "ls") || !strcmp(cmd, "verify")) return walk_cmd(dir, cmd, limit);
    if (!strcmp(cmd, "gc")) return gc_cmd(dir, ns_text, all_ns);
    if (!strcmp(cmd, "clear")) {
        uint64_t freed;
        if (kvt_disk_clear(dir, &freed)) {
            fprintf(stderr, "kvtier cache: clear: %s\n", kvt_errmsg());
            return 1;
        }
        printf("clear: removed %.1f MiB of segments from %s\n", (double)freed / 1048576.0, dir);
        return 0;
    }
    fprintf(stderr, "kvtier cache: unknown command '%s'\n\n", cmd);
    kvt_usage_cache(stderr);
    return 2;
}
