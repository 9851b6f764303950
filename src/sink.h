/* The loader's output buffer. */
#ifndef XF_SINK_H
#define XF_SINK_H

#include <stddef.h>

struct xf_sink {
  char *data; /* malloc'd, NUL-terminated; NULL until set */
  size_t len;
  size_t max_len; /* the client's max_value_len */
  int is_set;
  int not_found;
};

void xf__sink_init(struct xf_sink *sink, size_t max_len);

/* Moves the data out (caller frees) and resets the sink. */
char *xf__sink_take(struct xf_sink *sink, size_t *len);

void xf__sink_clear(struct xf_sink *sink);

#endif
