/* fault_backend.h — a test-only backend wrapping another one and failing on
 * demand: "fail the k-th call" and "fail every call of kind X". It also
 * counts live resources so tests can check nothing leaks. */
#ifndef MDR_FAULT_BACKEND_H
#define MDR_FAULT_BACKEND_H

#include "backend_impl.h"

/* Wrap `inner` (borrowed; must outlive the wrapper). */
mdr_status fault_backend_create(mdr_backend *inner, mdr_backend **out);

/* Fail the k-th fallible call from now (1-based; 0: never). Calls of void
 * slots (frees, destroys) are not counted. */
void fault_backend_fail_at(mdr_backend *f, long k);
/* Fail every call of kind `op` (-1: none). */
void fault_backend_fail_kind(mdr_backend *f, int op);
/* Fallible calls seen since creation, and failures injected. */
long fault_backend_calls(const mdr_backend *f);
long fault_backend_injected(const mdr_backend *f);
/* Calls of one kind seen since creation. */
long fault_backend_calls_of(const mdr_backend *f, mdr_op op);
/* Live resources made through the wrapper and not yet released:
 * device + pinned allocations, streams, graphs and execs. */
long fault_backend_live(const mdr_backend *f);

#endif
