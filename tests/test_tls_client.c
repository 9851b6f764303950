/* The blocking, batch and pool drivers over TLS (options.tls) against real
 * TLS redis-servers (tls_fixture.c): hits, single flight, refusals worded
 * for people, mutual TLS, one handshake per connection. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <string.h>
#include <unistd.h>

#include "client.h"
#include "tls.h"
#include "tls_fixture.h"
#include "xfetch.h"

/* A refused handshake ends well before the clients' 20 s timeouts: it fails
 * fast, not by waiting one out. 5 s leaves a busy machine under ASan or
 * valgrind room (1 s was missed under ASan in a busy run). */
#define QUICK_MS 5000

static xf_options tls_opts(int port) {
  xf_options o = XF_OPTIONS_INIT;
  o.host = "127.0.0.1";
  o.port = port;
  o.connect_timeout_ms = o.command_timeout_ms = 20000;
  o.key_prefix = "tlsc:";
  o.tls.enable = 1;
  o.tls.ca_file = xft_tls_file("ca.crt");
  return o;
}

static int loads;
static int loader(void *ud, const char *key, size_t keylen, xf_sink *sink) {
  (void)ud, (void)key, (void)keylen;
  __atomic_add_fetch(&loads, 1, __ATOMIC_RELAXED);
  return xf_sink_set(sink, "tls-value", 9);
}

static void unique_key(char *buf, size_t n, const char *what) {
  snprintf(buf, n, "%s:%d:%ld", what, getpid(), (long)xft_now_ms());
}

Test(tls_client, miss_then_hit_with_one_handshake) {
  xf_options o = tls_opts(xft_tls_port());
  xf_client *c;
  cr_assert_eq(xf_client_open(&c, &o), XF_OK);
  xf_policy p = XF_POLICY_INIT;
  char key[64];
  unique_key(key, sizeof key, "mh");
  xf_value v;
  cr_assert_eq(xf_get_or_compute(c, key, strlen(key), &p, loader, NULL, &v), XF_OK);
  cr_assert_eq(v.source, XF_SOURCE_LOADER);
  xf_value_free(&v);
  for (int i = 0; i < 20; i++) {
    cr_assert_eq(xf_get_or_compute(c, key, strlen(key), &p, loader, NULL, &v), XF_OK);
    cr_assert_eq(v.source, XF_SOURCE_CACHE);
    cr_assert_eq(v.len, 9);
    cr_assert_eq(memcmp(v.data, "tls-value", 9), 0);
    xf_value_free(&v);
  }
  cr_assert_eq(xf__tls_handshakes(c->tls), 1, "one handshake per connection");
  xf_client_close(c);
}

Test(tls_client, a_batch_reads_over_tls) {
  xf_options o = tls_opts(xft_tls_port());
  xf_client *c;
  cr_assert_eq(xf_client_open(&c, &o), XF_OK);
  xf_policy p = XF_POLICY_INIT;
  char k[3][64];
  const char *keys[3];
  size_t lens[3];
  for (int i = 0; i < 3; i++) {
    unique_key(k[i], sizeof k[i], i == 0 ? "b0" : i == 1 ? "b1" : "b2");
    keys[i] = k[i], lens[i] = strlen(k[i]);
  }
  xf_value v[3];
  int rcs[3];
  for (int round = 0; round < 2; round++) {
    cr_assert_eq(xf_get_or_compute_many(c, 3, keys, lens, &p, loader, NULL, v, rcs), XF_OK);
    for (int i = 0; i < 3; i++) {
      cr_assert_eq(rcs[i], XF_OK);
      cr_assert_eq(v[i].source, round ? XF_SOURCE_CACHE : XF_SOURCE_LOADER);
      xf_value_free(&v[i]);
    }
  }
  xf_client_close(c);
}

struct race {
  xf_pool *pool;
  const char *key;
  int rc;
};

static void *one_caller(void *arg) {
  struct race *r = arg;
  xf_policy p = XF_POLICY_INIT;
  xf_value v;
  r->rc = xf_pool_get_or_compute(r->pool, r->key, strlen(r->key), &p, loader, NULL, &v);
  if (r->rc == XF_OK && (v.len != 9 || memcmp(v.data, "tls-value", 9) != 0))
    r->rc = -100;
  xf_value_free(&v);
  return NULL;
}

Test(tls_client, sixteen_threads_on_a_cold_key_load_once) {
  xf_options o = tls_opts(xft_tls_port());
  xf_pool *pool;
  cr_assert_eq(xf_pool_open(&pool, &o, 16, 0), XF_OK);
  char key[64];
  unique_key(key, sizeof key, "cold");
  __atomic_store_n(&loads, 0, __ATOMIC_RELAXED);
  pthread_t t[16];
  struct race r[16];
  for (int i = 0; i < 16; i++) {
    r[i] = (struct race){pool, key, 0};
    pthread_create(&t[i], NULL, one_caller, &r[i]);
  }
  for (int i = 0; i < 16; i++) /* all of them, before an assertion leaves r */
    pthread_join(t[i], NULL);
  for (int i = 0; i < 16; i++)
    cr_assert_eq(r[i].rc, XF_OK, "thread %d: %d", i, r[i].rc);
  cr_assert_eq(__atomic_load_n(&loads, __ATOMIC_RELAXED), 1);
  xf_pool_close(pool);
}

/* A TLS failure is XF_ETLS from a lazy client's first call (the reason in
 * xf_errmsg) and again from the breaker's refusals: never ECONNECT, never
 * served fail-open. */
static void assert_refused(xf_options o, const char *words) {
  o.lazy_connect = 1;
  xf_client *c;
  cr_assert_eq(xf_client_open(&c, &o), XF_OK);
  xf_policy p = XF_POLICY_INIT;
  xf_value v;
  __atomic_store_n(&loads, 0, __ATOMIC_RELAXED);
  int64_t t0 = xft_now_ms();
  int rc = xf_get_or_compute(c, "refused", 7, &p, loader, NULL, &v);
  cr_assert_eq(rc, XF_ETLS, "%d: %s", rc, xf_errmsg(c));
  cr_assert_lt(xft_now_ms() - t0, QUICK_MS);
  cr_assert(strstr(xf_errmsg(c), words), "%s", xf_errmsg(c));
  cr_assert_eq(__atomic_load_n(&loads, __ATOMIC_RELAXED), 0,
               "a TLS failure is not served fail-open");
  cr_assert_eq(xf_get_or_compute(c, "refused", 7, &p, loader, NULL, &v), XF_ETLS);
  cr_assert(strstr(xf_errmsg(c), words), "breaker: %s", xf_errmsg(c));
  cr_assert_eq(xf_ping(c), XF_ETLS);
  xf_client_close(c);
  o.lazy_connect = 0;
  cr_assert_eq(xf_client_open(&c, &o), XF_ETLS);
}

Test(tls_client, a_wrong_ca_is_refused_as_not_trusted) {
  xf_options o = tls_opts(xft_tls_port());
  o.tls.ca_file = xft_tls_file("other-ca.crt");
  assert_refused(o, "certificate not trusted");
}

Test(tls_client, a_wrong_host_name_is_refused_as_a_mismatch) {
  xf_options o = tls_opts(xft_tls_port());
  o.tls.server_name = "redis.example.org";
  assert_refused(o, "host name mismatch");
}

Test(tls_client, mutual_tls_without_a_client_certificate_is_refused) {
  assert_refused(tls_opts(xft_mtls_port()), "client certificate");
}

Test(tls_client, mutual_tls_with_a_client_certificate_hits) {
  xf_options o = tls_opts(xft_mtls_port());
  o.tls.cert_file = xft_tls_file("client.crt");
  o.tls.key_file = xft_tls_file("client.key");
  xf_client *c;
  cr_assert_eq(xf_client_open(&c, &o), XF_OK);
  xf_policy p = XF_POLICY_INIT;
  xf_value v;
  char key[64];
  unique_key(key, sizeof key, "mtls");
  for (int i = 0; i < 2; i++) {
    cr_assert_eq(xf_get_or_compute(c, key, strlen(key), &p, loader, NULL, &v), XF_OK);
    cr_assert_eq(v.source, i ? XF_SOURCE_CACHE : XF_SOURCE_LOADER);
    xf_value_free(&v);
  }
  xf_client_close(c);
}

Test(tls_client, plain_tcp_to_a_tls_port_errors_quickly) {
  xf_options o = tls_opts(xft_tls_port());
  memset(&o.tls, 0, sizeof o.tls);
  o.lazy_connect = 1;
  xf_client *c;
  cr_assert_eq(xf_client_open(&c, &o), XF_OK);
  int64_t t0 = xft_now_ms();
  int rc = xf_ping(c);
  cr_assert(rc == XF_EIO || rc == XF_ECONNECT, "%d", rc);
  cr_assert_lt(xft_now_ms() - t0, QUICK_MS);
  cr_assert(strstr(xf_errmsg(c), "rediss://"), "%s", xf_errmsg(c));
  xf_client_close(c);
}

Test(tls_client, a_ca_file_that_cannot_be_loaded_is_an_invalid_argument) {
  xf_options o = tls_opts(xft_tls_port());
  o.tls.ca_file = "/nonexistent/ca.pem";
  xf_client *c;
  cr_assert_eq(xf_client_open(&c, &o), XF_EINVAL);
  cr_assert_null(c);
}

/* An ACL user (made over the server's plain port) that may run xfetch's
 * commands, unique per process. */
static void acl_user(char *name, size_t n) {
  snprintf(name, n, "tlsc-%d", getpid());
  redisContext *r = xft_redis_port(xft_tls_plain_port());
  redisReply *ok = xft_cmd(r, "ACL SETUSER %s on >s3cret ~* +@all", name);
  cr_assert(ok && ok->type == REDIS_REPLY_STATUS, "ACL SETUSER refused");
  freeReplyObject(ok);
  redisFree(r);
}

Test(tls_client, an_acl_user_with_its_password_hits_over_tls) {
  char user[64], key[64];
  acl_user(user, sizeof user);
  unique_key(key, sizeof key, "acl");
  xf_options o = tls_opts(xft_tls_port());
  o.username = user;
  o.password = "s3cret";
  xf_client *c;
  cr_assert_eq(xf_client_open(&c, &o), XF_OK);
  xf_policy p = XF_POLICY_INIT;
  xf_value v;
  for (int i = 0; i < 2; i++) {
    cr_assert_eq(xf_get_or_compute(c, key, strlen(key), &p, loader, NULL, &v), XF_OK, "%s",
                 xf_errmsg(c));
    cr_assert_eq(v.source, i ? XF_SOURCE_CACHE : XF_SOURCE_LOADER);
    xf_value_free(&v);
  }
  xf_client_close(c);
}

/* A wrong password over TLS is XF_EAUTH, worded by the server, not a TLS
 * failure nor a fail-open. */
Test(tls_client, a_wrong_password_over_tls_is_refused_clearly) {
  char user[64];
  acl_user(user, sizeof user);
  xf_options o = tls_opts(xft_tls_port());
  o.username = user;
  o.password = "not-it";
  xf_client *c = NULL;
  cr_assert_eq(xf_client_open(&c, &o), XF_EAUTH);
  o.lazy_connect = 1;
  cr_assert_eq(xf_client_open(&c, &o), XF_OK);
  xf_policy p = XF_POLICY_INIT;
  xf_value v;
  __atomic_store_n(&loads, 0, __ATOMIC_RELAXED);
  cr_assert_eq(xf_get_or_compute(c, "acl-wrong", 9, &p, loader, NULL, &v), XF_EAUTH);
  cr_assert(strstr(xf_errmsg(c), "WRONGPASS"), "%s", xf_errmsg(c));
  cr_assert_eq(__atomic_load_n(&loads, __ATOMIC_RELAXED), 0);
  xf_client_close(c);
}
