/* The Redis key of one call: the client's prefix + the caller's key. */
#ifndef XF_KEY_H
#define XF_KEY_H

#include <stddef.h>
#include <stdint.h>

#include "flow_env.h"

/* Each call owns its key (inline when short, on the heap when long), so a
 * loader that calls back into its own client cannot overwrite the key of the
 * call that is running it. Not movable once built: data may point into it. */
typedef struct xf__key {
  char *data;
  size_t len;
  char inline_buf[128];
} xf__key;

/* Validates key/keylen against the client's limits and builds prefix + key.
 * Returns XF_OK, XF_EINVAL or XF_ENOMEM (message on the client); on error
 * nothing needs freeing. */
int xf__key_build(const xf__config *cfg, xf__runtime *rt, const char *key, size_t keylen,
                  xf__key *out);

/* The hash of a key (FNV-1a, folded): the near cache files keys under it. */
uint64_t xf__key_hash(const char *key, size_t len);

/* Frees a built key. */
void xf__key_free(xf__key *k);

#endif
