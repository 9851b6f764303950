/* (tls_certs.h) A throwaway CA and certificates by the openssl CLI. No
 * Criterion: the TLS fixture (tls_fixture.c) and xfetch-bench's tls scenario
 * share it. */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "tls_certs.h"

/* EC P-256 keys: made in a millisecond, where RSA takes a tenth of a second
 * each. Certificates live two days: a run never outlives them. */
static const char make_certs_sh[] =
    "set -e\n"
    "key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out $1.key; "
    "}\n"
    "ca() { key $1; openssl req -x509 -new -key $1.key -out $1.crt -days 2 -subj /CN=$1; "
    "}\n"
    "leaf() {\n"
    "  key $1; openssl req -new -key $1.key -out $1.csr -subj /CN=$2\n"
    "  printf '%s\\n' \"$3\" \"extendedKeyUsage=$4\" > $1.ext\n"
    "  openssl x509 -req -in $1.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out $1.crt "
    "\\\n"
    "    -days 2 -extfile $1.ext\n"
    "}\n"
    "ca ca; ca other-ca\n"
    "leaf server localhost subjectAltName=DNS:localhost,IP:127.0.0.1,IP:::1 serverAuth\n"
    "leaf wrong wrong.example subjectAltName=DNS:wrong.example serverAuth\n"
    "leaf client xft-client basicConstraints=CA:FALSE clientAuth\n";

int xft_tls_make_certs(char *dir, size_t len) {
  snprintf(dir, len, "/tmp/xft-tls-XXXXXX");
  if (!mkdtemp(dir))
    return -1;
  char script[300], cmd[400];
  snprintf(script, sizeof script, "%s/make-certs.sh", dir);
  FILE *f = fopen(script, "w");
  if (!f || fputs(make_certs_sh, f) < 0 || fclose(f) != 0)
    return -1;
  snprintf(cmd, sizeof cmd, "cd %s && sh make-certs.sh >make-certs.log 2>&1", dir);
  if (system(cmd) != 0) {
    fprintf(stderr, "tls fixture: openssl failed, see %s/make-certs.log\n", dir);
    return -1;
  }
  return 0;
}

void xft_tls_remove_certs(const char *dir) {
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  if (dir[0] && system(cmd) != 0)
    fprintf(stderr, "could not remove %s\n", dir);
}
