/* mdr — MDR_API, the mark of a public function.
 *
 * libmdr is built with hidden visibility by default (C, CUDA and inline C++
 * alike), so only the functions declared MDR_API in include/mdr/ are
 * exported from the shared library; everything else (the backend vtable,
 * plan helpers, kernel launchers) stays internal. tests/test_exports.cmake
 * checks that the exported symbols and the MDR_API declarations agree.
 *
 *   shared library (default)  MDR_API is visibility("default") (ELF), or
 *                             dllexport while building mdr / dllimport
 *                             when using it (Windows);
 *   static library            MDR_STATIC_DEFINE is set (CMake passes it to
 *                             consumers of mdr::mdr, the .pc file to
 *                             pkg-config users) and MDR_API is empty.
 *
 * Plain C preprocessor only: the same in C and C++ (the declarations sit in
 * extern "C" blocks of their own headers). */
#ifndef MDR_EXPORT_H
#define MDR_EXPORT_H

#if defined(MDR_STATIC_DEFINE)
#define MDR_API
#elif defined(_WIN32) || defined(__CYGWIN__)
#if defined(MDR_BUILDING_LIBRARY)
#define MDR_API __declspec(dllexport)
#else
#define MDR_API __declspec(dllimport)
#endif
#elif defined(__GNUC__) || defined(__clang__)
#define MDR_API __attribute__((visibility("default")))
#else
#define MDR_API
#endif

#endif
