/* minimal.c: size an arena for a preset model, clear a 4-token step's rows. */
#include <mdr/mdr.h>
#include <stdio.h>

int main(void) {
  mdr_model_config cfg;
  mdr_limits lim = {.max_batch_tokens = 64, .max_seq_len = 4096, .kv_block_size = 16, .max_batch_size = 4};
  mdr_sizes sizes;
  mdr_backend *b = NULL; /* handles start NULL: every destroy accepts NULL */
  mdr_arena *arena = NULL;
  mdr_stream s = NULL;
  mdr_status st = mdr_model_preset("qwen3-next-80b", &cfg);
  if (st == MDR_OK) st = mdr_sizes_from_config(&cfg, &lim, &sizes);
  if (st == MDR_OK) st = mdr_backend_create_default(&b); /* the GPU, else host memory */
  if (st == MDR_OK) st = mdr_arena_create(b, &sizes, &arena);
  if (st == MDR_OK) st = mdr_backend_stream_create(b, &s);
  if (st == MDR_OK) st = mdr_arena_zero_all_rows(arena, s, 4); /* enqueued on s */
  if (st == MDR_OK) st = mdr_backend_synchronize(b, s);
  if (st == MDR_OK)
    printf("mdr %s (%s), backend %s: arena %zu bytes, hidden_states at 0x%llx\n", mdr_version_string(),
           mdr_build_features_string(), mdr_backend_name(b), mdr_arena_slab_bytes(arena),
           (unsigned long long)mdr_arena_hidden_states(arena));
  else
    fprintf(stderr, "mdr: %s: %s\n", mdr_status_string(st), mdr_backend_last_error(b));
  mdr_backend_stream_destroy(b, s);
  mdr_arena_destroy(arena);
  mdr_backend_destroy(b);
  return st == MDR_OK ? 0 : 1;
}
