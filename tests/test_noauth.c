/* A server that needs a password, reached without one or with a wrong one:
 * XF_EAUTH at open (when the client connects there) and from every call of
 * every driver (blocking, batch, pool, the sans-I/O call), never XF_EREDIS
 * and never a loader run. The event-loop driver's are in test_async.c. */
#include <criterion/criterion.h>
#include <string.h>
#include <unistd.h>

#include "fixture.h"

static const char *const conf[] = {"--requirepass", "s3cret", NULL};
static xft_server srv;

static void start(void) { cr_assert_eq(xft_server_start(&srv, conf), 0); }
static void stop(void) { xft_server_stop(&srv); }
TestSuite(noauth, .init = start, .fini = stop);

/* The ways to be refused: no password, a wrong one; each through the
 * cluster detection (AUTO), without it (OFF) and on the Unix socket. */
typedef struct way {
  const char *password;
  int cluster;
  int unix_socket;
} way;
static const way ways[] = {
    {NULL, XF_CLUSTER_AUTO, 0},    {NULL, XF_CLUSTER_OFF, 0},    {NULL, XF_CLUSTER_AUTO, 1},
    {"wrong", XF_CLUSTER_AUTO, 0}, {"wrong", XF_CLUSTER_OFF, 0},
};
#define NWAYS (sizeof ways / sizeof ways[0])

static xf_options options(const way *w, int lazy) {
  xf_options o = XF_OPTIONS_INIT;
  o.port = srv.port;
  o.unix_path = w->unix_socket ? srv.unix_path : NULL;
  o.password = w->password;
  o.cluster = w->cluster;
  o.lazy_connect = lazy;
  return o;
}

/* The reason names what the server said, and a missing password as such. */
static void expect_reason(const char *msg, const way *w) {
  cr_expect(strstr(msg, w->password ? "WRONGPASS" : "NOAUTH"), "reason: '%s'", msg);
  if (!w->password)
    cr_expect(strstr(msg, "options.password"), "names the option: '%s'", msg);
}

Test(noauth, open_is_eauth_with_the_reason) {
  for (size_t i = 0; i < NWAYS; i++) {
    xf_options o = options(&ways[i], 0);
    xf_client *c = NULL;
    cr_expect_eq(xf_client_open(&c, &o), XF_EAUTH, "way %zu", i);
    cr_expect_null(c);
    expect_reason(xf_errmsg(c), &ways[i]);
  }
}

/* Every call of a lazy client (the connection made by the call) is XF_EAUTH,
 * the loader never run, again and again (the breaker repeats the refusal). */
Test(noauth, every_blocking_call_is_eauth) {
  for (size_t i = 0; i < NWAYS; i++) {
    xf_options o = options(&ways[i], 1);
    xf_client *c;
    cr_assert_eq(xf_client_open(&c, &o), XF_OK);
    xf_policy p = XF_POLICY_INIT;
    xft_loader l = {.value = "v"};
    for (int round = 0; round < 2; round++) {
      xf_value v;
      cr_expect_eq(xf_get_or_compute(c, "na:k", 4, &p, xft_load, &l, &v), XF_EAUTH,
                   "way %zu get_or_compute: %s", i, xf_errmsg(c));
      expect_reason(xf_errmsg(c), &ways[i]);
      cr_expect_eq(xf_get(c, "na:k", 4, &v), XF_EAUTH, "way %zu get: %s", i, xf_errmsg(c));
      cr_expect_eq(xf_set(c, "na:k", 4, "v", 1, &p), XF_EAUTH, "way %zu set: %s", i,
                   xf_errmsg(c));
      cr_expect_eq(xf_delete(c, "na:k", 4), XF_EAUTH, "way %zu delete: %s", i,
                   xf_errmsg(c));
      cr_expect_eq(xf_ping(c), XF_EAUTH, "way %zu ping: %s", i, xf_errmsg(c));
    }
    cr_expect_eq(xft_loader_calls(&l), 0);
    xf_client_close(c);
  }
}

static int batch_loader(void *ud, size_t n, const char *const *keys, const size_t *keylens,
                        xf_sink *const *sinks) {
  (void)keys, (void)keylens;
  ++*(int *)ud;
  for (size_t i = 0; i < n; i++)
    xf_sink_set(sinks[i], "v", 1);
  return 0;
}

Test(noauth, a_batch_is_eauth_key_by_key) {
  xf_options o = options(&ways[0], 1);
  xf_client *c;
  cr_assert_eq(xf_client_open(&c, &o), XF_OK);
  const char *keys[] = {"na:a", "na:b", "na:c"};
  size_t lens[] = {4, 4, 4};
  xf_value values[3];
  int rcs[3], loads = 0;
  xf_policy p = XF_POLICY_INIT;
  xft_loader l = {.value = "v"};
  cr_expect_eq(xf_get_or_compute_many(c, 3, keys, lens, &p, xft_load, &l, values, rcs),
               XF_OK);
  for (int i = 0; i < 3; i++)
    cr_expect_eq(rcs[i], XF_EAUTH, "key %d: %s", i, xf_strerror(rcs[i]));
  cr_expect_eq(
      xf_get_or_compute_many_batch(c, 3, keys, lens, &p, batch_loader, &loads, values, rcs),
      XF_OK);
  for (int i = 0; i < 3; i++)
    cr_expect_eq(rcs[i], XF_EAUTH, "batch loader, key %d: %s", i, xf_strerror(rcs[i]));
  cr_expect_eq(xft_loader_calls(&l) + loads, 0);
  xf_client_close(c);
}

Test(noauth, every_pool_call_is_eauth) {
  xf_options o = options(&ways[0], 0);
  xf_pool *pool;
  cr_assert_eq(xf_pool_open(&pool, &o, 2, 0), XF_OK);
  xf_policy p = XF_POLICY_INIT;
  xft_loader l = {.value = "v"};
  xf_value v;
  cr_expect_eq(xf_pool_get_or_compute(pool, "na:k", 4, &p, xft_load, &l, &v), XF_EAUTH,
               "%s", xf_pool_errmsg());
  expect_reason(xf_pool_errmsg(), &ways[0]);
  cr_expect_eq(xf_pool_get(pool, "na:k", 4, &v), XF_EAUTH, "%s", xf_pool_errmsg());
  cr_expect_eq(xf_pool_set(pool, "na:k", 4, "v", 1, &p), XF_EAUTH, "%s", xf_pool_errmsg());
  cr_expect_eq(xf_pool_delete(pool, "na:k", 4), XF_EAUTH, "%s", xf_pool_errmsg());
  cr_expect_eq(xft_loader_calls(&l), 0);
  xf_pool_close(pool);
}

/* ---- the sans-I/O face, over a raw socket ------------------------------------ */

/* Drives call over fd until it is done or asks for a load; its code. */
static int drive(xf_call *call, int fd, xf_reader *rd) {
  while (xf_call_next(call) == XF_CALL_SEND) {
    xf_reply *reply = xft_call_exchange(fd, rd, call, 0);
    xf_call_reply(call, reply, xft_now_ms());
  }
  cr_assert_eq(xf_call_next(call), XF_CALL_DONE, "no load: step %d", xf_call_next(call));
  xf_value v;
  int rc = xf_call_result(call, &v);
  xf_value_free(&v);
  return rc;
}

/* The setup a link runs first says XF_EAUTH (HELLO, when no other command
 * is sent); a driver that answers calls by hand, with no setup, still gets
 * XF_EAUTH from each call, the set's long request (refused as
 * "unauthenticated multibulk length") too. */
Test(noauth, the_link_setup_and_each_call_are_eauth) {
  xf_options o = options(&ways[1], 1); /* no INFO cluster first: the calls' own commands */
  xf_client *lc;
  cr_assert_eq(xf_client_open(&lc, &o), XF_OK);
  xf_link *link;
  cr_assert_eq(xf_link_open(&link, lc, "127.0.0.1", srv.port, 0), XF_OK);
  redisContext *sock = xft_redis_port(srv.port);
  cr_assert_eq(xf_link_start(link, xft_now_ms()), XF_OK);
  xf_link_connected(link, sock->fd, xft_now_ms());
  size_t len;
  const char *req = xf_link_output(link, &len);
  cr_assert(len > 0 && strncmp(req, "*1\r\n$5\r\nHELLO\r\n", len) == 0, "a HELLO: %.*s",
            (int)len, req);
  cr_assert_eq(write(sock->fd, req, len), (ssize_t)len);
  xf_link_written(link, len);
  int rc = XF_OK;
  while (rc == XF_OK) {
    char buf[512];
    ssize_t got = read(sock->fd, buf, sizeof buf);
    cr_assert_gt(got, 0);
    rc = xf_link_feed(link, buf, (size_t)got, xft_now_ms());
  }
  cr_expect_eq(rc, XF_EAUTH);
  expect_reason(xf_errmsg(lc), &ways[0]);
  xf_link_close(link);
  xf_client_close(lc);
  redisFree(sock);

  xf_client *c;
  cr_assert_eq(xf_client_open(&c, &o), XF_OK);
  sock = xft_redis_port(srv.port);
  xf_reader *rd;
  cr_assert_eq(xf_reader_open(&rd), XF_OK);

  xf_policy p = XF_POLICY_INIT;
  xf_call *call;
  cr_assert_eq(xf_call_start(&call, c, "na:k", 4, &p, xft_now_ms()), XF_OK);
  cr_expect_eq(drive(call, sock->fd, rd), XF_EAUTH, "get_or_compute: %s",
               xf_call_errmsg(call));
  xf_call_free(call);
  cr_assert_eq(xf_call_start_get(&call, c, "na:k", 4, xft_now_ms()), XF_OK);
  cr_expect_eq(drive(call, sock->fd, rd), XF_EAUTH, "get: %s", xf_call_errmsg(call));
  xf_call_free(call);
  cr_assert_eq(xf_call_start_delete(&call, c, "na:k", 4, xft_now_ms()), XF_OK);
  cr_expect_eq(drive(call, sock->fd, rd), XF_EAUTH, "delete: %s", xf_call_errmsg(call));
  xf_call_free(call);
  cr_assert_eq(xf_call_start_set(&call, c, "na:k", 4, "v", 1, &p, xft_now_ms()), XF_OK);
  cr_expect_eq(drive(call, sock->fd, rd), XF_EAUTH, "set: %s", xf_call_errmsg(call));
  cr_expect(strstr(xf_call_errmsg(call), "unauthenticated"), "%s", xf_call_errmsg(call));
  xf_call_free(call);
  xf_reader_close(rd);
  redisFree(sock);
  xf_client_close(c);
}
