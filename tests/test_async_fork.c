/* The event-loop driver (xf_async) in a fork's child that re-made its loop
 * (uv_loop_fork, event_reinit) and keeps the handle: each test body on libuv
 * and on libevent against its own redis-server. The child's calls go on a
 * connection of its own, the parent's command still on the wire at the fork
 * is never answered in the child with a reply read off the parent's socket,
 * and the parent goes on on its own connection. */
#define _DEFAULT_SOURCE /* <uv.h> under -std=c11 */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <xfetch_libevent.h>
#include <xfetch_libuv.h>

#include "fixture.h"

#define BOUND_MS 5000

enum { LIBUV, LIBEVENT };

typedef struct loop {
  int kind;
  uv_loop_t uv;
  uv_timer_t guard; /* ends a turn that would wait past the bound */
  struct event_base *base;
  xf_async *ac;
} loop;

typedef struct call {
  int fired, rc;
  char got[32];
} call;

static void on_done(int rc, const xf_value *v, void *privdata) {
  call *k = privdata;
  k->fired++;
  k->rc = rc;
  snprintf(k->got, sizeof k->got, "%.*s", v ? (int)v->len : 0, v ? v->data : "");
}

static void on_set(int rc, void *privdata) { on_done(rc, NULL, privdata); }

static void guard_fired(uv_timer_t *t) { (void)t; }

static void loop_open(loop *l, int kind, int port) {
  memset(l, 0, sizeof *l);
  l->kind = kind;
  xf_options o = XF_OPTIONS_INIT;
  o.port = port;
  o.entry_format = xft_entry_format();
  if (kind == LIBUV) {
    cr_assert_eq(uv_loop_init(&l->uv), 0);
    cr_assert_eq(uv_timer_init(&l->uv, &l->guard), 0);
    cr_assert_eq(xf_async_open_libuv(&l->ac, &o, &l->uv), XF_OK);
  } else {
    cr_assert_not_null(l->base = event_base_new());
    cr_assert_eq(xf_async_open_libevent(&l->ac, &o, l->base), XF_OK);
  }
}

/* Turns the loop until *a and *b fired (b NULL: a only) or BOUND_MS passed;
 * 0 when they did. */
static int turn_until(loop *l, const call *a, const call *b) {
  int64_t until = xft_now_ms() + BOUND_MS;
  while ((!a->fired || (b && !b->fired)) && xft_now_ms() < until) {
    if (l->kind == LIBUV) {
      uv_timer_start(&l->guard, guard_fired, 50, 0);
      uv_run(&l->uv, UV_RUN_ONCE);
    } else {
      struct timeval tv = {0, 50000};
      event_base_loopexit(l->base, &tv);
      event_base_loop(l->base, EVLOOP_ONCE);
    }
  }
  return a->fired && (!b || b->fired) ? 0 : -1;
}

static void loop_close(loop *l) {
  xf_async_close(l->ac);
  if (l->kind == LIBUV) {
    uv_close((uv_handle_t *)&l->guard, NULL);
    uv_run(&l->uv, UV_RUN_DEFAULT);
    uv_loop_close(&l->uv);
  } else {
    event_base_free(l->base);
  }
}

/* The loop re-made in a fork's child, as its library says. */
static int loop_after_fork(loop *l) {
  return l->kind == LIBUV ? uv_loop_fork(&l->uv) : event_reinit(l->base);
}

static void set(loop *l, const char *key, const char *value) {
  xf_policy p = XF_POLICY_INIT;
  call k = {0};
  cr_assert_eq(xf_async_set(l->ac, key, strlen(key), value, strlen(value), &p, on_set, &k),
               XF_OK);
  cr_assert_eq(turn_until(l, &k, NULL), 0, "the set never called back");
  cr_assert_eq(k.rc, XF_OK, "set %s: %s", key, xf_async_errmsg(l->ac));
}

static int get(loop *l, const char *key, call *k) {
  return xf_async_get(l->ac, key, strlen(key), on_done, k);
}

/* The child's half: its own key's value on a connection of its own, and the
 * parent's get (on the wire at the fork) ended as a lost connection ends it.
 * Its exit status: 0, or what went wrong (bits). */
static int child(loop *l, call *theirs) {
  if (loop_after_fork(l) != 0)
    return 64;
  call mine = {0};
  if (get(l, "afork:child", &mine) != XF_OK)
    return 32;
  int bad = turn_until(l, &mine, theirs) != 0 ? 16 : 0;
  if (mine.rc != XF_OK || strcmp(mine.got, "child") != 0)
    bad |= 1;
  if (theirs->rc == XF_OK) /* a reply read off the parent's socket */
    bad |= 2;
  if (theirs->fired && theirs->rc != XF_EIO)
    bad |= 4;
  loop_close(l);
  return bad;
}

ParameterizedTestParameters(async_fork, a_child_calls_on_a_connection_of_its_own) {
  static int kinds[] = {LIBUV, LIBEVENT};
  return cr_make_param_array(int, kinds, 2);
}

ParameterizedTest(int *kind, async_fork, a_child_calls_on_a_connection_of_its_own) {
  xft_server s;
  cr_assert_eq(xft_server_start(&s, NULL), 0);
  loop l;
  loop_open(&l, *kind, s.port);
  set(&l, "afork:parent", "parent"); /* the parent's connection is up */
  set(&l, "afork:child", "child");
  redisContext *r = xft_redis_port(s.port);
  long long before = xft_info_int(r, "total_connections_received");
  call theirs = {0};
  cr_assert_eq(get(&l, "afork:parent", &theirs), XF_OK); /* queued, not answered */
  pid_t pid = fork();
  cr_assert_geq(pid, 0);
  if (pid == 0) {
    int bad = child(&l, &theirs);
    redisFree(r); /* the child's copy: nothing sent */
    _exit(bad);
  }
  int status;
  cr_assert_eq(waitpid(pid, &status, 0), pid);
  cr_expect(WIFEXITED(status) && WEXITSTATUS(status) == 0,
            "the child: status %d (1: its value wrong, 2: the parent's reply read, "
            "4: the parent's call not ended as lost, 16: no callback within %d ms)",
            WIFEXITED(status) ? WEXITSTATUS(status) : -1, BOUND_MS);
  long long after_child = xft_info_int(r, "total_connections_received");
  cr_expect_eq(after_child, before + 1, "the child connected anew (%lld connections)",
               after_child - before);
  cr_assert_eq(turn_until(&l, &theirs, NULL), 0, "the parent's get never called back");
  cr_expect_eq(theirs.rc, XF_OK, "%s", xf_async_errmsg(l.ac));
  cr_expect_str_eq(theirs.got, "parent");
  call again = {0};
  cr_assert_eq(get(&l, "afork:parent", &again), XF_OK);
  cr_assert_eq(turn_until(&l, &again, NULL), 0);
  cr_expect_eq(again.rc, XF_OK, "%s", xf_async_errmsg(l.ac));
  cr_expect_str_eq(again.got, "parent");
  cr_expect_eq(xft_info_int(r, "total_connections_received"), after_child,
               "the parent kept its connection");
  loop_close(&l);
  redisFree(r);
  xft_server_stop(&s);
}
