/* The Redis key of one call: the client's prefix + the caller's key. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "client.h"
#include "key.h"
#include "near.h"

int xf__key_build(xf_client *c, const char *key, size_t keylen, xf__key *out) {
  out->data = NULL;
  out->len = 0;
  if (!key)
    return xf__fail(c, XF_EINVAL, "key is NULL");
  if (keylen == 0)
    return xf__fail(c, XF_EINVAL, "key is empty");
  if (keylen > c->max_key_len || keylen > SIZE_MAX - c->prefix_len)
    return xf__fail(c, XF_EINVAL, "key is %zu bytes, above max_key_len %zu", keylen,
                    c->max_key_len);
  size_t len = c->prefix_len + keylen;
  char *data = len <= sizeof out->inline_buf ? out->inline_buf : malloc(len);
  if (!data)
    return xf__fail(c, XF_ENOMEM, "out of memory for a %zu-byte key", len);
  memcpy(data, c->prefix, c->prefix_len);
  memcpy(data + c->prefix_len, key, keylen);
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

uint64_t xf__near_key_hash(const char *key, size_t len) {
  uint64_t h = 1469598103934665603ull; /* FNV-1a */
  for (size_t i = 0; i < len; i++)
    h = (h ^ (unsigned char)key[i]) * 1099511628211ull;
  return h ^ (h >> 29);
}
