/* The cdef for cffi: mirrors include/xfetch.h (declarations only; cffi checks
 * every value and layout against the real header when it compiles). */
enum {
  XF_OK = 0,
  XF_EINVAL = -1,
  XF_ENOMEM = -2,
  XF_ECONNECT = -3,
  XF_EIO = -4,
  XF_EREDIS = -5,
  XF_EPROTO = -6,
  XF_ETIMEDOUT = -7,
  XF_ELOADER = -8,
  XF_ENOTFOUND = -9,
  XF_EWRONGTYPE = -10,
  XF_EAUTH = -11,
  XF_EUNAVAILABLE = -12,
  XF_ENOPERM = -13,
  XF_ESUPERSEDED = -14,
  XF_ECANCELED = -15,
  XF_EBUSY = -16,
  XF_ETLS = -17,
  XF_ENOTREPLICATED = -18
};

const char *xf_strerror(int rc);
const char *xf_errname(int rc);

typedef struct xf_share xf_share;
typedef struct xf_share_options {
  size_t max_entries;
  size_t max_bytes;
  size_t near_cache_bytes;
} xf_share_options;
int xf_share_open(xf_share **out, const xf_share_options *opts);
void xf_share_close(xf_share *s);

typedef int (*xf_interrupt_fn)(void *ud);
typedef struct xf_refresh xf_refresh;
typedef int (*xf_refresh_executor_fn)(xf_refresh *r, void *ud);

typedef struct xf_tls_options {
  int enable;
  const char *ca_file;
  const char *ca_dir;
  const char *cert_file;
  const char *key_file;
  const char *server_name;
  int no_verify;
} xf_tls_options;

typedef enum xf_event_type {
  XF_EV_HIT = 0, XF_EV_MISS = 1, XF_EV_EARLY = 2, XF_EV_STALE = 3, XF_EV_FAIL_OPEN = 4,
  XF_EV_NEAR = 5, XF_EV_LEASE_WON = 6, XF_EV_LEASE_LOST = 7, XF_EV_LOAD_START = 8,
  XF_EV_LOAD_DONE = 9, XF_EV_WAIT = 10, XF_EV_LOCAL = 11, XF_EV_SUPERSEDED = 12,
  XF_EV_BREAKER_OPEN = 13, XF_EV_BREAKER_CLOSED = 14, XF_EV_RECONNECT = 15,
  XF_EV_REDIRECT = 16, XF_EV_INVALIDATION = 17, XF_EV_TAG_INVALIDATED = 18,
  XF_EV_LEASE_RENEWED = 19, XF_EV_SOFT_TIMEOUT = 20, XF_EV_HARD_TIMEOUT = 21,
  XF_EV_FAILSAFE = 22,
  XF_EV_REVALIDATED = 23
} xf_event_type;
typedef enum xf_driver {
  XF_DRIVER_BLOCKING = 0, XF_DRIVER_BATCH = 1, XF_DRIVER_POOL = 2, XF_DRIVER_ASYNC = 3,
  XF_DRIVER_CALL = 4
} xf_driver;
typedef struct xf_event {
  xf_event_type type;
  xf_driver driver;
  const char *key;
  size_t keylen;
  const char *server;
  int source;
  int64_t duration_us;
  int rc;
} xf_event;
typedef void (*xf_event_fn)(const xf_event *ev, void *ud);
const char *xf_event_name(int type);
const char *xf_driver_name(int driver);
typedef struct xf_options {
  const char *host;
  int port;
  const char *unix_path;
  const char *username;
  const char *password;
  int db;
  int connect_timeout_ms;
  int command_timeout_ms;
  const char *key_prefix;
  uint64_t seed;
  size_t max_key_len;
  size_t max_value_len;
  int breaker_ms;
  int lazy_connect;
  xf_share *share;
  int64_t tombstone_ms;
  int cluster;
  int read_from_replicas;
  xf_interrupt_fn interrupt;
  void *interrupt_ud;
  xf_tls_options tls;
  xf_event_fn on_event;
  void *on_event_ud;
  int disabled;
  int entry_format;
  xf_refresh_executor_fn refresh_executor;
  void *refresh_executor_ud;
  int write_fence;
  int namespace_tag;
} xf_options;

typedef enum xf_on_wait_timeout { XF_WAIT_LOAD = 0, XF_WAIT_FAIL = 1 } xf_on_wait_timeout;
typedef enum xf_background {
  XF_BACKGROUND_AUTO = 0,
  XF_BACKGROUND_ON = 1,
  XF_BACKGROUND_OFF = 2
} xf_background;
typedef void *(*xf_ud_keep_fn)(void *loader_ud);
typedef void (*xf_ud_drop_fn)(void *kept_ud);

typedef struct xf_policy {
  int64_t ttl_ms;
  double beta;
  int64_t lease_ms;
  int64_t wait_ms;
  int64_t stale_ms;
  int64_t stale_if_error_ms;
  int64_t negative_ttl_ms;
  double jitter;
  xf_on_wait_timeout on_wait_timeout;
  int background_refresh;
  double refresh_ahead;
  const char *const *tags;
  size_t ntags;
  int64_t max_load_ms;
  int64_t soft_timeout_ms;
  int64_t hard_timeout_ms;
  int64_t failsafe_throttle_ms;
  xf_ud_keep_fn loader_ud_keep;
  xf_ud_drop_fn loader_ud_drop;
  size_t compress_min_bytes;
  int tags_never_stale;
} xf_policy;
#define XF_MAX_TAGS 15
#define XF_MAX_TAG_LEN 200
#define XF_MAX_VALIDATOR 255

typedef enum xf_source {
  XF_SOURCE_CACHE = 0,
  XF_SOURCE_LOADER = 1,
  XF_SOURCE_STALE = 2,
  XF_SOURCE_UNCACHED = 3,
  XF_SOURCE_LOCAL = 4
} xf_source;

typedef struct xf_value {
  char *data;
  size_t len;
  xf_source source;
} xf_value;

void xf_value_free(xf_value *v);

typedef struct xf_client xf_client;
int xf_client_open(xf_client **out, const xf_options *opts);
void xf_client_close(xf_client *c);
void xf_client_set_enabled(xf_client *c, int enabled);
const char *xf_errmsg(const xf_client *c);
int xf_loader_error(const xf_client *c);
int xf_load_moved(const xf_client *c);

typedef struct xf_sink xf_sink;
int xf_sink_set(xf_sink *sink, const void *data, size_t len);
void xf_sink_not_found(xf_sink *sink);
int xf_sink_ttl(xf_sink *sink, int64_t ttl_ms);
int xf_sink_previous(const xf_sink *sink, const void **data, size_t *len, int64_t *age_ms);
int xf_sink_unchanged(xf_sink *sink);
int xf_sink_validator(xf_sink *sink, const void *data, size_t len);
int xf_sink_previous_validator(const xf_sink *sink, const void **data, size_t *len);

typedef int (*xf_loader_fn)(void *ud, const char *key, size_t keylen, xf_sink *sink);
int xf_get_or_compute(xf_client *c, const char *key, size_t keylen, const xf_policy *policy,
                      xf_loader_fn loader, void *loader_ud, xf_value *out);
int xf_get_or_compute_many(xf_client *c, size_t n, const char *const *keys,
                           const size_t *keylens, const xf_policy *policy, xf_loader_fn loader,
                           void *loader_ud, xf_value *values, int *rcs);
typedef int (*xf_batch_loader_fn)(void *ud, size_t n, const char *const *keys, const size_t *keylens, xf_sink *const *sinks);
int xf_get_or_compute_many_batch(xf_client *c, size_t n, const char *const *keys, const size_t *keylens, const xf_policy *policy, xf_batch_loader_fn loader, void *loader_ud, xf_value *values, int *rcs);
int xf_get(xf_client *c, const char *key, size_t keylen, xf_value *out);
int xf_set(xf_client *c, const char *key, size_t keylen, const void *data, size_t len,
           const xf_policy *policy);
int xf_ping(xf_client *c);
int xf_delete(xf_client *c, const char *key, size_t keylen);
int xf_invalidate_tags(xf_client *c, const char *const *tags, size_t ntags);
int xf_clear_namespace(xf_client *c);

typedef enum xf_tag_reason { XF_TAG_RAISED = 1, XF_TAG_OTHER = 2 } xf_tag_reason;

typedef struct xf_stats {
  uint64_t hits;
  uint64_t misses;
  uint64_t early;
  uint64_t loads;
  uint64_t load_errors;
  uint64_t lease_lost;
  uint64_t waits;
  uint64_t stale;
  uint64_t uncached;
  uint64_t redis_errors;
  uint64_t superseded;
  uint64_t local;
  uint64_t redirects;
  uint64_t map_refreshes;
  uint64_t connections;
  uint64_t malformed;
  uint64_t bypassed;
  uint64_t near_hits;
  uint64_t near_evictions;
  uint64_t fence_failed;
  uint64_t tag_invalidated;
  uint64_t failsafe;
  uint64_t revalidated;
} xf_stats;
void xf_client_stats(const xf_client *c, xf_stats *out);

/* The binding's callbacks (xfetch/_runtime.py): the loader trampolines, and
 * the interrupt check that lets a signal through a C wait. */
extern "Python" int _xf_py_loader(void *ud, const char *key, size_t keylen, xf_sink *sink);
extern "Python" int _xf_py_key_loader(void *ud, const char *key, size_t keylen,
                                      xf_sink *sink);
extern "Python" int _xf_py_batch_loader(void *ud, size_t n, const char *const *keys,
                                        const size_t *keylens, xf_sink *const *sinks);
extern "Python" int _xf_py_interrupt(void *ud);
/* The sync face's refresh executor (xf_options.refresh_executor): _refresh.py. */
extern "Python" int _xf_py_refresh(xf_refresh *r, void *ud);
int xf_refresh_run(xf_refresh *r, xf_loader_fn loader, void *loader_ud);
void xf_refresh_drop(xf_refresh *r);
const char *xf_refresh_key(const xf_refresh *r, size_t *len);
typedef struct xf_refresh_info {
  uint64_t started;
  uint64_t done;
  uint64_t failed;
  uint64_t skipped;
  uint64_t abandoned;
  xf_stats clients;
} xf_refresh_info;
void xf_share_refresh_stats(xf_share *s, xf_refresh_info *out);
/* The event hook (xf_options.on_event): _events.py. */
extern "Python" void _xf_py_event(const xf_event *ev, void *ud);

typedef struct xf_pool xf_pool;
int xf_pool_open(xf_pool **out, const xf_options *opts, size_t max_connections,
                 int checkout_timeout_ms);
int xf_pool_get_or_compute(xf_pool *p, const char *key, size_t keylen,
                           const xf_policy *policy, xf_loader_fn loader, void *loader_ud,
                           xf_value *out);
int xf_pool_set(xf_pool *p, const char *key, size_t keylen, const void *data, size_t len,
                const xf_policy *policy);
int xf_pool_delete(xf_pool *p, const char *key, size_t keylen);
int xf_pool_invalidate_tags(xf_pool *p, const char *const *tags, size_t ntags);
int xf_pool_clear_namespace(xf_pool *p);
int xf_pool_get(xf_pool *p, const char *key, size_t keylen, xf_value *out);
int xf_pool_get_or_compute_many(xf_pool *p, size_t n, const char *const *keys,
                                const size_t *keylens, const xf_policy *policy,
                                xf_loader_fn loader, void *loader_ud, xf_value *values,
                                int *rcs);
int xf_pool_get_or_compute_many_batch(xf_pool *p, size_t n, const char *const *keys,
                                      const size_t *keylens, const xf_policy *policy,
                                      xf_batch_loader_fn loader, void *loader_ud,
                                      xf_value *values, int *rcs);
const char *xf_pool_errmsg(void);
typedef struct xf_pool_info {
  xf_stats clients;
  uint64_t open;
  uint64_t idle;
  uint64_t waited;
  uint64_t timed_out;
} xf_pool_info;
void xf_pool_stats(xf_pool *p, xf_pool_info *out);
void xf_pool_close(xf_pool *p);

typedef struct xf_call xf_call;
typedef struct xf_reader xf_reader;
typedef struct xf_reply xf_reply;
typedef enum xf_call_step {
  XF_CALL_SEND = 0,
  XF_CALL_LOAD = 1,
  XF_CALL_WAIT = 2,
  XF_CALL_DONE = 3
} xf_call_step;
int xf_call_start(xf_call **out, xf_client *c, const char *key, size_t keylen,
                  const xf_policy *policy, int64_t now_ms);
int xf_call_start_get(xf_call **out, xf_client *c, const char *key, size_t keylen,
                      int64_t now_ms);
int xf_call_start_set(xf_call **out, xf_client *c, const char *key, size_t keylen,
                      const void *data, size_t len, const xf_policy *policy,
                      int64_t now_ms);
int xf_call_start_delete(xf_call **out, xf_client *c, const char *key, size_t keylen,
                         int64_t now_ms);
int xf_call_start_invalidate_tags(xf_call **out, xf_client *c, const char *const *tags,
                                  size_t ntags, int64_t now_ms);
int xf_call_start_clear_namespace(xf_call **out, xf_client *c, int64_t now_ms);
xf_call_step xf_call_next(const xf_call *call);
const char *xf_call_request(const xf_call *call, size_t *len);
int xf_call_target(const xf_call *call, const char **host, int *port);
xf_call_step xf_call_reply(xf_call *call, xf_reply *reply, int64_t now_ms);
xf_call_step xf_call_io_failed(xf_call *call, int rc, int64_t now_ms);
xf_call_step xf_call_loaded(xf_call *call, const void *data, size_t len,
                            int64_t duration_us, int64_t now_ms);
xf_call_step xf_call_not_found(xf_call *call, int64_t duration_us, int64_t now_ms);
xf_call_step xf_call_load_failed(xf_call *call, int loader_rc, int64_t now_ms);
xf_sink *xf_call_sink(xf_call *call);
xf_call_step xf_call_load_done(xf_call *call, int loader_rc, int64_t duration_us,
                               int64_t now_ms);
int64_t xf_call_wait_ms(const xf_call *call, int64_t now_ms);
xf_call_step xf_call_woke(xf_call *call, int64_t now_ms);
int xf_call_result(xf_call *call, xf_value *out);
const char *xf_call_errmsg(const xf_call *call);
void xf_call_free(xf_call *call);
xf_call *xf_call_take_refresh(xf_call *call);
int64_t xf_call_renew_at(const xf_call *call);
int64_t xf_call_load_deadline(const xf_call *call);
xf_call_step xf_call_load_timeout(xf_call *call, int64_t now_ms);
int xf_call_start_renew(xf_call **out, xf_call *loading, int64_t now_ms);
typedef enum xf_setup_flags {
  XF_SETUP_REPLICA = 1,
  XF_SETUP_SCRIPTS = 2
} xf_setup_flags;
int xf_call_wake_open(xf_client *c, int *fd);
void xf_call_wake_close(xf_client *c, int fd);
int xf_call_woken(const xf_call *call);
typedef struct xf_link xf_link;
typedef enum xf_link_how {
  XF_LINK_CLOSED = 0,
  XF_LINK_BROKEN = 1,
  XF_LINK_TIMEOUT = 2,
  XF_LINK_TLS = 3,
  XF_LINK_CANCELED = 4
} xf_link_how;
int xf_link_open(xf_link **out, xf_client *c, const char *host, int port, int flags);
int xf_link_wants_stream(const xf_link *link);
int xf_link_start(xf_link *link, int64_t now_ms);
void xf_link_connected(xf_link *link, int fd, int64_t now_ms);
const char *xf_link_output(const xf_link *link, size_t *len);
void xf_link_written(xf_link *link, size_t n);
int xf_link_feed(xf_link *link, const void *data, size_t len, int64_t now_ms);
void xf_link_failed(xf_link *link, xf_link_how how, const char *why, int64_t now_ms);
int64_t xf_link_deadline(const xf_link *link);
xf_call *xf_link_ready(xf_link *link);
xf_call_step xf_call_received(xf_call *call, int64_t now_ms);
int xf_call_send(xf_call *call, xf_link *link, int64_t now_ms);
int xf_call_send_many(xf_call *const *calls, size_t n, xf_link *link, int64_t now_ms);
void xf_link_close(xf_link *link);
int xf_call_park(xf_call *call, xf_link *link, int64_t now_ms);
int xf_link_tick(xf_link *link, int64_t now_ms);
int xf_link_wake_fd(const xf_link *link);
int xf_reader_open(xf_reader **out);
int xf_reader_feed(xf_reader *rd, const char *data, size_t len);
int xf_reader_next(xf_reader *rd, xf_reply **reply);
int xf_reply_is_error(const xf_reply *reply, const char **msg, size_t *len);
void xf_reply_free(xf_reply *reply);
void xf_reader_close(xf_reader *rd);

#define XF_NEAR_NOT_SERVED 1
int xf_near_serve(xf_client *c, const char *key, size_t keylen, const xf_policy *policy,
                  xf_driver driver, uint64_t *near_hits, xf_value *out);
void xf_near_move_refresh(xf_client *from, xf_client *to);

/* The event-loop driver (xfetch.aio runs on it: _aio_loop.py). */
typedef struct xf_async xf_async;
typedef struct xf_async_conn xf_async_conn;
#define XF_ASYNC_READ 1
#define XF_ASYNC_WRITE 2
typedef struct xf_async_load xf_async_load;
typedef void (*xf_async_callback_fn)(int rc, const xf_value *value, void *privdata);
typedef void (*xf_async_done_fn)(int rc, void *privdata);
typedef void (*xf_async_loader_fn)(void *ud, const char *key, size_t keylen,
                                   xf_async_load *load);
typedef struct xf_async_loop {
  void *data;
  int (*watch)(void *data, void **watch, int fd, int events, xf_async_conn *conn);
  void (*unwatch)(void *data, void *watch);
  void (*timer_start)(void *data, int64_t delay_ms);
  void (*timer_stop)(void *data);
  void (*cleanup)(void *data);
} xf_async_loop;
int xf_async_open(xf_async **out, const xf_options *opts, const xf_async_loop *loop);
void xf_async_close(xf_async *ac);
void xf_async_set_enabled(xf_async *ac, int enabled);
int xf_async_get_or_compute(xf_async *ac, const char *key, size_t keylen,
                            const xf_policy *policy, xf_async_loader_fn loader,
                            void *loader_ud, xf_async_callback_fn callback, void *privdata);
int xf_async_get(xf_async *ac, const char *key, size_t keylen,
                 xf_async_callback_fn callback, void *privdata);
int xf_async_set(xf_async *ac, const char *key, size_t keylen, const void *data,
                 size_t len, const xf_policy *policy, xf_async_done_fn callback,
                 void *privdata);
int xf_async_delete(xf_async *ac, const char *key, size_t keylen,
                    xf_async_done_fn callback, void *privdata);
int xf_async_invalidate_tags(xf_async *ac, const char *const *tags, size_t ntags,
                             xf_async_done_fn callback, void *privdata);
int xf_async_clear_namespace(xf_async *ac, xf_async_done_fn callback, void *privdata);
void xf_async_set_eager(xf_async *ac, int eager);
void xf_async_cork(xf_async *ac);
void xf_async_uncork(xf_async *ac);
void xf_async_set_autocork(xf_async *ac, int autocork);
int xf_async_load_done(xf_async_load *load, const void *data, size_t len);
int xf_async_load_previous(const xf_async_load *load, const void **data, size_t *len,
                           int64_t *age_ms);
int xf_async_load_previous_validator(const xf_async_load *load, const void **data,
                                     size_t *len);
int xf_async_load_validator(xf_async_load *load, const void *data, size_t len);
int xf_async_load_ttl(xf_async_load *load, int64_t ttl_ms);
int xf_async_load_unchanged(xf_async_load *load);
void xf_async_load_not_found(xf_async_load *load);
void xf_async_load_fail(xf_async_load *load, int code);
xf_sink *xf_async_load_sink(xf_async_load *load);
void xf_async_load_complete(xf_async_load *load, int rc);
int xf_async_near_serve(xf_async *ac, const char *key, size_t keylen,
                        const xf_policy *policy, uint64_t *near_hits, xf_value *out);
void xf_async_timer_fired(xf_async *ac);
void xf_async_ready(xf_async_conn *conn, int events);
const char *xf_async_errmsg(const xf_async *ac);
int xf_async_loader_error(const xf_async *ac);
void xf_async_stats(const xf_async *ac, xf_stats *out);
/* Its loop adapter and callbacks (_aio_loop.py). */
extern "Python" int _xf_aio_watch(void *data, void **watch, int fd, int events,
                                  xf_async_conn *conn);
extern "Python" void _xf_aio_unwatch(void *data, void *watch);
extern "Python" void _xf_aio_timer_start(void *data, int64_t delay_ms);
extern "Python" void _xf_aio_timer_stop(void *data);
extern "Python" void _xf_aio_cleanup(void *data);
extern "Python" void _xf_aio_loader(void *ud, const char *key, size_t keylen,
                                    xf_async_load *load);
extern "Python" void _xf_aio_done(int rc, const xf_value *value, void *privdata);
extern "Python" void _xf_aio_done_rc(int rc, void *privdata);
extern "Python" void *_xf_aio_keep(void *ud);
extern "Python" void _xf_aio_drop(void *ud);
