// SPDX-License-Identifier: MIT
/* The connection table behind kvtier serve's accept policy: the per-address
 * quota, the reserve that only addresses with no connection may take, trusted
 * proxies outside the quota with their forwarded clients claimed against
 * theirs, and the address forms X-Forwarded-For and --trusted-proxy accept. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <string.h>

#include "http_conns.h"
#include "testutil.h"

static struct sockaddr_in v4(const char *text) {
    struct sockaddr_in sa = {.sin_family = AF_INET};
    inet_pton(AF_INET, text, &sa.sin_addr);
    return sa;
}

static kvt_http_addr addr(const char *text) {
    kvt_http_addr a;
    memset(&a, 0xee, sizeof a);
    CHECKF(!kvt_http_addr_parse(text, strlen(text), 1, &a), "%s parses", text);
    return a;
}

/* Admits a connection from text and, when admitted, counts it open. 1 when admitted. */
static int open_from(kvt_http_conns *t, const char *text) {
    struct sockaddr_in sa = v4(text);
    if (!kvt_http_conns_admit(t, (const struct sockaddr *)&sa)) return 0;
    kvt_http_addr a = addr(text);
    kvt_http_conns_opened(t, &a);
    return 1;
}

static void test_addresses(void) {
    char text[KVT_HTTP_ADDR_TEXT];
    kvt_http_addr a = addr("10.1.2.3"), b = addr("::ffff:10.1.2.3"), c = addr("10.1.2.3:8080");
    CHECK(!memcmp(&a, &b, sizeof a) && !memcmp(&a, &c, sizeof a)); /* mapped and with a port: the same client */
    kvt_http_addr_text(&a, text);
    CHECK(!strcmp(text, "10.1.2.3"));
    a = addr("[2001:db8::1]:443");
    kvt_http_addr_text(&a, text);
    CHECK(!strcmp(text, "2001:db8::1"));
    const char *bad[] = {"", "host.example", "10.1.2", "10.1.2.3:", "10.1.2.3:x", "[::1", "[::1]x", "1.2.3.4 5"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        CHECKF(kvt_http_addr_parse(bad[i], strlen(bad[i]), 1, &a), "'%s' is refused", bad[i]);
    /* a port is X-Forwarded-For's form only: --trusted-proxy takes plain addresses */
    CHECK(kvt_http_addr_parse("10.1.2.3:80", 11, 0, &a) && !kvt_http_addr_parse("[::1]", 5, 0, &a));
}

/* 10 connections at most, 3 kept for new addresses, 4 per address. */
static void test_reserve(void) {
    kvt_http_conns *t = kvt_http_conns_new(10, 4, 3, NULL, 0);
    int in = 0;
    for (int round = 0; round < 4; round++) /* 4 each from .1 and .2 (8 > 10 - 3): the quota then the reserve */
        in += open_from(t, "127.0.0.1") + open_from(t, "127.0.0.2");
    CHECKF(in == 7 && kvt_http_conns_open(t) == 7, "%d admitted", in);
    CHECK(!open_from(t, "127.0.0.2")); /* 3 open, below its quota, but the last slots are for new addresses */
    CHECK(open_from(t, "127.0.0.3") && open_from(t, "127.0.0.4") && open_from(t, "127.0.0.5"));
    CHECK(!open_from(t, "127.0.0.6")); /* the cap */
    kvt_http_addr one = addr("127.0.0.1");
    kvt_http_conns_closed(t, &one);
    CHECK(!open_from(t, "127.0.0.1")); /* 9 open: still inside the reserve */
    CHECK(open_from(t, "127.0.0.6"));
    for (int i = 0; i < 3; i++) kvt_http_conns_closed(t, &one);
    CHECK(kvt_http_conns_open(t) == 7 && open_from(t, "127.0.0.1")); /* it holds none now: new again */
    kvt_http_conns_free(t);
}

static void test_proxy(void) {
    kvt_http_addr proxy = addr("127.0.0.1");
    kvt_http_conns *t = kvt_http_conns_new(100, 2, 10, &proxy, 1);
    CHECK(kvt_http_conns_trusted(t, &proxy));
    int in = 0;
    for (int i = 0; i < 5; i++) in += open_from(t, "127.0.0.1");
    CHECKF(in == 5, "the proxy opened %d of 5 (quota 2)", in);
    kvt_http_addr c1 = addr("10.0.0.1"), c2 = addr("10.0.0.2");
    CHECK(!kvt_http_conns_claim(t, &c1) && !kvt_http_conns_claim(t, &c1));
    CHECK(kvt_http_conns_claim(t, &c1)); /* its quota */
    CHECK(!kvt_http_conns_claim(t, &c2));
    kvt_http_conns_unclaim(t, &c1);
    CHECK(!kvt_http_conns_claim(t, &c1));
    /* a direct connection from a client counts with its proxied requests */
    CHECK(!open_from(t, "10.0.0.1"));
    kvt_http_conns_free(t);
}

int main(void) {
    test_addresses();
    test_reserve();
    test_proxy();
    return kvt_test_done("test_http_conns");
}
