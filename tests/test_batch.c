/* The batch driver (xf_get_or_compute_many) against a real Redis. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "fixture.h"
#include "now.h"
#include "thread_fail.h"

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

/* The batch of a client writing format (entries of that format): misses
 * load once, then hits are plain reads, `reads` calls of cmd a batch. */
static void load_once_then_hit(int format, const char *cmd, long long reads) {
  xft_server s; /* its own: the command counts must be this test's alone */
  cr_assert_eq(xft_server_start(&s, NULL), 0);
  xf_client *c = xft_client_format(s.port, 1, format);
  redisContext *r = xft_redis_port(s.port);
  keys k;
  make_keys(&k, "batch:all", N);
  xf_policy p = XF_POLICY_INIT;
  p.beta = 0;
  int calls = 0;
  xf_value v[N];
  int rcs[N];
  int64_t t0 = xft_now_ms(); /* the clock estimate is learned after this */
  cr_assert_eq(xf_get_or_compute_many(c, N, k.ptr, k.len, &p, key_loader, &calls, v, rcs),
               XF_OK);
  expect_values(&k, N, v, rcs, XF_SOURCE_LOADER);
  cr_expect_eq(calls, N);
  free_values(v, N);
  for (int round = 0; round < 2; round++) { /* the first may load read_many */
    long long ro = xft_command_calls(r, "evalsha_ro"), rw = xft_command_calls(r, "evalsha"),
              hm = xft_command_calls(r, cmd);
    cr_assert_eq(xf_get_or_compute_many(c, N, k.ptr, k.len, &p, key_loader, &calls, v, rcs),
                 XF_OK);
    expect_values(&k, N, v, rcs, XF_SOURCE_CACHE);
    cr_expect_eq(calls, N, "no loader call for hits");
    /* Round 1 reads plainly while the clock estimate learned since t0 is
     * younger than half its refresh period (500 ms): judged exactly when
     * the load and both rounds took less than that; on a busy machine, the
     * estimate may be old and the batch's read goes as one read script. */
    long long scripts = xft_command_calls(r, "evalsha_ro") - ro,
              plain = xft_command_calls(r, cmd) - hm;
    if (round == 1 && xft_now_ms() - t0 < 500) {
      cr_expect_eq(scripts, 0, "no script for hits");
      cr_expect_eq(plain, reads, "%lld %s a batch", reads, cmd);
    } else if (round == 1) {
      cr_expect_leq(scripts, 1, "%lld read scripts: one at most (one node)", scripts);
      cr_expect_leq(plain, reads, "%lld %s, at most %lld", plain, cmd, reads);
    }
    cr_expect_eq(xft_command_calls(r, "evalsha") - rw, 0, "no lease or write for hits");
    free_values(v, N);
  }
  redisFree(r);
  xf_client_close(c);
  xft_server_stop(&s);
}

Test(batch, misses_load_once_then_all_hit_in_one_mget) {
  load_once_then_hit(XF_ENTRY_DEFAULT, "mget", 1); /* format 2: one MGET per node */
}

/* Format 1 (a fleet that keeps hashes): one HMGET per key, pipelined. */
Test(batch, format1_misses_load_once_then_all_hit_in_one_hmget_per_key) {
  load_once_then_hit(XF_ENTRY_HASH, "hmget", N);
}

static void warm(xf_client *c, const keys *k, size_t n, const xf_policy *p) {
  for (size_t i = 0; i < n; i++) {
    char val[64];
    int len = snprintf(val, sizeof val, "v-%s", k->buf[i]);
    cr_assert_eq(xf_set(c, k->ptr[i], k->len[i], val, (size_t)len, p), XF_OK);
  }
}

Test(batch, hits_survive_script_flush) {
  xft_server srv; /* its own: a SCRIPT FLUSH would race the other tests' calls */
  cr_assert_eq(xft_server_start(&srv, NULL), 0);
  xf_client *c = xft_client_port(srv.port, 1);
  redisContext *r = xft_redis_port(srv.port);
  keys k;
  make_keys(&k, "batch:flush", 10);
  xf_policy p = XF_POLICY_INIT;
  p.beta = 0;
  warm(c, &k, 10, &p);
  int calls = 0, rcs[10];
  xf_value v[10];
  for (int round = 0; round < 2; round++) {
    redisReply *ok = redisCommand(r, "SCRIPT FLUSH");
    freeReplyObject(ok);
    cr_assert_eq(
        xf_get_or_compute_many(c, 10, k.ptr, k.len, &p, key_loader, &calls, v, rcs), XF_OK);
    expect_values(&k, 10, v, rcs, XF_SOURCE_CACHE);
    free_values(v, 10);
  }
  cr_expect_eq(calls, 0);
  redisFree(r);
  xf_client_close(c);
  xft_server_stop(&srv);
}

Test(batch, a_key_of_the_wrong_type_fails_alone) {
  xf_client *c = xft_client(1);
  redisContext *r = xft_redis();
  keys k;
  make_keys(&k, "batch:wt", 3);
  xf_policy p = XF_POLICY_INIT;
  p.beta = 0;
  warm(c, &k, 3, &p);
  redisReply *ok = redisCommand(r, "SET %s plain", k.buf[1]);
  freeReplyObject(ok);
  int calls = 0, rcs[3];
  xf_value v[3];
  for (int round = 0; round < 2; round++) { /* the first call finds the mode */
    cr_assert_eq(xf_get_or_compute_many(c, 3, k.ptr, k.len, &p, key_loader, &calls, v, rcs),
                 XF_OK);
    cr_expect_eq(rcs[0], XF_OK);
    cr_expect_eq(rcs[1], XF_EWRONGTYPE);
    cr_expect_null(v[1].data);
    cr_expect_eq(rcs[2], XF_OK);
    cr_expect_str_eq(v[2].data, "v-batch:wt:2");
    free_values(v, 3);
  }
  cr_expect_eq(calls, 0);
  redisFree(r);
  xf_client_close(c);
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

/* ---- the batch loader ------------------------------------------------------ */

typedef struct batch_calls {
  int calls, fail_with, leave_unset;
  size_t n;
  char keys[N][32];
} batch_calls;

/* Records the keys of its (last) call; values "v-" + key. */
static int batch_loader(void *ud, size_t n, const char *const *ks, const size_t *lens,
                        xf_sink *const *sinks) {
  batch_calls *b = ud;
  b->calls++;
  b->n = n;
  for (size_t i = 0; i < n; i++) {
    snprintf(b->keys[i], sizeof b->keys[i], "%.*s", (int)lens[i], ks[i]);
    if ((int)i == b->leave_unset - 1)
      continue;
    char v[64];
    int len = snprintf(v, sizeof v, "v-%.*s", (int)lens[i], ks[i]);
    xf_sink_set(sinks[i], v, (size_t)len);
  }
  return b->fail_with;
}

static int by_str(const void *a, const void *b) { return strcmp(a, b); }

Test(batch, a_batch_loader_gets_exactly_the_cold_keys_in_one_call) {
  xf_client *c = xft_client(1);
  keys k;
  make_keys(&k, "batch:bl", N);
  xf_policy p = XF_POLICY_INIT;
  p.beta = 0;
  for (size_t i = 0; i < N; i++) /* 30 cold: every key i % 10 < 3 */
    if (i % 10 >= 3) {
      char val[64];
      int len = snprintf(val, sizeof val, "v-%s", k.buf[i]);
      cr_assert_eq(xf_set(c, k.ptr[i], k.len[i], val, (size_t)len, &p), XF_OK);
    }
  batch_calls b = {0};
  xf_value v[N];
  int rcs[N];
  cr_assert_eq(
      xf_get_or_compute_many_batch(c, N, k.ptr, k.len, &p, batch_loader, &b, v, rcs),
      XF_OK);
  cr_expect_eq(b.calls, 1);
  cr_assert_eq(b.n, 30);
  char want[30][32];
  for (size_t i = 0, j = 0; i < N; i++)
    if (i % 10 < 3)
      snprintf(want[j++], sizeof want[0], "%s", k.buf[i]);
  qsort(b.keys, 30, sizeof b.keys[0], by_str);
  qsort(want, 30, sizeof want[0], by_str);
  for (size_t j = 0; j < 30; j++)
    cr_expect_str_eq(b.keys[j], want[j]);
  for (size_t i = 0; i < N; i++) {
    char val[64];
    snprintf(val, sizeof val, "v-%s", k.buf[i]);
    cr_expect_eq(rcs[i], XF_OK, "key %zu", i);
    cr_expect_str_eq(v[i].data, val);
    cr_expect_eq(v[i].source, i % 10 < 3 ? XF_SOURCE_LOADER : XF_SOURCE_CACHE, "key %zu",
                 i);
  }
  free_values(v, N);
  /* Now all cached: no call. */
  cr_assert_eq(
      xf_get_or_compute_many_batch(c, N, k.ptr, k.len, &p, batch_loader, &b, v, rcs),
      XF_OK);
  cr_expect_eq(b.calls, 1);
  expect_values(&k, N, v, rcs, XF_SOURCE_CACHE);
  free_values(v, N);
  xf_client_close(c);
}

Test(batch, a_failed_batch_load_fails_its_keys_only) {
  xf_client *c = xft_client(1);
  keys k;
  make_keys(&k, "batch:blf", 4);
  xf_policy p = XF_POLICY_INIT;
  p.beta = 0;
  warm(c, &k, 2, &p); /* keys 0, 1 cached; 2, 3 cold */
  batch_calls b = {.fail_with = 7};
  xf_value v[4];
  int rcs[4];
  cr_assert_eq(
      xf_get_or_compute_many_batch(c, 4, k.ptr, k.len, &p, batch_loader, &b, v, rcs),
      XF_OK);
  cr_expect_eq(b.calls, 1);
  expect_values(&k, 2, v, rcs, XF_SOURCE_CACHE);
  cr_expect_eq(rcs[2], XF_ELOADER);
  cr_expect_eq(rcs[3], XF_ELOADER);
  cr_expect_eq(xf_loader_error(c), 7);
  free_values(v, 4);
  /* Nothing was cached, the leases were released: a loader that leaves key
   * 3's sink unset fails that key alone. */
  b = (batch_calls){.leave_unset = 2};
  cr_assert_eq(
      xf_get_or_compute_many_batch(c, 4, k.ptr, k.len, &p, batch_loader, &b, v, rcs),
      XF_OK);
  cr_expect_eq(b.calls, 1);
  cr_expect_eq(b.n, 2);
  cr_expect_eq(rcs[0] | rcs[1], XF_OK);
  int unset = strcmp(b.keys[1], k.buf[2]) == 0 ? 2 : 3;
  cr_expect_eq(rcs[unset], XF_ELOADER);
  cr_expect_eq(rcs[5 - unset], XF_OK);
  cr_expect_eq(v[5 - unset].source, XF_SOURCE_LOADER);
  free_values(v, 4);
  cr_expect_eq(xf_get_or_compute_many_batch(c, 1, k.ptr, k.len, &p, NULL, &b, v, rcs),
               XF_EINVAL);
  xf_client_close(c);
}

Test(batch, an_acl_denying_some_keys_fails_those_keys_only) {
  xf_client *setup = xft_client(1);
  redisContext *r = xft_redis();
  keys k;
  make_keys(&k, "batch:acl", 3);
  xf_policy p = XF_POLICY_INIT;
  p.beta = 0;
  warm(setup, &k, 3, &p);
  xf_client_close(setup);
  freeReplyObject(
      xft_cmd(r, "ACL SETUSER batchacl on >pw ~batch:acl:0 ~batch:acl:2 +@all"));
  xf_options o = XF_OPTIONS_INIT;
  o.port = xft_port();
  o.username = "batchacl";
  o.password = "pw";
  xf_client *c = NULL;
  cr_assert_eq(xf_client_open(&c, &o), XF_OK);
  int calls = 0, rcs[3];
  xf_value v[3];
  for (int round = 0; round < 2; round++) { /* the second reads with read_many */
    cr_assert_eq(xf_get_or_compute_many(c, 3, k.ptr, k.len, &p, key_loader, &calls, v, rcs),
                 XF_OK);
    cr_expect_eq(rcs[0], XF_OK, "%s", xf_strerror(rcs[0]));
    cr_expect_eq(rcs[1], XF_ENOPERM, "%s", xf_strerror(rcs[1]));
    cr_expect_eq(rcs[2], XF_OK, "%s", xf_strerror(rcs[2]));
    cr_expect_str_eq(v[2].data, "v-batch:acl:2");
    free_values(v, 3);
  }
  cr_expect_eq(calls, 0);
  xf_client_close(c);
  freeReplyObject(xft_cmd(r, "ACL DELUSER batchacl"));
  redisFree(r);
}

Test(batch, a_large_batch_reads_in_chunks_of_512) {
  xft_server s; /* its own: the command counts must be this test's alone */
  cr_assert_eq(xft_server_start(&s, NULL), 0);
  /* 10 s timeouts: a 512-key chunk under ASan on a busy run took past 1 s (its
   * keys then read as not cached) */
  xf_client *c = xft_client_patient(s.port, 1);
  redisContext *r = xft_redis_port(s.port);
  enum { BIG = 1100 };
  static char buf[BIG][32];
  static const char *ks[BIG];
  static size_t lens[BIG];
  static xf_value v[BIG];
  static int rcs[BIG];
  for (int i = 0; i < BIG; i++) {
    snprintf(buf[i], sizeof buf[i], "batch:big:%d", i);
    ks[i] = buf[i];
    lens[i] = strlen(buf[i]);
  }
  xf_policy p = XF_POLICY_INIT;
  p.beta = 0;
  int calls = 0;
  for (int round = 0; round < 3; round++) { /* loads; loads read_many; counted */
    long long ro = xft_command_calls(r, "evalsha_ro");
    if (round == 2) /* the clock estimate is old: the reads are scripts again */
      xft_sleep_ms(XF_CLOCK_REFRESH_MS / 2 + 50);
    cr_assert_eq(xf_get_or_compute_many(c, BIG, ks, lens, &p, key_loader, &calls, v, rcs),
                 XF_OK);
    for (int i = 0; i < BIG; i++) {
      cr_expect_eq(rcs[i], XF_OK, "key %d", i);
      cr_expect_eq(v[i].source, round ? XF_SOURCE_CACHE : XF_SOURCE_LOADER,
                   "round %d, key %d: source %d", round, i, (int)v[i].source);
      xf_value_free(&v[i]);
    }
    if (round == 2)
      cr_expect_eq(xft_command_calls(r, "evalsha_ro") - ro, 3, "512 + 512 + 76 keys");
  }
  cr_expect_eq(calls, BIG);
  redisFree(r);
  xf_client_close(c);
  xft_server_stop(&s);
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

/* ---- leases while the keys load one after the other ----------------------- */

enum { TURNS = 24 };

/* Counts loads per key ("<prefix>:<i>"), slowly; the first load lets the
 * second client in. */
typedef struct turns {
  int loads[TURNS];
  int started;
  int sleep_ms;
} turns;

static int turn_of(const char *key, size_t keylen) {
  const char *colon = memrchr(key, ':', keylen);
  return colon ? atoi(colon + 1) : -1;
}

static int slow_key_loader(void *ud, const char *key, size_t keylen, xf_sink *sink) {
  turns *t = ud;
  int i = turn_of(key, keylen);
  if (i < 0 || i >= TURNS)
    return -1; /* not this test's key: fails the test by its rc */
  __atomic_add_fetch(&t->loads[i], 1, __ATOMIC_SEQ_CST);
  __atomic_store_n(&t->started, 1, __ATOMIC_SEQ_CST);
  xft_sleep_ms(t->sleep_ms);
  char v[64];
  int len = snprintf(v, sizeof v, "v-%.*s", (int)keylen, key);
  return xf_sink_set(sink, v, (size_t)len);
}

/* What both clients' leases did, in time order: printed for a key loaded
 * twice, so a failure on a busy machine says why. */
enum { TIMELINE = 512 };
typedef struct timeline {
  pthread_mutex_t mu;
  int64_t t0_ms;
  size_t n;
  struct {
    int64_t ms;
    int who, type, rc, turn;
  } ev[TIMELINE];
} timeline;

typedef struct witness {
  timeline *tl;
  int who; /* 1: the batch, 2: the second client */
} witness;

static void note_event(const xf_event *ev, void *ud) {
  const witness *w = ud;
  switch (ev->type) {
  case XF_EV_LEASE_WON:
  case XF_EV_LEASE_LOST:
  case XF_EV_LEASE_RENEWED:
  case XF_EV_LOAD_START:
  case XF_EV_FAIL_OPEN:
  case XF_EV_SUPERSEDED:
  case XF_EV_RECONNECT:
  case XF_EV_BREAKER_OPEN:
  case XF_EV_WAIT:
    break;
  default:
    return;
  }
  timeline *tl = w->tl;
  pthread_mutex_lock(&tl->mu);
  if (tl->n < TIMELINE)
    tl->ev[tl->n++] =
        (__typeof__(tl->ev[0])){xf__now_ms() - tl->t0_ms, w->who, ev->type, ev->rc,
                                ev->key ? turn_of(ev->key, ev->keylen) : -1};
  pthread_mutex_unlock(&tl->mu);
}

static void print_timeline(timeline *tl, int turn) {
  pthread_mutex_lock(&tl->mu);
  for (size_t j = 0; j < tl->n; j++)
    if (tl->ev[j].turn == turn || tl->ev[j].turn < 0)
      cr_log_warn("key %d: +%lld ms client %d %s rc %d", turn, (long long)tl->ev[j].ms,
                  tl->ev[j].who, xf_event_name(tl->ev[j].type), tl->ev[j].rc);
  pthread_mutex_unlock(&tl->mu);
}

/* A client of port whose events w notes: XF_OK or the open's code. */
static int open_witnessed(xf_client **c, int port, witness *w) {
  xf_options o = XF_OPTIONS_INIT;
  o.port = port;
  o.seed = (uint64_t)w->who;
  o.entry_format = xft_entry_format();
  o.connect_timeout_ms = o.command_timeout_ms = XFT_PATIENT_MS;
  o.on_event = note_event;
  o.on_event_ud = w;
  *c = NULL;
  return xf_client_open(c, &o);
}

static xf_client *witnessed_client(witness *w) {
  xf_client *c;
  cr_assert_eq(open_witnessed(&c, xft_port(), w), XF_OK, "%s", xf_errmsg(NULL));
  return c;
}

typedef struct second {
  turns *t;
  witness *w;
  const keys *k;
  const xf_policy *p;
  int port;
  int batch; /* the second client runs a batch too, else one call per key */
  int uncached, wrong;
  xft_fail fail; /* what went wrong on its thread */
} second;

/* Another client, once the batch has started loading: asks for every key. */
static void *second_client(void *arg) {
  second *s = arg;
  while (!__atomic_load_n(&s->t->started, __ATOMIC_SEQ_CST))
    xft_sleep_ms(1);
  xf_client *c;
  int rc =
      xft_record_open(open_witnessed(&c, s->port, s->w), &s->fail, "the second client");
  if (rc != XF_OK)
    return NULL;
  xf_value v[TURNS];
  int rcs[TURNS];
  if (s->batch) {
    if (xf_get_or_compute_many(c, TURNS, s->k->ptr, s->k->len, s->p, slow_key_loader, s->t,
                               v, rcs) != XF_OK)
      for (size_t i = 0; i < TURNS; i++)
        rcs[i] = XF_EINVAL, v[i].data = NULL;
  } else {
    for (size_t i = 0; i < TURNS; i++)
      rcs[i] = xf_get_or_compute(c, s->k->ptr[i], s->k->len[i], s->p, slow_key_loader, s->t,
                                 &v[i]);
  }
  for (size_t i = 0; i < TURNS; i++) {
    char want[64];
    snprintf(want, sizeof want, "v-%s", s->k->buf[i]);
    s->wrong += rcs[i] != XF_OK || !v[i].data || strcmp(v[i].data, want) != 0;
    s->uncached += rcs[i] == XF_OK && v[i].source == XF_SOURCE_UNCACHED;
    xf_value_free(&v[i]);
  }
  xf_client_close(c);
  return NULL;
}

/* TURNS cold keys whose loads (250 ms each) take longer together than the
 * lease (5 s): a lease taken for every key up front runs out after twenty
 * loads, before the later keys' turn, and the second client then loads them
 * too. Margin: the batch leases a group of keys that the loads seen so far say
 * will be loaded within half a lease, so a group's last lease must outlive
 * the group's loads by 2.5 s for a thread starved by a busy machine (with a
 * 2.5 s lease, 1.25 s was not enough under ASan on a busy run: 'key 8 loaded
 * 2 times'). */
static void keys_stay_protected(const char *prefix, int second_batch) {
  timeline tl = {.mu = PTHREAD_MUTEX_INITIALIZER, .t0_ms = xf__now_ms()};
  witness batch_w = {&tl, 1}, second_w = {&tl, 2};
  xf_client *c = witnessed_client(&batch_w);
  keys k;
  make_keys(&k, prefix, TURNS);
  xf_policy p = XF_POLICY_INIT;
  p.lease_ms = 5000; /* 24 loads of 250 ms take 6 s: leases taken up front run out */
  p.wait_ms = 30000; /* a loaded machine: never give up waiting in this test */
  turns t = {.sleep_ms = 250};
  second s = {
      .t = &t, .w = &second_w, .k = &k, .p = &p, .port = xft_port(), .batch = second_batch};
  pthread_t th;
  cr_assert_eq(pthread_create(&th, NULL, second_client, &s), 0);
  xf_value v[TURNS];
  int rcs[TURNS];
  int rc = xf_get_or_compute_many(c, TURNS, k.ptr, k.len, &p, slow_key_loader, &t, v, rcs);
  if (rc != XF_OK) /* maybe no load began: the second client waits for one */
    __atomic_store_n(&t.started, 1, __ATOMIC_SEQ_CST);
  pthread_join(th, NULL);
  cr_assert_eq(rc, XF_OK);
  xft_assert_no_fail(&s.fail);
  int uncached = 0;
  for (size_t i = 0; i < TURNS; i++) {
    cr_expect_eq(rcs[i], XF_OK, "key %zu: %s", i, xf_strerror(rcs[i]));
    uncached += v[i].source == XF_SOURCE_UNCACHED;
    int n = __atomic_load_n(&t.loads[i], __ATOMIC_SEQ_CST);
    cr_expect_eq(n, 1, "key %zu loaded %d times", i, n);
    if (n != 1 || v[i].source == XF_SOURCE_UNCACHED)
      print_timeline(&tl, (int)i);
  }
  cr_expect_eq(uncached, 0, "the batch's writes refused");
  cr_expect_eq(s.uncached, 0, "the second client's writes refused");
  cr_expect_eq(s.wrong, 0);
  free_values(v, TURNS);
  xf_client_close(c);
}

Test(batch, keys_stay_protected_until_their_turn_to_load) {
  keys_stay_protected("batch:turn", 0);
}

Test(batch, two_batches_on_the_same_cold_keys_load_each_once) {
  keys_stay_protected("batch:turn2", 1);
}

/* ---- leases held while another key of the batch stalls ------------------- */

enum { STALLED = 4, STALL_LEASE_MS = 3000, STALL_MS = 6500 };

/* Keys "<prefix>:<i>", i < STALLED: loads take 1 ms, except key `stall`'s
 * (the per-key loader) or the whole call's (the batch loader): STALL_MS,
 * more than twice the lease. */
typedef struct stall {
  int loads[STALLED];
  int stalled; /* set once the stalled load began */
  int stall;   /* which key stalls (the per-key loader) */
} stall;

static int stall_value(stall *st, const char *key, size_t keylen, xf_sink *sink) {
  int i = turn_of(key, keylen);
  if (i < 0 || i >= STALLED)
    return -1;
  __atomic_add_fetch(&st->loads[i], 1, __ATOMIC_SEQ_CST);
  char v[64];
  int len = snprintf(v, sizeof v, "v-%.*s", (int)keylen, key);
  return xf_sink_set(sink, v, (size_t)len);
}

static int stalling_loader(void *ud, const char *key, size_t keylen, xf_sink *sink) {
  stall *st = ud;
  if (turn_of(key, keylen) == st->stall) {
    __atomic_store_n(&st->stalled, 1, __ATOMIC_SEQ_CST);
    xft_sleep_ms(STALL_MS);
  } else {
    xft_sleep_ms(1);
  }
  return stall_value(st, key, keylen, sink);
}

static int stalling_batch_loader(void *ud, size_t n, const char *const *keys,
                                 const size_t *keylens, xf_sink *const *sinks) {
  stall *st = ud;
  __atomic_store_n(&st->stalled, 1, __ATOMIC_SEQ_CST);
  xft_sleep_ms(STALL_MS);
  for (size_t i = 0; i < n; i++)
    if (stall_value(st, keys[i], keylens[i], sinks[i]) != XF_OK)
      return -1;
  return XF_OK;
}

typedef struct stall_batch {
  stall st;
  keys k;
  xf_policy p;
  int use_batch_loader;
  int use_pool; /* xf_pool_get_or_compute_many(_batch) on a pool of one */
  int port;     /* the pool's: xft_port(), asserted on the test's thread */
  int rc;
  xft_fail fail; /* what went wrong on its thread before the batch */
} stall_batch;

static int stalled_batch_on_client(stall_batch *sb, xf_value *v, int *rcs) {
  xf_client *c;
  int rc = xft_record_open(xft_client_open(&c, 1), &sb->fail, "the batch's thread");
  if (rc != XF_OK)
    return rc;
  rc = sb->use_batch_loader
           ? xf_get_or_compute_many_batch(c, STALLED, sb->k.ptr, sb->k.len, &sb->p,
                                          stalling_batch_loader, &sb->st, v, rcs)
           : xf_get_or_compute_many(c, STALLED, sb->k.ptr, sb->k.len, &sb->p,
                                    stalling_loader, &sb->st, v, rcs);
  xf_client_close(c);
  return rc;
}

static int stalled_batch_on_pool(stall_batch *sb, xf_value *v, int *rcs) {
  xf_options o = XF_OPTIONS_INIT;
  o.port = sb->port;
  o.connect_timeout_ms = o.command_timeout_ms = XFT_PATIENT_MS;
  xf_pool *pool = NULL;
  int rc = xf_pool_open(&pool, &o, 1, XFT_PATIENT_MS);
  if (rc != XF_OK) {
    xft_fail_record(&sb->fail, "the batch's thread: xf_pool_open returned %d (%s): %s", rc,
                    xf_strerror(rc), xf_pool_errmsg());
    return rc;
  }
  rc = sb->use_batch_loader
           ? xf_pool_get_or_compute_many_batch(pool, STALLED, sb->k.ptr, sb->k.len, &sb->p,
                                               stalling_batch_loader, &sb->st, v, rcs)
           : xf_pool_get_or_compute_many(pool, STALLED, sb->k.ptr, sb->k.len, &sb->p,
                                         stalling_loader, &sb->st, v, rcs);
  xf_pool_close(pool);
  return rc;
}

static void *run_stalled_batch(void *arg) {
  stall_batch *sb = arg;
  xf_value v[STALLED] = {0};
  int rcs[STALLED];
  sb->rc = sb->use_pool ? stalled_batch_on_pool(sb, v, rcs)
                        : stalled_batch_on_client(sb, v, rcs);
  for (size_t i = 0; i < STALLED && sb->rc == XF_OK; i++)
    if (rcs[i] != XF_OK)
      sb->rc = rcs[i];
  free_values(v, STALLED);
  return NULL;
}

/* A batch's load stalls for more than twice the lease: every key the batch
 * leased and has not loaded yet stays leased meanwhile (renewed with the
 * load's own), so another client that asks for them after the lease's
 * length waits for the batch's values instead of loading them again.
 * key_asked is a key leased with the stalled one (the per-key loader: the
 * batch leases keys 2 and 3 together once keys 0 and 1 loaded fast): the
 * key waiting its turn, or the key loaded before the stalled one, waiting
 * for the group's writes; or one of the batch loader's call. Margins:
 * renewals come every lease/3 = 1 s, so a renewal thread starved for up to
 * 2 s keeps the key; the other client asks 3.5 s after the stall began
 * (the lease's 3 s + 0.5 s) and 3 s before it ends, so without renewals
 * its lease has run out by then (it then loads the key: 2 loads). */
static void stalled_batch_keeps_its_leases(const char *prefix, int use_pool,
                                           int use_batch_loader, int stall, int key_asked) {
  stall_batch sb = {
      .use_batch_loader = use_batch_loader, .use_pool = use_pool, .port = xft_port()};
  sb.st.stall = stall;
  make_keys(&sb.k, prefix, STALLED);
  sb.p = (xf_policy)XF_POLICY_INIT;
  sb.p.lease_ms = STALL_LEASE_MS;
  sb.p.wait_ms = 60000; /* the other client waits for the batch's value */
  pthread_t th;
  cr_assert_eq(pthread_create(&th, NULL, run_stalled_batch, &sb), 0);
  while (!__atomic_load_n(&sb.st.stalled, __ATOMIC_SEQ_CST)) {
    xft_assert_no_fail_join(&sb.fail, th); /* else no load stalls: no end to this wait */
    xft_sleep_ms(1);
  }
  xft_sleep_ms(STALL_LEASE_MS + 500);
  xf_client *other;
  int orc = xft_client_open(&other, 2);
  xf_value v;
  int rc = orc != XF_OK ? orc
                        : xf_get_or_compute(other, sb.k.ptr[key_asked], sb.k.len[key_asked],
                                            &sb.p, stalling_loader, &sb.st, &v);
  pthread_join(th, NULL);
  cr_assert_eq(orc, XF_OK, "xf_client_open: %s (%s)", xf_strerror(orc), xf_errmsg(NULL));
  xft_assert_no_fail(&sb.fail);
  cr_expect_eq(sb.rc, XF_OK, "the batch: %s", xf_strerror(sb.rc));
  cr_expect_eq(rc, XF_OK, "the other client: %s", xf_strerror(rc));
  char want[64];
  snprintf(want, sizeof want, "v-%s", sb.k.buf[key_asked]);
  cr_expect(rc == XF_OK && v.data && strcmp(v.data, want) == 0, "the other client read %s",
            rc == XF_OK && v.data ? v.data : "(null)");
  for (int i = 0; i < STALLED; i++) {
    int n = __atomic_load_n(&sb.st.loads[i], __ATOMIC_SEQ_CST);
    cr_expect_eq(n, 1, "key %d loaded %d times", i, n);
  }
  if (rc == XF_OK)
    xf_value_free(&v);
  xf_client_close(other);
}

Test(batch, keys_leased_with_a_stalled_load_stay_leased) {
  stalled_batch_keeps_its_leases("batch:stall:one", 0, 0, 2, 3);
}

Test(batch, a_stalled_batch_loader_keeps_its_keys_leased) {
  stalled_batch_keeps_its_leases("batch:stall:many", 0, 1, 2, 1);
}

/* A key loaded before the stalled one of its group waits for the group's
 * writes (they go together once every load of the group ended): its lease
 * stays renewed until then, or another client loads it again (key 2 loads
 * at once, key 3 stalls; the other client asks for key 2). */
Test(batch, a_key_loaded_before_a_stalled_one_stays_leased_until_written) {
  stalled_batch_keeps_its_leases("batch:stall:done", 0, 0, 3, 2);
}

Test(batch, pool_a_key_loaded_before_a_stalled_one_stays_leased_until_written) {
  stalled_batch_keeps_its_leases("batch:stall:pool:done", 1, 0, 3, 2);
}

/* The same on the pool's batches (a client lent for the whole batch). */
Test(batch, pool_keys_leased_with_a_stalled_load_stay_leased) {
  stalled_batch_keeps_its_leases("batch:stall:pool:one", 1, 0, 2, 3);
}

Test(batch, pool_a_stalled_batch_loader_keeps_its_keys_leased) {
  stalled_batch_keeps_its_leases("batch:stall:pool:many", 1, 1, 2, 1);
}

/* "v<n>", n the loader's calls so far; each load takes 2 ms (a delta). */
static int counting_loader(void *ud, const char *key, size_t keylen, xf_sink *sink) {
  (void)key, (void)keylen;
  int n = __atomic_add_fetch((int *)ud, 1, __ATOMIC_SEQ_CST);
  xft_sleep_ms(2);
  char v[16];
  int len = snprintf(v, sizeof v, "v%d", n);
  return xf_sink_set(sink, v, (size_t)len);
}

/* The default policy (background_refresh AUTO) with a per-key loader: a
 * key's early refresh runs in the batch, on a client with a share as on a
 * bare one (loader_ud may live in the caller's frame; XF_BACKGROUND_ON hands
 * it to the share's workers). */
Test(batch, by_default_an_early_refresh_runs_in_the_batch) {
  for (int with_share = 0; with_share < 2; with_share++) {
    xf_share *s = NULL;
    if (with_share)
      cr_assert_eq(xf_share_open(&s, NULL), XF_OK);
    xf_options o = XF_OPTIONS_INIT;
    o.port = xft_port();
    o.share = s;
    xf_client *c;
    cr_assert_eq(xf_client_open(&c, &o), XF_OK);
    const char *key = with_share ? "batch:bgdefault:share" : "batch:bgdefault:bare";
    size_t len = strlen(key);
    xf_policy p = XF_POLICY_INIT;
    p.refresh_ahead = 1e9; /* due as soon as the value has a delta */
    int calls = 0, rc;
    xf_value v;
    cr_assert_eq(
        xf_get_or_compute_many(c, 1, &key, &len, &p, counting_loader, &calls, &v, &rc),
        XF_OK);
    cr_expect_eq(v.source, XF_SOURCE_LOADER);
    xf_value_free(&v);
    cr_assert_eq(
        xf_get_or_compute_many(c, 1, &key, &len, &p, counting_loader, &calls, &v, &rc),
        XF_OK);
    cr_expect_eq(rc, XF_OK);
    cr_expect_eq(v.source, XF_SOURCE_LOADER, "share %d", with_share);
    cr_expect_str_eq(v.data, "v2", "share %d", with_share);
    xf_value_free(&v);
    cr_expect_eq(__atomic_load_n(&calls, __ATOMIC_SEQ_CST), 2,
                 "refreshed before the batch returned, share %d", with_share);
    xf_client_close(c);
    xf_share_close(s); /* waits for anything its workers still run */
    cr_expect_eq(__atomic_load_n(&calls, __ATOMIC_SEQ_CST), 2, "one refresh, share %d",
                 with_share);
  }
}
