/* A loader's lease lives as long as its loader (policy.max_load_ms): a
 * loader slower than its lease renews it, so a second caller never loads
 * the key meanwhile; a holder that dies stops renewing, and the key is free
 * again within the lease. Every driver whose loader runs on the caller's
 * thread (blocking, pool, batch); real redis-server. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fixture.h"
#include "flow.h"

/* The lease and a loader twice as long. Renewals go every third of the
 * lease (~333 ms): a renewal may come up to ~660 ms late on a busy machine
 * before the lease runs out (500 ms was too little beside two CPU loops:
 * 2 of 5 runs lost a lease). */
#define LEASE_MS 1000
#define LOAD_MS (2 * LEASE_MS)

enum { BLOCKING, POOL, BATCH };
static const char *const driver_names[] = {"blocking", "pool", "batch"};

typedef struct caller {
  int driver;
  xf_client *c;
  xf_pool *pool;
  const char *key;
  xf_policy p;
  xft_loader *l;
  int64_t start_ms; /* when the call is made */
  int rc;
  xf_value v;
} caller;

static int call(caller *k) {
  size_t len = strlen(k->key);
  switch (k->driver) {
  case POOL:
    return xf_pool_get_or_compute(k->pool, k->key, len, &k->p, xft_load, k->l, &k->v);
  case BATCH: {
    int rc = XF_OK;
    int many =
        xf_get_or_compute_many(k->c, 1, &k->key, &len, &k->p, xft_load, k->l, &k->v, &rc);
    return many == XF_OK ? rc : many;
  }
  default:
    return xf_get_or_compute(k->c, k->key, len, &k->p, xft_load, k->l, &k->v);
  }
}

static void *run(void *arg) {
  caller *k = arg;
  while (xft_now_ms() < k->start_ms)
    xft_sleep_ms(1);
  k->rc = call(k);
  return NULL;
}

static xf_policy slow_load_policy(int64_t max_load_ms) {
  xf_policy p = XF_POLICY_INIT;
  p.lease_ms = LEASE_MS;
  p.wait_ms = 5000; /* the second caller waits for the first's value */
  p.max_load_ms = max_load_ms;
  return p;
}

/* Two callers of one key, the second 100 ms after the first, each on its
 * own client (or both on one pool): how many loads ran. */
static int loads_of_two_callers(int driver, const char *key, int64_t max_load_ms) {
  xft_loader l = {.value = "v", .len = 1, .sleep_ms = LOAD_MS};
  xf_pool *pool = NULL;
  if (driver == POOL) {
    xf_options o = XF_OPTIONS_INIT;
    o.port = xft_port();
    o.entry_format = xft_entry_format();
    cr_assert_eq(xf_pool_open(&pool, &o, 4, 0), XF_OK);
  }
  caller k[2];
  int64_t now = xft_now_ms();
  for (int i = 0; i < 2; i++) {
    k[i] = (caller){.driver = driver,
                    .pool = pool,
                    .c = driver == POOL ? NULL : xft_client(0),
                    .key = key,
                    .p = slow_load_policy(max_load_ms),
                    .l = &l,
                    .start_ms = now + 50 + 100 * i};
  }
  pthread_t t[2];
  for (int i = 0; i < 2; i++)
    pthread_create(&t[i], NULL, run, &k[i]);
  for (int i = 0; i < 2; i++)
    pthread_join(t[i], NULL);
  for (int i = 0; i < 2; i++) {
    cr_expect_eq(k[i].rc, XF_OK, "%s caller %d: %s", driver_names[driver], i,
                 xf_strerror(k[i].rc));
    xf_value_free(&k[i].v);
    xf_client_close(k[i].c);
  }
  xf_pool_close(pool);
  return xft_loader_calls(&l);
}

static void no_twin(int driver, const char *key) {
  int loads = loads_of_two_callers(driver, key, 0);
  cr_log_info("%s: a %d ms loader under a %d ms lease: %d load(s)", driver_names[driver],
              LOAD_MS, LEASE_MS, loads);
  cr_expect_eq(loads, 1, "%s: the second caller loaded too (%d loads)",
               driver_names[driver], loads);
}

Test(renew, a_loader_twice_its_lease_gets_no_twin_blocking) {
  no_twin(BLOCKING, "renew:b");
}
Test(renew, a_loader_twice_its_lease_gets_no_twin_pool) { no_twin(POOL, "renew:p"); }
Test(renew, a_loader_twice_its_lease_gets_no_twin_batch) { no_twin(BATCH, "renew:m"); }

/* max_load_ms at most the lease: no renewal, the lease runs out under the
 * loader and the second caller loads too (what every load did before). */
Test(renew, without_renewal_the_second_caller_loads_too) {
  int loads = loads_of_two_callers(BLOCKING, "renew:off", LEASE_MS);
  cr_expect_eq(loads, 2, "%d loads", loads);
}

/* Renewals stop at max_load_ms: a loader running past it loses the key's
 * protection (its lease runs out), so a hung loader cannot hold it longer. */
Test(renew, renewals_stop_at_max_load_ms) {
  int loads = loads_of_two_callers(BLOCKING, "renew:max", LEASE_MS + LEASE_MS / 3 + 10);
  cr_expect_eq(loads, 2, "%d loads", loads);
}

/* Whether another caller holds key's lease now: a call that must not wait
 * says XF_ETIMEDOUT. */
static int lease_held(xf_client *c, const char *key) {
  xf_policy p = XF_POLICY_INIT;
  p.wait_ms = 0;
  p.on_wait_timeout = XF_WAIT_FAIL;
  xft_loader l = {.value = "x", .len = 1};
  xf_value v;
  int rc = xf_get_or_compute(c, key, strlen(key), &p, xft_load, &l, &v);
  xf_value_free(&v);
  return rc == XF_ETIMEDOUT;
}

/* The killed holder's loader: says it runs (the lease is won), then hangs. */
static int hang(void *ud, const char *key, size_t keylen, xf_sink *sink) {
  (void)key, (void)keylen, (void)sink;
  char b = 1;
  if (write(*(int *)ud, &b, 1) != 1)
    _exit(2);
  for (;;)
    pause();
}

/* A holder killed mid-load: its renewals stop, and the key is free again
 * within its lease of the kill. */
Test(renew, a_killed_holder_frees_the_key_within_its_lease) {
  XFT_SKIP_THREADED_FORK();
  const char *key = "renew:killed";
  int ready[2];
  cr_assert_eq(pipe(ready), 0);
  pid_t pid = fork();
  if (pid == 0) {
    close(ready[0]);
    xf_client *c = xft_client(0);
    xf_policy p = slow_load_policy(0);
    xf_value v;
    xf_get_or_compute(c, key, strlen(key), &p, hang, &ready[1], &v);
    _exit(0);
  }
  close(ready[1]);
  char b;
  cr_assert_eq(read(ready[0], &b, 1), 1);
  xf_client *c = xft_client(0);
  /* The child's loader runs: its lease is won. Past its first lease_ms,
   * it is still held (renewed). */
  cr_expect(lease_held(c, key), "the child holds the lease");
  xft_sleep_ms(LEASE_MS + 200);
  cr_expect(lease_held(c, key), "the lease was renewed past its %d ms", LEASE_MS);
  kill(pid, SIGKILL);
  int64_t killed = xft_now_ms();
  waitpid(pid, NULL, 0);
  xft_loader l = {.value = "parent", .len = 6};
  xf_policy p = slow_load_policy(0);
  xf_value v;
  cr_assert_eq(xf_get_or_compute(c, key, strlen(key), &p, xft_load, &l, &v), XF_OK);
  int64_t freed = xft_now_ms() - killed;
  cr_log_info("the key was loaded again %lld ms after its holder was killed",
              (long long)freed);
  cr_expect_eq(xft_loader_calls(&l), 1);
  cr_expect_str_eq(v.data, "parent");
  /* Within the lease (the last renewal came at most a third of it before
   * the kill), plus the waiter's poll (50 ms at most) and 650 ms for a
   * busy machine. */
  cr_expect_leq(freed, LEASE_MS + 700, "freed after %lld ms", (long long)freed);
  xf_value_free(&v);
  xf_client_close(c);
  close(ready[0]);
}

/* Counts the renewals a client reports (on its keeper's thread). */
static void count_renewals(const xf_event *ev, void *ud) {
  if (ev->type == XF_EV_LEASE_RENEWED && ev->rc == XF_OK)
    __atomic_add_fetch((int *)ud, 1, __ATOMIC_ACQ_REL);
}

static void *load_tagged(void *arg) {
  caller *k = arg;
  k->rc = xf_get_or_compute(k->c, k->key, strlen(k->key), &k->p, xft_load, k->l, &k->v);
  return NULL;
}

/* A renewal rewrites the entry's header: a tagged entry keeps its tags'
 * record, so that a caller of the same tags still serves its stale value
 * while the loader runs (with the record lost, the entry would be another
 * tags' one: refused, a miss whose lease is taken, XF_ETIMEDOUT here). No
 * timing: the loader is held until the second caller has read. */
Test(renew, a_renewal_keeps_the_entrys_tags) {
  if (xft_entry_format() == XF_ENTRY_HASH)
    cr_skip_test("tags need entry format 2");
  const char *key = "renew:tagged";
  const char *tags[] = {"renew-tag"};
  redisContext *r = xft_redis();
  freeReplyObject(xft_cmd(r, "DEL %s", key));
  redisFree(r);
  xf_policy p = slow_load_policy(0);
  p.tags = tags, p.ntags = 1;
  p.stale_ms = 60000;
  xf_policy short_ttl = p;
  short_ttl.ttl_ms = 100;
  xf_client *b = xft_client(0);
  cr_assert_eq(xf_set(b, key, strlen(key), "old", 3, &short_ttl), XF_OK);
  xft_sleep_ms(150); /* past its ttl: a stale value, within stale_ms */

  int renewals = 0;
  xf_options o = XF_OPTIONS_INIT;
  o.port = xft_port();
  o.entry_format = xft_entry_format();
  o.on_event = count_renewals;
  o.on_event_ud = &renewals;
  xft_loader l = {.value = "new", .len = 3, .held = 1};
  caller a = {.key = key, .p = p, .l = &l};
  cr_assert_eq(xf_client_open(&a.c, &o), XF_OK);
  pthread_t t;
  pthread_create(&t, NULL, load_tagged, &a);
  int64_t give_up = xft_now_ms() + 10000; /* the first renewal is due ~333 ms in */
  while (__atomic_load_n(&renewals, __ATOMIC_ACQUIRE) < 1 && xft_now_ms() < give_up)
    xft_sleep_ms(5);
  cr_expect_geq(__atomic_load_n(&renewals, __ATOMIC_ACQUIRE), 1, "no renewal in 10 s");

  xf_policy no_wait = p;
  no_wait.wait_ms = 0;
  no_wait.on_wait_timeout = XF_WAIT_FAIL;
  xft_loader never = {.value = "x", .len = 1};
  xf_value v;
  int rc = xf_get_or_compute(b, key, strlen(key), &no_wait, xft_load, &never, &v);
  cr_expect_eq(rc, XF_OK, "after a renewal: %s", xf_strerror(rc));
  if (rc == XF_OK) {
    cr_expect_eq(v.source, XF_SOURCE_STALE, "source %d", v.source);
    cr_expect_str_eq(v.data, "old");
  }
  xf_value_free(&v);
  cr_expect_eq(xft_loader_calls(&never), 0);

  xft_loader_release(&l);
  pthread_join(t, NULL);
  cr_expect_eq(a.rc, XF_OK, "%s", xf_strerror(a.rc));
  cr_expect_str_eq(a.v.data, "new");
  xf_value_free(&a.v);
  /* The loader's write (ttl 60 s) carries the tags too: a tagged hit. */
  cr_assert_eq(xf_get_or_compute(b, key, strlen(key), &no_wait, xft_load, &never, &v),
               XF_OK);
  cr_expect_eq(v.source, XF_SOURCE_CACHE, "source %d", v.source);
  cr_expect_str_eq(v.data, "new");
  xf_value_free(&v);
  xf_client_close(a.c);
  xf_client_close(b);
}

/* A renewal that failed extended nothing: the next one is still sent while
 * it would extend the lease Redis holds (before: the failed one's deadline
 * was taken as the lease's, and the renewals stopped up to a lease early,
 * so a second caller could load the key meanwhile). The renewal's clock
 * alone (no server): lease 3 s, max_load_ms 10 s, the renewal sent at
 * 6.5 s renewed. */
Test(renew, a_failed_renewal_extends_nothing) {
  xf__renewal rn = {.lease_ms = 3000,
                    .until_ms = 10000,
                    .deadline_ms = 9500,
                    .sent_ms = 9500,
                    .next_ms = 7500};
  cr_assert_eq(xf__renewal_take(&rn, 7500), 2500); /* asks for 10 s */
  xf__renewal_done(&rn, XF_EIO);                   /* and fails */
  cr_assert_eq(xf__renewal_take(&rn, 8500), 1500, "the lease Redis holds ends at 9.5 s");
  xf__renewal_done(&rn, XF_OK); /* now it holds until 10 s: nothing left to extend */
  cr_assert_eq(xf__renewal_take(&rn, 9500), 0);
  cr_assert_eq(rn.next_ms, INT64_MAX);
}
