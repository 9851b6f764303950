/* The loader's output buffer. */
#ifndef XF_SINK_H
#define XF_SINK_H

#include <stddef.h>
#include <stdint.h>

struct xf_sink {
  char *data; /* malloc'd, NUL-terminated; NULL until set */
  size_t len;
  size_t max_len; /* the client's max_value_len */
  int is_set;
  int not_found;
  int ttl_set;    /* xf_sink_ttl was called (0: the policy's ttl) */
  int64_t ttl_ms; /* its ttl */
};

void xf__sink_init(struct xf_sink *sink, size_t max_len);

/* Moves the data out (caller frees) and resets the sink. */
char *xf__sink_take(struct xf_sink *sink, size_t *len);

/* Frees and forgets the data (keeps ttl_ms: a sink is reset by init). */
void xf__sink_clear(struct xf_sink *sink);

#endif
