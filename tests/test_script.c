#include <criterion/criterion.h>
#include <string.h>

#include "fixture.h"
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
  cr_assert_eq(xf_get_or_compute(c, "script:flush", 12, &p, xft_load, &l, &v), XF_OK);
  cr_expect_str_eq(v.data, "v1");
  cr_expect_eq(v.source, XF_SOURCE_CACHE);
  cr_expect_eq(l.calls, 1);
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
  cr_expect_eq(l.calls, 0);
  xf_value_free(&v);
  freeReplyObject(xft_cmd(r, "CLIENT UNPAUSE"));
  redisFree(r);
  xf_client_close(c);
  xft_server_stop(&s);
}
