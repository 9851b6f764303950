/* Blocking runs of single entry scripts, for tests that set an entry up the
 * way another caller would (a lease held, a newer write): encode, send on the
 * client's connection, parse. The library has none: its commands go through
 * the flow (flow.h). A NOSCRIPT is answered with SCRIPT LOAD and the command
 * again, once. */
#ifndef XFT_ENTRY_IO_H
#define XFT_ENTRY_IO_H

#include "entry.h"

/* Tries to take the lease for lease_ms with a new token (written to token). */
int xft_entry_lease(xf_client *c, const char *key, size_t keylen, int64_t lease_ms,
                    int64_t seen_expiry_ms, char token[40], int64_t *now_ms,
                    xf__lease_result *result, xf__entry *newer);

/* Writes the entry; *written is 0 when it was refused. */
int xft_entry_write(xf_client *c, const char *key, size_t keylen, const xf__write *w,
                    int *written);

/* Touches the entry (lua/touch.lua); *touched is 0 when it was refused. */
int xft_entry_touch(xf_client *c, const char *key, size_t keylen, const xf__touch *t,
                    int *touched);

int xft_entry_release(xf_client *c, const char *key, size_t keylen, const char *token);

#endif
