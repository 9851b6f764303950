/* The sans-I/O call on a link (xf_link_*, xf_call_send) driven over a plain
 * socket to a real Redis, as a user's own driver would: the link runs the
 * setup (AUTH), the tracking of a near cache, the clock estimate and the
 * resend after the server closed a working connection; the driver only
 * connects, moves bytes and says when the socket failed. */
#include <criterion/criterion.h>
#include <string.h>
#include <unistd.h>

#include "entry_peek.h"
#include "fixture.h"
#include "link_net.h"
#include "near_env.h"

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
