/* The entry protocol run one command at a time on the blocking drivers'
 * connections (xf__command): encode (entry.h), send, recover a NOSCRIPT,
 * parse. The flow does not use these: tests and the blocking set / delete
 * / get paths do. */
#ifndef XF_ENTRY_RUN_H
#define XF_ENTRY_RUN_H

#include "entry.h"
#include "reply.h"
#include "resp.h"

/* Blocking: sends call, a call of script (loading the script on NOSCRIPT
 * and retrying once). Returns XF_OK with a reply that is not an error reply
 * (caller frees it); an error reply becomes its code (xf__script_error). */
int xf__script_run(xf_client *c, int script, const xf__cmd *call, struct xf_reply **reply);

int xf__entry_read(xf_client *c, const char *key, size_t keylen, xf__entry *out);

/* Tries to take the lease for lease_ms with a new token (written to token). */
int xf__entry_lease(xf_client *c, const char *key, size_t keylen, int64_t lease_ms,
                    int64_t seen_expiry_ms, char token[40], int64_t *now_ms,
                    xf__lease_result *result, xf__entry *newer);

/* Writes the entry; *written is 0 when it was refused: a newer computation
 * (or a delete) is in the entry, or the caller's lease is no longer the
 * entry's. */
int xf__entry_write(xf_client *c, const char *key, size_t keylen, const xf__write *w,
                    int *written);

int xf__entry_release(xf_client *c, const char *key, size_t keylen, const char *token);

/* Removes the entry and leaves a tombstone for tombstone_ms (delete.lua). */
int xf__entry_delete(xf_client *c, const char *key, size_t keylen, int64_t tombstone_ms);

#endif
