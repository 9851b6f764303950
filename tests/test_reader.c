/* The reply reader (src/link/reader.c) through the public xf_reader: a reply
 * costs memory for what has arrived, never for what its header claims. An
 * array header claiming more elements than any reply xfetch reads is a
 * protocol error; a smaller claim, or a bulk string's length, allocates
 * nothing until its bytes come. Heap growth is measured with mallinfo2
 * (glibc; under a sanitizer or valgrind it reads 0, and the bound holds
 * trivially: those builds still check the codes and the replies). */
#include <criterion/criterion.h>
#include <malloc.h>
#include <stdio.h>
#include <string.h>

#include "reader.h"
#include "reply.h"
#include "xfetch.h"

/* Bytes the heap holds now (main arena and mmap'd blocks). */
static size_t heap_bytes(void) {
  struct mallinfo2 m = mallinfo2();
  return m.uordblks + m.hblkhd;
}

/* How much the heap grew since before (0 if it shrank: a reader that
 * failed drops its buffer). */
static size_t grown_since(size_t before) {
  size_t now = heap_bytes();
  return now > before ? now - before : 0;
}

/* What a feed of bytes costs beyond the reader itself: a reader of its own
 * is opened first, so its buffers are counted before. */
#define BOUND (64 * 1024) /* a header and a few elements: well under 64 KiB */

static xf_reader *open_reader(void) {
  xf_reader *rd;
  cr_assert_eq(xf_reader_open(&rd), XF_OK);
  return rd;
}

static void feed(xf_reader *rd, const char *bytes) {
  cr_assert_eq(xf_reader_feed(rd, bytes, strlen(bytes)), XF_OK);
}

Test(reader, a_claim_past_any_reply_is_a_protocol_error_and_allocates_nothing) {
  static const char *const claims[] = {"*724527565\r\n", "*2147483647\r\n", "*1048577\r\n",
                                       "*+724527565\r\n", "*1\r\n*724527565\r\n"};
  for (size_t i = 0; i < sizeof claims / sizeof *claims; i++) {
    xf_reader *rd = open_reader();
    size_t before = heap_bytes();
    feed(rd, claims[i]);
    xf_reply *reply = (xf_reply *)1;
    cr_expect_eq(xf_reader_next(rd, &reply), XF_EPROTO, "%s", claims[i]);
    cr_expect_null(reply);
    size_t grown = grown_since(before);
    cr_expect_lt(grown, BOUND, "%s: the heap grew %zu bytes", claims[i], grown);
    xf_reader_close(rd);
  }
}

Test(reader, the_protocol_error_says_what_was_claimed) {
  redisReader *rd = xf__reader_create();
  cr_assert_not_null(rd);
  cr_assert_eq(redisReaderFeed(rd, "*724527565\r\n", 12), REDIS_OK);
  void *reply = NULL;
  cr_expect_eq(xf__reader_get_reply(rd, &reply), REDIS_ERR);
  cr_expect_eq(rd->err, REDIS_ERR_PROTOCOL);
  cr_expect(strstr(rd->errstr, "724527565 elements") != NULL, "%s", rd->errstr);
  redisReaderFree(rd);
}

/* The largest claim allowed still costs only what arrived: two elements of a
 * 1,048,576-element array. */
Test(reader, an_allowed_claim_allocates_as_its_elements_arrive) {
  xf_reader *rd = open_reader();
  size_t before = heap_bytes();
  feed(rd, "*1048576\r\n:1\r\n$3\r\nabc\r\n");
  xf_reply *reply = (xf_reply *)1;
  cr_expect_eq(xf_reader_next(rd, &reply), XF_OK);
  cr_expect_null(reply, "incomplete");
  size_t grown = grown_since(before);
  cr_expect_lt(grown, BOUND, "the heap grew %zu bytes", grown);
  xf_reader_close(rd); /* a partial array frees cleanly (ASan, valgrind) */
}

Test(reader, a_bulk_claim_allocates_nothing_before_its_bytes) {
  xf_reader *rd = open_reader();
  size_t before = heap_bytes();
  feed(rd, "$536870912\r\nabc");
  xf_reply *reply = (xf_reply *)1;
  cr_expect_eq(xf_reader_next(rd, &reply), XF_OK);
  cr_expect_null(reply, "incomplete");
  size_t grown = grown_since(before);
  cr_expect_lt(grown, BOUND, "the heap grew %zu bytes", grown);
  xf_reader_close(rd);
}

/* Arrays that grow as they fill come out as if allocated at once: every
 * element in place, elements the count, nested arrays too; fed whole or one
 * byte at a time. */
Test(reader, a_grown_array_is_whole) {
  enum { N = 1000 };
  static char wire[N * 16 + 64];
  int at = snprintf(wire, sizeof wire, "*2\r\n*%d\r\n", N);
  for (int i = 0; i < N; i++)
    at += snprintf(wire + at, sizeof wire - (size_t)at, ":%d\r\n", i);
  at += snprintf(wire + at, sizeof wire - (size_t)at, "*0\r\n");
  for (int bytewise = 0; bytewise < 2; bytewise++) {
    xf_reader *rd = open_reader();
    xf_reply *reply = NULL;
    for (int i = 0; i < at && !reply; i += bytewise ? 1 : at) {
      cr_assert_eq(xf_reader_feed(rd, wire + i, bytewise ? 1 : (size_t)at), XF_OK);
      cr_assert_eq(xf_reader_next(rd, &reply), XF_OK);
    }
    cr_assert_not_null(reply);
    const xf__reply *r = (const xf__reply *)reply;
    cr_assert_eq(r->type, XF_REPLY_ARRAY);
    cr_assert_eq(r->elements, 2);
    const xf__reply *a = r->element[0];
    cr_assert_eq(a->elements, N);
    for (int i = 0; i < N; i++)
      cr_expect_eq(a->element[i]->integer, i, "element %d", i);
    cr_expect_eq(r->element[1]->type, XF_REPLY_ARRAY);
    cr_expect_eq(r->element[1]->elements, 0);
    xf_reply_free(reply);
    xf_reader_close(rd);
  }
}
