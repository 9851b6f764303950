/* The sans-I/O call (xf_call_*, xf_reader_*) driven by hand over a plain
 * socket to a real Redis: request bytes written as they are, reply bytes fed
 * back whole or one byte at a time. */
#include <criterion/criterion.h>
#include <string.h>
#include <unistd.h>

#include "entry_peek.h"
#include "fixture.h"

typedef struct wire {
  redisContext *sock; /* only its file descriptor is used */
  xf_reader *reader;
  int byte_at_a_time;
} wire;

/* A connection to the server on port (0 = the binary's shared one). */
static wire open_wire_to(int port, int byte_at_a_time) {
  wire w = {.sock = port ? xft_redis_port(port) : xft_redis(),
            .byte_at_a_time = byte_at_a_time};
  cr_assert_eq(xf_reader_open(&w.reader), XF_OK);
  return w;
}

static wire open_wire(int byte_at_a_time) { return open_wire_to(0, byte_at_a_time); }

static void close_wire(wire *w) {
  xf_reader_close(w->reader);
  redisFree(w->sock);
}

/* Writes the call's request and reads until its reply is complete. */
static xf_reply *exchange(wire *w, const xf_call *call) {
  return xft_call_exchange(w->sock->fd, w->reader, call, w->byte_at_a_time ? 1 : 0);
}

typedef struct script {
  const char *value; /* the loader's; NULL = it fails */
  int loads;
} script;

/* Runs a call to the end as a driver would; returns its code. */
static int drive(wire *w, xf_client *c, const char *key, const xf_policy *p, script *s,
                 xf_value *out) {
  xf_call *call;
  cr_assert_eq(xf_call_start(&call, c, key, strlen(key), p, xft_now_ms()), XF_OK);
  for (xf_call_step step = xf_call_next(call); step != XF_CALL_DONE;) {
    if (step == XF_CALL_SEND) {
      step = xf_call_reply(call, exchange(w, call), xft_now_ms());
    } else if (step == XF_CALL_LOAD) {
      s->loads++;
      step = s->value ? xf_call_loaded(call, s->value, strlen(s->value), 1000, xft_now_ms())
                      : xf_call_load_failed(call, 7, xft_now_ms());
    } else {
      usleep((useconds_t)xf_call_wait_ms(call, xft_now_ms()) * 1000);
      step = xf_call_woke(call, xft_now_ms());
    }
  }
  int rc = xf_call_result(call, out);
  xf_call_free(call);
  return rc;
}

static xf_client *config_client(void) {
  xf_options o = XF_OPTIONS_INIT;
  o.lazy_connect = 1;
  o.port = 1; /* never used for I/O: a call has no socket of its own */
  o.seed = 3;
  xf_client *c;
  cr_assert_eq(xf_client_open(&c, &o), XF_OK);
  return c;
}

Test(call, a_miss_loads_and_writes_then_hits_fed_byte_by_byte) {
  xf_client *c = config_client();
  xf_policy p = XF_POLICY_INIT;
  p.beta = 0;
  for (int bytewise = 0; bytewise < 2; bytewise++) {
    wire w = open_wire(bytewise);
    char key[32];
    snprintf(key, sizeof key, "call:miss:%d", bytewise);
    script s = {.value = "computed"};
    xf_value v;
    cr_assert_eq(drive(&w, c, key, &p, &s, &v), XF_OK, "%s", xf_errmsg(c));
    cr_expect_str_eq(v.data, "computed");
    cr_expect_eq(v.source, XF_SOURCE_LOADER);
    xf_value_free(&v);
    cr_assert_eq(drive(&w, c, key, &p, &s, &v), XF_OK);
    cr_expect_str_eq(v.data, "computed");
    cr_expect_eq(v.source, XF_SOURCE_CACHE);
    cr_expect_eq(s.loads, 1);
    xf_value_free(&v);
    close_wire(&w);
  }
  xf_client_close(c);
}

Test(call, noscript_after_script_flush_is_recovered) {
  xft_server srv; /* its own: a SCRIPT FLUSH would hit the other tests' calls */
  cr_assert_eq(xft_server_start(&srv, NULL), 0);
  xf_client *c = config_client();
  wire w = open_wire_to(srv.port, 0);
  redisContext *r = xft_redis_port(srv.port);
  freeReplyObject(xft_cmd(r, "SCRIPT FLUSH"));
  xf_policy p = XF_POLICY_INIT;
  script s = {.value = "v"};
  xf_value v;
  cr_assert_eq(drive(&w, c, "call:noscript", &p, &s, &v), XF_OK, "%s", xf_errmsg(c));
  cr_expect_str_eq(v.data, "v");
  xf_value_free(&v);
  redisFree(r);
  close_wire(&w);
  xf_client_close(c);
  xft_server_stop(&srv);
}

Test(call, a_failed_loader_caches_nothing) {
  xf_client *c = config_client();
  wire w = open_wire(0);
  xf_policy p = XF_POLICY_INIT;
  script s = {.value = NULL};
  xf_value v;
  cr_expect_eq(drive(&w, c, "call:fails", &p, &s, &v), XF_ELOADER);
  cr_expect_eq(xf_loader_error(c), 7);
  cr_expect_null(v.data);
  redisContext *r = xft_redis();
  cr_expect_eq(xft_int(r, "HEXISTS call:fails v"), 0);
  redisFree(r);
  close_wire(&w);
  xf_client_close(c);
}

Test(call, an_error_reply_and_a_lost_connection) {
  xf_client *c = config_client();
  wire w = open_wire(0);
  redisContext *r = xft_redis();
  freeReplyObject(xft_cmd(r, "SET call:str plain"));
  xf_policy p = XF_POLICY_INIT;
  script s = {.value = "v"};
  xf_value v;
  cr_expect_eq(drive(&w, c, "call:str", &p, &s, &v), XF_EWRONGTYPE);
  xf_call *call;
  cr_assert_eq(xf_call_start(&call, c, "call:io", 7, &p, 0), XF_OK);
  cr_assert_eq(xf_call_next(call), XF_CALL_SEND);
  cr_assert_eq(xf_call_io_failed(call, XF_EIO, 0), XF_CALL_LOAD, "fails open");
  cr_assert_eq(xf_call_loaded(call, "direct", 6, 10, 0), XF_CALL_DONE);
  cr_assert_eq(xf_call_result(call, &v), XF_OK);
  cr_expect_str_eq(v.data, "direct");
  cr_expect_eq(v.source, XF_SOURCE_UNCACHED);
  xf_value_free(&v);
  xf_call_free(call);
  redisFree(r);
  close_wire(&w);
  xf_client_close(c);
}

Test(call, bad_arguments_and_a_call_abandoned_mid_way) {
  xf_client *c = config_client();
  xf_policy p = XF_POLICY_INIT;
  xf_call *call = NULL;
  cr_expect_eq(xf_call_start(NULL, c, "k", 1, &p, 0), XF_EINVAL);
  cr_expect_eq(xf_call_start(&call, NULL, "k", 1, &p, 0), XF_EINVAL);
  cr_expect_eq(xf_call_start(&call, c, "k", 1, NULL, 0), XF_EINVAL);
  cr_assert_eq(xf_call_start(&call, c, "", 0, &p, 0), XF_OK);
  cr_expect_eq(xf_call_next(call), XF_CALL_DONE);
  cr_expect_eq(xf_call_result(call, NULL), XF_EINVAL, "an empty key");
  xf_call_free(call);
  cr_assert_eq(xf_call_start(&call, c, "call:abandoned", 14, &p, 0), XF_OK);
  cr_expect_eq(xf_call_result(call, NULL), XF_EINVAL, "not done yet");
  cr_expect_eq(xf_call_woke(call, 0), XF_CALL_SEND, "a wrong step is ignored");
  xf_call_free(call); /* mid-way: nothing leaks (valgrind) */
  xf_call_free(NULL);
  xf_reader *rd;
  cr_assert_eq(xf_reader_open(&rd), XF_OK);
  cr_assert_eq(xf_reader_feed(rd, "-ERR no\r\n:", 10), XF_OK);
  xf_reply *reply;
  cr_assert_eq(xf_reader_next(rd, &reply), XF_OK);
  const char *msg;
  size_t len;
  cr_expect(xf_reply_is_error(reply, &msg, &len));
  cr_expect_eq(len, 6);
  xf_reply_free(reply);
  cr_assert_eq(xf_reader_next(rd, &reply), XF_OK);
  cr_expect_null(reply, "incomplete");
  cr_assert_eq(xf_reader_feed(rd, "x\r\n", 3), XF_OK);
  cr_expect_eq(xf_reader_next(rd, &reply), XF_EPROTO);
  xf_reader_close(rd);
  xf_client_close(c);
}

/* Sends a one-script call (set, delete) to its end; returns its code. */
static int drive_one(wire *w, xf_call *call) {
  for (xf_call_step step = xf_call_next(call); step != XF_CALL_DONE;)
    step = xf_call_reply(call, exchange(w, call), xft_now_ms());
  int rc = xf_call_result(call, NULL);
  xf_call_free(call);
  return rc;
}

Test(call, set_and_delete_as_calls) {
  xft_server srv; /* its own: it flushes the scripts */
  cr_assert_eq(xft_server_start(&srv, NULL), 0);
  xf_client *c = config_client();
  wire w = open_wire_to(srv.port, 1);
  redisContext *r = xft_redis_port(srv.port);
  freeReplyObject(xft_cmd(r, "SCRIPT FLUSH")); /* the set recovers from NOSCRIPT */
  xf_policy p = XF_POLICY_INIT;
  xf_call *call;
  cr_assert_eq(xf_call_start_set(&call, c, "call:set", 8, "written", 7, &p, 0), XF_OK);
  cr_assert_eq(drive_one(&w, call), XF_OK, "%s", xf_errmsg(c));
  script s = {.value = "loaded"};
  xf_value v;
  cr_assert_eq(drive(&w, c, "call:set", &p, &s, &v), XF_OK);
  cr_expect_str_eq(v.data, "written");
  cr_expect_eq(v.source, XF_SOURCE_CACHE);
  xf_value_free(&v);
  cr_assert_eq(xf_call_start_delete(&call, c, "call:set", 8, 0), XF_OK);
  cr_assert_eq(drive_one(&w, call), XF_OK);
  int rc = drive(&w, c, "call:set", &p, &s, &v);
  cr_assert_eq(rc, XF_OK, "%s: %s", xf_errname(rc), xf_errmsg(c));
  cr_expect_str_eq(v.data, "loaded", "the delete left a miss");
  xf_value_free(&v);
  cr_assert_eq(xf_call_start_set(&call, c, "call:set", 8, "x", 1, &p, 0), XF_OK);
  cr_expect_eq(xf_call_io_failed(call, XF_EIO, 0), XF_CALL_DONE);
  cr_expect_eq(xf_call_result(call, NULL), XF_EIO, "no fail-open for a set");
  xf_call_free(call);
  cr_expect_eq(xf_call_start_set(&call, c, "k", 1, NULL, 3, &p, 0), XF_EINVAL);
  cr_expect_eq(xf_call_start_delete(&call, c, "", 0, 0), XF_EINVAL);
  redisFree(r);
  close_wire(&w);
  xf_client_close(c);
  xft_server_stop(&srv);
}

/* A stream that is not RESP stays broken: every later feed and next says
 * XF_EPROTO (drop the connection), never XF_ENOMEM, which would send a driver
 * looking for a memory problem. */
Test(call, a_reader_after_a_protocol_error_keeps_saying_so) {
  xf_reader *rd;
  cr_assert_eq(xf_reader_open(&rd), XF_OK);
  cr_assert_eq(xf_reader_feed(rd, "+OK\r\n", 5), XF_OK);
  xf_reply *reply;
  cr_assert_eq(xf_reader_next(rd, &reply), XF_OK);
  cr_assert_not_null(reply);
  xf_reply_free(reply);
  cr_assert_eq(xf_reader_feed(rd, "?garbage\r\n", 10), XF_OK);
  cr_expect_eq(xf_reader_next(rd, &reply), XF_EPROTO);
  cr_expect_null(reply);
  for (int i = 0; i < 2; i++) {
    cr_expect_eq(xf_reader_feed(rd, "+OK\r\n", 5), XF_EPROTO, "feed %d", i);
    cr_expect_eq(xf_reader_next(rd, &reply), XF_EPROTO, "next %d", i);
    cr_expect_null(reply);
  }
  xf_reader_close(rd);
}

/* The value moves out once: a second xf_call_result must not look like a
 * cached empty value (XF_OK, data NULL, len 0). */
Test(call, a_result_is_taken_once) {
  xf_client *c = config_client();
  xf_policy p = XF_POLICY_INIT;
  wire w = open_wire(0);
  xf_call *call;
  cr_assert_eq(xf_call_start(&call, c, "call:once", 9, &p, 0), XF_OK);
  for (xf_call_step step = xf_call_next(call); step != XF_CALL_DONE;)
    step = step == XF_CALL_SEND   ? xf_call_reply(call, exchange(&w, call), 0)
           : step == XF_CALL_LOAD ? xf_call_loaded(call, "v", 1, 10, 0)
                                  : xf_call_woke(call, 0);
  xf_value v;
  cr_assert_eq(xf_call_result(call, &v), XF_OK);
  cr_expect_str_eq(v.data, "v");
  xf_value_free(&v);
  cr_expect_eq(xf_call_result(call, &v), XF_EINVAL, "a second result");
  cr_expect_null(v.data);
  cr_expect(strstr(xf_call_errmsg(call), "already taken"), "%s", xf_call_errmsg(call));
  xf_call_free(call);
  /* Asking for the code only (out NULL) takes nothing: the value is still there. */
  cr_assert_eq(xf_call_start(&call, c, "call:once", 9, &p, 0), XF_OK);
  while (xf_call_next(call) == XF_CALL_SEND)
    xf_call_reply(call, exchange(&w, call), 0);
  cr_assert_eq(xf_call_result(call, NULL), XF_OK);
  cr_assert_eq(xf_call_result(call, &v), XF_OK);
  cr_expect_str_eq(v.data, "v");
  xf_value_free(&v);
  xf_call_free(call);
  close_wire(&w);
  xf_client_close(c);
}

/* The call reads no clock: a lease wait's deadlines follow the time it is
 * given. Another caller's lease is live for a minute of real time; the call
 * waits, re-reads and gives up at the fake times it is fed, within a few ms
 * of real time. A fixed time never gives up. */
Test(call, the_call_takes_time_only_from_its_inputs) {
  xf_client *c = config_client();
  wire w = open_wire(0);
  redisContext *r = xft_redis();
  long long lease_until = xft_server_ms(r) + 60000;
  freeReplyObject(xft_cmd(r, "HSET call:fake l other:%lld", lease_until));
  freeReplyObject(xft_cmd(r, "PEXPIRE call:fake 60000"));
  xf_policy p = XF_POLICY_INIT;
  p.wait_ms = 500;
  p.on_wait_timeout = XF_WAIT_FAIL;
  xf_call *call;
  const int64_t t0 = 1000000; /* any clock, far from the process' own */
  cr_assert_eq(xf_call_start(&call, c, "call:fake", 9, &p, t0), XF_OK);
  xf_call_step step = xf_call_next(call);
  while (step == XF_CALL_SEND) /* INFO cluster first (options.cluster AUTO) */
    step = xf_call_reply(call, exchange(&w, call), t0);
  cr_assert_eq(step, XF_CALL_WAIT, "%s", xf_call_errmsg(call));
  cr_expect_eq(xf_call_wait_ms(call, t0), 2, "the first poll");
  cr_expect_eq(xf_call_wait_ms(call, t0 + 1), 1);
  cr_expect_eq(xf_call_wait_ms(call, t0 + 100), 0, "past due: now");
  for (int i = 0; i < 3; i++) { /* the clock stands still: the wait never ends */
    cr_assert_eq(xf_call_woke(call, t0), XF_CALL_SEND);
    cr_assert_eq(xf_call_reply(call, exchange(&w, call), t0), XF_CALL_WAIT);
    cr_expect_eq(xf_call_wait_ms(call, t0), 2, "round %d", i);
  }
  cr_assert_eq(xf_call_woke(call, t0 + 400), XF_CALL_SEND);
  cr_assert_eq(xf_call_reply(call, exchange(&w, call), t0 + 400), XF_CALL_WAIT);
  cr_expect_eq(xf_call_wait_ms(call, t0 + 400), 50, "a quarter of 400 ms, capped at 50");
  cr_assert_eq(xf_call_woke(call, t0 + 500), XF_CALL_SEND);
  cr_assert_eq(xf_call_reply(call, exchange(&w, call), t0 + 500), XF_CALL_DONE);
  cr_expect_eq(xf_call_result(call, NULL), XF_ETIMEDOUT, "%s", xf_call_errmsg(call));
  xf_call_free(call);
  /* The loader's duration is the driver's measure: the entry's delta. */
  freeReplyObject(xft_cmd(r, "DEL call:fake"));
  cr_assert_eq(xf_call_start(&call, c, "call:fake", 9, &p, t0), XF_OK);
  step = xf_call_next(call);
  while (step == XF_CALL_SEND)
    step = xf_call_reply(call, exchange(&w, call), t0);
  cr_assert_eq(step, XF_CALL_LOAD);
  step = xf_call_loaded(call, "v", 1, 250000, t0);
  while (step == XF_CALL_SEND)
    step = xf_call_reply(call, exchange(&w, call), t0);
  cr_assert_eq(xf_call_result(call, NULL), XF_OK);
  xf_call_free(call);
  xft_peek e;
  xft_peek_read(r, "call:fake", "", &e);
  cr_expect_eq(e.d, 250000, "d is %lld (%s entry)", e.d, e.kind);
  xft_peek_free(&e);
  redisFree(r);
  close_wire(&w);
  xf_client_close(c);
}

/* xf_get as a call: the value while within its ttl, else XF_ENOTFOUND. */
Test(call, get_as_a_call) {
  xf_client *c = config_client();
  wire w = open_wire(0);
  xf_policy p = XF_POLICY_INIT;
  xf_call *call;
  cr_assert_eq(xf_call_start_set(&call, c, "call:get", 8, "there", 5, &p, 0), XF_OK);
  cr_assert_eq(drive_one(&w, call), XF_OK);
  cr_assert_eq(xf_call_start_get(&call, c, "call:get", 8, 0), XF_OK);
  while (xf_call_next(call) == XF_CALL_SEND)
    xf_call_reply(call, exchange(&w, call), 0);
  xf_value v;
  cr_assert_eq(xf_call_result(call, &v), XF_OK, "%s", xf_call_errmsg(call));
  cr_expect_str_eq(v.data, "there");
  cr_expect_eq(v.source, XF_SOURCE_CACHE);
  xf_value_free(&v);
  xf_call_free(call);
  cr_assert_eq(xf_call_start_delete(&call, c, "call:get", 8, 0), XF_OK);
  cr_assert_eq(drive_one(&w, call), XF_OK);
  cr_assert_eq(xf_call_start_get(&call, c, "call:get", 8, 0), XF_OK);
  while (xf_call_next(call) == XF_CALL_SEND)
    xf_call_reply(call, exchange(&w, call), 0);
  cr_expect_eq(xf_call_result(call, &v), XF_ENOTFOUND);
  cr_expect_null(v.data);
  xf_call_free(call);
  cr_assert_eq(xf_call_start_get(&call, c, "", 0, 0), XF_OK);
  cr_expect_eq(xf_call_result(call, NULL), XF_EINVAL, "an empty key");
  xf_call_free(call);
  close_wire(&w);
  xf_client_close(c);
}

/* Runs call (a refresh taken from its call) from its LOAD to its end with
 * the loader's value (NULL: it fails); returns its code. */
static int drive_refresh(wire *w, xf_call *call, const char *value) {
  cr_assert_eq(xf_call_next(call), XF_CALL_LOAD, "a refresh starts at its load");
  xf_call_step step = value ? xf_call_loaded(call, value, strlen(value), 1000, xft_now_ms())
                            : xf_call_load_failed(call, 7, xft_now_ms());
  while (step != XF_CALL_DONE)
    step = xf_call_reply(call, exchange(w, call), xft_now_ms());
  int rc = xf_call_result(call, NULL);
  xf_call_free(call);
  return rc;
}

/* Drives a call that should end without loading: its value into v. */
static xf_call *drive_to_done(wire *w, xf_client *c, const char *key, const xf_policy *p,
                              xf_value *v) {
  xf_call *call;
  cr_assert_eq(xf_call_start(&call, c, key, strlen(key), p, xft_now_ms()), XF_OK);
  for (xf_call_step step = xf_call_next(call); step != XF_CALL_DONE;) {
    cr_assert_eq(step, XF_CALL_SEND, "the caller neither loads nor waits");
    step = xf_call_reply(call, exchange(w, call), xft_now_ms());
  }
  cr_assert_eq(xf_call_result(call, v), XF_OK);
  return call;
}

static int cached_is(const char *key, const char *want) {
  xf_client *b = xft_client(0);
  xf_value v;
  int ok = xf_get(b, key, strlen(key), &v) == XF_OK && strcmp(v.data, want) == 0;
  xf_value_free(&v);
  xf_client_close(b);
  return ok;
}

Test(call, background_refresh_is_handed_over_as_a_call_of_its_own) {
  xf_client *c = config_client();
  xf_policy p = XF_POLICY_INIT;
  p.background_refresh = 1;
  p.refresh_ahead = 1e9; /* due as soon as the value has a delta */
  wire w = open_wire(0);
  script s = {.value = "v1"};
  xf_value v;
  cr_assert_eq(drive(&w, c, "call:bg", &p, &s, &v), XF_OK);
  cr_expect_eq(v.source, XF_SOURCE_LOADER, "a miss loads in the call");
  xf_value_free(&v);
  xf_call *call = drive_to_done(&w, c, "call:bg", &p, &v);
  cr_expect_str_eq(v.data, "v1");
  cr_expect_eq(v.source, XF_SOURCE_CACHE);
  xf_value_free(&v);
  xf_call *refresh = xf_call_take_refresh(call);
  cr_assert_not_null(refresh, "the early refresh's winner hands it over");
  cr_expect_null(xf_call_take_refresh(call), "once");
  xf_call_free(call);
  cr_expect(cached_is("call:bg", "v1"));
  cr_expect_eq(drive_refresh(&w, refresh, "v2"), XF_OK);
  cr_expect(cached_is("call:bg", "v2"), "the refresh wrote");
  /* A failed refresh: the value stays, the lease is released (the next
   * call wins the refresh again). */
  call = drive_to_done(&w, c, "call:bg", &p, &v);
  xf_value_free(&v);
  refresh = xf_call_take_refresh(call);
  xf_call_free(call);
  cr_assert_not_null(refresh);
  cr_expect_eq(drive_refresh(&w, refresh, NULL), XF_ELOADER);
  cr_expect(cached_is("call:bg", "v2"), "the value is kept");
  call = drive_to_done(&w, c, "call:bg", &p, &v);
  xf_value_free(&v);
  refresh = xf_call_take_refresh(call);
  xf_call_free(call);
  cr_assert_not_null(refresh, "the lease was released");
  cr_expect_eq(drive_refresh(&w, refresh, "v3"), XF_OK);
  call = drive_to_done(&w, c, "call:bg", &p, &v);
  xf_value_free(&v);
  xf_call_free(call); /* a refresh never taken goes with its call (ASan, valgrind) */
  close_wire(&w);
  xf_client_close(c);
}

/* The default policy (background_refresh AUTO) keeps an early refresh in the
 * call here: a sans-I/O driver takes refreshes only when its policy says
 * XF_BACKGROUND_ON (a refresh it never took would hold the key's lease). */
Test(call, by_default_an_early_refresh_loads_in_the_call) {
  xf_client *c = config_client();
  xf_policy p = XF_POLICY_INIT;
  p.refresh_ahead = 1e9; /* due as soon as the value has a delta */
  wire w = open_wire(0);
  script s = {.value = "v1"};
  xf_value v;
  cr_assert_eq(drive(&w, c, "call:bgdefault", &p, &s, &v), XF_OK);
  cr_expect_eq(v.source, XF_SOURCE_LOADER);
  xf_value_free(&v);
  s.value = "v2";
  cr_assert_eq(drive(&w, c, "call:bgdefault", &p, &s, &v), XF_OK);
  cr_expect_eq(s.loads, 2, "the early refresh was the call's LOAD");
  cr_expect_eq(v.source, XF_SOURCE_LOADER);
  cr_expect_str_eq(v.data, "v2");
  xf_value_free(&v);
  cr_expect(cached_is("call:bgdefault", "v2"));
  close_wire(&w);
  xf_client_close(c);
}
