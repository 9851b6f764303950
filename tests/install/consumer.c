/* Links against the installed xfetch and checks a few calls work. */
#include <stdio.h>
#include <string.h>
#include <xfetch.h>

int main(void) {
  xf_options o = XF_OPTIONS_INIT;
  o.port = 1; /* nothing listens there */
  o.connect_timeout_ms = 200;
  xf_client *c;
  int rc = xf_client_open(&c, &o);
  if (rc != XF_ECONNECT || strcmp(xf_errname(rc), "ECONNECT") != 0) {
    fprintf(stderr, "unexpected %d (%s)\n", rc, xf_errname(rc));
    return 1;
  }
  if (!strstr(xf_errmsg(c), "refused")) { /* c is NULL: this thread's failed open */
    fprintf(stderr, "no reason: '%s'\n", xf_errmsg(c));
    return 1;
  }
  printf("consumer ok: %s: %s\n", xf_strerror(rc), xf_errmsg(c));
  return 0;
}
