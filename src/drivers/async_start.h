/* Starting the event-loop driver's calls (async_start.c): every kind is an
 * xf__acall whose flow is started on its own copies of the arguments, then
 * handed to async.c. */
#ifndef XF_ASYNC_START_H
#define XF_ASYNC_START_H

#include "async.h"

/* Takes k, its flow started at step, on as one of ac's calls: XF_OK, its
 * callback to fire from the loop. A flow that ended at once on a bad
 * argument (XF_EINVAL, XF_ENOMEM: nothing sent, nothing owed) is refused
 * instead: k is freed, its code returned. */
int xf__async_accept(xf_async *ac, xf__acall *k, xf__step step);

#endif
