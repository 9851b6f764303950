#include <criterion/criterion.h>
#include <string.h>

#include "resp.h"

static void expect_encoding(int argc, const char **argv, const size_t *lens,
                            const char *want, size_t want_len) {
  xf__buf buf = {0};
  cr_assert_eq(xf__resp_encode(&buf, argc, argv, lens), 0);
  cr_expect_eq(buf.len, want_len, "length %zu, want %zu", buf.len, want_len);
  cr_expect_eq(memcmp(buf.data, want, want_len), 0);
  xf__buf_free(&buf);
}

Test(resp, encodes_an_array_of_bulk_strings) {
  const char *argv[] = {"GET", "key"};
  size_t lens[] = {3, 3};
  static const char want[] = "*2\r\n$3\r\nGET\r\n$3\r\nkey\r\n";
  expect_encoding(2, argv, lens, want, sizeof want - 1);
}

Test(resp, binary_and_empty_arguments) {
  const char *argv[] = {"a\0b", ""};
  size_t lens[] = {3, 0};
  static const char want[] = "*2\r\n$3\r\na\0b\r\n$0\r\n\r\n";
  expect_encoding(2, argv, lens, want, sizeof want - 1);
}

Test(resp, multi_digit_lengths_and_buffer_reuse) {
  static char big[12345];
  memset(big, 'x', sizeof big);
  const char *argv[] = {big};
  size_t lens[] = {sizeof big};
  xf__buf buf = {0};
  cr_assert_eq(xf__resp_encode(&buf, 1, argv, lens), 0);
  cr_expect_eq(memcmp(buf.data, "*1\r\n$12345\r\nxxx", 15), 0);
  cr_expect_eq(buf.len, 4 + 8 + sizeof big + 2);
  const char *small[] = {"PING"};
  size_t small_len[] = {4};
  cr_assert_eq(xf__resp_encode(&buf, 1, small, small_len), 0);
  cr_expect_eq(buf.len, 14, "the buffer's contents are replaced");
  cr_expect_eq(memcmp(buf.data, "*1\r\n$4\r\nPING\r\n", 14), 0);
  xf__buf_free(&buf);
}
