/* Every driver behind one face, for tests that run the same assertions on
 * each: the blocking client, the pool, the event loop (xf_async on libevent
 * and on libuv) and the sans-I/O call (on links, one per server the calls
 * name, each over a plain socket to it: link_net.h), on standalone Redis or
 * a Redis Cluster (options.host a seed list).
 * Each operation runs to its end before it returns, whatever the driver.
 * It needs fixture.h's declarations only: it links with the cluster
 * fixture too. */
#ifndef XFT_OP_DRIVERS_H
#define XFT_OP_DRIVERS_H

#include "fixture.h"

enum { XFT_BLOCKING, XFT_POOL, XFT_ASYNC, XFT_CALL, XFT_ASYNC_UV, XFT_NDRIVERS };
/* Every driver, for a parametrized test's array. */
#define XFT_ALL_DRIVERS                                                                    \
  { XFT_BLOCKING, XFT_POOL, XFT_ASYNC, XFT_CALL, XFT_ASYNC_UV }
extern const char *const xft_driver_names[XFT_NDRIVERS];

typedef struct xft_drv xft_drv;

/* A loader every driver runs: it hands over value (NULL: "not found"), or
 * fails with fail, and
 * counts its runs. during (NULL: nothing) runs while the load is under way,
 * after the loader started and before its result is handed over, on the
 * test's thread: e.g. another call of the same driver. */
typedef struct xft_op_loader {
  const char *value;
  int fail; /* non-zero: the loader fails with this code (value unused) */
  int calls;
  void (*during)(xft_drv *d, void *arg);
  void *arg;
  /* Conditional refresh: unchanged answers "unchanged" when the load has a
   * previous value (else hands over value). Every run records what it was
   * given: had_previous, the previous value (its first bytes, NUL-ended)
   * and its age. */
  int unchanged;
  int had_previous;
  char previous[64];
  int64_t previous_age_ms;
  const char *validator;       /* stored with value (NULL: none) */
  char previous_validator[64]; /* the previous value's ("" none) */
  /* xft_drv_many only: non-zero runs the batch with a batch loader
   * (xf_get_or_compute_many_batch), which hands over value (NULL: not found)
   * to each key it is given, or fails them all with fail; calls counts the
   * keys loaded, batch_calls the loader's runs (during runs in each;
   * unchanged and validator are not used). */
  int batch;
  int batch_calls;
} xft_op_loader;

/* A handle of driver on the server o names (o is copied; the call driver's
 * client is opened lazy, the test's socket being its wire). Asserts. */
xft_drv *xft_drv_open(int driver, const xf_options *o);
void xft_drv_close(xft_drv *d);

/* The operations, each the driver's own API; their code. A value is the
 * caller's to free (xf_value_free), zeroed on error. */
int xft_drv_get_or_compute(xft_drv *d, const char *key, const xf_policy *p,
                           xft_op_loader *l, xf_value *out);
int xft_drv_get(xft_drv *d, const char *key, xf_value *out);
int xft_drv_set(xft_drv *d, const char *key, const char *value, const xf_policy *p);
int xft_drv_delete(xft_drv *d, const char *key);
int xft_drv_invalidate_tags(xft_drv *d, const char *const *tags, size_t n);

/* The batch (xf_get_or_compute_many; with l->batch, _many_batch), on the
 * drivers that have one. */
int xft_drv_has_batch(int driver);
int xft_drv_many(xft_drv *d, size_t n, const char *const *keys, const xf_policy *p,
                 xft_op_loader *l, xf_value *values, int *rcs);

/* A batch driver and its loader, for a test's parameters: the batch with a
 * loader per key (xf_get_or_compute_many) or a batch loader (_many_batch). */
typedef struct xft_batch_kind {
  int driver; /* one with a batch (xft_drv_has_batch) */
  int batch_loader;
} xft_batch_kind;
/* Every batch kind, for a parametrized test's array. */
#define XFT_ALL_BATCH_KINDS                                                                \
  {                                                                                        \
    {XFT_BLOCKING, 0}, {XFT_BLOCKING, 1}, {XFT_POOL, 0}, { XFT_POOL, 1 }                   \
  }

/* The handle's counters (the pool's: its clients' summed). */
void xft_drv_stats(const xft_drv *d, xf_stats *out);

/* The message of the handle's last failed operation. */
const char *xft_drv_errmsg(const xft_drv *d);

#endif
