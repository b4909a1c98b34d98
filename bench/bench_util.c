/* bench_util.c — mdr-bench's small shared pieces: failure handling, host
 * memory, statistics, output files, JSON and CSV numbers (bench.h). */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "bench.h"

const char *const k_strategy_names[STRAT_COUNT] = {
    "eager-memset", "eager-fused", "graph-memset", "graph-fused", "graph-fused-dev", "graph-dynamic",
    "graph-dynamic-count", "graph-fused-inputs", "graph-fused-dev-inputs", "graph-fused-inputs-devtable"};
const char *const k_policy_names[MDR_ROWS_POLICY_COUNT] = {"seed", "all"};

/* ---- failure handling ---- */

void die(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fputs("mdr-bench: ", stderr);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputc('\n', stderr);
  exit(1);
}

void check_mdr(mdr_backend *b, mdr_status st, const char *call, const char *file, int line) {
  if (st != MDR_OK)
    die("%s:%d: %s: %s: %s", file, line, call, mdr_status_string(st), mdr_backend_last_error(b));
}

#ifdef MDR_HAVE_CUDA
void check_cuda(cudaError_t e, const char *call, const char *file, int line) {
  if (e != cudaSuccess)
    die("%s:%d: %s: %s (%s)", file, line, call, cudaGetErrorName(e), cudaGetErrorString(e));
}
#endif

void *xmalloc(size_t n) {
  void *p = malloc(n ? n : 1);
  if (!p) die("out of host memory (%zu bytes)", n);
  return p;
}

/* ---- statistics ---- */

const summary k_no_summary = {NAN, NAN, NAN, NAN, NAN};

double now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

double percentile(double *v, size_t n, double q) {
  if (n == 0) return NAN;
  qsort(v, n, sizeof *v, cmp_double);
  double pos = q * (double)(n - 1);
  size_t lo = (size_t)pos;
  size_t hi = lo + 1 < n ? lo + 1 : lo;
  return v[lo] + (pos - (double)lo) * (v[hi] - v[lo]);
}

summary summarize(double *v, size_t n) {
  summary s = {percentile(v, n, 0.5), percentile(v, n, 0.1), percentile(v, n, 0.9), percentile(v, n, 0.99),
               percentile(v, n, 1.0)};
  return s;
}

double nan_if_zero(double x) { return x > 0 ? x : NAN; }

/* ---- flags ---- */

void set_all(bool *flags, size_t n) {
  for (size_t i = 0; i < n; i++) flags[i] = true;
}

bool any(const bool *flags, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (flags[i]) return true;
  return false;
}

size_t count_on(const bool *flags, size_t n) {
  size_t k = 0;
  for (size_t i = 0; i < n; i++) k += flags[i];
  return k;
}

/* ---- files ---- */

void mkdir_p(const char *dir) {
  char path[4096];
  if (snprintf(path, sizeof path, "%s", dir) >= (int)sizeof path) die("--out path too long");
  for (char *p = path + 1; *p; p++) {
    if (*p != '/') continue;
    *p = '\0';
    if (mkdir(path, 0755) != 0 && errno != EEXIST) die("mkdir %s: %s", path, strerror(errno));
    *p = '/';
  }
  if (mkdir(path, 0755) != 0 && errno != EEXIST) die("mkdir %s: %s", path, strerror(errno));
}

FILE *open_out(const char *dir, const char *name) {
  char path[4096];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, "w");
  if (!f) die("cannot write %s: %s", path, strerror(errno));
  return f;
}

/* ---- JSON and CSV numbers ---- */

void json_str(FILE *f, const char *s) {
  fputc('"', f);
  for (; s && *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
    else if (c < 0x20) fprintf(f, "\\u%04x", c);
    else fputc(c, f);
  }
  fputc('"', f);
}

void json_num(FILE *f, double x) {
  if (isfinite(x)) fprintf(f, "%.6g", x);
  else fputs("null", f);
}

void csv_num(FILE *f, double x) {
  if (isfinite(x)) fprintf(f, "%.6g", x);
}

void fmt_num(char *out, size_t n, const char *f, double x) {
  if (isfinite(x)) snprintf(out, n, f, x);
  else snprintf(out, n, "-");
}

int bench_option_id(const char *arg, const char *const *names, int n, char *name, size_t cap, const char **eq) {
  *eq = strncmp(arg, "--", 2) == 0 ? strchr(arg, '=') : NULL;
  size_t len = *eq ? (size_t)(*eq - arg) : strlen(arg);
  if (len >= cap) len = cap - 1;
  memcpy(name, arg, len);
  name[len] = '\0';
  if (strcmp(name, "-h") == 0) snprintf(name, cap, "--help");
  int id = 0;
  while (id < n && strcmp(name, names[id]) != 0) id++;
  return id;
}

size_t bench_each_item(const char *list, void (*fn)(void *ctx, const char *item), void *ctx) {
  size_t len = strlen(list);
  char *copy = xmalloc(len + 1);
  memcpy(copy, list, len + 1);
  size_t index = 1, bad = 0;
  for (char *item = copy;; index++) {
    char *comma = strchr(item, ',');
    if (comma) *comma = '\0';
    if (*item == '\0') {
      bad = index;
      break;
    }
    fn(ctx, item);
    if (!comma) break;
    item = comma + 1;
  }
  free(copy);
  return bad;
}
