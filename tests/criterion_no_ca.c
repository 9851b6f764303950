/* Built into every test binary that links a fixture (tests/CMakeLists.txt).
 *
 * Criterion 2.4 initialises libgit2 (its string diffs) at the start of
 * every test process, and Debian's libgit2 (mbedTLS) then parses the
 * system's CA bundle, about 140 certificates, for HTTPS no test makes: each
 * Criterion test is a process of its own, so the suite parsed it once per
 * test. Under ASan (whose strstr checks the whole remaining buffer each call)
 * and valgrind that cost about a tenth of a test process's CPU. These
 * definitions (the executable's win over libmbedx509's for libgit2's calls,
 * as tsan_criterion.c's rand_r does for libcriterion's) load no certificate.
 * The library's TLS is OpenSSL's, which this does not touch. */
int mbedtls_x509_crt_parse_file(void *chain, const char *path);
int mbedtls_x509_crt_parse_path(void *chain, const char *path);

int mbedtls_x509_crt_parse_file(void *chain, const char *path) {
  (void)chain, (void)path;
  return 0;
}

int mbedtls_x509_crt_parse_path(void *chain, const char *path) {
  (void)chain, (void)path;
  return 0;
}
