/* The I/O-free cluster router: slots, redirections, detection. */
#include <criterion/criterion.h>
#include <stdint.h>
#include <string.h>

#include "cluster.h"
#include "xfetch.h"

/* --- CRC16 and slots ------------------------------------------------------------- */

Test(cluster, crc16_matches_the_spec_vector) {
  cr_expect_eq(xf__crc16("123456789", 9), 0x31C3);
  cr_expect_eq(xf__crc16("", 0), 0);
  cr_expect_eq(xf__crc16("A", 1), 0x58E5);
}

Test(cluster, keyslots_match_redis) {
  /* Values from the Redis docs (CLUSTER KEYSLOT) and redis-cli. */
  cr_expect_eq(xf__cluster_keyslot("somekey", 7), 11058);
  cr_expect_eq(xf__cluster_keyslot("foo{hash_tag}", 13), 2515);
  cr_expect_eq(xf__cluster_keyslot("foo", 3), 12182);
  cr_expect_eq(xf__cluster_keyslot("123456789", 9), 0x31C3 & 16383);
  cr_expect_eq(xf__cluster_keyslot("", 0), 0);
}

static int slot_of(const char *s) { return xf__cluster_keyslot(s, strlen(s)); }

Test(cluster, hash_tags_follow_the_spec) {
  int user = slot_of("user1000");
  cr_expect_eq(slot_of("{user1000}.following"), user);
  cr_expect_eq(slot_of("{user1000}.followers"), user);
  /* An empty tag: the whole key is hashed. */
  cr_expect_eq(slot_of("foo{}{bar}"), xf__crc16("foo{}{bar}", 10) & 16383);
  cr_expect_neq(slot_of("foo{}{bar}"), slot_of("bar"));
  /* The first '{' and the first '}' after it. */
  cr_expect_eq(slot_of("foo{{bar}}zap"), slot_of("{bar"));
  cr_expect_eq(slot_of("foo{bar}{zap}"), slot_of("bar"));
  cr_expect_eq(slot_of("a}b{c}"), slot_of("c"));
  /* No closing brace after the first '{': the whole key. */
  cr_expect_eq(slot_of("abc{def"), xf__crc16("abc{def", 7) & 16383);
  cr_expect_eq(slot_of("}{"), xf__crc16("}{", 2) & 16383);
  cr_expect_eq(slot_of("{"), xf__crc16("{", 1) & 16383);
  cr_expect_eq(slot_of("{}"), xf__crc16("{}", 2) & 16383);
  /* Binary-safe, inside and outside the tag; the length is respected. */
  cr_expect_eq(xf__cluster_keyslot("x{a\0b}y", 7), xf__cluster_keyslot("a\0b", 3));
  cr_expect_eq(xf__cluster_keyslot("{tag}", 3), xf__crc16("{ta", 3) & 16383);
}

/* --- Redirections ------------------------------------------------------------------- */

static xf__cluster_redirect redirect(const char *msg, int want_rc) {
  xf__cluster_redirect d;
  memset(&d, 0x5a, sizeof d);
  cr_expect_eq(xf__cluster_redirect_parse(msg, msg ? strlen(msg) : 0, &d), want_rc, "'%s'",
               msg);
  return d;
}

static void expect_target(const char *msg, xf__cluster_kind kind, int slot,
                          const char *host, int port) {
  xf__cluster_redirect d = redirect(msg, XF_OK);
  cr_expect_eq(d.kind, kind, "'%s'", msg);
  cr_expect_eq(d.slot, slot, "'%s'", msg);
  cr_expect_str_eq(d.host, host, "'%s'", msg);
  cr_expect_eq(d.port, port, "'%s'", msg);
}

Test(cluster, moved_and_ask_name_slot_and_node) {
  expect_target("MOVED 3999 127.0.0.1:6381", XF_CLUSTER_MOVED, 3999, "127.0.0.1", 6381);
  expect_target("ASK 3999 127.0.0.1:6381", XF_CLUSTER_ASK, 3999, "127.0.0.1", 6381);
  expect_target("MOVED 0 redis-3.example.com:1", XF_CLUSTER_MOVED, 0, "redis-3.example.com",
                1);
  expect_target("ASK 16383 10.1.2.3:65535", XF_CLUSTER_ASK, 16383, "10.1.2.3", 65535);
  /* Redis 7 with an unknown endpoint: the host of the node that replied. */
  expect_target("MOVED 12 :6380", XF_CLUSTER_MOVED, 12, "", 6380);
  /* IPv6 comes without brackets: the port follows the last ':'. */
  expect_target("MOVED 7 ::1:7000", XF_CLUSTER_MOVED, 7, "::1", 7000);
  expect_target("ASK 7 fe80::1:2:7000", XF_CLUSTER_ASK, 7, "fe80::1:2", 7000);
}

Test(cluster, retry_and_down_and_other_errors) {
  xf__cluster_redirect d =
      redirect("TRYAGAIN Multiple keys request during rehashing of slot", XF_OK);
  cr_expect_eq(d.kind, XF_CLUSTER_TRYAGAIN);
  cr_expect_eq(d.slot, -1);
  cr_expect_eq(redirect("TRYAGAIN", XF_OK).kind, XF_CLUSTER_TRYAGAIN);
  cr_expect_eq(redirect("CLUSTERDOWN The cluster is down", XF_OK).kind, XF_CLUSTER_DOWN);
  cr_expect_eq(redirect("CLUSTERDOWN Hash slot not served", XF_OK).kind, XF_CLUSTER_DOWN);
  const char *others[] = {
      "ERR unknown command 'FOO'",
      "NOSCRIPT No matching script. Please use EVAL.",
      "WRONGTYPE Operation against a key holding the wrong kind of value",
      "MOVEDX 1 a:1",
      "ASKING",
      "moved 1 a:1",
      " MOVED 1 a:1",
      "TRYAGAINX",
      "CLUSTERDOWNX",
      "LOADING Redis is loading the dataset in memory",
      "",
      NULL};
  for (int i = 0; i < (int)(sizeof others / sizeof *others); i++) {
    d = redirect(others[i], XF_OK);
    cr_expect_eq(d.kind, XF_CLUSTER_REPLY, "'%s'", others[i]);
    cr_expect_eq(d.slot, -1, "'%s'", others[i]);
  }
}

Test(cluster, garbled_moved_and_ask_are_protocol_errors) {
  const char *bad[] = {"MOVED",           "MOVED ",       "ASK ",
                       "MOVED 3999",      "MOVED 3999 ",  "MOVED 3999 h",
                       "MOVED 16384 h:1", "MOVED -1 h:1", "MOVED 12a h:1",
                       "MOVED  1 h:1",    "MOVED 1  h:1", "MOVED 1 h:0",
                       "MOVED 1 h:65536", "MOVED 1 h:",   "MOVED 1 h:12x",
                       "MOVED 1 h:1 x",   "MOVED 1 h:-1", "MOVED 99999999999 h:1",
                       "ASK x h:1",       "ASK 1 h:+1",   "MOVED 1 h:99999999999"};
  for (int i = 0; i < (int)(sizeof bad / sizeof *bad); i++) {
    xf__cluster_redirect d = redirect(bad[i], XF_EPROTO);
    cr_expect_eq(d.kind, XF_CLUSTER_REPLY, "'%s'", bad[i]);
    cr_expect_eq(d.slot, -1, "'%s'", bad[i]);
  }
  char longhost[400] = "MOVED 1 ";
  memset(longhost + 8, 'h', 300);
  strcpy(longhost + 308, ":1");
  redirect(longhost, XF_EPROTO);
  static const char nul[] = "MOVED 1 a\0b:1";
  xf__cluster_redirect d;
  cr_expect_eq(xf__cluster_redirect_parse(nul, sizeof nul - 1, &d), XF_EPROTO);
  /* The length bounds the text: no terminator needed, none read past. */
  cr_expect_eq(xf__cluster_redirect_parse("MOVED 1 h:1234", 12, &d), XF_OK);
  cr_expect_eq(d.port, 12);
}

Test(cluster, random_bytes_never_crash_the_parser) {
  uint32_t x = 12345;
  char buf[40];
  const char *heads[] = {"MOVED ", "ASK ", "TRYAGAIN", ""};
  for (int i = 0; i < 20000; i++) {
    size_t h = strlen(heads[i % 4]), n = h;
    memcpy(buf, heads[i % 4], h);
    size_t extra = (x = x * 1664525u + 1013904223u) >> 27; /* 0..31 bytes */
    for (size_t k = 0; k < extra; k++) {
      x = x * 1664525u + 1013904223u;
      buf[n++] = "0123456789: .h\0"[(x >> 24) % 15];
    }
    xf__cluster_redirect d;
    int rc = xf__cluster_redirect_parse(buf, n, &d);
    cr_assert(rc == XF_OK || rc == XF_EPROTO);
    if (d.kind == XF_CLUSTER_MOVED || d.kind == XF_CLUSTER_ASK) {
      cr_assert(d.slot >= 0 && d.slot < 16384 && d.port > 0 && d.port < 65536);
      cr_assert_lt(strlen(d.host), sizeof d.host);
    }
  }
}

Test(cluster, retry_delays_are_bounded) {
  for (int a = 1; a <= XF_CLUSTER_MAX_REDIRECTS; a++) {
    cr_expect_eq(xf__cluster_retry_delay_ms(XF_CLUSTER_MOVED, a), 0);
    cr_expect_eq(xf__cluster_retry_delay_ms(XF_CLUSTER_ASK, a), 0);
  }
  cr_expect_eq(XF_CLUSTER_MAX_REDIRECTS, 5);
  cr_expect_eq(xf__cluster_retry_delay_ms(XF_CLUSTER_TRYAGAIN, 1), 10);
  cr_expect_eq(xf__cluster_retry_delay_ms(XF_CLUSTER_TRYAGAIN, 5), 160);
  cr_expect_eq(xf__cluster_retry_delay_ms(XF_CLUSTER_DOWN, 3), 40);
  xf__cluster_kind all[] = {XF_CLUSTER_REPLY, XF_CLUSTER_MOVED, XF_CLUSTER_ASK,
                            XF_CLUSTER_TRYAGAIN, XF_CLUSTER_DOWN};
  for (int k = 0; k < 5; k++) {
    cr_expect_eq(xf__cluster_retry_delay_ms(all[k], 0), -1);
    cr_expect_eq(xf__cluster_retry_delay_ms(all[k], XF_CLUSTER_MAX_REDIRECTS + 1), -1);
  }
  cr_expect_eq(xf__cluster_retry_delay_ms(XF_CLUSTER_REPLY, 1), -1);
}

/* --- Detection ----------------------------------------------------------------------- */

static int enabled(const char *info) {
  return xf__cluster_info_enabled(info, info ? strlen(info) : 0);
}

Test(cluster, info_cluster_enabled) {
  cr_expect_eq(enabled("# Cluster\r\ncluster_enabled:1\r\n"), 1);
  cr_expect_eq(enabled("# Cluster\r\ncluster_enabled:0\r\n"), 0);
  cr_expect_eq(enabled("cluster_enabled:1"), 1);
  cr_expect_eq(enabled("# Server\nredis_version:7.0.15\n\n# Cluster\ncluster_enabled:1\n"),
               1);
  cr_expect_eq(enabled("# Server\r\nredis_version:7.0.15\r\n"), XF_EPROTO);
  cr_expect_eq(enabled("cluster_enabled:10\r\n"), XF_EPROTO);
  cr_expect_eq(enabled("cluster_enabled:\r\n"), XF_EPROTO);
  cr_expect_eq(enabled("cluster_enabled:x\r\n"), XF_EPROTO);
  cr_expect_eq(enabled("xcluster_enabled:1\r\n"), XF_EPROTO);
  cr_expect_eq(enabled("# cluster_enabled:1\r\n"), XF_EPROTO);
  cr_expect_eq(enabled(""), XF_EPROTO);
  cr_expect_eq(enabled(NULL), XF_EPROTO);
  cr_expect_eq(xf__cluster_info_enabled("cluster_enabled:1", 16), XF_EPROTO,
               "length bound");
}
