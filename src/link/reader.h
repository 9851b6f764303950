/* hiredis' reply reader, made to build the project's replies (reply.h): the
 * object functions every reader the library uses is given (blocking and async
 * contexts, the xf_reader of the sans-I/O call API). */
#ifndef XF_READER_H
#define XF_READER_H

#include <hiredis/read.h>

/* Makes rd build xf__reply objects (freed with xf__reply_free). For a
 * context: before its first reply; again after a redisReconnect, which makes
 * a fresh reader. */
void xf__reader_adopt(redisReader *rd);

/* A reader building xf__reply objects; NULL when out of memory. */
redisReader *xf__reader_create(void);

/* redisReaderGetReply on a reader of these objects: the same, except that
 * a reply whose array header claims more elements than any reply xfetch
 * reads fails as a protocol error (rd->err REDIS_ERR_PROTOCOL, rd->errstr
 * saying so) before anything is allocated for it. Arrays are allocated as
 * their elements arrive, never for what a header claims; hiredis keeps a
 * bulk string's bytes as they arrive and builds it once all are in. */
int xf__reader_get_reply(redisReader *rd, void **reply);

#endif
