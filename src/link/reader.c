/* hiredis' reader building xf__reply objects (reader.h), and on it the public
 * xf_reader of the sans-I/O call API. The object functions mirror hiredis
 * 0.14's own (hiredis.c), on our type. */
#include "reader.h"

#include <hiredis/hiredis.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "entry.h"
#include "reply.h"

/* hiredis reads these through redisReply (reply.h says where). */
#define SAME_FIELD(f)                                                                      \
  _Static_assert(offsetof(xf__reply, f) == offsetof(redisReply, f), "xf__reply." #f)
SAME_FIELD(type);
SAME_FIELD(integer);
SAME_FIELD(len);
SAME_FIELD(str);
SAME_FIELD(elements);
SAME_FIELD(element);
_Static_assert(sizeof(xf__reply) == sizeof(redisReply), "xf__reply's size");
_Static_assert(XF_REPLY_STRING == REDIS_REPLY_STRING &&
                   XF_REPLY_ARRAY == REDIS_REPLY_ARRAY &&
                   XF_REPLY_INTEGER == REDIS_REPLY_INTEGER &&
                   XF_REPLY_NIL == REDIS_REPLY_NIL &&
                   XF_REPLY_STATUS == REDIS_REPLY_STATUS &&
                   XF_REPLY_ERROR == REDIS_REPLY_ERROR,
               "XF_REPLY_* are hiredis' types");

/* An array's element pointers are allocated as its elements arrive, never
 * for the count its header claims before any of them came: a header costs
 * at most FIRST_ELEMENTS pointers, and an array the bytes received so far,
 * whatever it claims. While it fills, elements is the room allocated (all
 * NULL past the last element read, so a partial array frees cleanly); once
 * full, it is the count. */
#define FIRST_ELEMENTS 64

/* A claim past this many elements is a protocol error: nothing xfetch sends
 * gets near it (an MGET or read_many of at most 512 keys, a script's handful
 * of fields, CLUSTER SLOTS' at most 16,384 ranges; an invalidation lists the
 * keys of one command). Its reader then fails (xf__reader_get_reply). */
#define MAX_ELEMENTS (1 << 20)

/* The claim create_array refused in this thread's reader call, for
 * xf__reader_get_reply to report (hiredis reports any NULL as "Out of
 * memory"): set and read within one redisReaderGetReply. */
static _Thread_local long long refused_claim;

/* Makes room for element idx of parent, whose header claimed claimed. */
static int make_room(xf__reply *parent, size_t idx, size_t claimed) {
  if (idx < parent->elements)
    return 1;
  size_t room = parent->elements * 2;
  if (room > claimed)
    room = claimed;
  if (room <= idx)
    room = idx + 1;
  xf__reply **grown = realloc(parent->element, room * sizeof *grown);
  if (!grown)
    return 0;
  memset(grown + parent->elements, 0, (room - parent->elements) * sizeof *grown);
  parent->element = grown;
  parent->elements = room;
  return 1;
}

/* A new reply of type, linked into its parent array (the reader fills
 * arrays element by element, in order). */
static xf__reply *create(const redisReadTask *task, int type) {
  xf__reply *r = calloc(1, sizeof *r);
  if (!r)
    return NULL;
  r->type = type;
  if (task->parent) {
    xf__reply *parent = task->parent->obj;
    size_t idx = (size_t)task->idx;
    if (!make_room(parent, idx, (size_t)task->parent->elements)) {
      free(r);
      return NULL;
    }
    parent->element[idx] = r;
  }
  return r;
}

static void *create_string(const redisReadTask *task, char *str, size_t len) {
  char *buf = malloc(len + 1);
  if (!buf)
    return NULL;
  xf__reply *r = create(task, task->type); /* STRING, STATUS or ERROR */
  if (!r) {
    free(buf);
    return NULL;
  }
  if (!task->parent && task->type == XF_REPLY_STRING) /* a GET's: maybe an entry */
    r->integer = xf__entry_string_copy(buf, str, len);
  else {
    memcpy(buf, str, len);
    buf[len] = '\0';
  }
  r->str = buf;
  r->len = len;
  return r;
}

static void *create_array(const redisReadTask *task, int elements) {
  if (elements > MAX_ELEMENTS) {
    refused_claim = elements;
    return NULL;
  }
  size_t first = elements > FIRST_ELEMENTS ? FIRST_ELEMENTS
                 : elements > 0            ? (size_t)elements
                                           : 0;
  xf__reply **element = NULL;
  if (first && !(element = calloc(first, sizeof *element)))
    return NULL;
  xf__reply *r = create(task, XF_REPLY_ARRAY);
  if (!r) {
    free(element);
    return NULL;
  }
  r->element = element;
  r->elements = first;
  return r;
}

static void *create_integer(const redisReadTask *task, long long value) {
  xf__reply *r = create(task, XF_REPLY_INTEGER);
  if (r)
    r->integer = value;
  return r;
}

static void *create_nil(const redisReadTask *task) { return create(task, XF_REPLY_NIL); }

static void free_object(void *r) { xf__reply_free(r); }

/* Shared by every reader: hiredis only reads it. */
static redisReplyObjectFunctions functions = {create_string, create_array, create_integer,
                                              create_nil, free_object};

void xf__reader_adopt(redisReader *rd) { rd->fn = &functions; }

redisReader *xf__reader_create(void) { return redisReaderCreateWithFunctions(&functions); }

int xf__reader_get_reply(redisReader *rd, void **reply) {
  refused_claim = 0;
  int rc = redisReaderGetReply(rd, reply);
  if (rc != REDIS_OK && refused_claim) {
    rd->err = REDIS_ERR_PROTOCOL;
    snprintf(rd->errstr, sizeof rd->errstr,
             "Protocol error: a reply claims %lld elements, more than any reply xfetch "
             "reads (%d)",
             refused_claim, MAX_ELEMENTS);
  }
  refused_claim = 0;
  return rc;
}

/* ---- the public xf_reader ------------------------------------------------------ */

struct xf_reader {
  redisReader *r;
};

int xf_reader_open(xf_reader **out) {
  if (!out)
    return XF_EINVAL;
  *out = calloc(1, sizeof **out);
  if (!*out || !((*out)->r = xf__reader_create())) {
    free(*out);
    *out = NULL;
    return XF_ENOMEM;
  }
  return XF_OK;
}

int xf_reader_feed(xf_reader *rd, const char *data, size_t len) {
  if (!rd || (!data && len))
    return XF_EINVAL;
  if (redisReaderFeed(rd->r, data, len) == REDIS_OK)
    return XF_OK;
  /* hiredis refuses every feed once the stream was not RESP: that is still
   * the protocol error, not a lack of memory. */
  return rd->r->err == REDIS_ERR_OOM ? XF_ENOMEM : XF_EPROTO;
}

int xf_reader_next(xf_reader *rd, xf_reply **reply) {
  if (!reply)
    return XF_EINVAL;
  *reply = NULL;
  if (!rd)
    return XF_EINVAL;
  void *r = NULL;
  if (xf__reader_get_reply(rd->r, &r) != REDIS_OK)
    return rd->r->err == REDIS_ERR_OOM ? XF_ENOMEM : XF_EPROTO;
  *reply = r;
  return XF_OK;
}

void xf_reader_close(xf_reader *rd) {
  if (!rd)
    return;
  redisReaderFree(rd->r);
  free(rd);
}
