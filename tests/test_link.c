/* The connection engine (src/link/link.c) through scripted conversations, no
 * socket: the bytes it wants written (the setup first, tracking, ASKING,
 * the read script or the plain GET as its clock says) and the replies it
 * hands back in order for canned RESP bytes, a setup refusal, and what a
 * failed stream means (resent once, failed, breaker). */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "client.h"
#include "clock.h"
#include "entry.h"
#include "link.h"
#include "script.h"

static xf_client *client(const char *password, int db) {
  xf_options o = XF_OPTIONS_INIT;
  o.port = 1; /* never connected: lazy */
  o.password = password;
  o.db = db;
  o.lazy_connect = 1;
  o.cluster = XF_CLUSTER_OFF;
  xf_client *c;
  cr_assert_eq(xf_client_open(&c, &o), XF_OK);
  return c;
}

/* What the engine wants written, taken (and marked written). */
static char wrote[1 << 16];
static const char *take(xf__link *l) {
  const char *p;
  size_t n;
  xf__link_output(l, &p, &n);
  cr_assert_lt(n, sizeof wrote);
  memcpy(wrote, p, n);
  wrote[n] = '\0';
  xf__link_written(l, n);
  return wrote;
}

/* The RESP of one command, for comparing. */
static const char *resp(int argc, const char *const *argv) {
  static char buf[4096];
  size_t at = (size_t)snprintf(buf, sizeof buf, "*%d\r\n", argc);
  for (int i = 0; i < argc; i++)
    at += (size_t)snprintf(buf + at, sizeof buf - at, "$%zu\r\n%s\r\n", strlen(argv[i]),
                           argv[i]);
  return buf;
}

/* A completion's record. */
typedef struct done {
  int n;
  int rc[8];
  xf__reply *r[8];
  int order[8];
} done;
static int seq;

static void record(xf__link *l, void *ud, int rc, xf__reply **reply) {
  (void)l;
  done *d = ud;
  d->rc[d->n] = rc;
  d->r[d->n] = *reply; /* taken */
  *reply = NULL;
  d->order[d->n++] = seq++;
}

static void done_free(done *d) {
  for (int i = 0; i < d->n; i++)
    if (d->r[i])
      xf__reply_free(d->r[i]);
}

/* A client with neither password nor db: its setup is HELLO alone (the server
 * says whether it lets the client in), answered here. */
static void hello(xf__link *l) {
  cr_assert_str_eq(take(l), resp(1, (const char *[]){"HELLO"}));
  cr_assert_eq(xf__link_feed(l, "*0\r\n", 4, 100), XF_OK);
  cr_assert(l->ready);
}

static void plain(xf__cmd *cmd, const char *key) {
  xf__entry_get_cmd(cmd, key, strlen(key));
}

Test(link, the_setup_goes_first_and_replies_come_back_in_order) {
  xf_client *c = client("pw", 2);
  xf__link l;
  cr_assert_eq(xf__link_init(&l, c, "h", 6379, NULL, 0), XF_OK);
  cr_assert_eq(xf__link_start(&l, 100), XF_OK);
  xf__link_connected(&l, -1, 100);
  xf__cmd a, b;
  xf__cmd_begin(&a, "k1", 2);
  a.argc = 2, a.argv[0] = "GET", a.lens[0] = 3, a.argv[1] = "k1", a.lens[1] = 2;
  xf__cmd_begin(&b, "k2", 2);
  b.argc = 2, b.argv[0] = "GET", b.lens[0] = 3, b.argv[1] = "k2", b.lens[1] = 2;
  done d = {0};
  cr_assert_eq(xf__link_submit(&l, &a, 0, 100, record, &d), XF_OK);
  cr_assert_eq(xf__link_submit(&l, &b, 0, 100, record, &d), XF_OK);
  char want[8192] = "";
  const char *auth[] = {"AUTH", "default", "pw"}, *sel[] = {"SELECT", "2"},
             *g1[] = {"GET", "k1"}, *g2[] = {"GET", "k2"};
  strcat(want, resp(3, auth));
  strcat(want, resp(2, sel));
  strcat(want, resp(2, g1));
  strcat(want, resp(2, g2));
  cr_expect_str_eq(take(&l), want, "AUTH, SELECT, then the commands in one write");
  cr_expect_eq(xf__link_pending_count(&l), 4);
  /* The replies, split anywhere. */
  const char *in = "+OK\r\n+OK\r\n$1\r\nx\r\n$-1\r\n";
  for (const char *p = in; *p; p++)
    cr_assert_eq(xf__link_feed(&l, p, 1, 101), XF_OK);
  cr_assert_eq(d.n, 2);
  cr_expect(l.ready, "its setup answered");
  cr_expect_eq(d.rc[0], XF_OK);
  cr_expect_str_eq(d.r[0]->str, "x");
  cr_expect_eq(d.r[1]->type, XF_REPLY_NIL);
  cr_expect_lt(d.order[0], d.order[1]);
  done_free(&d);
  xf__link_free(&l);
  xf_client_close(c);
}

Test(link, a_refused_setup_fails_the_commands_with_its_code) {
  xf_client *c = client("wrong", 0);
  xf__link l;
  cr_assert_eq(xf__link_init(&l, c, "h", 6379, NULL, 0), XF_OK);
  cr_assert_eq(xf__link_start(&l, 100), XF_OK);
  xf__link_connected(&l, -1, 100);
  xf__cmd a;
  plain(&a, "k");
  done d = {0};
  cr_assert_eq(xf__link_submit(&l, &a, 0, 100, record, &d), XF_OK);
  take(&l);
  const char *in = "-WRONGPASS invalid username-password pair\r\n";
  cr_expect_eq(xf__link_feed(&l, in, strlen(in), 101), XF__LINK_CLOSE);
  cr_assert_eq(d.n, 1);
  cr_expect_eq(d.rc[0], XF_EAUTH);
  cr_expect_null(d.r[0]);
  cr_expect_eq(xf__link_pending_count(&l), 0);
  cr_expect(strstr(xf_errmsg(c), "WRONGPASS"), "%s", xf_errmsg(c));
  cr_expect_eq(xf__link_allows(&l, 102), XF_EAUTH, "the open breaker repeats the refusal");
  xf__link_free(&l);
  xf_client_close(c);
}

Test(link, asking_goes_first_and_its_refusal_fails_the_command) {
  xf_client *c = client(NULL, 0);
  xf__link l;
  cr_assert_eq(xf__link_init(&l, c, "h", 6379, NULL, 0), XF_OK);
  cr_assert_eq(xf__link_start(&l, 100), XF_OK);
  xf__link_connected(&l, -1, 100);
  hello(&l);
  xf__cmd a;
  xf__cmd_begin(&a, "k", 1);
  a.argc = 2, a.argv[0] = "GET", a.lens[0] = 3, a.argv[1] = "k", a.lens[1] = 1;
  done d = {0};
  cr_assert_eq(xf__link_submit(&l, &a, XF__LINK_ASKING, 100, record, &d), XF_OK);
  cr_assert_eq(xf__link_submit(&l, &a, XF__LINK_ASKING, 100, record, &d), XF_OK);
  const char *asking[] = {"ASKING"}, *g[] = {"GET", "k"};
  char want[8192] = "";
  strcat(want, resp(1, asking));
  strcat(want, resp(2, g));
  strcat(want, resp(1, asking));
  strcat(want, resp(2, g));
  cr_expect_str_eq(take(&l), want);
  const char *in = "+OK\r\n$1\r\nv\r\n-ERR no\r\n$1\r\nw\r\n";
  cr_assert_eq(xf__link_feed(&l, in, strlen(in), 101), XF_OK);
  cr_assert_eq(d.n, 2);
  cr_expect_eq(d.rc[0], XF_OK);
  cr_expect_eq(d.rc[1], XF_EPROTO, "ASKING refused");
  cr_expect_null(d.r[1]);
  done_free(&d);
  xf__link_free(&l);
  xf_client_close(c);
}

Test(link, a_plain_read_is_the_read_script_until_the_clock_is_fresh) {
  xf_client *c = client(NULL, 0);
  xf__link l;
  cr_assert_eq(xf__link_init(&l, c, "h", 6379, NULL, XF__LINK_ONE_SCRIPT), XF_OK);
  cr_assert_eq(xf__link_start(&l, 1000), XF_OK);
  xf__link_connected(&l, -1, 1000);
  hello(&l);
  int plain1 = -1, plain2 = -1, plain3 = -1;
  xf__clock *whose = NULL;
  xf__cmd a, b, e;
  plain(&a, "k"), a.plain_out = &plain1, a.clock_out = &whose;
  plain(&b, "k"), b.plain_out = &plain2;
  done d = {0};
  cr_assert_eq(xf__link_submit(&l, &a, 0, 1000, record, &d), XF_OK);
  cr_expect_eq(plain1, 0, "no clock yet: the read script");
  cr_expect_eq(whose, l.clock, "the reply tells of this connection's clock");
  const char *out = take(&l);
  cr_expect(strstr(out, "EVALSHA"), "%s", out);
  cr_assert_eq(xf__link_submit(&l, &b, 0, 1001, record, &d), XF_OK);
  cr_expect_eq(plain2, 1, "a script is on its way: one per refresh");
  out = take(&l);
  cr_expect_str_eq(out, resp(2, (const char *[]){"GET", "k"}));
  /* The script's reply teaches the clock (the flow does, from it). */
  cr_assert_eq(xf__link_feed(&l, "$-1\r\n$-1\r\n", 10, 1002), XF_OK);
  cr_assert_eq(d.n, 2);
  xf__clock_learn(l.clock, 5000, 1000, 1002);
  plain(&e, "k"), e.plain_out = &plain3;
  cr_assert_eq(xf__link_submit(&l, &e, 0, 1003, record, &d), XF_OK);
  cr_expect_eq(plain3, 1, "fresh: the plain GET");
  cr_expect_str_eq(take(&l), resp(2, (const char *[]){"GET", "k"}));
  plain3 = -1;
  cr_assert_eq(xf__link_submit(&l, &e, 0, 1003 + XF_CLOCK_REFRESH_MS, record, &d), XF_OK);
  cr_expect_eq(plain3, 0, "stale again: the script");
  done_free(&d);
  xf__link_free(&l);
  xf_client_close(c);
}

Test(link, a_working_connection_the_peer_closed_resends_once) {
  xf_client *c = client(NULL, 0);
  xf__link l;
  cr_assert_eq(xf__link_init(&l, c, "h", 6379, NULL, 0), XF_OK);
  cr_assert_eq(xf__link_start(&l, 100), XF_OK);
  xf__link_connected(&l, -1, 100);
  hello(&l);
  xf__link_up(&l);
  xf__cmd a;
  xf__cmd_begin(&a, "k", 1);
  a.argc = 2, a.argv[0] = "GET", a.lens[0] = 3, a.argv[1] = "k", a.lens[1] = 1;
  done d = {0};
  cr_assert_eq(xf__link_submit(&l, &a, 0, 100, record, &d), XF_OK);
  take(&l);
  uint64_t errors = c->stats.redis_errors;
  xf__link_fail(&l, XF_EIO, XF__LINK_PEER_CLOSED, "closed", 101);
  cr_assert_eq(d.n, 1);
  cr_expect_eq(d.rc[0], XF__LINK_AGAIN, "once more on a new stream");
  cr_expect_eq(xf__link_allows(&l, 101), XF_OK, "the breaker stays closed");
  cr_expect_eq(c->stats.redis_errors, errors, "nothing counted");
  /* The new stream: the command again, closed again: now it fails. */
  cr_assert_eq(xf__link_start(&l, 102), XF_OK);
  xf__link_connected(&l, -1, 102);
  hello(&l);
  cr_assert_eq(xf__link_submit(&l, &a, XF__LINK_RESENT, 102, record, &d), XF_OK);
  cr_expect_str_eq(take(&l), resp(2, (const char *[]){"GET", "k"}));
  xf__link_fail(&l, XF_EIO, XF__LINK_PEER_CLOSED, "closed again", 103);
  cr_assert_eq(d.n, 2);
  cr_expect_eq(d.rc[1], XF_EIO);
  cr_expect_eq(xf__link_allows(&l, 104), XF_ECONNECT, "the breaker is open");
  cr_expect(strstr(xf_errmsg(c), "closed again"), "%s", xf_errmsg(c));
  xf__link_free(&l);
  xf_client_close(c);
}

/* An idle stream the server closed (an event loop sees it go at once): no
 * command lost, nothing counted, the breaker closed. */
Test(link, an_idle_stream_the_peer_closed_is_simply_gone) {
  xf_client *c = client(NULL, 0);
  xf__link l;
  cr_assert_eq(xf__link_init(&l, c, "h", 6379, NULL, 0), XF_OK);
  cr_assert_eq(xf__link_start(&l, 100), XF_OK);
  xf__link_connected(&l, -1, 100);
  hello(&l);
  xf__link_up(&l);
  uint64_t errors = c->stats.redis_errors;
  xf__link_fail(&l, XF_EIO, XF__LINK_PEER_CLOSED, "closed", 101);
  cr_expect_eq(xf__link_allows(&l, 101), XF_OK, "the breaker stays closed");
  cr_expect_eq(c->stats.redis_errors, errors, "nothing counted");
  cr_expect_not(l.live);
  xf__link_free(&l);
  xf_client_close(c);
}

/* A stream the server closed while its setup was on the way (a CLIENT KILL
 * or a proxy's cut-off landing in the setup's round trip) says no more about
 * the server than a working one it closed: the driver connects once more,
 * the breaker closed, and the commands queued behind the setup go again;
 * closed in its setup a second time in a row, the breaker trips. */
Test(link, a_stream_the_peer_closed_during_its_setup_is_opened_once_more) {
  xf_client *c = client(NULL, 0);
  xf__link l;
  cr_assert_eq(xf__link_init(&l, c, "h", 6379, NULL, 0), XF_OK);
  cr_assert_eq(xf__link_start(&l, 100), XF_OK);
  xf__link_connected(&l, -1, 100);
  xf__cmd a;
  plain(&a, "k");
  done d = {0};
  cr_assert_eq(xf__link_submit(&l, &a, 0, 100, record, &d), XF_OK);
  take(&l); /* HELLO and the GET, unanswered */
  uint64_t errors = c->stats.redis_errors;
  xf__link_fail(&l, XF_EIO, XF__LINK_PEER_CLOSED, "closed in setup", 101);
  cr_expect(xf__link_setup_again(&l), "the driver connects once more");
  cr_expect_eq(xf__link_allows(&l, 101), XF_OK, "the breaker stays closed");
  cr_assert_eq(d.n, 1);
  cr_expect_eq(d.rc[0], XF__LINK_AGAIN, "the queued command goes again");
  cr_expect_eq(c->stats.redis_errors, errors, "nothing counted");
  /* Closed in the setup again: a server that will not let us in. */
  cr_assert_eq(xf__link_start(&l, 102), XF_OK);
  cr_expect(!xf__link_setup_again(&l));
  xf__link_connected(&l, -1, 102);
  cr_assert_eq(xf__link_submit(&l, &a, XF__LINK_RESENT, 102, record, &d), XF_OK);
  take(&l);
  xf__link_fail(&l, XF_EIO, XF__LINK_PEER_CLOSED, "closed in setup again", 103);
  cr_expect(!xf__link_setup_again(&l));
  cr_assert_eq(d.n, 2);
  cr_expect_eq(d.rc[1], XF_EIO);
  cr_expect_eq(xf__link_allows(&l, 104), XF_ECONNECT, "the breaker is open");
  /* Once a setup was answered, the next stream's setup may be closed once
   * more without tripping it. */
  xf__breaker_close(&l.breaker);
  cr_assert_eq(xf__link_start(&l, 200), XF_OK);
  xf__link_connected(&l, -1, 200);
  hello(&l);
  xf__link_up(&l);
  cr_assert_eq(xf__link_submit(&l, &a, 0, 200, record, &d), XF_OK);
  take(&l);
  xf__link_fail(&l, XF_EIO, XF__LINK_PEER_CLOSED, "idle cut", 201);
  cr_expect_eq(d.rc[2], XF__LINK_AGAIN);
  cr_expect(!xf__link_setup_again(&l), "a working stream: its commands go again");
  cr_assert_eq(xf__link_start(&l, 202), XF_OK);
  xf__link_connected(&l, -1, 202);
  take(&l);
  xf__link_fail(&l, XF_EIO, XF__LINK_PEER_CLOSED, "closed in setup", 203);
  cr_expect(xf__link_setup_again(&l));
  cr_expect_eq(xf__link_allows(&l, 204), XF_OK);
  /* A timeout or a reset in the setup is a failed connect, as before. */
  cr_assert_eq(xf__link_start(&l, 300), XF_OK);
  xf__link_connected(&l, -1, 300);
  xf__link_fail(&l, XF_EIO, XF__LINK_BROKEN, "reset in setup", 301);
  cr_expect(!xf__link_setup_again(&l));
  cr_expect_eq(xf__link_allows(&l, 302), XF_ECONNECT);
  xf__link_free(&l);
  xf_client_close(c);
}

Test(link, a_canceled_stream_fails_its_commands_and_leaves_the_breaker) {
  xf_client *c = client(NULL, 0);
  xf__link l;
  cr_assert_eq(xf__link_init(&l, c, "h", 6379, NULL, 0), XF_OK);
  cr_assert_eq(xf__link_start(&l, 100), XF_OK);
  xf__link_connected(&l, -1, 100);
  xf__cmd a;
  plain(&a, "k");
  done d = {0};
  cr_assert_eq(xf__link_submit(&l, &a, XF__LINK_FRESH, 100, record, &d), XF_OK);
  xf__link_fail(&l, XF_ECANCELED, XF__LINK_CANCELED, "interrupted", 101);
  cr_assert_eq(d.n, 1);
  cr_expect_eq(d.rc[0], XF_ECANCELED);
  cr_expect_eq(xf__link_allows(&l, 101), XF_OK);
  /* A stream otherwise lost (a reset) trips the breaker, its commands
   * failed, and so does a failed connect: on every driver's link. */
  xf__link q, r;
  cr_assert_eq(xf__link_init(&q, c, "h", 6379, NULL, 0), XF_OK);
  cr_assert_eq(xf__link_start(&q, 100), XF_OK);
  cr_assert_eq(xf__link_submit(&q, &a, 0, 100, record, &d), XF_OK);
  xf__link_connected(&q, -1, 100);
  xf__link_fail(&q, XF_EIO, XF__LINK_BROKEN, "reset", 101);
  cr_expect_eq(d.rc[1], XF_EIO);
  cr_expect_eq(xf__link_allows(&q, 101), XF_ECONNECT, "a reset: the breaker trips");
  cr_assert_eq(xf__link_init(&r, c, "h", 6380, NULL, 0), XF_OK);
  cr_assert_eq(xf__link_start(&r, 200), XF_OK);
  cr_assert_eq(xf__link_submit(&r, &a, 0, 200, record, &d), XF_OK);
  xf__link_fail(&r, XF_EIO, XF__LINK_BROKEN, "refused", 201);
  cr_expect_eq(d.rc[2], XF_EIO);
  cr_expect_eq(xf__link_allows(&r, 202), XF_ECONNECT, "never connected: the breaker trips");
  cr_expect_gt(xf__link_deadline(&r, 0, 10, 10), 0);
  xf__link_free(&r);
  xf__link_free(&q);
  xf__link_free(&l);
  xf_client_close(c);
}

/* ---- tracking, through the hooks a near cache fills -------------------------------- */

static int arms, watched, lost;
static struct xf__track_node *fake_node = (struct xf__track_node *)&arms;
static int fake_arm(struct xf__ncache *n, struct xf_client *c, const char *host, int port,
                    const char *unix_path, int wait, long long *id, xf__track *t) {
  (void)n, (void)c, (void)host, (void)port, (void)unix_path, (void)wait;
  arms++;
  *id = 42;
  t->node = fake_node;
  t->gen = 1;
  return XF_OK;
}
static int fake_due(struct xf__track_node *node) { return node != NULL; }
static void fake_watch(xf__track *t, int fd) { watched++, t->fd = fd; }
static void fake_lost(const xf__track *t, int fd) { (void)t, (void)fd, lost++; }
static int fake_stale(const xf__track *t) { return t->gen != 1; }
static const xf__link_tracking fake = {fake_arm, fake_due, fake_watch, fake_lost,
                                       fake_stale};

Test(link, tracking_is_armed_last_in_the_setup_and_kept_once_it_said_ok) {
  xf_client *c = client(NULL, 0);
  xf__link_set_tracking(&fake);
  struct xf__ncache *near = c->near;
  c->near = (struct xf__ncache *)&arms; /* any: the hooks are the stub's */
  xf__link l;
  cr_assert_eq(xf__link_init(&l, c, "h", 6379, NULL, XF__LINK_ARM_WAIT), XF_OK);
  cr_assert_eq(xf__link_start(&l, 100), XF_OK);
  xf__link_connected(&l, 7, 100);
  xf__cmd a;
  xf__track track = {0};
  plain(&a, "k");
  a.track_out = &track;
  done d = {0};
  cr_assert_eq(xf__link_submit(&l, &a, 0, 100, record, &d), XF_OK);
  const char *t[] = {"CLIENT", "TRACKING", "on", "REDIRECT", "42"};
  char want[8192] = "";
  strcat(want, resp(1, (const char *[]){"HELLO"}));
  strcat(want, resp(5, t));
  strcat(want, resp(2, (const char *[]){"GET", "k"}));
  cr_expect_str_eq(take(&l), want);
  cr_assert_eq(xf__link_feed(&l, "*0\r\n+OK\r\n$-1\r\n", 14, 101), XF_OK);
  cr_expect_eq(watched, 1);
  cr_expect_eq(track.node, fake_node, "the read may be kept near");
  cr_expect_eq(track.fd, 7);
  xf__link_fail(&l, XF_EIO, XF__LINK_BROKEN, "gone", 102);
  cr_expect_eq(lost, 1, "its loss told");
  c->near = near;
  xf__link_set_tracking(NULL);
  done_free(&d);
  xf__link_free(&l);
  xf_client_close(c);
}

Test(link, a_batch_the_peer_cut_midway_is_not_resent_and_garbage_ends_the_stream) {
  xf_client *c = client(NULL, 0);
  xf__link l;
  cr_assert_eq(xf__link_init(&l, c, "h", 6379, NULL, 0), XF_OK);
  cr_assert_eq(xf__link_start(&l, 100), XF_OK);
  xf__link_connected(&l, -1, 100);
  hello(&l);
  xf__link_up(&l);
  xf__cmd a;
  plain(&a, "k");
  done d = {0};
  for (int i = 0; i < 3; i++)
    cr_assert_eq(xf__link_submit(&l, &a, 0, 100, record, &d), XF_OK);
  cr_assert_eq(xf__link_feed(&l, "$-1\r\n", 5, 101), XF_OK);
  xf__link_fail(&l, XF_EIO, XF__LINK_PEER_CLOSED, "closed", 102);
  cr_assert_eq(d.n, 3);
  cr_expect_eq(d.rc[0], XF_OK);
  cr_expect_eq(d.rc[1], XF_EIO,
               "a reply came: the connection was working on it, no resend");
  cr_expect_eq(d.rc[2], XF_EIO);
  cr_expect_eq(xf__link_allows(&l, 103), XF_ECONNECT, "the breaker tripped");
  /* A reply that is no RESP: the stream is done, its commands failed. */
  xf__link g;
  cr_assert_eq(xf__link_init(&g, c, "h", 6379, NULL, 0), XF_OK);
  cr_assert_eq(xf__link_start(&g, 100), XF_OK);
  xf__link_connected(&g, -1, 100);
  hello(&g);
  cr_assert_eq(xf__link_submit(&g, &a, 0, 100, record, &d), XF_OK);
  cr_expect_eq(xf__link_feed(&g, "!oops\r\n", 7, 101), XF__LINK_CLOSE);
  cr_assert_eq(d.n, 4);
  cr_expect_eq(d.rc[3], XF_EIO);
  cr_expect(strstr(xf_errmsg(c), "unreadable"), "%s", xf_errmsg(c));
  done_free(&d);
  xf__link_free(&g);
  xf__link_free(&l);
  xf_client_close(c);
}
