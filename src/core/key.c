/* The Redis key of one call: the client's prefix + the caller's key. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "flow_env.h"
#include "key.h"

int xf__key_build(const xf__config *cfg, xf__runtime *rt, const char *key, size_t keylen,
                  xf__key *out) {
  out->data = NULL;
  out->len = 0;
  if (!key)
    return xf__rt_fail(rt, XF_EINVAL, "key is NULL");
  if (keylen == 0)
    return xf__rt_fail(rt, XF_EINVAL, "key is empty");
  if (keylen > cfg->max_key_len || keylen > SIZE_MAX - cfg->prefix_len)
    return xf__rt_fail(rt, XF_EINVAL, "key is %zu bytes, above max_key_len %zu", keylen,
                       cfg->max_key_len);
  size_t len = cfg->prefix_len + keylen;
  char *data = len <= sizeof out->inline_buf ? out->inline_buf : malloc(len);
  if (!data)
    return xf__rt_fail(rt, XF_ENOMEM, "out of memory for a %zu-byte key", len);
  memcpy(data, cfg->prefix, cfg->prefix_len);
  memcpy(data + cfg->prefix_len, key, keylen);
  out->data = data;
  out->len = len;
  return XF_OK;
}

void xf__key_free(xf__key *k) {
  if (k->data != k->inline_buf)
    free(k->data);
  k->data = NULL;
  k->len = 0;
}

uint64_t xf__key_hash(const char *key, size_t len) {
  uint64_t h = 1469598103934665603ull; /* FNV-1a */
  for (size_t i = 0; i < len; i++)
    h = (h ^ (unsigned char)key[i]) * 1099511628211ull;
  return h ^ (h >> 29);
}
