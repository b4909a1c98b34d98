/* Suite `version`: the version number and string, and the build-features
 * query against what CMake configured (MDR_TEST_EXPECT_*, set by
 * tests/CMakeLists.txt from the same MDR_HAVE_* results the library was
 * compiled with). */
#include <stdio.h>
#include <string.h>

#include <criterion/criterion.h>

#include "mdr/mdr.h"

Test(version, number_and_string_agree_with_the_headers_and_cmake) {
  cr_assert_eq(mdr_version_number(), MDR_VERSION_NUMBER);
  cr_assert_str_eq(mdr_version_string(), MDR_VERSION_STRING);
  char expect[32];
  snprintf(expect, sizeof expect, "%d.%d.%d", MDR_VERSION_MAJOR, MDR_VERSION_MINOR, MDR_VERSION_PATCH);
  cr_assert_str_eq(mdr_version_string(), expect);
  /* project(mdr VERSION ...) in CMakeLists.txt: one version, two places */
  cr_assert_str_eq(mdr_version_string(), MDR_TEST_PROJECT_VERSION);
  cr_assert_eq(mdr_version_string(), mdr_version_string(), "a static string");
}

Test(version, features_match_the_configured_build) {
  unsigned expect = (MDR_TEST_EXPECT_CUDA ? MDR_FEATURE_CUDA : 0u) | (MDR_TEST_EXPECT_NCCL ? MDR_FEATURE_NCCL : 0u) |
                    (MDR_TEST_EXPECT_NCCL_DEVICE ? MDR_FEATURE_NCCL_DEVICE : 0u) |
                    (MDR_TEST_EXPECT_NVTX ? MDR_FEATURE_NVTX : 0u);
  cr_assert_eq(mdr_build_features(), expect, "features 0x%x, configured 0x%x", mdr_build_features(), expect);
  cr_assert_eq(mdr_build_features() & ~15u, 0u, "only the four documented bits");
}

Test(version, features_string_names_each_bit_in_order) {
  static const struct {
    unsigned bit;
    const char *word;
  } k[] = {{MDR_FEATURE_CUDA, "cuda"}, {MDR_FEATURE_NCCL, "nccl"}, {MDR_FEATURE_NCCL_DEVICE, "nccl-device"},
           {MDR_FEATURE_NVTX, "nvtx"}};
  char expect[64] = "";
  for (size_t i = 0; i < sizeof k / sizeof k[0]; i++) {
    if (!(mdr_build_features() & k[i].bit)) continue;
    if (expect[0]) strcat(expect, " ");
    strcat(expect, k[i].word);
  }
  const char *s = mdr_build_features_string();
  cr_assert_not_null(s);
  cr_assert_str_eq(s, expect);
  cr_assert_eq(mdr_build_features_string(), s, "a static string");
}
