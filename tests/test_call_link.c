/* The sans-I/O call on a link (xf_link_*, xf_call_send) driven over a plain
 * socket to a real Redis, as a user's own driver would: the link runs the
 * setup (AUTH), the tracking of a near cache, the clock estimate and the
 * resend after the server closed a working connection; the driver only
 * connects, moves bytes and says when the socket failed. */
#include <criterion/criterion.h>
#include <poll.h>
#include <string.h>
#include <unistd.h>

#include "entry_peek.h"
#include "fixture.h"
#include "link_net.h"
#include "near_env.h"
#include "near_impl.h"
#include "share.h"

typedef struct script {
  const char *value; /* the loader's */
  int loads;
} script;

/* Runs a call to the end on n; returns its code. */
static int drive(xft_net *n, xf_call *call, script *s, xf_value *out) {
  for (xf_call_step step = xf_call_next(call); step != XF_CALL_DONE;) {
    if (step == XF_CALL_SEND) {
      step = xft_net_exchange(n, call);
    } else if (step == XF_CALL_LOAD) {
      s->loads++;
      step = xf_call_loaded(call, s->value, strlen(s->value), 1000, xft_now_ms());
    } else {
      usleep((useconds_t)xf_call_wait_ms(call, xft_now_ms()) * 1000);
      step = xf_call_woke(call, xft_now_ms());
    }
  }
  int rc = xf_call_result(call, out);
  xf_call_free(call);
  return rc;
}

static int fetch(xft_net *n, xf_client *c, const char *key, script *s, xf_value *v) {
  xf_policy p = XF_POLICY_INIT;
  p.beta = 0;
  xf_call *call;
  cr_assert_eq(xf_call_start(&call, c, key, strlen(key), &p, xft_now_ms()), XF_OK);
  return drive(n, call, s, v);
}

static xf_client *lazy_client(int port, const char *password, xf_share *share) {
  xf_options o = XF_OPTIONS_INIT;
  o.lazy_connect = 1;
  o.port = port;
  o.password = password;
  o.share = share;
  o.seed = 3;
  o.entry_format = xft_entry_format();
  xf_client *c;
  cr_assert_eq(xf_client_open(&c, &o), XF_OK);
  return c;
}

static uint64_t stat_of(xf_client *c, size_t offset) {
  xf_stats st;
  xf_client_stats(c, &st);
  return *(uint64_t *)((char *)&st + offset);
}
#define STAT(c, field) stat_of(c, offsetof(xf_stats, field))

Test(call_link, a_miss_loads_then_hits_are_plain_reads) {
  xft_server srv; /* its own: the scripts counted are this test's alone */
  cr_assert_eq(xft_server_start(&srv, NULL), 0);
  int port = srv.port;
  xf_client *c = lazy_client(port, NULL, NULL);
  xft_net n = xft_net_open(c, port, 0);
  redisContext *r = xft_redis_port(port);
  script s = {.value = "computed"};
  xf_value v;
  cr_assert_eq(fetch(&n, c, "link:miss", &s, &v), XF_OK, "%s", xf_errmsg(c));
  cr_expect_str_eq(v.data, "computed");
  cr_expect_eq(v.source, XF_SOURCE_LOADER);
  xf_value_free(&v);
  long long scripts = xft_command_calls(r, "evalsha_ro") + xft_command_calls(r, "evalsha");
  for (int i = 0; i < 5; i++) {
    cr_assert_eq(fetch(&n, c, "link:miss", &s, &v), XF_OK, "%s", xf_errmsg(c));
    cr_expect_str_eq(v.data, "computed");
    cr_expect_eq(v.source, XF_SOURCE_CACHE);
    xf_value_free(&v);
  }
  cr_expect_eq(s.loads, 1);
  /* The lease and write taught the clock: the hits are plain reads, but for
   * at most one refresh (every 500 ms: margin for a busy machine). */
  long long more = xft_command_calls(r, "evalsha_ro") + xft_command_calls(r, "evalsha");
  cr_expect_leq(more - scripts, 1, "%lld read scripts for 5 hits", more - scripts);
  cr_expect_eq(n.connects, 1);
  redisFree(r);
  xft_net_close(&n);
  xf_client_close(c);
  xft_server_stop(&srv);
}

Test(call_link, a_connection_the_server_closed_is_resent_once) {
  xft_server srv; /* its own: CLIENT KILL would cut the other tests' too */
  cr_assert_eq(xft_server_start(&srv, NULL), 0);
  xf_client *c = lazy_client(srv.port, NULL, NULL);
  xft_net n = xft_net_open(c, srv.port, 0);
  redisContext *r = xft_redis_port(srv.port);
  script s = {.value = "v1"};
  xf_value v;
  cr_assert_eq(fetch(&n, c, "link:kill", &s, &v), XF_OK, "%s", xf_errmsg(c));
  xf_value_free(&v);
  cr_assert_eq(xft_int(r, "CLIENT KILL TYPE normal SKIPME yes"), 1);
  cr_assert_eq(fetch(&n, c, "link:kill", &s, &v), XF_OK, "%s", xf_errmsg(c));
  cr_expect_str_eq(v.data, "v1");
  cr_expect_eq(v.source, XF_SOURCE_CACHE, "resent on a new stream, not failed open");
  xf_value_free(&v);
  cr_expect_eq(n.connects, 2);
  cr_expect_eq(STAT(c, redis_errors), 0, "no server down: the breaker stays closed");
  cr_expect_eq(s.loads, 1);
  /* The server going away for good: the resent command fails, the call
   * fails open (resent once, not twice). */
  xft_server_stop(&srv);
  cr_assert_eq(fetch(&n, c, "link:kill", &s, &v), XF_OK, "%s", xf_errmsg(c));
  cr_expect_eq(v.source, XF_SOURCE_UNCACHED);
  xf_value_free(&v);
  cr_expect_eq(n.connects, 3);
  cr_expect_eq(STAT(c, redis_errors), 1);
  redisFree(r);
  xft_net_close(&n);
  xf_client_close(c);
}

Test(call_link, auth_runs_inside_the_link) {
  xft_server srv;
  const char *const extra[] = {"--requirepass", "s3cret", NULL};
  cr_assert_eq(xft_server_start(&srv, extra), 0);
  xf_client *c = lazy_client(srv.port, "s3cret", NULL);
  xft_net n = xft_net_open(c, srv.port, 0);
  script s = {.value = "authed"};
  xf_value v;
  cr_assert_eq(fetch(&n, c, "link:auth", &s, &v), XF_OK, "%s", xf_errmsg(c));
  cr_expect_eq(v.source, XF_SOURCE_LOADER);
  xf_value_free(&v);
  xft_net_close(&n);
  xf_client_close(c);
  /* A wrong password: the call gets the link's refusal, no fail-open. */
  xf_client *bad = lazy_client(srv.port, "wrong", NULL);
  xft_net m = xft_net_open(bad, srv.port, 0);
  xf_call *call;
  cr_assert_eq(xf_call_start_get(&call, bad, "link:auth", 9, xft_now_ms()), XF_OK);
  cr_expect_eq(drive(&m, call, &s, &v), XF_EAUTH, "%s", xf_errmsg(bad));
  xft_net_close(&m);
  xf_client_close(bad);
  xft_server_stop(&srv);
}

Test(call_link, a_near_cache_is_tracked_inside_the_link) {
  near_env e;
  near_env_open(&e);
  xf_client *c = lazy_client(e.srv.port, NULL, e.share);
  xft_net n = xft_net_open(c, e.srv.port, 0);
  near_put(e.other, "link:near", "one");
  /* The first reads go untracked while the tracker opens the invalidation
   * connection (a background thread), then one fills the near cache. */
  xf_value v;
  script s = {.value = "never"};
  int64_t until = xft_now_ms() + BOUND_MS;
  while (STAT(c, near_hits) == 0 && xft_now_ms() < until) {
    cr_assert_eq(fetch(&n, c, "link:near", &s, &v), XF_OK, "%s", xf_errmsg(c));
    cr_assert_str_eq(v.data, "one");
    xf_value_free(&v);
    xft_sleep_ms(5);
  }
  cr_assert_gt(STAT(c, near_hits), 0, "never a near hit");
  /* Another process writes: the invalidation reaches the near cache, and
   * the link's reads see the new value (bounded wait). */
  near_put(e.other, "link:near", "two");
  until = xft_now_ms() + BOUND_MS;
  char got[16] = "";
  while (strcmp(got, "two") != 0 && xft_now_ms() < until) {
    cr_assert_eq(fetch(&n, c, "link:near", &s, &v), XF_OK, "%s", xf_errmsg(c));
    snprintf(got, sizeof got, "%.*s", (int)v.len, v.data);
    xf_value_free(&v);
  }
  cr_expect_str_eq(got, "two");
  cr_expect_eq(s.loads, 0);
  cr_expect_eq(n.connects, 1, "tracking armed on the one stream");
  xft_net_close(&n);
  xf_client_close(c);
  near_env_close(&e);
}

Test(call_link, arguments_refused) {
  xf_client *c = lazy_client(1, NULL, NULL);
  xf_link *l;
  cr_expect_eq(xf_link_open(NULL, c, "h", 1, 0), XF_EINVAL);
  cr_expect_eq(xf_link_open(&l, NULL, "h", 1, 0), XF_EINVAL);
  cr_assert_eq(xf_link_open(&l, c, "127.0.0.1", 1, 0), XF_OK);
  xf_call *call;
  xf_policy p = XF_POLICY_INIT;
  cr_assert_eq(xf_call_start(&call, c, "k", 1, &p, 0), XF_OK);
  cr_expect_eq(xf_call_send(NULL, l, 0), XF_EINVAL);
  cr_expect_eq(xf_call_send(call, NULL, 0), XF_EINVAL);
  cr_assert_eq(xf_call_send(call, l, 0), XF_OK);
  cr_expect_eq(xf_call_send(call, l, 0), XF_EINVAL, "already sent");
  cr_expect(xf_link_wants_stream(l));
  xf_call_free(call); /* freed while it waits: forgotten by the link */
  cr_expect(!xf_link_wants_stream(l));
  cr_expect_null(xf_link_ready(l));
  cr_expect_eq(xf_link_deadline(l), INT64_MAX);
  xf_link_close(l);
  xf_link_close(NULL);
  xf_client_close(c);
}

Test(call_link, a_cold_link_sends_one_read_script_however_many_reads_wait) {
  xft_server srv; /* its own: the scripts counted are this test's alone */
  cr_assert_eq(xft_server_start(&srv, NULL), 0);
  int port = srv.port;
  xf_client *c = lazy_client(port, NULL, NULL);
  redisContext *r = xft_redis_port(port);
  xf_policy p = XF_POLICY_INIT;
  p.beta = 0;
  p.ttl_ms = 60000;
  char key[32];
  xf_client *writer = xft_client_port(port, 5);
  for (int i = 0; i < 20; i++) { /* warm: another client's writes */
    snprintf(key, sizeof key, "link:cold:%d", i);
    cr_assert_eq(xf_set(writer, key, strlen(key), "v", 1, &p), XF_OK);
  }
  xf_client_close(writer);
  xft_net n = xft_net_open(c, port, XF_SETUP_SCRIPTS); /* no NOSCRIPT in the count */
  long long scripts = xft_command_calls(r, "evalsha_ro");
  xf_call *calls[20];
  for (int i = 0; i < 20; i++) {
    snprintf(key, sizeof key, "link:cold:%d", i);
    cr_assert_eq(xf_call_start(&calls[i], c, key, strlen(key), &p, xft_now_ms()), XF_OK);
    cr_assert_eq(xf_call_send(calls[i], n.link, xft_now_ms()), XF_OK);
  }
  for (int done = 0; done < 20;) {
    xf_call *moved = xft_net_pump(&n);
    if (xf_call_received(moved, xft_now_ms()) == XF_CALL_SEND) /* a read asked again */
      cr_assert_eq(xf_call_send(moved, n.link, xft_now_ms()), XF_OK);
    else
      done++;
  }
  for (int i = 0; i < 20; i++) {
    xf_value v;
    cr_expect_eq(xf_call_next(calls[i]), XF_CALL_DONE);
    cr_expect_eq(xf_call_result(calls[i], &v), XF_OK, "%s", xf_call_errmsg(calls[i]));
    cr_expect_eq(v.source, XF_SOURCE_CACHE);
    xf_value_free(&v);
    xf_call_free(calls[i]);
  }
  /* One script teaches the clock; the reads queued behind it go plain. */
  long long sent = xft_command_calls(r, "evalsha_ro") - scripts;
  cr_expect_eq(sent, 1, "%lld read scripts", sent);
  redisFree(r);
  xft_net_close(&n);
  xf_client_close(c);
  xft_server_stop(&srv);
}

/* Drives call (on n's link) until it reaches step want. */
static void drive_to(xft_net *n, xf_call *call, xf_call_step want) {
  xf_call_step step = xf_call_next(call);
  for (int i = 0; step != want && step == XF_CALL_SEND && i < 10; i++)
    step = xft_net_exchange(n, call);
  cr_assert_eq(step, want, "%s", xf_call_errmsg(call));
}

/* a holds the key's lease (in XF_CALL_LOAD); b waits for it (XF_CALL_WAIT). */
static void lease_holder_and_waiter(xft_net *n, xf_client *c, const char *key, xf_call **a,
                                    xf_call **b) {
  xf_policy p = XF_POLICY_INIT;
  p.beta = 0;
  cr_assert_eq(xf_call_start(a, c, key, strlen(key), &p, xft_now_ms()), XF_OK);
  drive_to(n, *a, XF_CALL_LOAD);
  cr_assert_eq(xf_call_start(b, c, key, strlen(key), &p, xft_now_ms()), XF_OK);
  drive_to(n, *b, XF_CALL_WAIT);
}

/* a's load lands; b, woken, reads it. */
static void both_end_with(xft_net *n, xf_call *a, xf_call *b, const char *value) {
  cr_assert_eq(xf_call_loaded(a, value, strlen(value), 1000, xft_now_ms()), XF_CALL_SEND);
  drive_to(n, a, XF_CALL_DONE);
  xf_call_free(a);
  xf_call_step step = xf_call_next(b);
  for (int i = 0; step != XF_CALL_DONE && i < 50; i++) {
    if (step == XF_CALL_SEND) {
      step = xft_net_exchange(n, b);
    } else { /* a wait again: parked, woken at its time */
      cr_assert_eq(step, XF_CALL_WAIT);
      cr_assert_eq(xf_call_park(b, n->link, xft_now_ms()), XF_OK);
      xft_sleep_ms(xf_call_wait_ms(b, xft_now_ms()) + 1);
      xf_link_tick(n->link, xft_now_ms());
      cr_assert_eq(xf_link_ready(n->link), b);
      step = xf_call_received(b, xft_now_ms());
    }
  }
  xf_value v;
  cr_assert_eq(xf_call_result(b, &v), XF_OK, "%s", xf_call_errmsg(b));
  cr_expect_eq(v.source, XF_SOURCE_CACHE);
  cr_expect_eq(v.len, strlen(value));
  cr_expect(memcmp(v.data, value, v.len) == 0);
  xf_value_free(&v);
  xf_call_free(b);
}

Test(call_link, a_parked_wait_ends_at_its_time) {
  xf_client *c = lazy_client(xft_port(), NULL, NULL);
  xft_net n = xft_net_open(c, xft_port(), 0);
  xf_call *a, *b;
  /* The link's clock is what the driver says: no sleep needed. t is taken before b's wait
   * began, so b's poll lies a full interval ahead of it however slow the machine. */
  int64_t t = xft_now_ms();
  lease_holder_and_waiter(&n, c, "link:park:time", &a, &b);
  int64_t wait = xf_call_wait_ms(b, t);
  cr_assert_gt(wait, 1, "a poll of %lld ms", (long long)wait);
  cr_assert_eq(xf_call_park(b, n.link, t), XF_OK);
  cr_expect_eq(xf_call_park(b, n.link, t), XF_EINVAL, "parked already");
  cr_expect_eq(xf_call_send(b, n.link, t), XF_EINVAL, "not a SEND");
  cr_expect_eq(xf_link_deadline(n.link), t + wait, "the link's timer covers the wait");
  cr_expect_eq(xf_link_wake_fd(n.link), -1, "no near cache: no wake pipe");
  cr_expect_eq(xf_link_tick(n.link, t + wait - 2), 0);
  cr_expect_null(xf_link_ready(n.link), "woken before its time");
  cr_expect_eq(xf_link_tick(n.link, t + wait), 0, "the stream is idle: no timeout");
  cr_assert_eq(xf_link_ready(n.link), b);
  cr_expect_eq(xf_link_deadline(n.link), INT64_MAX);
  cr_expect_eq(xf_call_received(b, t + wait), XF_CALL_SEND, "read again");
  both_end_with(&n, a, b, "landed");
  xft_net_close(&n);
  xf_client_close(c);
}

Test(call_link, a_parked_wait_ends_when_its_key_is_written) {
  near_env e;
  near_env_open(&e);
  xf_client *c = lazy_client(e.srv.port, NULL, e.share);
  xft_net n = xft_net_open(c, e.srv.port, 0);
  int fd = xf_link_wake_fd(n.link);
  cr_assert_geq(fd, 0, "a near cache: the link's wake pipe");
  /* Tracking up first (the tracker's connection opens in the background). */
  near_put(e.other, "link:park:warm", "w");
  script s = {.value = "never"};
  xf_value v;
  int64_t until = xft_now_ms() + BOUND_MS;
  while (STAT(c, near_hits) == 0 && xft_now_ms() < until) {
    cr_assert_eq(fetch(&n, c, "link:park:warm", &s, &v), XF_OK, "%s", xf_errmsg(c));
    xf_value_free(&v);
    xft_sleep_ms(5);
  }
  cr_assert_gt(STAT(c, near_hits), 0, "never a near hit");
  uint64_t seen = xf__near_invalidations(xf__share_near(e.share));
  /* The lease's own invalidation is awaited before b reads: one that came
   * after b's read would say the key changed since, and wake b (under TSan on
   * a busy machine the tracker's thread was that late once in four runs). */
  xf_call *a, *b;
  xf_policy p = XF_POLICY_INIT;
  p.beta = 0;
  const char *key = "link:park:near";
  cr_assert_eq(xf_call_start(&a, c, key, strlen(key), &p, xft_now_ms()), XF_OK);
  drive_to(&n, a, XF_CALL_LOAD);
  near_await_invalidations(e.share, seen);
  cr_assert_eq(xf_call_start(&b, c, key, strlen(key), &p, xft_now_ms()), XF_OK);
  drive_to(&n, b, XF_CALL_WAIT);
  /* The driver's clock stands still at t: only the write can end the wait. */
  int64_t t = xft_now_ms();
  cr_assert_eq(xf_call_park(b, n.link, t), XF_OK);
  xf_link_tick(n.link, t);
  cr_assert_null(xf_link_ready(n.link), "woken before the write");
  cr_assert_eq(xf_call_loaded(a, "fresh", 5, 1000, t), XF_CALL_SEND);
  drive_to(&n, a, XF_CALL_DONE);
  xf_call_free(a);
  xf_call *woken = NULL;
  until = xft_now_ms() + BOUND_MS;
  while (!woken && xft_now_ms() < until) {
    struct pollfd p = {.fd = fd, .events = POLLIN};
    poll(&p, 1, 100);
    xf_link_tick(n.link, t);
    woken = xf_link_ready(n.link);
  }
  cr_assert_eq(woken, b, "the write never ended the wait");
  char buf[8];
  cr_expect_eq(read(fd, buf, sizeof buf), -1, "the tick drained the pipe");
  cr_expect_eq(xf_call_received(b, t), XF_CALL_SEND, "read again");
  drive_to(&n, b, XF_CALL_DONE);
  cr_assert_eq(xf_call_result(b, &v), XF_OK, "%s", xf_call_errmsg(b));
  cr_expect_eq(v.len, 5);
  cr_expect(memcmp(v.data, "fresh", 5) == 0);
  xf_value_free(&v);
  xf_call_free(b);
  xft_net_close(&n);
  xf_client_close(c);
  near_env_close(&e);
}

Test(call_link, a_parked_call_freed_or_left_at_close) {
  xf_client *c = lazy_client(xft_port(), NULL, NULL);
  xft_net n = xft_net_open(c, xft_port(), 0);
  xf_call *a, *b;
  lease_holder_and_waiter(&n, c, "link:park:free", &a, &b);
  cr_assert_eq(xf_call_park(b, n.link, xft_now_ms()), XF_OK);
  xf_call_free(b); /* forgotten by the link */
  cr_expect_eq(xf_link_deadline(n.link), INT64_MAX);
  xf_call *a2, *b2;
  lease_holder_and_waiter(&n, c, "link:park:free2", &a2, &b2);
  cr_assert_eq(xf_call_park(b2, n.link, xft_now_ms()), XF_OK);
  xf_call_free(a);
  xf_call_free(a2);
  xft_net_close(&n); /* b2 stays in its wait */
  cr_expect_eq(xf_call_next(b2), XF_CALL_WAIT);
  cr_expect_eq(xf_call_woke(b2, xft_now_ms()), XF_CALL_SEND, "woken by hand");
  xf_call_free(b2);
  xf_client_close(c);
}

/* Ten warm keys' calls sent together on a connected link: their reads go as
 * one MGET (the batch's one command, as xf_get_many's), each call served its
 * own value; a cold key's call among them goes on to its lease and load. */
Test(call_link, calls_sent_together_read_with_one_mget) {
  xft_server srv; /* its own: the commands counted are this test's alone */
  cr_assert_eq(xft_server_start(&srv, NULL), 0);
  int port = srv.port;
  xf_client *c = lazy_client(port, NULL, NULL);
  redisContext *r = xft_redis_port(port);
  xft_net n = xft_net_open(c, port, XF_SETUP_SCRIPTS);
  script s = {.value = "computed"};
  xf_value v;
  char key[32];
  for (int i = 0; i < 10; i++) { /* warm, and the link's clock learned */
    snprintf(key, sizeof key, "link:many:%d", i);
    cr_assert_eq(fetch(&n, c, key, &s, &v), XF_OK, "%s", xf_errmsg(c));
    xf_value_free(&v);
  }
  if (xft_entry_format() == XF_ENTRY_HASH)
    goto out; /* format 1: plain HMGETs, pipelined, no MGET */
  long long reads = xft_read_calls(r), mgets = xft_command_calls(r, "mget");
  xf_policy p = XF_POLICY_INIT;
  p.beta = 0;
  xf_call *calls[11]; /* and one cold key: its call goes on to its lease */
  for (int i = 0; i < 11; i++) {
    snprintf(key, sizeof key, i < 10 ? "link:many:%d" : "link:many:cold", i);
    cr_assert_eq(xf_call_start(&calls[i], c, key, strlen(key), &p, xft_now_ms()), XF_OK);
  }
  cr_assert_eq(xf_call_send_many(calls, 11, n.link, xft_now_ms()), XF_OK);
  for (int done = 0; done < 11;) {
    xf_call *moved = xft_net_pump(&n);
    xf_call_step step = xf_call_received(moved, xft_now_ms());
    while (step == XF_CALL_LOAD) { /* the cold key's */
      s.loads++;
      step = xf_call_loaded(moved, "computed", 8, 1000, xft_now_ms());
    }
    if (step == XF_CALL_SEND) /* a read asked again, the lease, the write */
      cr_assert_eq(xf_call_send(moved, n.link, xft_now_ms()), XF_OK);
    else
      done++;
  }
  for (int i = 0; i < 11; i++) {
    cr_expect_eq(xf_call_next(calls[i]), XF_CALL_DONE);
    cr_expect_eq(xf_call_result(calls[i], &v), XF_OK, "%s", xf_call_errmsg(calls[i]));
    cr_expect_eq(v.source, i < 10 ? XF_SOURCE_CACHE : XF_SOURCE_LOADER);
    cr_expect_str_eq(v.data, "computed");
    xf_value_free(&v);
    xf_call_free(calls[i]);
  }
  /* the clock was learned by the fetches a moment ago (fresh for 250 ms at
   * least; a refresh in between would add one read script: allowed) */
  cr_expect_eq(s.loads, 11);
  cr_expect_eq(xft_command_calls(r, "mget") - mgets, 1);
  long long sent = xft_read_calls(r) - reads;
  cr_expect_leq(sent, 3, "%lld reads for 10 warm keys and a cold one", sent);
out:
  redisFree(r);
  xft_net_close(&n);
  xf_client_close(c);
  xft_server_stop(&srv);
}
