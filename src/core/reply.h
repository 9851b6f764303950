/* A Redis reply, the project's own type: what the core (entry, script, route,
 * cluster, flow, setup) parses. hiredis' reader builds these directly through
 * the object functions of reader.h, installed on every reader the library
 * uses, so no core file needs a hiredis header. The public opaque xf_reply is
 * this type. */
#ifndef XF_REPLY_H
#define XF_REPLY_H

#include <stddef.h>

#include "xfetch.h"

/* The RESP2 reply types; their values are hiredis 0.14's REDIS_REPLY_*
 * (reader.c checks), so a type read off the wire needs no translation. */
enum {
  XF_REPLY_STRING = 1,
  XF_REPLY_ARRAY = 2,
  XF_REPLY_INTEGER = 3,
  XF_REPLY_NIL = 4,
  XF_REPLY_STATUS = 5,
  XF_REPLY_ERROR = 6
};

/* Laid out as hiredis 0.14's redisReply (reader.c asserts it): hiredis' async
 * code reads type and str of an unsolicited error reply through its own type
 * whatever object functions built it. */
struct xf_reply {
  int type;          /* XF_REPLY_* */
  long long integer; /* XF_REPLY_INTEGER */
  size_t len;        /* str's length */
  char *str;         /* STRING, STATUS, ERROR: NUL-terminated, binary-safe by len */
  size_t elements;   /* XF_REPLY_ARRAY */
  struct xf_reply **element;
};
typedef struct xf_reply xf__reply;

/* Frees r and everything under it (NULL-safe). */
void xf__reply_free(xf__reply *r);

/* A deep copy of r, freeable with xf__reply_free; NULL when out of memory. */
xf__reply *xf__reply_copy(const xf__reply *r);

#endif
