/* Replies: freeing and copying (reply.h), and the public xf_reply_*. */
#include "reply.h"

#include <stdlib.h>
#include <string.h>

void xf__reply_free(xf__reply *r) {
  if (!r)
    return;
  if (r->element) { /* a partial array (the reader ran out of memory) has NULLs */
    for (size_t i = 0; i < r->elements; i++)
      xf__reply_free(r->element[i]);
    free(r->element);
  }
  free(r->str);
  free(r);
}

/* hiredis 0.14's async code frees a reply when its callback returns; the flow
 * keeps what it is given, so the event-loop driver hands it a copy. */
xf__reply *xf__reply_copy(const xf__reply *r) {
  xf__reply *copy = calloc(1, sizeof *copy);
  if (!copy)
    return NULL;
  copy->type = r->type;
  copy->integer = r->integer;
  if (r->type == XF_REPLY_STRING || r->type == XF_REPLY_STATUS ||
      r->type == XF_REPLY_ERROR) {
    copy->str = malloc(r->len + 1);
    if (!copy->str) {
      free(copy);
      return NULL;
    }
    memcpy(copy->str, r->str, r->len);
    copy->str[r->len] = '\0';
    copy->len = r->len;
  } else if (r->type == XF_REPLY_ARRAY && r->elements > 0) {
    copy->element = calloc(r->elements, sizeof *copy->element);
    if (!copy->element) {
      free(copy);
      return NULL;
    }
    copy->elements = r->elements;
    for (size_t i = 0; i < r->elements; i++)
      if (r->element[i] && !(copy->element[i] = xf__reply_copy(r->element[i]))) {
        xf__reply_free(copy);
        return NULL;
      }
  }
  return copy;
}

/* ---- the public face (xfetch.h) -------------------------------------------------- */

int xf_reply_is_error(const xf_reply *reply, const char **msg, size_t *len) {
  const xf__reply *r = reply;
  int err = r && r->type == XF_REPLY_ERROR;
  if (msg)
    *msg = err ? r->str : NULL;
  if (len)
    *len = err ? r->len : 0;
  return err;
}

void xf_reply_free(xf_reply *reply) { xf__reply_free(reply); }
