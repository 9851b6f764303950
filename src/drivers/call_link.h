/* What the call driver's link (call_link.c) shares with the calls sent
 * together on it (call_send_many.c): the link and its lists of calls. */
#ifndef XF_CALL_LINK_H
#define XF_CALL_LINK_H

#include "call.h"
#include "link.h"
#include "many.h"

/* Where a call sent on a link is (xf_call.on_link): on the wire, waiting for
 * a stream, moved (listed for xf_link_ready), or parked in its XF_CALL_WAIT. */
enum { ON_NONE, ON_WIRE, ON_WAIT, ON_READY, ON_PARKED };

/* What xf_call_received takes in (xf_call.got_set): a reply or the link's
 * failure, or the end of a parked call's wait. */
enum { GOT_NONE, GOT_REPLY, GOT_WAKE };

typedef struct calls {
  xf_call **at;
  size_t len, cap;
} calls;

struct xf_link {
  xf__link l;
  xf_client *c;
  char *host;
  int64_t now_ms;  /* the input being handled: the completions' time */
  size_t attached; /* calls sent and not yet taken out */
  calls waiting;   /* for a stream */
  calls ready;     /* moved, oldest first from ready_at */
  size_t ready_at;
  calls parked; /* in XF_CALL_WAIT (xf_call_park) */
  int wake_rd;  /* the wake pipe (with a near cache; else -1): a byte on */
  int wake_wr;  /* every invalidation */
};

/* Room in v for n calls: the engine's completions never allocate. */
int xf__calls_reserve(calls *v, size_t n);

/* The call moved: rc XF_OK with r, or the link's failure rc. */
void xf__link_moved(xf_link *k, xf_call *call, xf__reply *r, int rc);

#endif
