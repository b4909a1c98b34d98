/* Links against the installed mdr, sizes a preset and zeroes it on the host
 * backend; exits non-zero on any failure. */
#include <mdr/mdr.h>
#include <stdio.h>

int main(void) {
  mdr_model_config cfg;
  mdr_limits lim = {64, 4096, 16, 4};
  mdr_sizes sizes;
  mdr_backend *b = NULL;
  mdr_arena *a = NULL;
  if (mdr_version_number() != MDR_VERSION_NUMBER) return 1;
  if (mdr_model_preset("qwen3-next-80b", &cfg) != MDR_OK) return 2;
  if (mdr_sizes_from_config(&cfg, &lim, &sizes) != MDR_OK) return 3;
  if (mdr_backend_host_create(&b) != MDR_OK) return 4;
  if (mdr_arena_create(b, &sizes, &a) != MDR_OK) return 5;
  if (mdr_arena_zero_all_rows(a, NULL, 8) != MDR_OK) return 6;
  printf("mdr %u consumer ok: hidden_states %zu bytes\n", mdr_version_number(),
         mdr_arena_hidden_states_bytes(a));
  mdr_arena_destroy(a);
  mdr_backend_destroy(b);
  return 0;
}
