/* The near cache behind the flow's port (ports.h): each function is given
 * the client the port was filled for, whose near cache, namespace and
 * batch it uses. */
#include "client.h"
#include "near_impl.h"

static uint64_t token(void *self) { return xf__near_token(((xf_client *)self)->near); }

static int get(void *self, const char *key, size_t keylen, int64_t now_ms,
               xf__port_hit *hit) {
  const xf_client *c = self;
  return xf__near_get(c->near, c, key, keylen, now_ms, hit);
}

static uint64_t put(void *self, const xf__track *t, uint64_t token, const char *key,
                    size_t keylen, const char *value, size_t len, const unsigned char *tags,
                    size_t tags_len, int64_t delta_us, int64_t redis_expiry_ms,
                    int64_t expires_ms, int negative) {
  const xf_client *c = self;
  return xf__near_put(c->near, c, t, token, key, keylen, value, len, tags, tags_len,
                      delta_us, redis_expiry_ms, expires_ms, negative);
}

static uint64_t tag_epoch(void *self) {
  return xf__near_tag_epoch(((xf_client *)self)->near);
}

static void stamp(void *self, const char *key, size_t keylen, const unsigned char *tags,
                  size_t tags_len, const xf__tag_stamp *st) {
  const xf_client *c = self;
  xf__near_stamp_entry(c->near, c, key, keylen, tags, tags_len, st);
}

static void drop(void *self, const char *key, size_t keylen) {
  xf__near_drop(((xf_client *)self)->near, key, keylen);
}

static void report(void *self, xf_driver driver) {
  const xf_client *c = self;
  xf__near_report(c->near, c, driver);
}

static int wait(void *self, const char *key, size_t keylen, uint64_t token,
                int64_t until_ms) {
  return xf__near_wait(((xf_client *)self)->near, key, keylen, token, until_ms);
}

static int changed(void *self, const char *key, size_t keylen, uint64_t token) {
  return xf__near_changed(((xf_client *)self)->near, key, keylen, token);
}

static int notify_add(void *self, int fd) {
  return xf__near_notify_add(((xf_client *)self)->near, fd);
}

static void notify_remove(void *self, int fd) {
  xf__near_notify_remove(((xf_client *)self)->near, fd);
}

static void batch_begin(void *self, size_t count, const char *const *keys,
                        const size_t *lens, int64_t now_ms) {
  xf_client *c = self;
  xf__near_batch_begin(c->near, c, count, keys, lens, now_ms);
}

static void batch_end(void *self) { xf__near_batch_end(self); }

const xf__port_near xf__near_port_impl = {.token = token,
                                          .get = get,
                                          .put = put,
                                          .tag_epoch = tag_epoch,
                                          .stamp = stamp,
                                          .drop = drop,
                                          .report = report,
                                          .wait = wait,
                                          .changed = changed,
                                          .notify_add = notify_add,
                                          .notify_remove = notify_remove,
                                          .batch_begin = batch_begin,
                                          .batch_end = batch_end};
