/* cache_info.c — what a graph cache tells about itself (include/mdr/
 * graph.h): its count words, its zeroing strategy and row policy, its
 * statistics. Reads only; graph_cache.c keeps the state. */
#include "graph_cache_impl.h"

mdr_dptr mdr_graph_cache_count_ptr(const mdr_graph_cache *c) {
  return c ? mdr_staging_count_ptr(&c->staging) : 0;
}

mdr_zero_strategy mdr_graph_cache_zero_strategy(const mdr_graph_cache *c) {
  return c ? c->o.zero : MDR_ZERO_FROM_ARENA;
}

mdr_rows_policy mdr_graph_cache_rows_policy(const mdr_graph_cache *c) {
  return c ? c->o.rows : MDR_ROWS_FROM_ARENA;
}

mdr_dptr mdr_graph_cache_sequences_ptr(const mdr_graph_cache *c) {
  return c ? mdr_staging_count_ptr(&c->staging) + sizeof(uint32_t) : 0;
}

mdr_status mdr_graph_cache_stats(const mdr_graph_cache *c, mdr_graph_stats *out) {
  if (!c) return MDR_ERR_INVALID_ARGUMENT;
  if (!out) return mdr_backend_fail(c->b, MDR_ERR_INVALID_ARGUMENT, "graph cache: stats into NULL");
  *out = c->stats;
  out->graphs_disabled = c->graphs_disabled;
  out->poison = c->poison;
  out->memory_measured = c->measure_memory;
  return MDR_OK;
}
