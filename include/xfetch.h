/* xfetch — stampede-safe get-or-compute in front of expensive loaders, with
 * Redis as the shared cache.
 *
 *   xf_options o = XF_OPTIONS_INIT;
 *   xf_client *c;
 *   if (xf_client_open(&c, &o) != XF_OK) ...
 *   xf_policy p = XF_POLICY_INIT;
 *   xf_value v;
 *   int rc = xf_get_or_compute(c, "user:42", 7, &p, load_user, db, &v);
 *   ... v.data, v.len ...
 *   xf_value_free(&v);
 *   xf_client_close(c);
 *
 * Every fallible call returns XF_OK (0) or a negative XF_E* code; the detail
 * is on the client (xf_errmsg). If a call that takes a loader returns an error
 * before calling it, the loader is never called.
 *
 * Thread-safety: a client is one Redis connection and must be used by one
 * thread at a time (give each thread its own client). Distinct clients are
 * independent. Every *_free / *_close accepts NULL.
 */
#ifndef XFETCH_H
#define XFETCH_H

#include <stddef.h>
#include <stdint.h>

/* The parts, in dependency order, not sorted (each also compiles on its own). */
/* clang-format off */
#include "xfetch/base.h"
#include "xfetch/events.h"
#include "xfetch/options.h"
#include "xfetch/policy.h"
#include "xfetch/share.h"
#include "xfetch/client.h"
#include "xfetch/batch.h"
#include "xfetch/stats.h"
#include "xfetch/refresh.h"
#include "xfetch/call.h"
#include "xfetch/near.h"
#include "xfetch/pool.h"
#include "xfetch/async.h"
/* clang-format on */

#endif /* XFETCH_H */
