/* The public sans-I/O call's state, shared by call.c (the call's steps) and
 * call_route.c (where each SEND goes, as the client's fleet says: the server,
 * or a cluster node). */
#ifndef XF_CALL_H
#define XF_CALL_H

#include "clock.h"
#include "fleet.h"
#include "flight.h"
#include "flow.h"
#include "reply.h"

/* What the SEND on the wire asks: the call's command, or what the router
 * needs before routing it. */
enum { PROBE_NONE, PROBE_MODE, PROBE_MAP };

/* What goes before a SEND's command (xf_call.pre). */
enum { PRE_LOAD = 1, PRE_READONLY = 2, PRE_ASKING = 4 };

struct xf_call {
  xf__flow f; /* every kind (flow.h) */
  xf__step step;
  xf_policy policy; /* the flow points at it: a copy the call owns */
  char *key;        /* likewise */
  char *data;       /* likewise: a set's value */
  xf_value out;
  struct xf_call *refresh; /* background refresh detached at DONE (xf_call_take_refresh) */
  xf__renewal renew;       /* LOAD: its lease's renewals (xf_call_renew_at) */
  int renewing;            /* renew is set */
  xf__buf request;         /* the RESP bytes of the SEND step */
  /* The SEND's commands, for a link (call_link.c): the command and what goes
   * before it (PRE_*). */
  const xf__cmd *send_cmd;
  int pre;
  struct xf_link *link;  /* the link it was sent on, until it moved */
  int on_link;           /* ON_* (call_link.c) */
  int resend;            /* the server closed the stream it went on: once more */
  struct xf__many *many; /* on the wire in a shared MGET (xf_call_send_many) */
  int got_set;           /* it moved on its link: xf_call_received takes it in */
  int got_rc;            /* its reply's outcome: XF_OK with got, or the link's failure */
  xf__reply *got;
  int taken;        /* xf_call_result moved the value out */
  char errstr[256]; /* the client's message when the call ended in error */
  /* Routing (call_route.c). */
  const char *host; /* where request goes (the client's strings); NULL = Unix */
  int port;
  int replies;   /* how many replies request produces */
  int probe;     /* PROBE_* */
  int tries;     /* servers asked for the current probe or command */
  xf__trip trip; /* the command's way (fleet.h); trip.act XF_ROUTE_DONE:
                    the next command is new */
  int backoff;   /* the WAIT step is the router's, until wake_ms */
  int64_t wake_ms;
  xf__flight share; /* a load while Redis cannot be used (flight.h) */
};

/* Outcomes of call_route.c's functions, beside an error code (< 0) for the
 * command: fed to its flow. now_ms is the driver's time, as every input's. */
enum { XF__CALL_SENDING = 1, XF__CALL_BACKING_OFF = 2, XF__CALL_REPLY = 3 };

/* The call's current command (new, or again): where it goes and its bytes.
 * XF__CALL_SENDING (request, host, port, replies set), XF__CALL_BACKING_OFF
 * (wait until wake_ms, then call again), or an error code. */
int xf__call_route(xf_call *call, const xf__cmd *cmd, int64_t now_ms);

/* The last of the request's replies (*r; NULL: the connection failed, rc
 * XF_EIO / XF_ECONNECT). XF__CALL_REPLY: *r is the command's; else the
 * router took it (*r freed): XF__CALL_SENDING / XF__CALL_BACKING_OFF as
 * xf__call_route, or an error code. */
int xf__call_route_reply(xf_call *call, const xf__cmd *cmd, xf__reply **r, int rc,
                         int64_t now_ms);

/* A call sent on a link reached its next step: rc XF_OK with r (the
 * call takes it), or the failure rc (r NULL) as the link decided it. */
xf_call_step xf__call_on_reply(xf_call *call, xf__reply *r, int rc, int64_t now_ms);

/* Detaches a call being freed from the link it is on. */
void xf__call_link_forget(xf_call *call);

#endif
