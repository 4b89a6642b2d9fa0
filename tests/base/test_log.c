// SPDX-License-Identifier: MIT
/* Logging: every line has an ISO-8601 UTC timestamp with milliseconds and a
 * level, text or JSON (one parseable object per line, control bytes and quotes
 * escaped), the threshold filters, a log file is appended to and never opened
 * through a symbolic link or into a file with another hard link; progress
 * lines stay quiet for short work. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <regex.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common.h"
#include "progress.h"
#include "testutil.h"

static int matches(const char *re, const char *s) {
    regex_t r;
    if (regcomp(&r, re, REG_EXTENDED | REG_NEWLINE)) return 0;
    int ok = regexec(&r, s, 0, NULL, 0) == 0;
    regfree(&r);
    return ok;
}

static size_t count_lines(const char *s) {
    size_t n = 0;
    for (; *s; s++) n += *s == '\n';
    return n;
}

/* kvt_logk: the text line is kvt_log's; the JSON line has every named
 * conversion as a key of its own, typed by the conversion. */
static void check_logk(const char *dir) {
    const char *path = kvt_test_path(dir, "keys.log");
    CHECK(kvt_log_open_file(path) == 0);
    kvt_log_set_level(KVT_LOG_INFO);
    kvt_log_set_format(KVT_LOG_JSON);
    unsigned long long big = 18446744073709551615ULL;
    unsetenv("KVT_TEST_UNSET_VARIABLE"); /* a NULL %s that the compiler cannot see */
    kvt_logk(KVT_LOG_INFO, "request_id,tokens,,seconds,rate,segment,big,small,path,width,ch",
             "prefill %s: %d tokens (%zu skipped) in %.2f s (%g tok/s), segment %016llx, %llu %hd %s %*d%% %c", "req-7",
             1800, (size_t)3, 0.905, 2000.0, 0xabcULL, big, (short)-5, getenv("KVT_TEST_UNSET_VARIABLE"), 4, 9, 'x');
    kvt_logk(KVT_LOG_INFO, NULL, "no keys %d", 1);
    kvt_logk(KVT_LOG_DEBUG, "n", "hidden %d", 2);
    kvt_log_set_format(KVT_LOG_TEXT);
    kvt_logk(KVT_LOG_INFO, "n", "as text %d ok", 3);
    kvt_log_close_file();
    char *t = kvt_test_read_file(path, NULL);
    CHECKF(t && count_lines(t) == 3, "%s", t ? t : "(none)");
    if (!t) return;
    char *nl = strchr(t, '\n');
    *nl = 0;
    cJSON *j = cJSON_Parse(t);
    CHECKF(j != NULL, "not JSON: %s", t);
    if (j) {
        const char *want = "prefill req-7: 1800 tokens (3 skipped) in 0.91 s (2000 tok/s), segment 0000000000000abc, "
                           "18446744073709551615 -5 (null)    9% x";
        const cJSON *m = cJSON_GetObjectItem(j, "msg");
        CHECKF(cJSON_IsString(m) && !strcmp(m->valuestring, want), "msg %s", m ? m->valuestring : "-");
        CHECK(!strcmp(cJSON_GetObjectItem(j, "request_id")->valuestring, "req-7"));
        CHECK(cJSON_IsNumber(cJSON_GetObjectItem(j, "tokens")) && cJSON_GetObjectItem(j, "tokens")->valueint == 1800);
        CHECK(cJSON_GetObjectItem(j, "seconds")->valuedouble == 0.905);
        CHECK(cJSON_GetObjectItem(j, "rate")->valuedouble == 2000.0);
        CHECK(!strcmp(cJSON_GetObjectItem(j, "segment")->valuestring, "0000000000000abc"));
        CHECK(cJSON_GetObjectItem(j, "big")->valuedouble == 18446744073709551615.0);
        CHECK(cJSON_GetObjectItem(j, "small")->valueint == -5);
        CHECK(cJSON_IsNull(cJSON_GetObjectItem(j, "path")));
        CHECK(cJSON_GetObjectItem(j, "width")->valueint == 9);
        CHECK(!strcmp(cJSON_GetObjectItem(j, "ch")->valuestring, "x"));
        CHECKF(cJSON_GetArraySize(j) == 3 + 10, "%d keys", cJSON_GetArraySize(j)); /* the unnamed %zu has none */
        cJSON_Delete(j);
    }
    /* a float key is a float even where its value is whole: 2000.0, not 2000 */
    CHECKF(strstr(t, "\"rate\":2000.0,") != NULL, "%s", t);
    char *l2 = nl + 1, *nl2 = strchr(l2, '\n');
    *nl2 = 0;
    cJSON *j2 = cJSON_Parse(l2);
    CHECK(j2 && cJSON_GetArraySize(j2) == 3 && !strcmp(cJSON_GetObjectItem(j2, "msg")->valuestring, "no keys 1"));
    cJSON_Delete(j2);
    CHECKF(matches("Z kvtier: info: as text 3 ok$", nl2 + 1), "text line: %s", nl2 + 1);
    free(t);
}

int main(void) {
    const char *dir = kvt_test_tmpdir();
    char ts[KVT_LOG_TS_BYTES];
    kvt_log_timestamp(ts, sizeof ts);
    CHECKF(matches("^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\\.[0-9]{3}Z$", ts), "timestamp '%s'", ts);

    /* text lines in a file, filtered by the threshold */
    const char *path = kvt_test_path(dir, "text.log");
    CHECK(kvt_log_open_file(path) == 0);
    kvt_log_set_format(KVT_LOG_TEXT);
    kvt_log_set_level(KVT_LOG_INFO);
    kvt_log(KVT_LOG_INFO, "hello %d", 42);
    kvt_log(KVT_LOG_WARN, "careful");
    kvt_log(KVT_LOG_DEBUG, "hidden at info");
    kvt_log_set_level(KVT_LOG_DEBUG);
    kvt_log(KVT_LOG_DEBUG, "shown at debug");
    kvt_log_set_level(KVT_LOG_ERROR);
    kvt_log(KVT_LOG_WARN, "hidden at error");
    kvt_log(KVT_LOG_ERROR, "broken");
    kvt_log_close_file();
    char *t = kvt_test_read_file(path, NULL);
    CHECK(t != NULL);
    if (t) {
        const char *stamp = "^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\\.[0-9]{3}Z ";
        char re[256];
        snprintf(re, sizeof re, "%skvtier: info: hello 42$", stamp);
        CHECKF(matches(re, t), "%s", t);
        snprintf(re, sizeof re, "%skvtier: warn: careful$", stamp);
        CHECK(matches(re, t));
        snprintf(re, sizeof re, "%skvtier: debug: shown at debug$", stamp);
        CHECK(matches(re, t));
        snprintf(re, sizeof re, "%skvtier: error: broken$", stamp);
        CHECK(matches(re, t));
        CHECK(!strstr(t, "hidden"));
        CHECKF(count_lines(t) == 4, "%zu lines", count_lines(t));
        free(t);
    }
    struct stat sb;
    CHECK(stat(path, &sb) == 0 && (sb.st_mode & 0777) == 0600);

    /* JSON: one object per line, with the awkward bytes escaped; appended */
    kvt_log_set_level(KVT_LOG_INFO);
    kvt_log_set_format(KVT_LOG_JSON);
    CHECK(kvt_log_open_file(path) == 0);
    kvt_log(KVT_LOG_WARN, "quote \" backslash \\ tab \t newline \n bell \a end");
    kvt_log(KVT_LOG_INFO, "%s", "plain \xc3\xa9 bad \xff\xc3 cut");
    kvt_log_close_file();
    kvt_log_set_format(KVT_LOG_TEXT);
    t = kvt_test_read_file(path, NULL);
    CHECK(t != NULL);
    if (t) {
        CHECKF(count_lines(t) == 6, "%zu lines after appending", count_lines(t));
        char *line = t;
        for (int i = 0; i < 4; i++) line = strchr(line, '\n') + 1;
        char *nl = strchr(line, '\n');
        *nl = 0;
        cJSON *j = cJSON_Parse(line);
        CHECKF(j != NULL, "not JSON: %s", line);
        if (j) {
            const cJSON *lv = cJSON_GetObjectItem(j, "level"), *msg = cJSON_GetObjectItem(j, "msg"),
                        *jts = cJSON_GetObjectItem(j, "ts");
            CHECK(cJSON_IsString(lv) && !strcmp(lv->valuestring, "warn"));
            CHECK(cJSON_IsString(msg) &&
                  !strcmp(msg->valuestring, "quote \" backslash \\ tab \t newline \n bell \a end"));
            CHECK(cJSON_IsString(jts) && matches("^[0-9-]{10}T[0-9:]{8}\\.[0-9]{3}Z$", jts->valuestring));
            cJSON_Delete(j);
        }
        cJSON *j2 = cJSON_Parse(nl + 1);
        /* well-formed UTF-8 kept, stray bytes replaced */
        CHECK(j2 &&
              !strcmp(cJSON_GetObjectItem(j2, "msg")->valuestring, "plain \xc3\xa9 bad \xef\xbf\xbd\xef\xbf\xbd cut"));
        cJSON_Delete(j2);
        free(t);
    }
    CHECK(kvt_log_set_format_name("json") == 0);
    CHECK(kvt_log_set_format_name("xml") == KVT_EARG && strstr(kvt_errmsg(), "xml"));
    kvt_log_set_format(KVT_LOG_TEXT);

    /* structured lines: in JSON each field is its own key (typed); in text the text message */
    const char *fpath = kvt_test_path(dir, "fields.log");
    CHECK(kvt_log_open_file(fpath) == 0);
    const kvt_log_field fl[] = {
        {"method", KVT_LOG_STR, "POST", 0, 0},   {"path", KVT_LOG_STR, "/a\"b", 0, 0},
        {"status", KVT_LOG_INT, NULL, 200, 0},   {"tenant", KVT_LOG_STR, NULL, 0, 0},
        {"ttft_ms", KVT_LOG_NUM, NULL, 0, 12.5}, {"gone_ms", KVT_LOG_NUM, NULL, 0, NAN},
        {"complete", KVT_LOG_BOOL, NULL, 1, 0},
    };
    kvt_log_set_format(KVT_LOG_JSON);
    CHECK(kvt_log_get_format() == KVT_LOG_JSON);
    kvt_log_fields(KVT_LOG_INFO, "access", fl, KVT_ARRAY_LEN(fl), "access: POST /a 200");
    kvt_log_fields(KVT_LOG_DEBUG, "hidden", fl, 1, "hidden"); /* below the threshold */
    kvt_log_set_format(KVT_LOG_TEXT);
    kvt_log_fields(KVT_LOG_INFO, "access", fl, KVT_ARRAY_LEN(fl), "access: POST /a 200");
    kvt_log_close_file();
    t = kvt_test_read_file(fpath, NULL);
    CHECK(t && count_lines(t) == 2);
    if (t) {
        char *nl = strchr(t, '\n');
        *nl = 0;
        cJSON *j = cJSON_Parse(t);
        CHECKF(j != NULL, "not JSON: %s", t);
        if (j) {
            CHECK(!strcmp(cJSON_GetObjectItem(j, "msg")->valuestring, "access"));
            CHECK(!strcmp(cJSON_GetObjectItem(j, "method")->valuestring, "POST"));
            CHECK(!strcmp(cJSON_GetObjectItem(j, "path")->valuestring, "/a\"b"));
            CHECK(cJSON_IsNumber(cJSON_GetObjectItem(j, "status")) && cJSON_GetObjectItem(j, "status")->valueint == 200);
            CHECK(cJSON_IsNull(cJSON_GetObjectItem(j, "tenant")));
            CHECK(cJSON_IsNumber(cJSON_GetObjectItem(j, "ttft_ms")) &&
                  cJSON_GetObjectItem(j, "ttft_ms")->valuedouble == 12.5);
            CHECK(cJSON_IsNull(cJSON_GetObjectItem(j, "gone_ms")));
            CHECK(cJSON_IsTrue(cJSON_GetObjectItem(j, "complete")));
            CHECK(cJSON_GetArraySize(j) == 3 + (int)KVT_ARRAY_LEN(fl));
            cJSON_Delete(j);
        }
        CHECKF(matches("Z kvtier: info: access: POST /a 200$", nl + 1), "text line: %s", nl + 1);
        free(t);
    }

    check_logk(dir);

    /* a symbolic link is never followed: its target stays untouched */
    const char *target = kvt_test_path(dir, "target");
    const char *slink = kvt_test_path(dir, "link.log");
    FILE *f = fopen(target, "w");
    fputs("precious\n", f);
    fclose(f);
    CHECK(symlink(target, slink) == 0);
    int rc = kvt_log_open_file(slink);
    CHECKF(rc == -ELOOP && strstr(kvt_errmsg(), "symbolic link"), "rc %d: %s", rc, kvt_errmsg());
    t = kvt_test_read_file(target, NULL);
    CHECK(t && !strcmp(t, "precious\n"));
    free(t);
    /* a hard link (another name for a file O_NOFOLLOW cannot tell apart) is refused, its file untouched */
    char hard[512];
    snprintf(hard, sizeof hard, "%s", kvt_test_path(dir, "hard.log"));
    CHECK(link(target, hard) == 0);
    rc = kvt_log_open_file(hard);
    CHECKF(rc == -EMLINK && strstr(kvt_errmsg(), "hard links"), "rc %d: %s", rc, kvt_errmsg());
    kvt_log(KVT_LOG_ERROR, "a line that must not reach the linked file");
    t = kvt_test_read_file(target, NULL);
    CHECK(t && !strcmp(t, "precious\n"));
    free(t);
    /* a directory (or FIFO) is refused too */
    CHECK(kvt_log_open_file(dir) < 0);

    /* progress: short work prints nothing (not a terminal, KVT_PROGRESS unset) */
    unsetenv("KVT_PROGRESS");
    const char *ppath = kvt_test_path(dir, "progress.log");
    CHECK(kvt_log_open_file(ppath) == 0);
    kvt_progress p;
    kvt_progress_begin(&p, "short work", 100, "items");
    for (uint64_t i = 0; i < 100; i++) kvt_progress_update(&p, i);
    kvt_progress_end(&p, 100);
    CHECK(p.eager || p.shown == 0);
    /* eager (KVT_PROGRESS): lines appear, at most one per interval, then "done" */
    setenv("KVT_PROGRESS", "1", 1);
    kvt_progress_begin(&p, "long work", 10, "items");
    p.start -= 5 * KVT_PROGRESS_INTERVAL_S; /* as if it started earlier */
    p.last = p.start;
    kvt_progress_update(&p, 3);
    kvt_progress_update(&p, 4); /* within the interval: no line */
    kvt_progress_end(&p, 10);
    kvt_log_close_file();
    t = kvt_test_read_file(ppath, NULL);
    CHECK(t != NULL);
    if (t) {
        CHECKF(count_lines(t) == 2, "%s", t);
        CHECK(strstr(t, "progress: long work: 3/10 items (30%)") != NULL);
        CHECK(strstr(t, "progress: long work: 10/10 items (100%)") && strstr(t, ", done"));
        CHECK(!strstr(t, "short work"));
        free(t);
    }
    /* forced (a command's --progress): the first line at once, however short the work, then "done" */
    unsetenv("KVT_PROGRESS");
    CHECK(kvt_log_open_file(ppath) == 0);
    kvt_progress_set_forced(1);
    CHECK(kvt_progress_wanted());
    kvt_progress_begin(&p, "quick work", 4, "items");
    kvt_progress_update(&p, 2); /* within the interval: no line */
    kvt_progress_end(&p, 4);
    kvt_progress_set_forced(0);
    kvt_log_close_file();
    t = kvt_test_read_file(ppath, NULL);
    CHECK(t != NULL);
    if (t) {
        CHECKF(count_lines(t) == 4, "%s", t);
        CHECK(strstr(t, "progress: quick work: 0/4 items (0%)") != NULL);
        CHECK(strstr(t, "progress: quick work: 4/4 items (100%)") && !strstr(t, "quick work: 2/4"));
        free(t);
    }
    return kvt_test_done("test_log");
}
