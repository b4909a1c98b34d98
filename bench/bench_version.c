/* bench_version.c — what was built, for --version and results.json: the git
 * revision (bench_revision.h, written by bench/revision.cmake at every
 * build and rewritten only when the revision changes, so only this file
 * recompiles) and the build type (a compile definition of bench/CMakeLists.txt). */
#include "bench.h"

#include "bench_revision.h" /* generated in the build folder */
#ifndef MDR_BENCH_GIT_REVISION
#define MDR_BENCH_GIT_REVISION "unknown"
#endif
#ifndef MDR_BENCH_BUILD_TYPE
#define MDR_BENCH_BUILD_TYPE ""
#endif

const char *bench_git_revision(void) {
  return MDR_BENCH_GIT_REVISION[0] ? MDR_BENCH_GIT_REVISION : "unknown";
}

const char *bench_build_type(void) {
  return MDR_BENCH_BUILD_TYPE[0] ? MDR_BENCH_BUILD_TYPE : "unspecified";
}
