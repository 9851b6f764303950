/* Format-2 entries (one string per entry, docs/design.md, "The entry on Redis") on a
 * real 3 masters + 3 replicas cluster: a batch spanning every master reads
 * with MGET per slot (keys of one hash tag: one MGET), hits on replicas are
 * GETs, and a format-1 client reads what a format-2 client wrote. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "cluster_calls.h"
#include "cluster_fixture.h"
#include "cluster_slots.h"
#include "xfetch.h"

static xf_client *open2(int node, int format, int replicas) {
  char host[64];
  snprintf(host, sizeof host, "127.0.0.1:%d", xft_cluster_port(node));
  xf_options o = XF_OPTIONS_INIT;
  o.host = host;
  o.read_from_replicas = replicas;
  o.seed = 7;
  o.entry_format = format;
  xf_client *c = NULL;
  cr_assert_eq(xf_client_open(&c, &o), XF_OK);
  return c;
}

static void batch(xf_client *c, const char *fmt, int n, int round, int *calls) {
  char buf[100][32];
  const char *keys[100];
  size_t lens[100];
  for (int i = 0; i < n; i++) {
    snprintf(buf[i], sizeof buf[i], fmt, i);
    keys[i] = buf[i];
    lens[i] = strlen(buf[i]);
  }
  xf_policy p = xft_long_ttl();
  xf_value v[100];
  int rcs[100];
  cr_assert_eq(
      xf_get_or_compute_many(c, (size_t)n, keys, lens, &p, xft_key_loader, calls, v, rcs),
      XF_OK);
  for (int i = 0; i < n; i++) {
    char want[64];
    int len = snprintf(want, sizeof want, "v-%s", buf[i]);
    cr_assert(len > 0 && len < (int)sizeof want, "key %d: its value does not fit", i);
    cr_expect_eq(rcs[i], XF_OK, "key %d: %s", i, xf_strerror(rcs[i]));
    cr_expect(v[i].data && strcmp(v[i].data, want) == 0, "key %d", i);
    cr_expect_eq(v[i].source, round == 0 ? XF_SOURCE_LOADER : XF_SOURCE_CACHE);
    xf_value_free(&v[i]);
  }
}

Test(cluster_entry2, a_batch_reads_one_mget_per_slot) {
  xf_client *c = open2(1, XF_ENTRY_STRING, 0);
  int calls = 0;
  for (int round = 0; round < 3; round++) /* load; learn the clocks; plain */
    batch(c, "{e2tag}:%d", 50, round, &calls);
  long long mgets = xft_total_calls("mget"), gets = xft_total_calls("get");
  batch(c, "{e2tag}:%d", 50, 1, &calls);
  cr_expect_eq(xft_total_calls("mget") - mgets, 1, "one slot: one MGET");
  cr_expect_eq(xft_total_calls("get") - gets, 0);
  for (int round = 0; round < 3; round++) /* across every master */
    batch(c, "e2:spread:%d", 100, round, &calls);
  cr_expect_eq(calls, 150);
  xf_client_close(c);
}

Test(cluster_entry2, replicas_serve_gets_and_format_1_clients_read_them) {
  xf_client *w = open2(2, XF_ENTRY_STRING, 0);
  xf_policy p = xft_long_ttl();
  int calls = 0;
  char key[64];
  for (int i = 0; i < 50; i++) {
    snprintf(key, sizeof key, "e2:replica:%d", i);
    xft_expect_get(w, key, &p, &calls, XF_SOURCE_LOADER);
  }
  for (int i = 0; i < XFT_CLUSTER_NODES; i++) { /* the replicas have caught up */
    redisContext *r = xft_cluster_redis(xft_cluster_port(i));
    freeReplyObject(xft_cluster_cmd(r, "WAIT 1 2000"));
    redisFree(r);
  }
  xf_client *c = open2(0, XF_ENTRY_HASH, 1); /* reads both; its plain read is HMGET */
  long long before = xft_total_calls("get");
  for (int round = 0; round < 2; round++)
    for (int i = 0; i < 50; i++) {
      snprintf(key, sizeof key, "e2:replica:%d", i);
      xft_expect_get(c, key, &p, &calls, XF_SOURCE_CACHE);
    }
  cr_expect_eq(calls, 50, "nothing loaded twice");
  cr_expect_geq(xft_total_calls("get") - before, 50, "read with GET after WRONGTYPE");
  xf_stats st;
  xf_client_stats(c, &st);
  cr_expect_eq(st.malformed, 0);
  xf_client_close(c);
  xf_client_close(w);
}
