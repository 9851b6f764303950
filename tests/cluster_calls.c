/* See cluster_calls.h. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "cluster_calls.h"
#include "cluster_fixture.h"
#include "script.h"

int xft_key_loader(void *ud, const char *key, size_t keylen, xf_sink *sink) {
  __atomic_add_fetch((int *)ud, 1, __ATOMIC_SEQ_CST);
  char v[96];
  int len = snprintf(v, sizeof v, "v-%.*s", (int)keylen, key);
  return xf_sink_set(sink, v, (size_t)len);
}

xf_policy xft_long_ttl(void) {
  xf_policy p = XF_POLICY_INIT;
  p.ttl_ms = 3600 * 1000;
  p.beta = 0;
  return p;
}

void xft_expect_get(xf_client *c, const char *key, const xf_policy *p, int *calls,
                    xf_source source) {
  xf_value v;
  int rc = xf_get_or_compute(c, key, strlen(key), p, xft_key_loader, calls, &v);
  cr_assert_eq(rc, XF_OK, "%s: %s (%s)", key, xf_strerror(rc), xf_errmsg(c));
  char want[96];
  snprintf(want, sizeof want, "v-%s", key);
  cr_expect_str_eq(v.data, want);
  cr_expect_eq(v.source, source, "%s: source %d, want %d", key, v.source, source);
  xf_value_free(&v);
}

redisContext *xft_monitor(int port) {
  redisContext *m = xft_cluster_redis(port);
  freeReplyObject(xft_cluster_cmd(m, "MONITOR"));
  return m;
}

/* The client address of a MONITOR line ("<time> [<db> <addr>] ..."), into
 * addr; "" when the line is not one. */
static void client_of(const char *line, char *addr, size_t size) {
  const char *at = strchr(line, '['), *sp = at ? strchr(at, ' ') : NULL,
             *end = sp ? strchr(sp, ']') : NULL;
  snprintf(addr, size, "%.*s", end ? (int)(end - sp - 1) : 0, end ? sp + 1 : "");
}

xft_raises xft_raises_seen(redisContext *m, int port) {
  redisContext *a = xft_cluster_redis(port);
  freeReplyObject(xft_cluster_cmd(a, "ECHO xft-monitor-end"));
  redisFree(a);
  char raise[64], from[64] = "";
  snprintf(raise, sizeof raise, "] \"EVALSHA\" \"%s\"",
           xf__scripts[XF_SCRIPT_TAG_BUMP].sha);
  xft_raises seen = {0};
  redisReply *rep;
  while (redisGetReply(m, (void **)&rep) == REDIS_OK) {
    int end = rep->type == REDIS_REPLY_STATUS && strstr(rep->str, "xft-monitor-end");
    if (!end && rep->type == REDIS_REPLY_STATUS && !strstr(rep->str, " lua] ")) {
      char addr[64];
      client_of(rep->str, addr, sizeof addr);
      if (strstr(rep->str, raise)) {
        seen.raises++;
        snprintf(from, sizeof from, "%s", addr);
      } else if (strstr(rep->str, "] \"WAIT\"")) {
        seen.waits++;
        seen.waits_on_the_raise_s_connection += from[0] && strcmp(addr, from) == 0;
      }
    }
    freeReplyObject(rep);
    if (end)
      break;
  }
  redisFree(m);
  return seen;
}
