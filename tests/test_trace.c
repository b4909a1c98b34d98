/* Suite `trace`: the NVTX range names (src/trace.c): one per operation and
 * mode, each carrying the token count as its payload; out-of-range kinds
 * get the domain's bare name (a push always has its pop). Ranges themselves
 * need a tool attached to be seen (Nsight Systems on a GPU machine). */
#include <criterion/criterion.h>
#include <string.h>

#include "support.h"
#include "trace.h"

Test(trace, every_operation_and_mode_has_its_range_name) {
  cr_assert_str_eq(mdr_trace_name(MDR_TRACE_STEP, MDR_GRAPH_EXACT), "mdr step EXACT");
  cr_assert_str_eq(mdr_trace_name(MDR_TRACE_STEP, MDR_GRAPH_DYNAMIC), "mdr step DYNAMIC");
  cr_assert_str_eq(mdr_trace_name(MDR_TRACE_CAPTURE, MDR_GRAPH_LADDER), "mdr capture LADDER");
  cr_assert_str_eq(mdr_trace_name(MDR_TRACE_PREPARE, MDR_GRAPH_EXACT), "mdr prepare EXACT");
  cr_assert_str_eq(mdr_trace_name(MDR_TRACE_ZERO, 1), "mdr zero zero_all_rows");
  cr_assert_str_eq(mdr_trace_name(MDR_TRACE_WHAT_COUNT, 0), "mdr");
  cr_assert_str_eq(mdr_trace_name(MDR_TRACE_STEP, 3), "mdr");
  cr_assert_str_eq(mdr_trace_name(MDR_TRACE_STEP, -1), "mdr");
}

/* Pushing and popping balanced ranges works with or without a tool (and
 * with NVTX compiled out). */
Test(trace, ranges_push_and_pop_without_a_tool) {
  for (int w = 0; w <= MDR_TRACE_WHAT_COUNT; w++)
    for (int k = -1; k <= MDR_TRACE_KINDS; k++) {
      mdr_trace_push((mdr_trace_what)w, k, 7);
      mdr_trace_pop();
    }
  cr_assert(1, "no crash, no imbalance");
}
