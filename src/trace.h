/* trace.h — NVTX ranges around mdr's share of a step (private).
 *
 * Ranges in the "mdr" domain, so an engine's Nsight Systems trace shows
 * them beside its own: "mdr step <mode>", "mdr capture <mode>",
 * "mdr prepare <mode>" and "mdr zero <helper>", each carrying the token
 * count as its payload (int64). The names are registered once. Without a
 * tool (NVTX_INJECTION64_PATH unset when mdr first traces, as Nsight
 * Systems sets it in the programs it launches) a range is one load and a
 * branch; NVTX itself is not called.
 * CMake option MDR_ENABLE_NVTX=OFF compiles them out entirely. */
#ifndef MDR_TRACE_H
#define MDR_TRACE_H

#include <stdint.h>

typedef enum mdr_trace_what {
  MDR_TRACE_STEP,
  MDR_TRACE_CAPTURE,
  MDR_TRACE_PREPARE,
  MDR_TRACE_ZERO,
  MDR_TRACE_WHAT_COUNT
} mdr_trace_what;

/* Kinds under a range: a graph mode (mdr_graph_mode values, 0..2) for
 * step/capture/prepare; a helper for zero (0 zero_all, 1 zero_all_rows,
 * 2 zero_prefill_essentials). */
enum { MDR_TRACE_KINDS = 3 };

/* The range's name, e.g. "mdr step EXACT" (static; "mdr" when out of range). */
const char *mdr_trace_name(mdr_trace_what what, int kind);

#if defined(MDR_HAVE_NVTX)
void mdr_trace_push(mdr_trace_what what, int kind, uint64_t tokens);
void mdr_trace_pop(void);
#else
static inline void mdr_trace_push(mdr_trace_what what, int kind, uint64_t tokens) {
  (void)what;
  (void)kind;
  (void)tokens;
}
static inline void mdr_trace_pop(void) {}
#endif

#endif
