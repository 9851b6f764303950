/* The near cache behind the flow's port (ports.h): each function is given
 * the client the port was filled for, whose near cache, namespace and
 * batch it uses. */
#include "client.h"
#include "near_impl.h"

static uint64_t token(void *self) { return xf__near_token(((xf_client *)self)->near); }

static int get(void *self, const char *key, size_t keylen, int64_t now_ms,
               xf__near_hit *hit) {
  const xf_client *c = self;
  return xf__near_get(c->near, c, key, keylen, now_ms, hit);
}

static uint64_t put(void *self, const xf__track *t, uint64_t token, const char *key,
                    size_t keylen, const char *value, size_t len, int64_t delta_us,
                    int64_t redis_expiry_ms, int64_t expires_ms, int negative) {
  const xf_client *c = self;
  return xf__near_put(c->near, c, t, token, key, keylen, value, len, delta_us,
                      redis_expiry_ms, expires_ms, negative);
}

static void drop(void *self, const char *key, size_t keylen) {
  xf__near_drop(((xf_client *)self)->near, key, keylen);
}

static void report(void *self, xf_driver driver) {
  const xf_client *c = self;
  xf__near_report(c->near, c, driver);
}

const xf__near_port xf__near_port_impl = {
    .token = token, .get = get, .put = put, .drop = drop, .report = report};
