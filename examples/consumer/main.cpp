// The same consumer in C++: the public headers compile as C++ (extern "C",
// MDR_API), and the C functions link from a C++ program.
#include <mdr/mdr.h>

#include <cstdio>

int main() {
  mdr_model_config cfg;
  mdr_limits lim = {64, 4096, 16, 4};
  mdr_sizes sizes;
  mdr_backend *b = nullptr;
  mdr_arena *a = nullptr;
  int rc = 1;
  if (mdr_model_preset("qwen3-next-80b", &cfg) == MDR_OK &&
      mdr_sizes_from_config(&cfg, &lim, &sizes) == MDR_OK && mdr_backend_host_create(&b) == MDR_OK &&
      mdr_arena_create(b, &sizes, &a) == MDR_OK && mdr_arena_zero_all_rows(a, nullptr, 8) == MDR_OK) {
    std::printf("mdr %u C++ consumer ok: %s\n", mdr_version_number(), mdr_status_string(MDR_OK));
    rc = 0;
  }
  mdr_arena_destroy(a);
  mdr_backend_destroy(b);
  return rc;
}
