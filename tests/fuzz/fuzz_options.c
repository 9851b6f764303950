/* Fuzz target: options, policy and argument validation, with no server.
 *
 * The input becomes an xf_options (odd-byte strings, huge and negative
 * numbers; lazy_connect forced on), an xf_policy (NaN, infinities, huge and
 * negative times), a key, a value and NULL-pointer choices. An oracle in this
 * file states which are valid (the ranges include/xfetch.h and the policy
 * messages document) and the harness checks the library agrees:
 *   - xf_client_open returns XF_OK or XF_EINVAL as the oracle says;
 *   - xf__policy_check agrees; a valid policy's derived times stay in range;
 *   - xf_get_or_compute / xf_set / xf_delete / xf_sink_set are called ONLY
 *     with arguments the oracle rejects, and must return XF_EINVAL with a
 *     message, a zeroed value, the loader never called and no Redis traffic
 *     (stats stay zero). Valid arguments would go to the network, so they
 *     are checked through the pure layer instead (xf__key_build).
 * Safety net: the client points at a Unix socket that does not exist
 * (FUZZ_NO_SERVER), so even a call that wrongly passed validation would fail
 * at connect() without any network, fail open, and hit the aborting loader. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "client.h"
#include "fuzz.h"
#include "key.h"
#include "policy.h"
#include "sink.h"

#define DEFAULT_MAX_KEY_LEN 65536
#define DEFAULT_MAX_VALUE_LEN (64u * 1024 * 1024)

static int loader_must_not_run(void *ud, const char *key, size_t keylen, xf_sink *sink) {
  (void)ud, (void)key, (void)keylen, (void)sink;
  FUZZ_CHECK(!"the loader ran for a call that had to fail validation");
  return 1;
}

static int options_valid(const xf_options *o) {
  return o->port >= 0 && o->port <= 65535 && o->db >= 0 && o->connect_timeout_ms >= 0 &&
         o->command_timeout_ms >= 0 && o->tombstone_ms >= 0 &&
         o->tombstone_ms <= XF_MAX_TIME_MS;
}

static int time_valid(int64_t v, int64_t min) { return v >= min && v <= XF_MAX_TIME_MS; }

static int policy_valid(const xf_policy *p) {
  return !isnan(p->beta) && p->beta >= 0 && !isnan(p->jitter) && p->jitter >= 0 &&
         p->jitter < 1 &&
         (p->on_wait_timeout == XF_WAIT_LOAD || p->on_wait_timeout == XF_WAIT_FAIL) &&
         time_valid(p->ttl_ms, 1) && time_valid(p->lease_ms, 1) &&
         time_valid(p->wait_ms, 0) && time_valid(p->stale_ms, 0) &&
         time_valid(p->stale_if_error_ms, 0) && time_valid(p->negative_ttl_ms, 0) &&
         isfinite(p->refresh_ahead);
}

static void read_options(fuzz_in *in, xf_options *o, char (*str)[300]) {
  o->host = fuzz_str(in, str[0], sizeof str[0]);
  o->port = fuzz_int(in);
  o->username = fuzz_str(in, str[1], sizeof str[1]);
  o->password = fuzz_str(in, str[2], sizeof str[2]);
  o->db = fuzz_int(in);
  o->connect_timeout_ms = fuzz_int(in);
  o->command_timeout_ms = fuzz_int(in);
  o->key_prefix = fuzz_str(in, str[3], sizeof str[3]);
  o->seed = fuzz_u64(in);
  o->max_key_len = (size_t)fuzz_i64(in);
  o->max_value_len = (size_t)fuzz_i64(in);
  o->breaker_ms = fuzz_int(in);
  o->tombstone_ms = fuzz_i64(in);
  o->lazy_connect = 1;
  o->unix_path = FUZZ_NO_SERVER;
}

static void read_policy(fuzz_in *in, xf_policy *p) {
  p->ttl_ms = fuzz_i64(in);
  p->beta = fuzz_double(in);
  p->lease_ms = fuzz_i64(in);
  p->wait_ms = fuzz_i64(in);
  p->stale_ms = fuzz_i64(in);
  p->stale_if_error_ms = fuzz_i64(in);
  p->negative_ttl_ms = fuzz_i64(in);
  p->jitter = fuzz_double(in);
  uint8_t w = fuzz_u8(in);
  p->on_wait_timeout = (xf_on_wait_timeout)(w < 200 ? w % 2 : fuzz_int(in));
  p->background_refresh = fuzz_u8(in) & 1;
  p->refresh_ahead = fuzz_double(in);
}

/* Bytes and a claimed length: the real ones, NULL, empty, one past the
 * limit, or SIZE_MAX. *readable says whether len bytes may be read. */
typedef struct blob {
  const char *data;
  size_t len;
  int readable;
} blob;

static blob read_blob(fuzz_in *in, size_t limit) {
  blob b = {NULL, 0, 1};
  uint8_t how = fuzz_u8(in);
  size_t n;
  const uint8_t *p = fuzz_bytes(in, fuzz_u8(in), &n);
  b.data = (const char *)p;
  switch (how % 6) {
  case 0:
  case 1:
    b.len = n;
    break;
  case 2:
    b.data = NULL, b.len = fuzz_u8(in); /* NULL with a length (maybe 0) */
    break;
  case 3:
    b.len = 0;
    break;
  case 4:
    b.len = limit + 1; /* wraps to 0 when the limit is SIZE_MAX */
    break;
  default:
    b.len = SIZE_MAX;
    break;
  }
  b.readable = b.len <= n;
  return b;
}

static void check_rejected(xf_client *c, int rc) {
  FUZZ_CHECK(rc == XF_EINVAL);
  FUZZ_CHECK(xf_errmsg(c)[0] != '\0');
}

static void check_key_build(xf_client *c, const xf_options *o, blob key) {
  xf__key k;
  FUZZ_CHECK(xf__key_build(&c->cfg, &c->rt, key.data, key.len, &k) == XF_OK);
  size_t plen = o->key_prefix ? strlen(o->key_prefix) : 0;
  FUZZ_CHECK(k.len == plen + key.len);
  FUZZ_CHECK(memcmp(k.data, o->key_prefix ? o->key_prefix : "", plen) == 0);
  FUZZ_CHECK(memcmp(k.data + plen, key.data, key.len) == 0);
  xf__key_free(&k);
}

static void check_policy(xf_client *c, const xf_policy *p) {
  int ok = policy_valid(p);
  int rc = xf__policy_check(&c->rt, p);
  FUZZ_CHECK(rc == (ok ? XF_OK : XF_EINVAL));
  if (!ok)
    return;
  for (int i = 0; i < 4; i++) {
    int64_t ttl = xf__policy_ttl(&c->rt, p);
    FUZZ_CHECK(ttl >= 1 && ttl <= p->ttl_ms);
  }
  int64_t keep = xf__policy_keep_ms(p);
  FUZZ_CHECK(keep >= p->stale_ms && keep >= p->stale_if_error_ms && keep <= XF_MAX_TIME_MS);
}

static void check_calls(fuzz_in *in, xf_client *c, const xf_options *o,
                        const xf_policy *p) {
  size_t max_key = o->max_key_len ? o->max_key_len : DEFAULT_MAX_KEY_LEN;
  size_t max_value = o->max_value_len ? o->max_value_len : DEFAULT_MAX_VALUE_LEN;
  uint8_t nulls = fuzz_u8(in);
  blob key = read_blob(in, max_key);
  blob val = read_blob(in, max_value);
  const xf_policy *pol = nulls & 1 ? NULL : p;
  xf_loader_fn loader = nulls & 2 ? NULL : loader_must_not_run;
  xf_value v, *out = nulls & 4 ? NULL : &v;
  int key_ok = key.data && key.len > 0 && key.len <= max_key;
  int pol_ok = pol && policy_valid(pol);

  if (!(key_ok && pol_ok && loader && out)) {
    memset(&v, 0xa5, sizeof v);
    check_rejected(c, xf_get_or_compute(c, key.data, key.len, pol, loader, NULL, out));
    FUZZ_CHECK(!out || (v.data == NULL && v.len == 0));
  } else if (key.readable) {
    check_key_build(c, o, key);
  }
  int val_ok = (val.data || val.len == 0) && val.len <= max_value;
  if (!(val_ok && pol_ok && key_ok))
    check_rejected(c, xf_set(c, key.data, key.len, val.data, val.len, pol));
  if (!key_ok)
    check_rejected(c, xf_delete(c, key.data, key.len));
  if (val_ok && !val.readable)
    return;
  struct xf_sink sink;
  xf__sink_init(&sink, max_value);
  int rc = xf_sink_set(&sink, val.data, val.len);
  FUZZ_CHECK(rc == (val_ok ? XF_OK : XF_EINVAL));
  if (rc == XF_OK)
    FUZZ_CHECK(sink.len == val.len &&
               (val.len == 0 || !memcmp(sink.data, val.data, val.len)));
  xf__sink_clear(&sink);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fuzz_in in = {data, size};
  char str[4][300];
  xf_options o = XF_OPTIONS_INIT;
  read_options(&in, &o, str);
  FUZZ_CHECK(xf_client_open(NULL, &o) == XF_EINVAL);
  xf_client *c = (xf_client *)&in; /* must be overwritten */
  int rc = xf_client_open(&c, &o);
  FUZZ_CHECK(rc == (options_valid(&o) ? XF_OK : XF_EINVAL));
  if (rc != XF_OK) {
    FUZZ_CHECK(c == NULL);
    return 0;
  }
  xf_policy p = XF_POLICY_INIT;
  read_policy(&in, &p);
  check_policy(c, &p);
  check_calls(&in, c, &o, &p);
  xf_stats st;
  xf_client_stats(c, &st);
  FUZZ_CHECK(st.loads == 0 && st.redis_errors == 0 && st.misses == 0 && st.hits == 0);
  FUZZ_CHECK(strlen(xf_errmsg(c)) < 256);
  FUZZ_CHECK(xf_strerror(fuzz_int(&in)) != NULL && xf_errname(fuzz_int(&in)) != NULL);
  xf_client_close(c);
  return 0;
}
