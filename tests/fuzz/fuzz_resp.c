/* Fuzz target: the RESP request encoder (src/resp.c) with random argv.
 *
 * The input is split into up to MAX_ARGS binary arguments; they are encoded
 * into one buffer reused across inputs (as a client reuses its own), and the
 * encoding must be exactly what RESP says: its length computed here, and
 * hiredis' reader must decode it back into the same arguments. */
#include <hiredis/hiredis.h>
#include <stdint.h>
#include <string.h>

#include "fuzz.h"
#include "resp.h"

#define MAX_ARGS 16

static size_t digits(size_t n) {
  size_t d = 1;
  while (n >= 10)
    n /= 10, d++;
  return d;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static xf__buf buf; /* reused, like the client's request buffer */
  fuzz_in in = {data, size};
  int argc = fuzz_u8(&in) % (MAX_ARGS + 1);
  const char *argv[MAX_ARGS];
  size_t lens[MAX_ARGS];
  size_t want = 1 + digits((size_t)argc) + 2;
  for (int i = 0; i < argc; i++) {
    size_t n = fuzz_u8(&in);
    if (n >= 200) /* now and then a long argument */
      n = (size_t)fuzz_u8(&in) << 8 | fuzz_u8(&in);
    argv[i] = (const char *)fuzz_bytes(&in, n, &lens[i]);
    want += 1 + digits(lens[i]) + 2 + lens[i] + 2;
  }
  FUZZ_CHECK(xf__resp_encode(&buf, argc, argv, lens) == 0);
  FUZZ_CHECK(buf.len == want && buf.len <= buf.cap);

  redisReader *rd = redisReaderCreate();
  FUZZ_CHECK(rd != NULL);
  FUZZ_CHECK(redisReaderFeed(rd, buf.data, buf.len) == REDIS_OK);
  void *got = NULL;
  FUZZ_CHECK(redisReaderGetReply(rd, &got) == REDIS_OK && got != NULL);
  redisReply *r = got;
  FUZZ_CHECK(r->type == REDIS_REPLY_ARRAY && r->elements == (size_t)argc);
  for (int i = 0; i < argc; i++) {
    redisReply *e = r->element[i];
    FUZZ_CHECK(e->type == REDIS_REPLY_STRING && (size_t)e->len == lens[i]);
    FUZZ_CHECK(lens[i] == 0 || memcmp(e->str, argv[i], lens[i]) == 0);
  }
  freeReplyObject(r);
  void *extra = NULL; /* nothing may follow the one command */
  FUZZ_CHECK(redisReaderGetReply(rd, &extra) == REDIS_OK && extra == NULL);
  redisReaderFree(rd);
  return 0;
}
