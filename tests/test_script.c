#include <criterion/criterion.h>
#include <string.h>

#include "clock.h"
#include "fixture.h"
#include "flow_replies.h"
#include "reply.h"
#include "script.h"

Test(script, shas_are_sha1_hex_of_the_embedded_source) {
  redisContext *r = xft_redis();
  for (int i = XF_SCRIPT_READ; i <= XF_SCRIPT_RELEASE; i++) {
    redisReply *rep = xft_cmd(r, "SCRIPT LOAD %b", xf__scripts[i].src, xf__scripts[i].len);
    cr_assert_eq(rep->type, REDIS_REPLY_STRING, "%s: %s", xf__scripts[i].name, rep->str);
    cr_expect_str_eq(rep->str, xf__scripts[i].sha);
    freeReplyObject(rep);
  }
  redisFree(r);
}

Test(script, read_script_declares_no_writes) {
  cr_expect(strncmp(xf__scripts[XF_SCRIPT_READ].src, "#!lua flags=no-writes\n", 22) == 0);
}

Test(script, noscript_after_script_flush_is_recovered) {
  xft_server s; /* private: SCRIPT FLUSH would race the other tests */
  cr_assert_eq(xft_server_start(&s, NULL), 0);
  xf_client *c = xft_client_port(s.port, 1);
  xf_policy p = XF_POLICY_INIT;
  xft_loader l = {.value = "v1"};
  xf_value v;
  cr_assert_eq(xf_get_or_compute(c, "script:flush", 12, &p, xft_load, &l, &v), XF_OK);
  xf_value_free(&v);
  redisContext *r = xft_redis_port(s.port);
  freeReplyObject(xft_cmd(r, "SCRIPT FLUSH"));
  /* Past the clock estimate's refresh: the read is the read script again. */
  xft_sleep_ms(XF_CLOCK_REFRESH_MS / 2 + 50);
  cr_assert_eq(xf_get_or_compute(c, "script:flush", 12, &p, xft_load, &l, &v), XF_OK);
  cr_expect_str_eq(v.data, "v1");
  cr_expect_eq(v.source, XF_SOURCE_CACHE);
  cr_expect_eq(xft_loader_calls(&l), 1);
  xf_value_free(&v);
  redisReply *rep = xft_cmd(r, "SCRIPT EXISTS %s", xf__scripts[XF_SCRIPT_READ].sha);
  cr_expect_eq(rep->element[0]->integer, 1);
  freeReplyObject(rep);
  redisFree(r);
  xf_client_close(c);
  xft_server_stop(&s);
}

Test(script, hits_work_while_writes_are_paused) {
  xft_server s;
  cr_assert_eq(xft_server_start(&s, NULL), 0);
  xf_client *c = xft_client_port(s.port, 1);
  xf_policy p = XF_POLICY_INIT;
  p.beta = 0;
  cr_assert_eq(xf_set(c, "script:paused", 13, "cached", 6, &p), XF_OK);
  redisContext *r = xft_redis_port(s.port);
  freeReplyObject(xft_cmd(r, "CLIENT PAUSE 5000 WRITE"));
  xft_loader l = {.value = "never"};
  xf_value v;
  cr_expect_eq(xf_get_or_compute(c, "script:paused", 13, &p, xft_load, &l, &v), XF_OK);
  cr_expect_str_eq(v.data, "cached");
  cr_expect_eq(xft_loader_calls(&l), 0);
  xf_value_free(&v);
  freeReplyObject(xft_cmd(r, "CLIENT UNPAUSE"));
  redisFree(r);
  xf_client_close(c);
  xft_server_stop(&s);
}

/* ---- a server that cannot run scripts now: BUSY ------------------------------ */

static const char *const busy_config[] = {"--busy-reply-threshold", "10", NULL};

/* Runs a sans-I/O call over r; the server turns busy just before the call
 * sends a SCRIPT LOAD (after the NOSCRIPT that SCRIPT FLUSH causes), so that
 * it is the SCRIPT LOAD that gets BUSY. The loader gives "fresh". */
static int run_call(xf_call *call, redisContext *r, int port, redisContext **busy,
                    xf_value *out) {
  for (xf_call_step step = xf_call_next(call); step != XF_CALL_DONE;) {
    if (step == XF_CALL_SEND) {
      size_t len;
      const char *req = xf_call_request(call, &len);
      if (!*busy && memmem(req, len, "SCRIPT\r\n$4\r\nLOAD", 16))
        *busy = xft_busy_start(port);
      cr_assert_eq(redisAppendFormattedCommand(r, req, len), REDIS_OK);
      void *reply = NULL;
      cr_assert_eq(redisGetReply(r, &reply), REDIS_OK);
      step = xf_call_reply(call, reply, xft_now_ms());
    } else if (step == XF_CALL_LOAD) {
      step = xf_call_loaded(call, "fresh", 5, 1000, xft_now_ms());
    } else {
      step = xf_call_woke(call, xft_now_ms());
    }
  }
  cr_expect(*busy, "no SCRIPT LOAD was sent");
  int rc = xf_call_result(call, out);
  xf_call_free(call);
  return rc;
}

Test(script, script_load_refused_busy_is_unavailable) {
  xft_server s; /* private: a busy server would stall the other tests */
  cr_assert_eq(xft_server_start(&s, busy_config), 0);
  xf_options o = XF_OPTIONS_INIT;
  o.host = "127.0.0.1";
  o.port = s.port;
  o.lazy_connect = 1;
  xf_client *c;
  cr_assert_eq(xf_client_open(&c, &o), XF_OK);
  redisContext *r = xft_redis_port(s.port);
  xf_policy p = XF_POLICY_INIT;
  for (int kind = 0; kind < 3; kind++) {
    freeReplyObject(xft_cmd(r, "SCRIPT FLUSH"));
    xf_call *call;
    if (kind == 0)
      cr_assert_eq(xf_call_start(&call, c, "script:busy", 11, &p, xft_now_ms()), XF_OK);
    else if (kind == 1)
      cr_assert_eq(xf_call_start_set(&call, c, "script:busy", 11, "v", 1, &p, xft_now_ms()),
                   XF_OK);
    else
      cr_assert_eq(xf_call_start_delete(&call, c, "script:busy", 11, xft_now_ms()), XF_OK);
    redisContext *busy = NULL;
    xf_value v;
    int rc = run_call(call, r, s.port, &busy, &v);
    if (kind == 0) { /* get-or-compute fails open */
      cr_expect_eq(rc, XF_OK, "get: %s", xf_errname(rc));
      cr_expect_eq(v.source, XF_SOURCE_UNCACHED);
      cr_expect(v.data && strcmp(v.data, "fresh") == 0);
      xf_value_free(&v);
    } else {
      cr_expect_eq(rc, XF_EUNAVAILABLE, "%s: %s", kind == 1 ? "set" : "delete",
                   xf_errname(rc));
    }
    if (busy)
      xft_busy_stop(s.port, busy);
  }
  redisFree(r);
  xf_client_close(c);
  xft_server_stop(&s);
}

static int blocking_get(xf_client *c, const char *key, xft_loader *l, xf_value *v) {
  xf_policy p = XF_POLICY_INIT;
  return xf_get_or_compute(c, key, strlen(key), &p, xft_load, l, v);
}

/* The commands themselves answered BUSY (the script known or not). */
Test(script, commands_refused_busy_are_unavailable) {
  xft_server s;
  cr_assert_eq(xft_server_start(&s, busy_config), 0);
  xf_client *c = xft_client_port(s.port, 1);
  xf_policy p = XF_POLICY_INIT;
  cr_assert_eq(xf_set(c, "script:busy", 11, "cached", 6, &p), XF_OK);
  redisContext *busy = xft_busy_start(s.port);
  xft_loader l = {.value = "fresh", .len = 5};
  xf_value v;
  cr_expect_eq(blocking_get(c, "script:busy2", &l, &v), XF_OK, "%s", xf_errmsg(c));
  cr_expect_eq(v.source, XF_SOURCE_UNCACHED);
  cr_expect_eq(xft_loader_calls(&l), 1);
  xf_value_free(&v);
  cr_expect_eq(xf_get(c, "script:busy", 11, &v), XF_EUNAVAILABLE, "%s", xf_errmsg(c));
  cr_expect_eq(xf_set(c, "script:busy", 11, "x", 1, &p), XF_EUNAVAILABLE, "%s",
               xf_errmsg(c));
  cr_expect_eq(xf_delete(c, "script:busy", 11), XF_EUNAVAILABLE, "%s", xf_errmsg(c));
  const char *keys[] = {"script:busy", "script:busy3"};
  size_t lens[] = {11, 12};
  xf_value vs[2];
  int rcs[2];
  cr_assert_eq(xf_get_or_compute_many(c, 2, keys, lens, &p, xft_load, &l, vs, rcs), XF_OK);
  for (int i = 0; i < 2; i++) {
    cr_expect_eq(rcs[i], XF_OK, "batch %d: %s", i, xf_errname(rcs[i]));
    cr_expect_eq(vs[i].source, XF_SOURCE_UNCACHED, "batch %d", i);
    xf_value_free(&vs[i]);
  }
  xft_busy_stop(s.port, busy);
  xf_client_close(c);
  xft_server_stop(&s);
}

/* The one classification every driver uses: LOADING (a replica loading its
 * dataset) is unavailable like BUSY, for a call and for its SCRIPT LOAD. */
Test(script, error_replies_are_classified_in_one_place) {
  static const struct {
    const char *resp;
    xf__reply_kind kind;
  } cases[] = {
      {"$1\r\nx\r\n", XF_REPLY_VALUE},
      {"-NOSCRIPT No matching script.\r\n", XF_REPLY_NOSCRIPT},
      {"-MOVED 3999 127.0.0.1:6381\r\n", XF_REPLY_REDIRECT},
      {"-ASK 3999 127.0.0.1:6381\r\n", XF_REPLY_REDIRECT},
      {"-BUSY Redis is busy running a script.\r\n", XF_REPLY_UNAVAILABLE},
      {"-LOADING Redis is loading the dataset in memory\r\n", XF_REPLY_UNAVAILABLE},
      {"-TRYAGAIN Multiple keys request during rehashing of slot\r\n",
       XF_REPLY_UNAVAILABLE},
      {"-NOPERM this user has no permissions\r\n", XF_REPLY_NOPERM},
      {"-WRONGTYPE Operation against a key\r\n", XF_REPLY_WRONGTYPE},
      {"-ERR unknown command\r\n", XF_REPLY_HARD},
      {"-MOVEDX nonsense\r\n", XF_REPLY_HARD},
  };
  xf_client *c = xft_client(1);
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    xf__reply *r = reply(cases[i].resp);
    cr_expect_eq(xf__reply_classify(r), cases[i].kind, "%s", cases[i].resp);
    xf__reply_free(r);
  }
  cr_expect_eq(xf__script_loaded(&c->rt, XF_SCRIPT_READ, reply("-LOADING loading\r\n")),
               XF_EUNAVAILABLE);
  cr_expect(strstr(xf_errmsg(c), "SCRIPT LOAD") && strstr(xf_errmsg(c), "LOADING"), "%s",
            xf_errmsg(c));
  cr_expect_eq(xf__script_loaded(&c->rt, XF_SCRIPT_WRITE, reply("-ERR oops\r\n")), XF_EREDIS);
  xf_client_close(c);
}
