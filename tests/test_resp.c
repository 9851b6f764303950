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

Test(resp, a_command_with_more_arguments_is_one_array) {
  const char *keys[] = {"k1", "key2"};
  size_t lens[] = {2, 4};
  xf__cmd cmd = {.argc = 2, .argv = {"EVALSHA_RO", "2"}, .lens = {10, 1}};
  cmd.more_argc = 2, cmd.more_argv = keys, cmd.more_lens = lens;
  xf__buf buf = {0};
  cr_assert_eq(xf__resp_append_cmd(&buf, &cmd), 0);
  cmd.more_argc = 0; /* and appended after it, one without */
  cr_assert_eq(xf__resp_append_cmd(&buf, &cmd), 0);
  static const char want[] =
      "*4\r\n$10\r\nEVALSHA_RO\r\n$1\r\n2\r\n$2\r\nk1\r\n$4\r\nkey2\r\n"
      "*2\r\n$10\r\nEVALSHA_RO\r\n$1\r\n2\r\n";
  cr_expect_eq(buf.len, sizeof want - 1);
  cr_expect_eq(memcmp(buf.data, want, sizeof want - 1), 0);
  xf__buf_free(&buf);
}
