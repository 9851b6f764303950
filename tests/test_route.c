/* The Cluster router without Redis (src/core/route.c): hand-built replies
 * in, decisions out. A map of one master (10.0.0.1:7000, every slot) with one
 * replica (10.0.0.1:7100). */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client.h"
#include "entry.h"
#include "flow_replies.h"
#include "reply.h"
#include "route.h"

#define SLOTS_RESP                                                                         \
  "*1\r\n*4\r\n:0\r\n:16383\r\n*2\r\n$8\r\n10.0.0.1\r\n:7000\r\n"                          \
  "*2\r\n$8\r\n10.0.0.1\r\n:7100\r\n"

static xf_client *c;
static xf__routes r;
static xf__cmd cmd;
static xf__hop h;

/* An error reply built by hand, as the reader would give it. */
static xf__reply *error(const char *msg) {
  xf__reply *e = calloc(1, sizeof *e);
  cr_assert_not_null(e);
  e->type = XF_REPLY_ERROR;
  e->str = strdup(msg);
  e->len = strlen(msg);
  return e;
}

static void open_router(int read_from_replicas) {
  xf_options o = XF_OPTIONS_INIT;
  o.lazy_connect = 1; /* nothing is ever sent */
  o.cluster = XF_CLUSTER_ON;
  o.read_from_replicas = read_from_replicas;
  o.port = 7000;
  cr_assert_eq(xf_client_open(&c, &o), XF_OK);
  xf__route_init(&r, c);
  xf__reply *slots = reply(SLOTS_RESP);
  cr_assert_eq(xf__route_take_map(&r, slots, "10.0.0.1", 1000), XF_OK, "%s", xf_errmsg(c));
  xf__reply_free(slots);
  xf__entry_read_cmd(&cmd, "k", 1);
}

static void teardown(void) {
  xf__route_free(&r);
  xf_client_close(c);
}

static int port_of(int node) { return r.nodes[node].port; }

/* The reply hop.node gave to the read: the router's decision. */
static xf__route_act answer(xf__reply *reply, int64_t now_ms, int *arg) {
  xf__route_act act = xf__route_reply(&r, &cmd, &h, reply, now_ms, arg);
  xf__reply_free(reply);
  return act;
}

static void start_on(int port, int64_t now_ms) {
  int arg = -1;
  cr_assert_eq(xf__route_start(&r, &cmd, &h, now_ms, &arg), XF_ROUTE_SEND);
  cr_assert_eq(port_of(h.node), port);
}

TestSuite(route, .fini = teardown);

Test(route, a_value_is_the_flows) {
  open_router(0);
  start_on(7000, 1001);
  int arg = -1;
  cr_expect_eq(answer(reply("$1\r\nv\r\n"), 1001, &arg), XF_ROUTE_DONE);
  cr_expect_eq(c->stats.redirects, 0);
}

Test(route, moved_updates_the_slot_and_sends_there) {
  open_router(0);
  start_on(7000, 1001);
  int slot = xf__cluster_keyslot("k", 1), arg = -1;
  char msg[64];
  snprintf(msg, sizeof msg, "MOVED %d 10.0.0.1:7001", slot);
  /* Within XF_ROUTE_REFRESH_MS of the last map load: no reload, the slot
   * alone moves. */
  cr_assert_eq(answer(error(msg), 1001, &arg), XF_ROUTE_SEND);
  cr_expect_eq(port_of(h.node), 7001);
  cr_expect_eq(h.asking, 0);
  cr_expect_eq(h.attempt, 1);
  cr_expect_eq(c->stats.redirects, 1);
  cr_expect_eq(r.map.nodes[xf__cluster_map_master(&r.map, slot)].port, 7001);
  /* The next command of that slot goes there first. */
  start_on(7001, 1002);
}

Test(route, moved_after_the_refresh_period_reloads_the_map) {
  open_router(0);
  start_on(7000, 1001);
  int arg = -1;
  char msg[64];
  snprintf(msg, sizeof msg, "MOVED %d 10.0.0.1:7001", xf__cluster_keyslot("k", 1));
  cr_expect_eq(answer(error(msg), 1000 + XF_ROUTE_REFRESH_MS, &arg), XF_ROUTE_REFRESH);
}

Test(route, ask_sends_asking_there_and_keeps_the_map) {
  open_router(0);
  start_on(7000, 1001);
  int slot = xf__cluster_keyslot("k", 1), arg = -1;
  char msg[64];
  snprintf(msg, sizeof msg, "ASK %d 10.0.0.1:7002", slot);
  cr_assert_eq(answer(error(msg), 1001, &arg), XF_ROUTE_SEND);
  cr_expect_eq(port_of(h.node), 7002);
  cr_expect_eq(h.asking, 1);
  cr_expect_eq(c->stats.redirects, 1);
  cr_expect_eq(r.map.nodes[xf__cluster_map_master(&r.map, slot)].port, 7000);
}

Test(route, tryagain_backs_off_longer_each_time_then_fails_open) {
  open_router(0);
  start_on(7000, 1001);
  int arg = -1;
  int attempt = 1;
  for (; attempt <= XF_CLUSTER_MAX_REDIRECTS; attempt++) {
    cr_assert_eq(answer(error("TRYAGAIN Multiple keys request during rehashing of slot"),
                        1001, &arg),
                 XF_ROUTE_BACKOFF, "attempt %d", attempt);
    cr_expect_eq(arg, 10 << (attempt - 1), "attempt %d", attempt);
    cr_expect_eq(h.reload, 0);
    cr_assert_eq(xf__route_next(&r, &cmd, &h, 1001, &arg), XF_ROUTE_SEND);
    cr_expect_eq(port_of(h.node), 7000);
  }
  /* Past the limit the reply is the flow's: it fails open. */
  cr_expect_eq(answer(error("TRYAGAIN again"), 1001, &arg), XF_ROUTE_DONE);
}

Test(route, clusterdown_backs_off_then_reloads_the_map) {
  open_router(0);
  start_on(7000, 1001);
  int arg = -1;
  cr_assert_eq(answer(error("CLUSTERDOWN The cluster is down"), 1001, &arg),
               XF_ROUTE_BACKOFF);
  cr_expect_eq(arg, 10);
  cr_expect_eq(h.reload, 1);
  cr_expect_eq(xf__route_next(&r, &cmd, &h, 1000 + XF_ROUTE_REFRESH_MS, &arg),
               XF_ROUTE_REFRESH);
}

Test(route, a_replicas_error_sends_the_read_to_its_master) {
  open_router(1);
  start_on(7100, 1001); /* a read may be served by the replica */
  cr_expect_eq(h.replica, 1);
  int arg = -1;
  cr_assert_eq(answer(error("LOADING Redis is loading the dataset in memory"), 1001, &arg),
               XF_ROUTE_SEND);
  cr_expect_eq(port_of(h.node), 7000);
  cr_expect_eq(h.replica, 0);
  cr_expect_eq(h.master_only, 1);
  /* The master's own error is the command's. */
  cr_expect_eq(answer(error("ERR something"), 1001, &arg), XF_ROUTE_DONE);
}

Test(route, a_replicas_ask_is_not_followed_but_its_master_asked) {
  open_router(1);
  start_on(7100, 1001);
  int arg = -1;
  char msg[64];
  snprintf(msg, sizeof msg, "ASK %d 10.0.0.1:7002", xf__cluster_keyslot("k", 1));
  cr_assert_eq(answer(error(msg), 1001, &arg), XF_ROUTE_SEND);
  cr_expect_eq(port_of(h.node), 7000);
  cr_expect_eq(h.asking, 0);
}

Test(route, a_node_that_does_not_answer_fails_once_nobody_else_serves) {
  open_router(0);
  start_on(7000, 1001);
  int arg = -1;
  /* Within the refresh period: no reload, and the slot's only master is the
   * node that failed: the command fails open with its code. */
  cr_expect_eq(xf__route_io_error(&r, &cmd, &h, XF_EIO, 1001, &arg), XF_ROUTE_FAIL);
  cr_expect_eq(arg, XF_EIO);
}
