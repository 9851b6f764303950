/* The batch driver (xf_get_or_compute_many) against a real Redis. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fixture.h"

#define N 100

typedef struct keys {
  char buf[N][32];
  const char *ptr[N];
  size_t len[N];
} keys;

static void make_keys(keys *k, const char *prefix, size_t n) {
  for (size_t i = 0; i < n; i++) {
    snprintf(k->buf[i], sizeof k->buf[i], "%s:%zu", prefix, i);
    k->ptr[i] = k->buf[i];
    k->len[i] = strlen(k->buf[i]);
  }
}

/* A loader whose value is "v-" + the key, counting its calls. */
static int key_loader(void *ud, const char *key, size_t keylen, xf_sink *sink) {
  __atomic_add_fetch((int *)ud, 1, __ATOMIC_SEQ_CST);
  char v[64];
  int len = snprintf(v, sizeof v, "v-%.*s", (int)keylen, key);
  return xf_sink_set(sink, v, (size_t)len);
}

static void expect_values(const keys *k, size_t n, const xf_value *v, const int *rcs,
                          xf_source source) {
  for (size_t i = 0; i < n; i++) {
    char want[64];
    snprintf(want, sizeof want, "v-%s", k->buf[i]);
    cr_expect_eq(rcs[i], XF_OK, "key %zu: %s", i, xf_strerror(rcs[i]));
    cr_expect(v[i].data && strcmp(v[i].data, want) == 0, "key %zu: %s, want %s", i,
              v[i].data ? v[i].data : "(null)", want);
    cr_expect_eq(v[i].source, source, "key %zu source %d", i, v[i].source);
  }
}

static void free_values(xf_value *v, size_t n) {
  for (size_t i = 0; i < n; i++)
    xf_value_free(&v[i]);
}

Test(batch, misses_load_once_then_all_hit_in_one_read_each) {
  xft_server s; /* its own: the command counts must be this test's alone */
  cr_assert_eq(xft_server_start(&s, NULL), 0);
  xf_client *c = xft_client_port(s.port, 1);
  redisContext *r = xft_redis_port(s.port);
  keys k;
  make_keys(&k, "batch:all", N);
  xf_policy p = XF_POLICY_INIT;
  p.beta = 0;
  int calls = 0;
  xf_value v[N];
  int rcs[N];
  cr_assert_eq(xf_get_or_compute_many(c, N, k.ptr, k.len, &p, key_loader, &calls, v, rcs),
               XF_OK);
  expect_values(&k, N, v, rcs, XF_SOURCE_LOADER);
  cr_expect_eq(calls, N);
  free_values(v, N);
  long long ro = xft_command_calls(r, "evalsha_ro"), rw = xft_command_calls(r, "evalsha");
  cr_assert_eq(xf_get_or_compute_many(c, N, k.ptr, k.len, &p, key_loader, &calls, v, rcs),
               XF_OK);
  expect_values(&k, N, v, rcs, XF_SOURCE_CACHE);
  cr_expect_eq(calls, N, "no loader call for hits");
  cr_expect_eq(xft_command_calls(r, "evalsha_ro") - ro, N, "one read per key");
  cr_expect_eq(xft_command_calls(r, "evalsha") - rw, 0, "no lease or write for hits");
  free_values(v, N);
  redisFree(r);
  xf_client_close(c);
  xft_server_stop(&s);
}

Test(batch, mixed_hits_and_misses) {
  xf_client *c = xft_client(1);
  keys k;
  make_keys(&k, "batch:mixed", 20);
  xf_policy p = XF_POLICY_INIT;
  p.beta = 0;
  for (size_t i = 0; i < 20; i += 2) {
    char val[64];
    int len = snprintf(val, sizeof val, "v-%s", k.buf[i]);
    cr_assert_eq(xf_set(c, k.ptr[i], k.len[i], val, (size_t)len, &p), XF_OK);
  }
  int calls = 0;
  xf_value v[20];
  int rcs[20];
  cr_assert_eq(xf_get_or_compute_many(c, 20, k.ptr, k.len, &p, key_loader, &calls, v, rcs),
               XF_OK);
  cr_expect_eq(calls, 10);
  for (size_t i = 0; i < 20; i++)
    cr_expect_eq(v[i].source, i % 2 ? XF_SOURCE_LOADER : XF_SOURCE_CACHE, "key %zu", i);
  expect_values(&k, 0, v, rcs, XF_SOURCE_CACHE);
  free_values(v, 20);
  xf_client_close(c);
}

Test(batch, the_same_key_twice_loads_once) {
  xf_client *c = xft_client(1);
  const char *keys2[] = {"batch:dup", "batch:dup", "batch:dup"};
  size_t lens[] = {9, 9, 9};
  xf_policy p = XF_POLICY_INIT;
  int calls = 0;
  xf_value v[3];
  int rcs[3];
  cr_assert_eq(xf_get_or_compute_many(c, 3, keys2, lens, &p, key_loader, &calls, v, rcs),
               XF_OK);
  cr_expect_eq(calls, 1);
  for (int i = 0; i < 3; i++) {
    cr_expect_eq(rcs[i], XF_OK);
    cr_expect_str_eq(v[i].data, "v-batch:dup");
  }
  free_values(v, 3);
  xf_client_close(c);
}

Test(batch, a_bad_key_fails_alone) {
  xf_client *c = xft_client(1);
  const char *ks[] = {"batch:ok1", "", "batch:ok2"};
  size_t lens[] = {9, 0, 9};
  xf_policy p = XF_POLICY_INIT;
  int calls = 0;
  xf_value v[3];
  int rcs[3];
  cr_assert_eq(xf_get_or_compute_many(c, 3, ks, lens, &p, key_loader, &calls, v, rcs),
               XF_OK);
  cr_expect_eq(rcs[0], XF_OK);
  cr_expect_eq(rcs[1], XF_EINVAL);
  cr_expect_null(v[1].data);
  cr_expect_eq(rcs[2], XF_OK);
  cr_expect_eq(calls, 2);
  free_values(v, 3);
  xf_client_close(c);
}

Test(batch, bad_arguments_touch_nothing) {
  xf_client *c = xft_client(1);
  const char *ks[] = {"batch:x"};
  size_t lens[] = {7};
  xf_policy p = XF_POLICY_INIT;
  int calls = 0, rcs[1];
  xf_value v[1];
  cr_expect_eq(xf_get_or_compute_many(NULL, 1, ks, lens, &p, key_loader, &calls, v, rcs),
               XF_EINVAL);
  cr_expect_eq(xf_get_or_compute_many(c, 1, NULL, lens, &p, key_loader, &calls, v, rcs),
               XF_EINVAL);
  cr_expect_eq(xf_get_or_compute_many(c, 1, ks, lens, &p, NULL, &calls, v, rcs), XF_EINVAL);
  cr_expect_eq(xf_get_or_compute_many(c, 1, ks, lens, &p, key_loader, &calls, NULL, rcs),
               XF_EINVAL);
  cr_expect_eq(xf_get_or_compute_many(c, 0, NULL, NULL, &p, key_loader, &calls, NULL, NULL),
               XF_OK);
  cr_expect_eq(calls, 0);
  xf_client_close(c);
}

Test(batch, fails_open_when_redis_is_down) {
  xft_server s;
  cr_assert_eq(xft_server_start(&s, NULL), 0);
  xf_client *c = xft_client_port(s.port, 1);
  xft_server_stop(&s);
  keys k;
  make_keys(&k, "batch:down", 5);
  xf_policy p = XF_POLICY_INIT;
  int calls = 0;
  xf_value v[5];
  int rcs[5];
  cr_assert_eq(xf_get_or_compute_many(c, 5, k.ptr, k.len, &p, key_loader, &calls, v, rcs),
               XF_OK);
  expect_values(&k, 5, v, rcs, XF_SOURCE_UNCACHED);
  cr_expect_eq(calls, 5);
  free_values(v, 5);
  xf_client_close(c);
}

Test(batch, a_connection_the_server_closed_is_reopened_once) {
  static const char *const conf[] = {"--timeout", "1", NULL};
  xft_server s;
  cr_assert_eq(xft_server_start(&s, conf), 0);
  xf_client *c = xft_client_port(s.port, 1);
  keys k;
  make_keys(&k, "batch:idle", 10);
  xf_policy p = XF_POLICY_INIT;
  int calls = 0;
  xf_value v[10];
  int rcs[10];
  cr_assert_eq(xf_get_or_compute_many(c, 10, k.ptr, k.len, &p, key_loader, &calls, v, rcs),
               XF_OK);
  free_values(v, 10);
  xft_sleep_ms(2200); /* past the 1 s idle timeout: the server closes our socket */
  cr_assert_eq(xf_get_or_compute_many(c, 10, k.ptr, k.len, &p, key_loader, &calls, v, rcs),
               XF_OK);
  expect_values(&k, 10, v, rcs, XF_SOURCE_CACHE);
  cr_expect_eq(calls, 10, "hits after the reconnection: no loader call");
  free_values(v, 10);
  xf_client_close(c);
  xft_server_stop(&s);
}
