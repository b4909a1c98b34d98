# Install mdr from its build tree into a scratch prefix, then configure,
# build and run examples/consumer against it with find_package(mdr CONFIG)
# (its C and, with a C++ compiler, C++ program) and, separately, the C
# program through pkg-config: against the shared library, and as a static
# consumer would (every object of the library's static archive,
# MDR_STATIC_ARCHIVE, linked with the .pc file's --static flags alone, so a
# dependency missing from Libs.private fails to link). Checks too that the
# installed mdr-bench runs from the prefix.
set(prefix ${WORK_DIR}/prefix)
file(REMOVE_RECURSE ${WORK_DIR})
file(MAKE_DIRECTORY ${WORK_DIR})
function(run)
  execute_process(COMMAND ${ARGV} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "failed (${rc}): ${ARGV}\n${out}\n${err}")
  endif()
  message(STATUS "${out}")
endfunction()
run(${CMAKE_COMMAND} --install ${MDR_BUILD_DIR} --prefix ${prefix})
run(${CMAKE_COMMAND} -S ${MDR_SOURCE_DIR}/examples/consumer -B ${WORK_DIR}/build
    -G ${CMAKE_GENERATOR} -DCMAKE_PREFIX_PATH=${prefix})
run(${CMAKE_COMMAND} --build ${WORK_DIR}/build)
run(${WORK_DIR}/build/mdr_consumer)
if(EXISTS ${WORK_DIR}/build/mdr_consumer_cxx)
  run(${WORK_DIR}/build/mdr_consumer_cxx)
endif()
# pkg-config: compile the same source with the flags the .pc file gives.
find_program(PKG_CONFIG pkg-config)
if(PKG_CONFIG)
  set(ENV{PKG_CONFIG_PATH} ${prefix}/lib/pkgconfig:${prefix}/lib64/pkgconfig)
  unset(ENV{PKG_CONFIG_SYSROOT_DIR})
  execute_process(COMMAND ${PKG_CONFIG} --cflags --libs mdr OUTPUT_VARIABLE flags
                  RESULT_VARIABLE rc OUTPUT_STRIP_TRAILING_WHITESPACE)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "pkg-config does not know mdr")
  endif()
  separate_arguments(flags UNIX_COMMAND "${flags}")
  run(cc -std=c11 ${MDR_SOURCE_DIR}/examples/consumer/main.c ${flags}
      -Wl,-rpath,${prefix}/lib -o ${WORK_DIR}/consumer_pc)
  run(${WORK_DIR}/consumer_pc)
  if(MDR_STATIC_ARCHIVE)
    execute_process(COMMAND ${PKG_CONFIG} --static --libs mdr OUTPUT_VARIABLE static_flags
                    RESULT_VARIABLE rc OUTPUT_STRIP_TRAILING_WHITESPACE)
    separate_arguments(static_flags UNIX_COMMAND "${static_flags}")
    list(REMOVE_ITEM static_flags -lmdr) # the archive below stands in for it
    run(cc -std=c11 -DMDR_STATIC_DEFINE=1 -I${prefix}/include ${MDR_SOURCE_DIR}/examples/consumer/main.c
        -Wl,--whole-archive ${MDR_STATIC_ARCHIVE} -Wl,--no-whole-archive ${static_flags}
        -o ${WORK_DIR}/consumer_static)
    run(${WORK_DIR}/consumer_static)
  endif()
endif()
# The installed documents: every relative Markdown link resolves in the
# install tree (a file or folder beside the document).
file(GLOB_RECURSE docs ${prefix}/share/doc/mdr/*.md)
if(NOT docs)
  message(FATAL_ERROR "no documents installed under ${prefix}/share/doc/mdr")
endif()
if(NOT EXISTS ${prefix}/share/doc/mdr/docs/SIZES.md)
  message(FATAL_ERROR "share/doc/mdr/docs/SIZES.md, which the headers cite, is not installed")
endif()
foreach(doc IN LISTS docs)
  file(READ ${doc} text)
  get_filename_component(dir ${doc} DIRECTORY)
  string(REGEX MATCHALL "\\]\\([^)]+\\)" links "${text}")
  foreach(link IN LISTS links)
    string(REGEX REPLACE "^\\]\\(([^)#]*).*\\)$" "\\1" target "${link}")
    if(target STREQUAL "" OR target MATCHES "^[a-z]+:")
      continue() # an anchor in the same file, or a URL
    endif()
    if(NOT EXISTS ${dir}/${target})
      message(FATAL_ERROR "dead link in installed ${doc}: ${target}")
    endif()
  endforeach()
endforeach()
if(EXISTS ${prefix}/bin/mdr-bench)
  run(${prefix}/bin/mdr-bench --version)
endif()
