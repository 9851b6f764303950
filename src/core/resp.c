/* RESP request encoding: *<argc>\r\n then $<len>\r\n<bytes>\r\n per argument. */
#include <stdlib.h>
#include <string.h>

#include "resp.h"

/* Writes "<prefix><n>\r\n" at out; returns the bytes written (at most 23). */
static size_t put_header(char *out, char prefix, size_t n) {
  char digits[20];
  size_t d = 0;
  do {
    digits[d++] = (char)('0' + n % 10);
    n /= 10;
  } while (n);
  size_t at = 0;
  out[at++] = prefix;
  while (d)
    out[at++] = digits[--d];
  out[at++] = '\r';
  out[at++] = '\n';
  return at;
}

static int reserve(xf__buf *buf, size_t need) {
  if (need <= buf->cap)
    return 0;
  size_t cap = buf->cap ? buf->cap : 256;
  while (cap < need)
    cap *= 2;
  char *data = realloc(buf->data, cap);
  if (!data)
    return -1;
  buf->data = data;
  buf->cap = cap;
  return 0;
}

/* Reserves room for n more arguments of lens (the header counted apart). */
static size_t room(size_t n, const size_t *lens) {
  size_t need = 0;
  for (size_t i = 0; i < n; i++)
    need += 23 + lens[i] + 2;
  return need;
}

static size_t put_args(char *out, size_t n, const char *const *argv, const size_t *lens) {
  size_t at = 0;
  for (size_t i = 0; i < n; i++) {
    at += put_header(out + at, '$', lens[i]);
    memcpy(out + at, argv[i], lens[i]);
    at += lens[i];
    out[at++] = '\r';
    out[at++] = '\n';
  }
  return at;
}

int xf__resp_append(xf__buf *buf, int argc, const char *const *argv, const size_t *lens) {
  if (reserve(buf, buf->len + 23 + room((size_t)argc, lens)) != 0)
    return -1;
  buf->len += put_header(buf->data + buf->len, '*', (size_t)argc);
  buf->len += put_args(buf->data + buf->len, (size_t)argc, argv, lens);
  return 0;
}

int xf__resp_append_cmd(xf__buf *buf, const xf__cmd *cmd) {
  size_t argc = (size_t)cmd->argc, more = cmd->more_argc;
  if (reserve(buf, buf->len + 23 + room(argc, cmd->lens) + room(more, cmd->more_lens)) != 0)
    return -1;
  buf->len += put_header(buf->data + buf->len, '*', argc + more);
  buf->len += put_args(buf->data + buf->len, argc, cmd->argv, cmd->lens);
  buf->len += put_args(buf->data + buf->len, more, cmd->more_argv, cmd->more_lens);
  return 0;
}

int xf__resp_encode(xf__buf *buf, int argc, const char *const *argv, const size_t *lens) {
  buf->len = 0;
  return xf__resp_append(buf, argc, argv, lens);
}

void xf__buf_free(xf__buf *buf) {
  free(buf->data);
  buf->data = NULL;
  buf->len = buf->cap = 0;
}
