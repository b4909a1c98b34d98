/* mdr — status codes shared by every public function.
 *
 * Every fallible mdr function returns an mdr_status; results go through
 * out-params. Details of a backend failure are in mdr_backend_last_error(). */
#ifndef MDR_STATUS_H
#define MDR_STATUS_H

/* MDR_API, the mark of a public function (defined here, in the header
 * every public header includes first).
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

#ifdef __cplusplus
extern "C" {
#endif

/* X-macro: one line per status, (enum name, text for mdr_status_string). */
#define MDR_STATUS_LIST(X)                                                            \
  X(MDR_OK, "ok")                                                                     \
  X(MDR_ERR_INVALID_ARGUMENT, "invalid argument (NULL handle/out-param, unknown name or enum)") \
  X(MDR_ERR_OUT_OF_RANGE, "argument out of range")                                    \
  X(MDR_ERR_OVERFLOW, "size computation overflowed size_t")                           \
  X(MDR_ERR_OUT_OF_MEMORY, "device, pinned or host allocation failed")                \
  X(MDR_ERR_NO_DEVICE, "no CUDA driver or device")                                    \
  X(MDR_ERR_BACKEND, "backend call failed (see mdr_backend_last_error)")              \
  X(MDR_ERR_CAPTURE, "stream capture or graph instantiation failed")                  \
  X(MDR_ERR_UNSUPPORTED, "not supported by this backend or build")                    \
  X(MDR_ERR_STATE, "call not valid in the object's current state")

typedef enum mdr_status {
#define MDR_STATUS_ENUM_(name, text) name,
  MDR_STATUS_LIST(MDR_STATUS_ENUM_)
#undef MDR_STATUS_ENUM_
  MDR_STATUS_COUNT
} mdr_status;

/* Human-readable text for a status. Never NULL: an out-of-range value gives
 * "unknown status". Returns a static string; thread-safe. */
MDR_API const char *mdr_status_string(mdr_status s);

#ifdef __cplusplus
}
#endif
#endif
