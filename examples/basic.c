/* The README's C example: a slow loader behind xfetch.
 * Usage: basic [port] (default 6379). */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <xfetch.h>

/* The expensive computation: here, 100 ms of "database". */
static int load_profile(void *db, const char *key, size_t keylen, xf_sink *sink) {
  (void)db;
  usleep(100 * 1000);
  char buf[128];
  int n =
      snprintf(buf, sizeof buf, "{\"id\": \"%.*s\", \"name\": \"Ada\"}", (int)keylen, key);
  return xf_sink_set(sink, buf, (size_t)n);
}

int main(int argc, char **argv) {
  xf_options opts = XF_OPTIONS_INIT;
  opts.port = argc > 1 ? atoi(argv[1]) : 6379;
  xf_client *c;
  int rc = xf_client_open(&c, &opts);
  if (rc != XF_OK) {
    fprintf(stderr, "connect: %s: %s\n", xf_strerror(rc), xf_errmsg(c)); /* c is NULL */
    return 1;
  }
  xf_policy policy = XF_POLICY_INIT; /* ttl 60 s, beta 1 */
  policy.ttl_ms = 2000;
  for (int i = 0; i < 3; i++) {
    xf_value v;
    rc = xf_get_or_compute(c, "user:42", 7, &policy, load_profile, NULL, &v);
    if (rc != XF_OK) {
      fprintf(stderr, "get: %s (%s)\n", xf_strerror(rc), xf_errmsg(c));
      break;
    }
    static const char *from[] = {"cache", "loader", "stale", "uncached", "local"};
    printf("%s  <- %s\n", v.data, from[v.source]);
    xf_value_free(&v);
  }
  xf_client_close(c);
  return rc == XF_OK ? 0 : 1;
}
