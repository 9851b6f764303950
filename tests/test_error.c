#include <criterion/criterion.h>
#include <string.h>

#include "xfetch.h"

Test(error, every_code_has_a_name_and_message) {
#define CHECK(name, code, msg)                                                             \
  cr_expect_str_eq(xf_errname(code), #name);                                               \
  cr_expect_str_eq(xf_strerror(code), msg);
  XF_ERRNO_MAP(CHECK)
#undef CHECK
}

Test(error, ok_is_zero_and_named) {
  cr_expect_eq(XF_OK, 0);
  cr_expect_str_eq(xf_errname(XF_OK), "OK");
  cr_expect_str_eq(xf_strerror(XF_OK), "success");
}

Test(error, codes_are_negative_and_distinct) {
  int codes[] = {
#define CODE(name, code, msg) code,
      XF_ERRNO_MAP(CODE)
#undef CODE
  };
  size_t n = sizeof codes / sizeof codes[0];
  for (size_t i = 0; i < n; i++) {
    cr_expect_lt(codes[i], 0);
    for (size_t j = i + 1; j < n; j++)
      cr_expect_neq(codes[i], codes[j]);
  }
}

Test(error, unknown_code_is_never_null) {
  cr_expect_str_eq(xf_errname(-9999), "UNKNOWN");
  cr_expect_str_eq(xf_strerror(12345), "unknown error");
}
