/* The flow's one-script kinds (get, set, delete) without Redis: scripted
 * replies in, steps out. NOSCRIPT, superseded writes, Redis' errors (no
 * fail-open: no loader) and the share's drops are the machine's, so every
 * driver (blocking, pool, xf_call_*) gets them from here; so is the fence
 * after a tag's raise. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "client.h"
#include "cluster.h"
#include "flow.h"
#include "flow_replies.h"
#include "script.h"
#include "share.h"

static xf_client *c;
static xf_share *share;

static void setup(void) {
  cr_assert_eq(xf_share_open(&share, NULL), XF_OK);
  xf_options o = XF_OPTIONS_INIT;
  o.lazy_connect = 1; /* the machine never connects: nothing is sent */
  o.seed = 1;
  o.port = 1;
  o.share = share;
  cr_assert_eq(xf_client_open(&c, &o), XF_OK);
  /* No transport here to keep a clock estimate (and swap a plain read for
   * the read script where it is not fresh: xf__entry_read_as): every read
   * is the script, as for the sans-I/O call. */
  c->plain_hits = 0;
}

static void teardown(void) {
  xf_client_close(c);
  xf_share_close(share);
}

TestSuite(flow_kinds, .init = setup, .fini = teardown);

#define HIT "*8\r\n$3\r\nold\r\n:1000\r\n:50000\r\n:0\r\n:0\r\n:1060000\r\n:0\r\n$0\r\n\r\n"
#define MISS "*8\r\n$-1\r\n:0\r\n:0\r\n:0\r\n:0\r\n:1010000\r\n:0\r\n$0\r\n\r\n"
#define STALE "*8\r\n$3\r\nold\r\n:1000\r\n:-5\r\n:0\r\n:0\r\n:1060000\r\n:0\r\n$0\r\n\r\n"
#define NEGATIVE                                                                           \
  "*8\r\n$0\r\n\r\n:1000\r\n:50000\r\n:0\r\n:1\r\n:1060000\r\n:0\r\n$0\r\n\r\n"

enum { GET, SET, DELETE };
static const int script_of_kind[] = {XF_SCRIPT_READ, XF_SCRIPT_WRITE, XF_SCRIPT_DELETE};

static xf__step start(xf__flow *f, int kind, const char *key, xf_value *v) {
  static xf_policy p = XF_POLICY_INIT;
  size_t len = strlen(key);
  if (kind == GET)
    return xf__flow_start_get(f, c, key, len, v, 0);
  if (kind == SET)
    return xf__flow_start_set(f, c, key, len, "new", 3, &p, 0);
  return xf__flow_start_delete(f, c, key, len, 0);
}

Test(flow_kinds, a_set_is_one_write_and_a_refused_one_is_superseded) {
  xf__flow f;
  cr_assert_eq(start(&f, SET, "k", NULL), XF_STEP_SEND);
  expect_arg(&f, 1, xf__scripts[XF_SCRIPT_WRITE].sha);
  expect_arg(&f, 3, "k");
  expect_arg(&f, 4, ""); /* no lease token */
  expect_arg(&f, 5, "new");
  cr_assert_eq(xf__flow_reply(&f, XF_OK, reply(":1\r\n"), 0), XF_STEP_DONE);
  cr_expect_eq(f.rc, XF_OK);
  cr_expect_eq(c->stats.superseded, 0);
  start(&f, SET, "k", NULL);
  cr_assert_eq(xf__flow_reply(&f, XF_OK, reply(":0\r\n"), 0), XF_STEP_DONE);
  cr_expect_eq(f.rc, XF_ESUPERSEDED);
  cr_expect_eq(c->stats.superseded, 1);
  cr_expect(strstr(xf_errmsg(c), "newer value"), "%s", xf_errmsg(c));
}

Test(flow_kinds, noscript_is_recovered_once_for_every_kind) {
  const char *answer[] = {HIT, ":1\r\n", ":1\r\n"};
  for (int kind = GET; kind <= DELETE; kind++) {
    xf__flow f;
    xf_value v;
    int script = script_of_kind[kind];
    start(&f, kind, "k", &v);
    cr_assert_eq(xf__flow_reply(&f, XF_OK, reply("-NOSCRIPT No matching script.\r\n"), 0),
                 XF_STEP_SEND, "kind %d", kind);
    expect_arg(&f, 0, "SCRIPT");
    expect_arg(&f, 2, xf__scripts[script].src);
    char sha[64];
    snprintf(sha, sizeof sha, "$40\r\n%s\r\n", xf__scripts[script].sha);
    cr_assert_eq(xf__flow_reply(&f, XF_OK, reply(sha), 0), XF_STEP_SEND);
    expect_arg(&f, 1, xf__scripts[script].sha);
    cr_assert_eq(xf__flow_reply(&f, XF_OK, reply(answer[kind]), 0), XF_STEP_DONE);
    cr_expect_eq(f.rc, XF_OK, "kind %d: %s", kind, xf_errname(f.rc));
    if (kind == GET)
      cr_expect_str_eq(v.data, "old");
    if (kind == GET)
      xf_value_free(&v);
    /* A second NOSCRIPT for the same command is an error, not a loop. */
    start(&f, kind, "k", &v);
    xf__flow_reply(&f, XF_OK, reply("-NOSCRIPT\r\n"), 0);
    xf__flow_reply(&f, XF_OK, reply(sha), 0);
    cr_assert_eq(xf__flow_reply(&f, XF_OK, reply("-NOSCRIPT again\r\n"), 0), XF_STEP_DONE);
    cr_expect_eq(f.rc, XF_EREDIS, "kind %d", kind);
  }
}

/* No loader to fail open to: an unavailable server, a failed connection or
 * a refused SCRIPT LOAD end the call with their code, never a LOAD. */
Test(flow_kinds, errors_are_returned_never_failed_open) {
  for (int kind = GET; kind <= DELETE; kind++) {
    xf__flow f;
    xf_value v;
    start(&f, kind, "k", &v);
    cr_assert_eq(xf__flow_reply(&f, XF_OK, reply("-BUSY Redis is busy\r\n"), 0),
                 XF_STEP_DONE);
    cr_expect_eq(f.rc, XF_EUNAVAILABLE, "kind %d: %s", kind, xf_errname(f.rc));
    start(&f, kind, "k", &v);
    cr_assert_eq(xf__flow_reply(&f, XF_EIO, NULL, 0), XF_STEP_DONE);
    cr_expect_eq(f.rc, XF_EIO, "kind %d", kind);
    start(&f, kind, "k", &v);
    xf__flow_reply(&f, XF_OK, reply("-NOSCRIPT\r\n"), 0);
    cr_assert_eq(xf__flow_reply(&f, XF_OK, reply("-LOADING loading\r\n"), 0), XF_STEP_DONE);
    cr_expect_eq(f.rc, XF_EUNAVAILABLE, "kind %d: the SCRIPT LOAD's answer", kind);
    start(&f, kind, "k", &v);
    cr_assert_eq(xf__flow_reply(&f, XF_OK, reply("-WRONGTYPE x\r\n"), 0), XF_STEP_DONE);
    cr_expect_eq(f.rc, XF_EWRONGTYPE, "kind %d", kind);
  }
}

Test(flow_kinds, a_get_serves_only_a_value_within_its_ttl) {
  const char *notfound[] = {MISS, STALE, NEGATIVE};
  xf__flow f;
  xf_value v;
  cr_assert_eq(start(&f, GET, "k", &v), XF_STEP_SEND);
  expect_arg(&f, 0, "EVALSHA_RO");
  cr_assert_eq(xf__flow_reply(&f, XF_OK, reply(HIT), 0), XF_STEP_DONE);
  cr_expect_eq(f.rc, XF_OK);
  cr_expect_str_eq(v.data, "old");
  cr_expect_eq(v.source, XF_SOURCE_CACHE);
  xf_value_free(&v);
  for (size_t i = 0; i < 3; i++) {
    start(&f, GET, "k", &v);
    cr_assert_eq(xf__flow_reply(&f, XF_OK, reply(notfound[i]), 0), XF_STEP_DONE);
    cr_expect_eq(f.rc, XF_ENOTFOUND, "reply %zu", i);
    cr_expect_null(v.data);
  }
  cr_expect_eq(c->stats.hits, 1);
  cr_expect_eq(c->stats.misses, 3);
}

Test(flow_kinds, bad_arguments_end_the_call_at_its_start) {
  xf__flow f;
  xf_value v;
  xf_policy p = XF_POLICY_INIT;
  cr_expect_eq(xf__flow_start_set(&f, c, "k", 1, NULL, 3, &p, 0), XF_STEP_DONE);
  cr_expect_eq(f.rc, XF_EINVAL);
  cr_expect_eq(xf__flow_start_set(&f, c, "k", 1, "v", 1, NULL, 0), XF_STEP_DONE);
  cr_expect_eq(f.rc, XF_EINVAL);
  cr_expect_eq(xf__flow_start_set(&f, c, "k", 1, "v", c->max_value_len + 1, &p, 0),
               XF_STEP_DONE);
  cr_expect_eq(f.rc, XF_EINVAL);
  cr_expect_eq(xf__flow_start_delete(&f, c, "", 0, 0), XF_STEP_DONE);
  cr_expect_eq(f.rc, XF_EINVAL);
  cr_expect_eq(xf__flow_start_get(&f, c, NULL, 1, &v, 0), XF_STEP_DONE);
  cr_expect_eq(f.rc, XF_EINVAL);
}

/* Puts a fallback value for key in the share, as a fail-open load does. */
static void share_keep(const char *key) {
  char *data = NULL;
  size_t len = 0;
  int rc = XF_OK;
  cr_assert_eq(xf__share_begin(c, key, strlen(key), 0, 0, &data, &len, &rc), XF_SHARE_LEAD);
  xf__share_end(c, key, strlen(key), XF_OK, "fallback", 8, INT64_MAX / 2);
}

static int share_has(const char *key) {
  char *data = NULL;
  size_t len = 0;
  int rc = XF_OK;
  xf__share_role role = xf__share_begin(c, key, strlen(key), 0, 0, &data, &len, &rc);
  free(data);
  if (role == XF_SHARE_LEAD)
    xf__share_end(c, key, strlen(key), XF_ELOADER, NULL, 0, 0); /* keeps nothing */
  return role == XF_SHARE_SERVED;
}

/* A set or delete drops the share's copy whatever came of it: written,
 * refused, or not known (the connection failed after the command went). */
Test(flow_kinds, a_set_or_delete_drops_the_share_s_copy_acknowledged_or_not) {
  struct {
    int kind, rc;
    const char *answer;
  } cases[] = {{SET, XF_OK, ":1\r\n"},
               {SET, XF_OK, ":0\r\n"},
               {SET, XF_EIO, NULL},
               {DELETE, XF_OK, ":1\r\n"},
               {DELETE, XF_EIO, NULL}};
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    share_keep("k");
    cr_assert(share_has("k"));
    xf__flow f;
    start(&f, cases[i].kind, "k", NULL);
    xf__flow_reply(&f, cases[i].rc, cases[i].answer ? reply(cases[i].answer) : NULL, 0);
    cr_expect_not(share_has("k"), "case %zu", i);
  }
  share_keep("k"); /* a get reads: it leaves the copy */
  xf__flow f;
  xf_value v;
  start(&f, GET, "k", &v);
  xf__flow_reply(&f, XF_OK, reply(MISS), 0);
  cr_expect(share_has("k"));
}

/* The client's slot map: one master serving every slot, with one replica
 * or none (a CLUSTER SLOTS reply). */
static void map_with_replicas(int replicas) {
  xf__reply *r = reply(replicas ? "*1\r\n*4\r\n:0\r\n:16383\r\n"
                                  "*3\r\n$9\r\n127.0.0.1\r\n:7000\r\n$2\r\nm1\r\n"
                                  "*3\r\n$9\r\n127.0.0.1\r\n:7001\r\n$2\r\nr1\r\n"
                                : "*1\r\n*3\r\n:0\r\n:16383\r\n"
                                  "*3\r\n$9\r\n127.0.0.1\r\n:7000\r\n$2\r\nm1\r\n");
  char err[128];
  cr_assert_eq(xf__cluster_map_parse(&c->routes.map, r, "127.0.0.1", err, sizeof err),
               XF_OK, "%s", err);
  xf__reply_free(r);
}

#define RAISED "$16\r\n1700000000000000\r\n"

/* Starts the invalidation of tag "t"; the raise goes on stream `on`. */
static void raise_on(xf__flow *f, uint64_t on) {
  static const char *tags[] = {"t"};
  cr_assert_eq(xf__flow_start_invalidate(f, c, tags, 1, 0, 0), XF_STEP_SEND);
  expect_arg(f, 1, xf__scripts[XF_SCRIPT_TAG_BUMP].sha);
  cr_assert_not_null(f->cmd.stream_out, "the raise asks which stream it goes on");
  *f->cmd.stream_out = on;
}

/* The raise answered; the fence (on the tag's key: the raise's node) goes
 * on stream `on`. */
static void fence_on(xf__flow *f, const char *want, uint64_t on) {
  cr_assert_eq(xf__flow_reply(f, XF_OK, reply(RAISED), 0), XF_STEP_SEND);
  expect_arg(f, 0, want);
  cr_expect_eq(f->cmd.keylen, strlen("xf-tag:{t}"));
  cr_expect_eq(memcmp(f->cmd.key, "xf-tag:{t}", f->cmd.keylen), 0);
  cr_assert_not_null(f->cmd.stream_out, "the fence asks which stream it goes on");
  *f->cmd.stream_out = on;
}

/* Where the map gives the tag's master a replica, the raise is fenced by
 * WAIT 1 (half the command timeout): XF_OK once a replica has it,
 * XF_ENOTREPLICATED when none acknowledged it, Redis' errors returned. */
Test(flow_kinds, a_raise_is_fenced_by_wait_where_the_tag_s_master_has_a_replica) {
  map_with_replicas(1);
  xf__flow f;
  raise_on(&f, 7);
  fence_on(&f, "WAIT", 7);
  cr_assert_eq(f.cmd.argc, 3);
  expect_arg(&f, 1, "1");
  expect_arg(&f, 2, "500"); /* the default command timeout: 1000 ms */
  cr_assert_eq(xf__flow_reply(&f, XF_OK, reply(":1\r\n"), 0), XF_STEP_DONE);
  cr_expect_eq(f.rc, XF_OK);
  raise_on(&f, 7);
  fence_on(&f, "WAIT", 7);
  cr_assert_eq(xf__flow_reply(&f, XF_OK, reply(":0\r\n"), 0), XF_STEP_DONE);
  cr_expect_eq(f.rc, XF_ENOTREPLICATED);
  cr_expect(strstr(xf_errmsg(c), "no replica acknowledged it within 500 ms"), "%s",
            xf_errmsg(c));
  raise_on(&f, 7);
  fence_on(&f, "WAIT", 7);
  cr_assert_eq(xf__flow_reply(&f, XF_EIO, NULL, 0), XF_STEP_DONE);
  cr_expect_eq(f.rc, XF_EIO, "a WAIT unanswered is returned: the raise may be lost");
  raise_on(&f, 7);
  fence_on(&f, "WAIT", 7);
  cr_assert_eq(xf__flow_reply(&f, XF_OK, reply("-ERR nope\r\n"), 0), XF_STEP_DONE);
  cr_expect_eq(f.rc, XF_EREDIS);
  cr_expect_eq(c->stats.fence_failed, 0);
}

/* WAIT counts its own connection's writes: one on another stream than the
 * raise's (a reconnect in between) says nothing of it. The tag is raised
 * once more, then the call fails. */
Test(flow_kinds, a_wait_on_another_stream_than_its_raise_s_raises_again) {
  map_with_replicas(1);
  xf__flow f;
  raise_on(&f, 7);
  fence_on(&f, "WAIT", 8);
  cr_assert_eq(xf__flow_reply(&f, XF_OK, reply(":1\r\n"), 0), XF_STEP_SEND);
  expect_arg(&f, 1, xf__scripts[XF_SCRIPT_TAG_BUMP].sha);
  *f.cmd.stream_out = 8;
  fence_on(&f, "WAIT", 8);
  cr_assert_eq(xf__flow_reply(&f, XF_OK, reply(":1\r\n"), 0), XF_STEP_DONE);
  cr_expect_eq(f.rc, XF_OK);
  raise_on(&f, 7);
  fence_on(&f, "WAIT", 8);
  cr_assert_eq(xf__flow_reply(&f, XF_OK, reply(":1\r\n"), 0), XF_STEP_SEND);
  *f.cmd.stream_out = 9;
  fence_on(&f, "WAIT", 10);
  cr_assert_eq(xf__flow_reply(&f, XF_OK, reply(":1\r\n"), 0), XF_STEP_DONE);
  cr_expect_eq(f.rc, XF_EIO);
}

/* No replica known (a master alone in the map; standalone: no map): the
 * PING, whose failure is counted, not returned. */
Test(flow_kinds, a_raise_without_a_replica_known_is_fenced_by_a_ping) {
  map_with_replicas(0);
  xf__flow f;
  raise_on(&f, 7);
  fence_on(&f, "PING", 7);
  cr_assert_eq(f.cmd.argc, 1);
  cr_assert_eq(xf__flow_reply(&f, XF_OK, reply("+PONG\r\n"), 0), XF_STEP_DONE);
  cr_expect_eq(f.rc, XF_OK);
  raise_on(&f, 7);
  fence_on(&f, "PING", 7);
  cr_assert_eq(xf__flow_reply(&f, XF_EIO, NULL, 0), XF_STEP_DONE);
  cr_expect_eq(f.rc, XF_OK);
  cr_expect_eq(c->stats.fence_failed, 1);
}
