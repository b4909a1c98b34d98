/* support.h — shared helpers of the test suites: backends to run a suite
 * body on, and poison / read-back checks of device memory. */
#ifndef MDR_TEST_SUPPORT_H
#define MDR_TEST_SUPPORT_H

#include <criterion/criterion.h>
#include <stddef.h>
#include <stdint.h>

#include "mdr/mdr.h"
#include "rng.h"

typedef enum tb_kind { TB_HOST, TB_CUDA, TB_KIND_COUNT } tb_kind;

/* The backend a suite body runs on: host always; CUDA skips the test
 * (cr_skip_test) when there is no device. Caller destroys it. */
mdr_backend *tb_backend(tb_kind k);
const char *tb_kind_name(tb_kind k);
/* A stream on b (asserts success). */
mdr_stream tb_stream(mdr_backend *b);

/* The random generator: tb_rng_next, tb_rng_range (rng.h). */
/* Index of the first byte of [p, p + n) that differs from v, or n (4 KiB
 * memcmp strides: images run to hundreds of MiB). */
size_t tb_first_not(const unsigned char *p, size_t n, unsigned char v);

/* Poison byte of a buffer: differs per buffer so a stray copy is caught. */
unsigned char tb_poison_of(mdr_buffer buf);
/* Fill every non-NULL buffer of the arena with its poison byte (blocking). */
void tb_poison_arena(mdr_arena *a);
/* Read back `bytes` of device memory at p and check that the first `zero`
 * bytes are 0 and the rest equal `poison`. Returns the offset of the first
 * wrong byte, or -1 when all are as expected. */
long tb_check_head(mdr_backend *b, mdr_dptr p, size_t bytes, size_t zero, unsigned char poison);
/* For every buffer of the arena, expect[buf] leading bytes zero and the rest
 * still poisoned; fails the test naming the buffer otherwise. */
void tb_expect_arena(mdr_arena *a, const size_t expect[MDR_BUF_COUNT], const char *what);

/* The sizes of a preset at limits (M, S = 4096, B = 16, bs = 4); asserts. */
mdr_sizes tb_preset_sizes(const char *preset, size_t max_batch_tokens);

/* Reference coverage of the zeroing helpers, written from spec §9 by buffer
 * name, independently of src/: out[buf] = leading bytes cleared. */
typedef enum tb_helper { TB_ZERO_ALL, TB_ZERO_ROWS, TB_ZERO_PREFILL } tb_helper;
extern const char *const tb_zero_all_names[18];
void tb_expected(const mdr_arena *a, tb_helper h, size_t tokens, mdr_rows_policy policy,
                 size_t out[MDR_BUF_COUNT]);

/* A small arena of M = TB_SMALL_M rows (Mp = 48) with every kind of buffer
 * the row rule distinguishes: M-row, Mp-row, floored, fixed and NULL
 * entries; logits has TB_SMALL_M rows. */
enum { TB_SMALL_M = 40, TB_SMALL_MP = 48 };
mdr_sizes tb_small_sizes(void);


#endif
