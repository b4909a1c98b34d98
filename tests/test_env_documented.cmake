# Every environment variable the library reads is listed in the README's
# "## Environment" section (CTest `env_documented`). The library's sources
# (src/, graphs/, kernels/) are read as they are now, so a variable added
# later is caught: each name in a string literal on a line that calls
# getenv(, mdr_env_switch(, mdr_env_switch_or( or mdr_env_ms( must appear in that section as `NAME`.
# Usage: cmake -DSOURCE_DIR=<repo> -P test_env_documented.cmake
cmake_minimum_required(VERSION 3.24)
file(GLOB_RECURSE sources ${SOURCE_DIR}/src/*.c ${SOURCE_DIR}/src/*.h ${SOURCE_DIR}/graphs/*.c
     ${SOURCE_DIR}/graphs/*.h ${SOURCE_DIR}/kernels/*.cu ${SOURCE_DIR}/kernels/*.h ${SOURCE_DIR}/kernels/*.cuh)
set(read_vars)
foreach(f IN LISTS sources)
  file(STRINGS ${f} lines REGEX "(getenv|mdr_env_switch|mdr_env_switch_or|mdr_env_ms) *\\(")
  foreach(line IN LISTS lines)
    string(REGEX MATCHALL "\"[A-Z][A-Z0-9_]+\"" names "${line}")
    foreach(n IN LISTS names)
      string(REPLACE "\"" "" n "${n}")
      list(APPEND read_vars ${n})
    endforeach()
  endforeach()
endforeach()
list(REMOVE_DUPLICATES read_vars)
list(LENGTH read_vars n_read)
if(n_read EQUAL 0)
  message(FATAL_ERROR "env_documented: found no getenv( call in ${SOURCE_DIR}: the scan is broken")
endif()

file(READ ${SOURCE_DIR}/README.md readme)
string(FIND "${readme}" "\n## Environment\n" at)
if(at EQUAL -1)
  message(FATAL_ERROR "env_documented: README.md has no \"## Environment\" section")
endif()
string(SUBSTRING "${readme}" ${at} -1 section)
string(SUBSTRING "${section}" 1 -1 section)
string(FIND "${section}" "\n## " next)
if(NOT next EQUAL -1)
  string(SUBSTRING "${section}" 0 ${next} section)
endif()

set(missing)
foreach(v IN LISTS read_vars)
  string(FIND "${section}" "`${v}`" pos)
  if(pos EQUAL -1)
    list(APPEND missing ${v})
  endif()
endforeach()
if(missing)
  message(FATAL_ERROR "env_documented: the library reads ${missing}, which README.md's \"## Environment\" "
    "section does not list (as `NAME`)")
endif()
message("env_documented: ok, ${n_read} variables, each listed: ${read_vars}")
