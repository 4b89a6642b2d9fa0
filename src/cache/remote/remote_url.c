// SPDX-License-Identifier: MIT
/* --kv-remote URLs: one Redis (redis://, unix://) or a Redis Cluster
 * (redis-cluster://), parsed here for the connection code and the cluster
 * code alike, so that neither calls the other to read one. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common.h"
#include "remote_cluster_internal.h"

#define DEFAULT_PORT 6379
#define URL_REDIS "redis://"
#define URL_UNIX "unix://"

/* host:port at s[0..n) into host (cap bytes) and *port. 0 or -1. */
int kvt_remote_split_addr(const char *s, size_t n, char *host, size_t cap, int *port) {
    const char *colon = NULL;
    for (size_t i = n; i > 0; i--)
        if (s[i - 1] == ':') {
            colon = s + i - 1;
            break;
        }
    if (!colon || colon == s || (size_t)(colon - s) >= cap) return -1;
    char num[8], *e;
    size_t pn = n - (size_t)(colon - s) - 1;
    if (!pn || pn >= sizeof num) return -1;
    memcpy(num, colon + 1, pn);
    num[pn] = 0;
    long p = strtol(num, &e, 10);
    if (*e || p < 1 || p > 65535) return -1;
    memcpy(host, s, (size_t)(colon - s));
    host[colon - s] = 0;
    *port = (int)p;
    return 0;
}

void kvt_remote_url_shown(const char *url, char *out, size_t cap) {
    const char *s = strstr(url, "://");
    /* the last '@': hosts never hold one, a mistyped password might */
    const char *at = s ? strrchr(s + 3, '@') : NULL, *colon = at ? memchr(s + 3, ':', (size_t)(at - s - 3)) : NULL;
    if (!colon) snprintf(out, cap, "%s", url);
    else snprintf(out, cap, "%.*s:***%s", (int)(colon - url), url, at);
}

/* The user or password at s[0..n) into dst (KVT_REMOTE_URL_PART_MAX bytes),
 * %XX escapes decoded so that a password may hold '@', ':', '/' or ','. 0 or -1. */
static int copy_userinfo(char *dst, const char *s, size_t n) {
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (k + 1 >= KVT_REMOTE_URL_PART_MAX) return -1;
        char hex[3] = {0};
        if (s[i] == '%') {
            if (i + 2 >= n) return -1;
            memcpy(hex, s + i + 1, 2);
            if (strspn(hex, "0123456789abcdefABCDEF") != 2) return -1;
            dst[k++] = (char)strtol(hex, NULL, 16);
            i += 2;
        } else dst[k++] = s[i];
    }
    dst[k] = 0;
    return 0;
}

/* The last '@' in [s, end), or NULL: a raw '@' in a password then stays out of the host. */
static const char *last_at(const char *s, const char *end) {
    for (const char *p = end; p > s; p--)
        if (p[-1] == '@') return p - 1;
    return NULL;
}

/* user:password@ (or user@, kept as user_only for a password file to
 * complete) at s[0..at): into u. 0, or KVT_EARG naming the part (never its
 * text). */
static int parse_userinfo(const char *s, const char *at, kvt_remote_url *u) {
    const char *colon = memchr(s, ':', (size_t)(at - s));
    if (copy_userinfo(u->user, s, (size_t)((colon ? colon : at) - s)))
        return kvt_fail(KVT_EARG, "--kv-remote: the user is too long or has a bad %%XX escape");
    if (!colon) {
        u->user_only = 1;
        return 0;
    }
    if (copy_userinfo(u->pass, colon + 1, (size_t)(at - colon - 1)))
        return kvt_fail(KVT_EARG, "--kv-remote: the password is too long or has a bad %%XX escape");
    return 0;
}

static int parse_query(const char *url, const char *q, kvt_remote_url *u) {
    if (!strcmp(q, "replica_reads=yes") || !strcmp(q, "replica_reads=1")) u->replica_reads = 1;
    else if (strcmp(q, "replica_reads=no") && strcmp(q, "replica_reads=0"))
        return kvt_fail(KVT_EARG, "--kv-remote %s: unknown parameter '%s' (expected replica_reads=yes or no)", url, q);
    return 0;
}

int kvt_remote_cluster_parse_url(const char *raw, kvt_remote_url *u) {
    char url[4 * KVT_REMOTE_URL_PART_MAX]; /* raw with its password hidden: for messages */
    kvt_remote_url_shown(raw, url, sizeof url);
    memset(u, 0, sizeof *u);
    u->cluster = 1;
    const char *s = raw + strlen(KVT_REMOTE_CLUSTER_SCHEME), *end = s + strcspn(s, "/?");
    if (*end == '/' && end[1] && end[1] != '?')
        return kvt_fail(KVT_EARG, "--kv-remote %s: a cluster has no database numbers (drop the /db)", url);
    const char *q = strchr(end, '?');
    if (q && parse_query(url, q + 1, u)) return KVT_EARG;
    const char *at = last_at(s, end);
    if (at) {
        if (parse_userinfo(s, at, u)) return KVT_EARG;
        s = at + 1;
    }
    if ((size_t)(end - s) >= sizeof u->seeds) return kvt_fail(KVT_EARG, "--kv-remote %s: too many hosts", url);
    memcpy(u->seeds, s, (size_t)(end - s));
    u->seeds[end - s] = 0;
    for (const char *h = u->seeds; *h;) {
        size_t n = strcspn(h, ",");
        char host[KVT_REMOTE_URL_PART_MAX];
        int port;
        if (kvt_remote_split_addr(h, n, host, sizeof host, &port))
            return kvt_fail(KVT_EARG, "--kv-remote %s: expected host:port[,host:port...] after %s", url,
                            KVT_REMOTE_CLUSTER_SCHEME);
        if (h == u->seeds) {
            snprintf(u->host, sizeof u->host, "%s", host);
            u->port = port;
        }
        h += n + (h[n] == ',');
    }
    if (!u->seeds[0]) return kvt_fail(KVT_EARG, "--kv-remote %s: no host", url);
    return 0;
}

static int copy_part(char *dst, const char *s, size_t n, const char *what, const char *url) {
    if (n >= KVT_REMOTE_URL_PART_MAX) return kvt_fail(KVT_EARG, "--kv-remote %s: the %s is too long", url, what);
    memcpy(dst, s, n);
    dst[n] = 0;
    return 0;
}

int kvt_remote_parse_url(const char *raw, kvt_remote_url *u) {
    char url[4 * KVT_REMOTE_URL_PART_MAX]; /* raw with its password hidden: for messages */
    kvt_remote_url_shown(raw, url, sizeof url);
    memset(u, 0, sizeof *u);
    u->port = DEFAULT_PORT;
    if (!strncmp(url, "rediss", 6))
        return kvt_fail(KVT_EARG,
                        "--kv-remote %s: TLS is not supported: this build's hiredis (0.14) has no TLS; reach the "
                        "server through a TLS tunnel and give a redis:// or redis-cluster:// URL",
                        url);
    if (!strncmp(url, KVT_REMOTE_CLUSTER_SCHEME, strlen(KVT_REMOTE_CLUSTER_SCHEME)))
        return kvt_remote_cluster_parse_url(raw, u);
    if (!strncmp(url, URL_UNIX, strlen(URL_UNIX))) {
        const char *path = raw + strlen(URL_UNIX);
        if (*path != '/') return kvt_fail(KVT_EARG, "--kv-remote %s: expected unix:///absolute/path", url);
        u->is_unix = 1;
        return copy_part(u->path, path, strlen(path), "path", url);
    }
    if (strncmp(url, URL_REDIS, strlen(URL_REDIS)))
        return kvt_fail(KVT_EARG, "--kv-remote %s: expected redis://[user:pass@]host:port[/db] or unix:///path", url);
    const char *s = raw + strlen(URL_REDIS), *end = s + strcspn(s, "/");
    const char *at = last_at(s, end);
    if (at) {
        if (parse_userinfo(s, at, u)) return KVT_EARG;
        s = at + 1;
    }
    const char *colon = memchr(s, ':', (size_t)(end - s));
    const char *host_end = colon ? colon : end;
    if (host_end == s) return kvt_fail(KVT_EARG, "--kv-remote %s: no host", url);
    if (copy_part(u->host, s, (size_t)(host_end - s), "host", url)) return KVT_EARG;
    if (colon) {
        char *e;
        long port = strtol(colon + 1, &e, 10);
        if (e != end || port < 1 || port > 65535) return kvt_fail(KVT_EARG, "--kv-remote %s: bad port", url);
        u->port = (int)port;
    }
    if (*end == '/' && end[1]) {
        char *e;
        long db = strtol(end + 1, &e, 10);
        if (*e || db < 0 || db > 1000000) return kvt_fail(KVT_EARG, "--kv-remote %s: bad database number", url);
        u->db = (int)db;
    }
    return 0;
}

/* The password file's checks are the key file's: a regular file of ours,
 * opened without following links, readable by nobody else (whoever reads it
 * can use the store; whoever replaces it can point AUTH elsewhere). It holds
 * one line, the password; one trailing newline (or CRLF) is not part of it. */
static int read_password_file(const char *path, char *pass) {
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0)
        return kvt_fail(errno == ELOOP ? KVT_EARG : -errno, "--kv-remote-password-file %s: %s", path,
                        errno == ELOOP ? "is a symbolic link (give the file itself)" : strerror(errno));
    struct stat sb;
    char buf[KVT_REMOTE_URL_PART_MAX + 2];
    ssize_t n = 0;
    int rc = 0;
    if (fstat(fd, &sb)) rc = kvt_fail(-errno, "--kv-remote-password-file %s: %s", path, strerror(errno));
    else if (!S_ISREG(sb.st_mode)) rc = kvt_fail(KVT_EARG, "--kv-remote-password-file %s is not a regular file", path);
    else if (sb.st_uid != geteuid())
        rc = kvt_fail(-EACCES, "--kv-remote-password-file %s belongs to uid %u, not to this user (%u)", path,
                      (unsigned)sb.st_uid, (unsigned)geteuid());
    else if (sb.st_mode & 077)
        rc = kvt_fail(-EACCES,
                      "--kv-remote-password-file %s is readable or writable by others (mode %03o): chmod 600 %s", path,
                      (unsigned)(sb.st_mode & 0777), path);
    else if ((n = read(fd, buf, sizeof buf)) < 0)
        rc = kvt_fail(-errno, "--kv-remote-password-file %s: %s", path, strerror(errno));
    close(fd);
    size_t len = n > 0 ? (size_t)n : 0;
    if (len && buf[len - 1] == '\n') len--;
    if (len && buf[len - 1] == '\r') len--;
    if (!rc && !len) rc = kvt_fail(KVT_EARG, "--kv-remote-password-file %s is empty: it must hold the password", path);
    else if (!rc && len >= KVT_REMOTE_URL_PART_MAX)
        rc = kvt_fail(KVT_EARG, "--kv-remote-password-file %s: the password is longer than %d bytes", path,
                      KVT_REMOTE_URL_PART_MAX - 1);
    else if (!rc && (memchr(buf, '\n', len) || memchr(buf, '\r', len) || memchr(buf, 0, len)))
        rc = kvt_fail(KVT_EARG, "--kv-remote-password-file %s must hold one line, the password, and nothing else", path);
    if (!rc) {
        memcpy(pass, buf, len);
        pass[len] = 0;
    }
    memset(buf, 0, sizeof buf);
    return rc;
}

int kvt_remote_parse_url_auth(const char *raw, const char *password_file, kvt_remote_url *u) {
    int rc = kvt_remote_parse_url(raw, u);
    if (rc) return rc;
    char url[4 * KVT_REMOTE_URL_PART_MAX];
    kvt_remote_url_shown(raw, url, sizeof url);
    if (!password_file) {
        if (u->user_only)
            return kvt_fail(KVT_EARG,
                            "--kv-remote %s: a user@ without a password: give user:password@ in the URL, or the "
                            "password in --kv-remote-password-file FILE",
                            url);
        return 0;
    }
    if (u->pass[0])
        return kvt_fail(KVT_EARG,
                        "--kv-remote %s carries a password and --kv-remote-password-file gives one too: give it in "
                        "one place (the file keeps it out of ps and shell history)",
                        url);
    if (!*password_file) return kvt_fail(KVT_EARG, "--kv-remote-password-file: no file name given");
    rc = read_password_file(password_file, u->pass);
    if (!rc) u->pass_from_file = 1;
    return rc;
}
