/* The I/O-free cluster router: slots, the slot map, redirections, detection. */
#include <criterion/criterion.h>
#include <hiredis/hiredis.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster.h"
#include "xfetch.h"

/* --- Replies from a compact notation, through hiredis' own reader ------------
 * "[1 2 [a nil]]": '[' ... ']' an array, a number an integer, nil a nil bulk,
 * '' an empty bulk, +word a status, !word an error, #word the bulk "word",
 * anything else a bulk string. Tokens are separated by spaces. */

typedef struct text {
  char *data;
  size_t len, cap;
} text;

static void put(text *t, const char *s, size_t n) {
  if (t->len + n + 1 > t->cap) {
    t->cap = (t->len + n + 1) * 2;
    t->data = realloc(t->data, t->cap);
    cr_assert_not_null(t->data);
  }
  memcpy(t->data + t->len, s, n);
  t->len += n;
  t->data[t->len] = '\0';
}

static void put_bulk(text *t, const char *s) {
  char head[32];
  put(t, head, (size_t)snprintf(head, sizeof head, "$%zu\r\n", strlen(s)));
  put(t, s, strlen(s));
  put(t, "\r\n", 2);
}

/* Emits one value starting at *p into t; returns 1, or 0 at ']' / the end. */
static int emit(const char **p, text *t) {
  while (**p == ' ')
    (*p)++;
  if (!**p || **p == ']')
    return 0;
  if (**p == '[') {
    (*p)++;
    text inner = {0};
    size_t n = 0;
    while (emit(p, &inner))
      n++;
    cr_assert_eq(**p, ']', "unbalanced [");
    (*p)++;
    char head[32];
    put(t, head, (size_t)snprintf(head, sizeof head, "*%zu\r\n", n));
    if (inner.len)
      put(t, inner.data, inner.len);
    free(inner.data);
    return 1;
  }
  size_t n = strcspn(*p, " ]");
  char tok[512];
  cr_assert_lt(n, sizeof tok);
  memcpy(tok, *p, n);
  tok[n] = '\0';
  *p += n;
  char *end;
  long long v = strtoll(tok, &end, 10);
  if (*end == '\0' && n > 0 && tok[0] != '+') {
    char s[32];
    put(t, s, (size_t)snprintf(s, sizeof s, ":%lld\r\n", v));
  } else if (strcmp(tok, "nil") == 0) {
    put(t, "$-1\r\n", 5);
  } else if (strcmp(tok, "''") == 0) {
    put(t, "$0\r\n\r\n", 6);
  } else if (tok[0] == '+' || tok[0] == '!') {
    put(t, tok[0] == '+' ? "+" : "-", 1);
    put(t, tok + 1, n - 1);
    put(t, "\r\n", 2);
  } else {
    put_bulk(t, tok[0] == '#' ? tok + 1 : tok);
  }
  return 1;
}

static redisReply *raw_reply(const char *resp, size_t len) {
  redisReader *rd = redisReaderCreate();
  cr_assert_eq(redisReaderFeed(rd, resp, len), REDIS_OK);
  void *r = NULL;
  cr_assert_eq(redisReaderGetReply(rd, &r), REDIS_OK, "bad RESP");
  cr_assert_not_null(r, "incomplete RESP");
  redisReaderFree(rd);
  return r;
}

static redisReply *reply(const char *notation) {
  text t = {0};
  const char *p = notation;
  cr_assert(emit(&p, &t), "empty notation");
  redisReply *r = raw_reply(t.data, t.len);
  free(t.data);
  return r;
}

/* Parses notation into m (seed host "10.0.0.9"); returns the code. */
static int parse(xf__cluster_map *m, const char *notation, char *err, size_t errlen) {
  redisReply *r = reply(notation);
  int rc = xf__cluster_map_parse(m, r, "10.0.0.9", err, errlen);
  freeReplyObject(r);
  return rc;
}

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

/* --- The slot map ------------------------------------------------------------------ */

#define THREE                                                                              \
  "[[0 5460 [127.0.0.1 7000 id0 []] [127.0.0.1 7003 id3 []]]"                              \
  " [5461 10922 [127.0.0.1 7001 id1 [hostname h1]] [127.0.0.1 7004 id4 [hostname h4]]]"    \
  " [10923 16383 [127.0.0.1 7002 id2] [127.0.0.1 7005 id5]]]"

Test(cluster, parses_three_masters_with_replicas) {
  xf__cluster_map m;
  xf__cluster_map_init(&m);
  char err[128] = "";
  cr_assert_eq(parse(&m, THREE, err, sizeof err), XF_OK, "%s", err);
  cr_expect_eq(m.nnodes, 6);
  cr_expect_eq(xf__cluster_map_covered(&m), 16384);
  int at[] = {0, 5460, 5461, 10922, 10923, 16383};
  int port[] = {7000, 7000, 7001, 7001, 7002, 7002};
  for (int i = 0; i < 6; i++) {
    int n = xf__cluster_map_master(&m, at[i]);
    cr_assert_geq(n, 0);
    cr_expect_eq(m.nodes[n].port, port[i], "slot %d", at[i]);
    cr_expect_str_eq(m.nodes[n].host, "127.0.0.1");
    cr_expect_eq(m.nodes[n].master, -1);
    int rep[4];
    cr_assert_eq(xf__cluster_map_replicas(&m, n, rep, 4), 1);
    cr_expect_eq(m.nodes[rep[0]].port, port[i] + 3);
    cr_expect_eq(m.nodes[rep[0]].master, n);
  }
  int n = xf__cluster_map_find(&m, "127.0.0.1", 7004);
  cr_assert_geq(n, 0);
  cr_expect_str_eq(m.nodes[n].id, "id4");
  cr_expect_eq(xf__cluster_map_find(&m, "127.0.0.2", 7004), -1);
  cr_expect_eq(xf__cluster_map_master(&m, -1), -1);
  cr_expect_eq(xf__cluster_map_master(&m, 16384), -1);
  xf__cluster_map_free(&m);
  cr_expect_eq(m.nnodes, 0);
  cr_expect_null(m.nodes);
  xf__cluster_map_free(NULL);
}

Test(cluster, a_master_with_several_ranges_is_one_node) {
  xf__cluster_map m;
  xf__cluster_map_init(&m);
  cr_assert_eq(parse(&m,
                     "[[0 99 [a 1 x] [b 2 y]] [200 299 [a 1 x] [b 2 y]] [100 100 [c 3]]]",
                     NULL, 0),
               XF_OK);
  cr_expect_eq(m.nnodes, 3);
  cr_expect_eq(xf__cluster_map_covered(&m), 201);
  cr_expect_eq(xf__cluster_map_master(&m, 150), -1);
  cr_expect_eq(xf__cluster_map_master(&m, 0), xf__cluster_map_master(&m, 299));
  cr_expect_null(m.nodes[xf__cluster_map_master(&m, 100)].id);
  xf__cluster_map_free(&m);
}

Test(cluster, unknown_and_empty_endpoints) {
  xf__cluster_map m;
  xf__cluster_map_init(&m);
  char err[128] = "";
  /* nil and "" mean the node that answered (the seed host); "?" is not known
   * yet: its slots stay uncovered and a "?" replica is dropped. */
  cr_assert_eq(parse(&m,
                     "[[0 9 [nil 7000] [? 7003]] [10 19 ['' 7001]] [20 29 [? 7002] [b 1]]]",
                     err, sizeof err),
               XF_OK, "%s", err);
  cr_expect_eq(xf__cluster_map_covered(&m), 20);
  cr_expect_str_eq(m.nodes[xf__cluster_map_master(&m, 0)].host, "10.0.0.9");
  cr_expect_str_eq(m.nodes[xf__cluster_map_master(&m, 10)].host, "10.0.0.9");
  cr_expect_eq(xf__cluster_map_master(&m, 20), -1);
  cr_expect_eq(m.nnodes, 3);
  int b = xf__cluster_map_find(&m, "b", 1);
  cr_assert_geq(b, 0);
  cr_expect_eq(m.nodes[b].master, -1, "a replica of an unknown master is not attached");
  /* Without a seed host, an empty endpoint is unusable. */
  redisReply *r = reply("[[0 9 ['' 7000]]]");
  cr_expect_eq(xf__cluster_map_parse(&m, r, NULL, err, sizeof err), XF_EPROTO);
  freeReplyObject(r);
  xf__cluster_map_free(&m);
}

Test(cluster, empty_reply_is_an_empty_map) {
  xf__cluster_map m;
  xf__cluster_map_init(&m);
  cr_expect_eq(parse(&m, "[]", NULL, 0), XF_OK);
  cr_expect_eq(xf__cluster_map_covered(&m), 0);
  cr_expect_eq(m.nnodes, 0);
}

static void expect_malformed(const char *notation, const char *needle) {
  xf__cluster_map m;
  xf__cluster_map_init(&m);
  char err[160] = "";
  cr_assert_eq(parse(&m, THREE, err, sizeof err), XF_OK);
  cr_expect_eq(parse(&m, notation, err, sizeof err), XF_EPROTO, "%s", notation);
  cr_expect(strstr(err, needle) != NULL, "%s: message '%s' lacks '%s'", notation, err,
            needle);
  cr_expect_eq(m.nnodes, 0, "%s: the map is left empty", notation);
  cr_expect_eq(xf__cluster_map_covered(&m), 0);
  xf__cluster_map_free(&m);
}

Test(cluster, malformed_replies_are_protocol_errors) {
  expect_malformed("+OK", "not an array");
  expect_malformed("42", "not an array");
  expect_malformed("nil", "not an array");
  expect_malformed("!ERR_This_instance_has_cluster_support_disabled", "cluster_support");
  expect_malformed("[1]", "range 0 is not");
  expect_malformed("[[0 1]]", "range 0 is not");
  expect_malformed("[[#0 1 [a 1]]]", "range 0 is not");
  expect_malformed("[[0 #1 [a 1]]]", "range 0 is not");
  expect_malformed("[[0 1 [a 1]] [nil]]", "range 1 is not");
  expect_malformed("[[-1 1 [a 1]]]", "bad slots -1-1");
  expect_malformed("[[5 4 [a 1]]]", "bad slots 5-4");
  expect_malformed("[[0 16384 [a 1]]]", "bad slots 0-16384");
  expect_malformed("[[0 1 a]]", "not [host, port");
  expect_malformed("[[0 1 [a]]]", "not [host, port");
  expect_malformed("[[0 1 [a 1] [b]]]", "not [host, port");
  expect_malformed("[[0 1 [7 1]]]", "bad node");
  expect_malformed("[[0 1 [a #1]]]", "bad node");
  expect_malformed("[[0 1 [a 0]]]", "bad node");
  expect_malformed("[[0 1 [a 65536]]]", "bad node");
  expect_malformed("[[0 1 [a -5]]]", "bad node");
  expect_malformed("[[0 1 [a 1 7]]]", "bad node");
  expect_malformed("[[0 1 [a 1 [x]]]]", "bad node");
  expect_malformed("[[0 1 [a 1] [b 2 nil]]]", "bad node");
  expect_malformed("[[0 10 [a 1]] [10 20 [b 2]]]", "slot 10 is in two ranges");
  expect_malformed("[[0 10 [a 1]] [3 3 [a 1]]]", "slot 3 is in two ranges");
}

Test(cluster, odd_hosts_are_refused) {
  xf__cluster_map m;
  xf__cluster_map_init(&m);
  char err[128];
  static const char nul[] = "*1\r\n*3\r\n:0\r\n:1\r\n*2\r\n$3\r\na\0b\r\n:1\r\n";
  redisReply *r = raw_reply(nul, sizeof nul - 1);
  cr_expect_eq(xf__cluster_map_parse(&m, r, NULL, err, sizeof err), XF_EPROTO);
  freeReplyObject(r);
  char longhost[400] = "[[0 1 [";
  memset(longhost + 7, 'h', 300);
  strcpy(longhost + 307, " 1]]]");
  cr_expect_eq(parse(&m, longhost, err, sizeof err), XF_EPROTO);
  cr_expect(strstr(err, "too long") != NULL, "%s", err);
  cr_expect_eq(xf__cluster_map_parse(&m, NULL, NULL, err, sizeof err), XF_EPROTO);
  cr_expect_str_eq(err, "CLUSTER SLOTS: no reply");
}

Test(cluster, set_slot_follows_a_moved) {
  xf__cluster_map m;
  xf__cluster_map_init(&m);
  cr_assert_eq(parse(&m, THREE, NULL, 0), XF_OK);
  /* To a known master, to a promoted replica, to a new node. */
  cr_expect_eq(xf__cluster_map_set_slot(&m, 0, "127.0.0.1", 7001),
               xf__cluster_map_find(&m, "127.0.0.1", 7001));
  int rep = xf__cluster_map_set_slot(&m, 1, "127.0.0.1", 7003);
  cr_expect_eq(rep, xf__cluster_map_find(&m, "127.0.0.1", 7003));
  cr_expect_eq(m.nodes[rep].master, -1, "the promoted replica is a master");
  int fresh = xf__cluster_map_set_slot(&m, 2, "::1", 7100);
  cr_expect_eq(fresh, 6);
  cr_expect_eq(xf__cluster_map_master(&m, 2), 6);
  cr_expect_eq(xf__cluster_map_covered(&m), 16384);
  cr_expect_eq(xf__cluster_map_set_slot(&m, 16384, "a", 1), XF_EINVAL);
  cr_expect_eq(xf__cluster_map_set_slot(&m, -1, "a", 1), XF_EINVAL);
  cr_expect_eq(xf__cluster_map_set_slot(&m, 3, "", 1), XF_EINVAL);
  cr_expect_eq(xf__cluster_map_set_slot(&m, 3, NULL, 1), XF_EINVAL);
  cr_expect_eq(xf__cluster_map_set_slot(&m, 3, "a", 0), XF_EINVAL);
  cr_expect_eq(m.nnodes, 7);
  xf__cluster_map_free(&m);
  cr_expect_eq(xf__cluster_map_set_slot(&m, 5, "a", 1), 0, "on an empty map");
  cr_expect_eq(xf__cluster_map_covered(&m), 1);
  xf__cluster_map_free(&m);
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
