/* Where a loader hands over its result. */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "sink.h"
#include "xfetch.h"

void xf__sink_reset(struct xf_sink *sink) {
  memset(sink, 0, offsetof(struct xf_sink, prev_validator));
}

void xf__sink_init(struct xf_sink *sink, size_t max_len) {
  xf__sink_reset(sink);
  sink->max_len = max_len;
}

int xf_sink_ttl(xf_sink *sink, int64_t ttl_ms) {
  if (!sink || ttl_ms < 0 || ttl_ms > (int64_t)1 << 40)
    return XF_EINVAL;
  sink->ttl_ms = ttl_ms;
  sink->ttl_set = 1;
  return XF_OK;
}

int xf_sink_set(xf_sink *sink, const void *data, size_t len) {
  if (!sink || (!data && len > 0) || len > sink->max_len)
    return XF_EINVAL;
  char *copy = malloc(len + 1);
  if (!copy)
    return XF_ENOMEM;
  if (len)
    memcpy(copy, data, len);
  copy[len] = '\0';
  free(sink->data);
  sink->data = copy;
  sink->len = len;
  sink->is_set = 1;
  sink->not_found = 0;
  sink->unchanged = 0;
  return XF_OK;
}

void xf_sink_not_found(xf_sink *sink) {
  if (!sink)
    return;
  free(sink->data);
  sink->data = NULL;
  sink->len = 0;
  sink->is_set = 0;
  sink->unchanged = 0;
  sink->not_found = 1;
}

int xf_sink_previous(const xf_sink *sink, const void **data, size_t *len, int64_t *age_ms) {
  int has = sink && sink->has_prev;
  if (data)
    *data = has ? sink->prev : NULL;
  if (len)
    *len = has ? sink->prev_len : 0;
  if (age_ms)
    *age_ms = has ? sink->prev_age_ms : -1;
  return has;
}

int xf_sink_validator(xf_sink *sink, const void *data, size_t len) {
  if (!sink || (!data && len > 0) || len > XF_MAX_VALIDATOR)
    return XF_EINVAL;
  if (len)
    memcpy(sink->validator, data, len);
  sink->validator_len = len;
  return XF_OK;
}

int xf_sink_previous_validator(const xf_sink *sink, const void **data, size_t *len) {
  int has = sink && sink->has_prev && sink->prev_validator_len > 0;
  if (data)
    *data = has ? sink->prev_validator : NULL;
  if (len)
    *len = has ? sink->prev_validator_len : 0;
  return has;
}

int xf_sink_unchanged(xf_sink *sink) {
  if (!sink || !sink->has_prev)
    return XF_EINVAL;
  free(sink->data);
  sink->data = NULL;
  sink->len = 0;
  sink->is_set = 0;
  sink->not_found = 0;
  sink->unchanged = 1;
  return XF_OK;
}

int xf__sink_own_previous(struct xf_sink *sink) {
  if (!sink->has_prev || sink->prev_own)
    return XF_OK;
  char *copy = malloc(sink->prev_len + 1);
  if (!copy) {
    sink->has_prev = sink->unchanged = 0;
    sink->prev = NULL;
    return XF_ENOMEM;
  }
  memcpy(copy, sink->prev, sink->prev_len);
  copy[sink->prev_len] = '\0';
  sink->prev = sink->prev_own = copy;
  return XF_OK;
}

char *xf__sink_take(struct xf_sink *sink, size_t *len) {
  char *data = sink->data;
  *len = sink->len;
  sink->data = NULL;
  sink->len = 0;
  sink->is_set = 0;
  return data;
}

void xf__sink_clear(struct xf_sink *sink) {
  free(sink->data);
  sink->data = NULL;
  sink->len = 0;
  sink->is_set = 0;
  sink->not_found = 0;
  sink->unchanged = 0;
  free(sink->prev_own);
  sink->prev_own = NULL;
  sink->prev = NULL;
  sink->has_prev = 0;
}

/* A call's result owns its bytes as the sink handed them over (malloc'd):
 * the core frees what it decided and then dropped (an interrupted call). */
void xf_value_free(xf_value *v) {
  if (!v)
    return;
  free(v->data);
  memset(v, 0, sizeof *v);
}
