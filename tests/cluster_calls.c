/* See cluster_calls.h. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "cluster_calls.h"

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
