/* The cluster router's slot map, parsed from CLUSTER SLOTS replies built
 * with hiredis' own reader. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster.h"
#include "reply.h"
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

/* RESP parsed by the library's reader (NUL bytes included). */
static xf__reply *raw_reply(const char *resp, size_t len) {
  xf_reader *rd;
  cr_assert_eq(xf_reader_open(&rd), XF_OK);
  cr_assert_eq(xf_reader_feed(rd, resp, len), XF_OK, "bad RESP");
  xf_reply *r = NULL;
  cr_assert_eq(xf_reader_next(rd, &r), XF_OK, "bad RESP");
  cr_assert_not_null(r, "incomplete RESP");
  xf_reader_close(rd);
  return r;
}

static xf__reply *reply(const char *notation) {
  text t = {0};
  const char *p = notation;
  cr_assert(emit(&p, &t), "empty notation");
  xf__reply *r = raw_reply(t.data, t.len);
  free(t.data);
  return r;
}

/* Parses notation into m (seed host "10.0.0.9"); returns the code. */
static int parse(xf__cluster_map *m, const char *notation, char *err, size_t errlen) {
  xf__reply *r = reply(notation);
  int rc = xf__cluster_map_parse(m, r, "10.0.0.9", err, errlen);
  xf__reply_free(r);
  return rc;
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
  xf__reply *r = reply("[[0 9 ['' 7000]]]");
  cr_expect_eq(xf__cluster_map_parse(&m, r, NULL, err, sizeof err), XF_EPROTO);
  xf__reply_free(r);
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
  xf__reply *r = raw_reply(nul, sizeof nul - 1);
  cr_expect_eq(xf__cluster_map_parse(&m, r, NULL, err, sizeof err), XF_EPROTO);
  xf__reply_free(r);
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
