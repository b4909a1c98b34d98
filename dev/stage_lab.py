#!/usr/bin/env python3
"""stage_lab.py — the staging candidates of dev/step_params_route.md ("What
the measurement leaves, and what to try next") measured side by side in one
GPU session: copies of the source tree with named patches, each built,
validated by its own step-input suites, then timed by mdr-bench's
step-input sweep, the runs of every variant interleaved.

A lab measurement, never a product build. Each patch must match exactly
once, so a source that moved on fails loudly here (and in CI, through
--check-patches) instead of measuring something else. A variant whose
suites fail is reported and never timed.

Variants:
  base       the tree as it is
  inline512  MDR_STAGE_INLINE_BYTES = 512 (a second size class: ids-only
             steps to 124 tokens inline; steps with a 128-entry block table
             still take the ring)
  inline2k   MDR_STAGE_INLINE_BYTES = 2048 (positions, sequence lengths and
             a 128-entry block table per sequence inline at 1-3 sequences,
             ids only to 508 tokens)
             (MDR_STAGE_INLINE_PARAM_MAX holds the fused kernel's parameter
             block, plan and image, at either size)
  span       a diagnostic: every block of a staged zero_static_kernel
             launch, and of an inline list or table kernel launch,
             stamps its start and end (%globaltimer); one launch
             in 64 prints where the stage blocks ran against the zeroing
             blocks ("span ..." lines; the report's medians)
  phases     a diagnostic: SM clock stamps of an inline launch's stage
             block (threads 0 and 1, about one launch in 64, in mdr-bench's
             log): image copied, inputs' votes, the last barrier, the end
             ("phases ..." lines in the log)
  phasesimg  phases, with four more stamps inside the image's copy: its
             vector in, its lane's piece known, the pieces' bounds from
             every lane, its stores issued ("phasesimg ..." lines; the
             report's medians of both, as span's)
  fine       a diagnostic: SM clock stamps of a ring step's stage block
             (thread 1, one step in 32, in mdr-bench's log; time it with
             MDR_STAGE_INLINE=0): counter, table entry, slot address, pieces,
             first round, copy, barriers ("fine ..." lines in the log)
  twice      fine, with the slot copied twice: the second copy runs the
             same code and loads from a warm instruction cache
  devpass    a step with inputs runs the device-input pass and its
             barrier even with no device-resident input (as before the
             warp vote that skips them)
  idswarp    an inline device-id step's last warp (the one that copies
             the ids) takes no part in the image's copy when the image's
             vectors do not reach it (measured, not kept:
             bench/results/h200-2026-12-04-session23/)
  lb8, lb6   every zeroing kernel that can stage under
             __launch_bounds__(ZF_BLOCK, 8 or 6): 32 or 40 registers where
             ptxas gives the staged ones 64 (the stage code's), so eight or
             six zeroing blocks a SM instead of four; the stage code spills
  tablelb6   the table kernel (DYNAMIC's node update) under
             __launch_bounds__(ZF_BLOCK, 6), 40 registers, where main sizes
             its grid at the blocks of its 64 registers that fit a SM
  xltable    the extra-large image class (inputs at 3-8 sequences) in the
             table form (about 5 KiB of parameters) instead of the chunk
             list's (about 9.4 KiB): host CPU against GPU time
  largetable the large class (1-2 sequences) in the table form too (about
             2 KiB against 6.2): the chunk list for ids-only steps alone
  drvlaunch  graph launches through the driver's cuGraphLaunch (entry
             point taken once), where main calls cudaGraphLaunch: the
             runtime wrapper's host cost a step
  lb1        the staged static and table-inline kernels under
             __launch_bounds__(256, 1): 72 registers where ptxas holds them
             at 64
  inlsame    a diagnostic: an inline step whose launch parameters equal
             those of its graph's last node update skips the update
             (mdr-bench stages the same ids every step): does a graph
             launched with no update since its last launch, as a ring
             step's always is, take longer on the GPU? (No:
             bench/results/h200-2026-12-04-session23/, call 5)
  inlack     a diagnostic: on the device, an inline launch whose descriptor
             has the ring's words (the graph cache's) also writes the ack
             word (the value it holds: the counter's), so an inline step
             makes the host-memory write a ring step makes; what that write
             costs
  large256   a diagnostic: the large image class at 256 bytes (1152 on
             main): the device-table step's parameter block 900 bytes
             smaller
  seedinline the larger image classes inline whatever the zero plan's
             length (LARGE_INLINE_ZERO_MAX 1 GiB): steps with inputs at seed
             policy inline, where the 32 MiB rule sends them to the ring
  ownlate    an inline launch that carries its input table in its parameters
             (the larger image classes) tests each lane's entry for the
             zeroed room (the fallback to the table in device memory) after
             issuing the image's loads, not before: on main that test waits
             for the entry's parameter load ahead of the image's, two round
             trips in a row where the ids-only step takes one
  idslarge   a diagnostic: ids-only inline steps in the large image class
             (the table's room and a 1152-byte image, about 6.4 KiB of
             parameters, where the small class's are 4.6 KiB): does the
             class's launch cost what steps with inputs pay over ids only
             at 1-2 sequences? (validated without stage_inline, whose
             class tests hold the rule it changes)
  largelist256 the large image class in the list form with a 256-chunk list
             where the count's plan fits it: 4096 bytes of parameters, under
             the small class's 4592, where the 544-chunk list makes 6400
             (validated without stage_inline, whose layout tests hold the
             544-chunk list)
  idspad     a diagnostic: ids-only inline steps keep the small class and
             its code, its list-form parameters padded (before the image)
             to the large class's size (6400 bytes where the small class's
             are 4592): the parameter block's size alone, beside idslarge's
             whole class (validated without stage_inline, whose layout
             tests hold the size)
  onealloc   a diagnostic (mdr-bench only): the step inputs' three
             destinations carved from one device allocation (256-byte
             aligned, in declaration order) where base allocates each on its
             own: whether the stores to more allocations (their pages) cost
             what steps with inputs pay over ids only at 1-2 sequences
  imgpair    an inline image of at most 72 vectors dealt over the stage
             block's warps by 32-byte sectors (vectors 2s and 2s + 1 to
             neighbouring lanes of warp s % 8: at most 3 sectors a warp at 1
             sequence, 5 at 2) where main deals it by vector (one sector a
             lane: 5 and 9); larger images in a row, as main
  pairall    imgpair's dealing for every image (a larger one's load then
             touches 16 sectors a warp, as in a row, in 16 lines, not 4)
  wordtail   a piece's part-vector (a position or a length, 4 bytes at a
             sequence) stored in 4-byte words where its destination is
             word-aligned, where main stores it a byte at a time
  pairword   imgpair and wordtail together

Retired (their patches no longer apply; what they measured is in
dev/step_params_route.md): preload (the image's first vector and the
table entry loaded at the stage block's entry); inlspec (the stage block
compiled for a host-valued inline step's flags) and imgspread (an inline
image dealt over the stage block's warps), on main since as
mdr_stage_inline_block and mdr_stage_copy_image's dealing; imgpair (the
dealing by 32-byte sectors, as first written against inlspec), never run;
rewritten above against main.

Switch variants share base's build and run with an environment switch set,
in validation and in the benches alike (VARIANT+SWITCH runs a switch on
another variant's build, e.g. fine+ring, with VARIANT named too):
  onestage   MDR_STAGE_SPREAD=0: a large ring slot read by one stage block
             (as before the spread)
  ring       MDR_STAGE_INLINE=0: every step through the ring (ids-only
             steps too), so a ring step's cost can be read beside base's
             inline one in the same run
  rtupdate   MDR_NODE_UPDATE_DRIVER=0: graph node updates through the
             runtime's cudaGraphExecKernelNodeSetParams, which maps the
             kernel's symbol at every call, not the driver's entry point

A variant may also be a whole source tree, NAME=DIR (a branch archived with
`git archive BRANCH | tar -x -C DIR`): built and validated from DIR as it
is, no patches, and timed beside the rest.

Usage: dev/stage_lab.py OUT_DIR [names...] [--runs N] [--no-bench] [--builds P]
                        [--pin CPU] [--report-only] [-- mdr-bench args]
       dev/stage_lab.py --check-patches
Writes OUT_DIR/<name>/{src,build} (the patched copy and its build),
OUT_DIR/<name>/ctest.log, OUT_DIR/<name>/host-inline (a host-backend run of
mdr-bench: which counts went inline), OUT_DIR/<name>/bench-<i> (mdr-bench
--out) and OUT_DIR/stage_lab.txt (every variant's medians side by side, with
ratios to base). --builds P builds P variants at once (default 1), each
with nproc / P jobs. --pin CPU runs every bench on that one CPU: the host
CPU figures of one bench process can differ from another's by up to 2x,
every row at once; pinned, every variant runs on the same CPU.
--report-only rewrites stage_lab.txt from the runs in
OUT_DIR. Without a GPU (nvidia-smi -L) it builds and validates, says that
the benches are skipped, and exits 0."""
import concurrent.futures
import csv
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

LAYOUT = "staging/staging_layout.h"
CUH = "staging/staging.cuh"


def inline_bytes(n):
    return [(LAYOUT, ("#define MDR_STAGE_INLINE_BYTES 112u\n", f"#define MDR_STAGE_INLINE_BYTES {n}u\n"))]


# The clock the diagnostics read (fine, twice): none in the host
# emulation, which compiles staging.cuh too.
STAMP_INC = ("#include <stdint.h>\n",
             "#include <stdint.h>\n#include <stdio.h>\n"
             "/* the host emulation compiles this file too: no clock there, no stamps */\n"
             "#if defined(__CUDA_ARCH__)\n#define MDR_LAB_CLOCK() clock64()\n#define MDR_LAB_DEVICE 1\n"
             "#else\n#define MDR_LAB_CLOCK() 0ll\n#define MDR_LAB_DEVICE 0\n#endif\n")

# fine: a diagnostic. Thread 1 of a ring step's stage
# block stamps, in cycles from entry: [1] the ring counter's value in; [2] its
# input-table entry in (waited for at once, where main waits only inside the
# slot's pieces); [3] the slot's address computed; [4]
# the slot's pieces known; [5] round 0 of the slot's loads stored; [6] the
# slot copied (ids only: [4] the id vectors stored, [5] the scalar ids
# stored); [9] after the barrier before the device-resident inputs; [10] the
# end (after the last barrier). Between [3] and [5] a step waits for no
# memory but the slot's: cycles there that an ids-only step does not spend
# are the instructions' own (their fetch included). twice: fine, with the
# slot copied a second time ([7] pieces, [8] round 0 stored): the same code
# and the same loads again, now from a warm instruction cache.
FINE_START = (
    "  const uint64_t step = inl ? 0 : *(volatile const uint64_t *)st.counter; /* one broadcast load */\n"
    "  const uint64_t slot = inl ? inline_slot : mdr_stage_slot_of(st, step);\n",
    "  long long lab[12] = {0};\n"
    "  lab[0] = MDR_LAB_CLOCK();\n"
    "  const uint64_t step = inl ? 0 : *(volatile const uint64_t *)st.counter; /* one broadcast load */\n"
    "  if (step != ~0ull) lab[1] = MDR_LAB_CLOCK();\n"
    "  if (have && e.row_bytes != 0xffffffffu) lab[2] = MDR_LAB_CLOCK();\n"
    "  const uint64_t slot = inl ? inline_slot : mdr_stage_slot_of(st, step);\n"
    "  if (slot != 1ull) lab[3] = MDR_LAB_CLOCK();\n")
FINE_SIG = (
    "                                                    uint4 *hdr = nullptr, uint32_t blk = 0, uint32_t blocks = 1) {\n"
    "  const mdr_stage_lane_piece p = mdr_stage_lane_piece_of(st, e, have, slot, ids && copy_t, copy_t, copy_s);\n",
    "                                                    uint4 *hdr = nullptr, uint32_t blk = 0, uint32_t blocks = 1,\n"
    "                                                    long long *lab = nullptr) {\n"
    "  const mdr_stage_lane_piece p = mdr_stage_lane_piece_of(st, e, have, slot, ids && copy_t, copy_t, copy_s);\n"
    "  if (lab && p.nvec != ~0u) lab[0] = MDR_LAB_CLOCK();\n")
FINE_ROUND = (
    "    if (tj < p.ntail) *(unsigned char *)tto = tb;\n  }\n}\n",
    "    if (tj < p.ntail) *(unsigned char *)tto = tb;\n    if (lab && round == 0) lab[1] = MDR_LAB_CLOCK();\n  }\n}\n")


def fine_copy(twice):
    head = "    else if (fetch)\n"
    call = ("      mdr_stage_copy_slot(st, e, have, slot, !(flags & MDR_STAGE_DEVICE_IDS), copy, copy_s, blk == 0 ? &hv : nullptr,\n"
            "                          blk, blocks")
    again = (call + ", lab + 7);\n") if twice else ""
    return (head + call + ");\n",
            "    else if (fetch) {\n" + call + ", lab + 4);\n" + "      lab[6] = MDR_LAB_CLOCK();\n" + again + "    }\n")


FINE_IDS = (
    "    mdr_stage_fetch_vectors((const uint4 *)ids, (uint4 *)st.token_ids, 0, nvec);\n"
    "    mdr_stage_fetch_scalars((const uint32_t *)ids, (uint32_t *)st.token_ids, nvec * MDR_STAGE_IDS_PER_VEC, copy);\n"
    "    tokens = hv.x;\n"
    "    seqs = hv.z;\n"
    "  }\n"
    "  __syncthreads(); /* every load of the slot has completed */\n",
    "    mdr_stage_fetch_vectors((const uint4 *)ids, (uint4 *)st.token_ids, 0, nvec);\n"
    "    lab[4] = MDR_LAB_CLOCK();\n"
    "    mdr_stage_fetch_scalars((const uint32_t *)ids, (uint32_t *)st.token_ids, nvec * MDR_STAGE_IDS_PER_VEC, copy);\n"
    "    lab[5] = MDR_LAB_CLOCK();\n"
    "    tokens = hv.x;\n"
    "    seqs = hv.z;\n"
    "  }\n"
    "  __syncthreads(); /* every load of the slot has completed */\n"
    "  lab[10] = MDR_LAB_CLOCK();\n"
    "  if (MDR_LAB_DEVICE && threadIdx.x == 1 && !inl && (step & 31u) == 20u)\n"
    "    printf(\"fine inputs %u copy %u copy_s %u: %lld %lld %lld %lld %lld %lld %lld %lld %lld %lld\\n\", st.n_inputs, copy,\n"
    "           copy_s, lab[1] - lab[0], lab[2] ? lab[2] - lab[0] : -1ll, lab[3] - lab[0], lab[4] ? lab[4] - lab[0] : -1ll,\n"
    "           lab[5] ? lab[5] - lab[0] : -1ll, lab[6] ? lab[6] - lab[0] : -1ll, lab[7] ? lab[7] - lab[0] : -1ll,\n"
    "           lab[8] ? lab[8] - lab[0] : -1ll, lab[9] ? lab[9] - lab[0] : -1ll, lab[10] - lab[0]);\n")
FINE_BAR = (
    "      if (ids_here) mdr_stage_device_ids(st, s_tokens, copy);\n"
    "      mdr_stage_device_inputs(st, s_in, s_tokens, s_seqs, copy, copy_s);\n",
    "      if (ids_here) mdr_stage_device_ids(st, s_tokens, copy);\n"
    "      lab[9] = MDR_LAB_CLOCK();\n"
    "      mdr_stage_device_inputs(st, s_in, s_tokens, s_seqs, copy, copy_s);\n")
FINE = [(CUH, STAMP_INC), (CUH, FINE_SIG), (CUH, FINE_ROUND), (CUH, FINE_START), (CUH, FINE_IDS), (CUH, FINE_BAR)]

# phases: a diagnostic. Threads 0 and 1 of an inline launch's stage block
# (lane 0 the ids, lane 1 the first input) stamp the SM clock, in cycles
# from the stage block's entry: [1] the image copied (its stores issued,
# so its loads and the lane's table entry arrived; ids only: the ids
# stored), [2] the inputs' votes and shared stores done, [3] at the last
# barrier, [4] past it, [5] the end; and the whole stage block in ns
# (%globaltimer). About one launch in 64 prints ("phases ..." lines in the
# bench logs): where the stage block of a step with inputs spends what the
# ids-only step's does not, at 1-2 sequences under policy all, where that
# block is the launch's critical path (span).
PH_INC = ("#include <stdint.h>\n",
          "#include <stdint.h>\n#include <stdio.h>\n"
          "/* the host emulation compiles this file too: no clock there, no stamps */\n"
          "#if defined(__CUDA_ARCH__)\n#define MDR_LAB_CLOCK() clock64()\n"
          "__device__ __forceinline__ unsigned long long mdr_lab_gt() {\n"
          "  unsigned long long t;\n"
          "  asm volatile(\"mov.u64 %0, %%globaltimer;\" : \"=l\"(t));\n"
          "  return t;\n"
          "}\n"
          "#else\n#define MDR_LAB_CLOCK() 0ll\n#endif\n")
PH_START = (
    "  const uint32_t copy_s = st.copy_sequences;\n  __shared__ mdr_stage_input s_in[MDR_STAGE_INPUTS_MAX];\n",
    "  long long lab[6] = {0};\n"
    "  lab[0] = MDR_LAB_CLOCK();\n"
    "#if defined(__CUDA_ARCH__)\n"
    "  const unsigned long long lab_g0 = mdr_lab_gt();\n"
    "#endif\n"
    "  const uint32_t copy_s = st.copy_sequences;\n  __shared__ mdr_stage_input s_in[MDR_STAGE_INPUTS_MAX];\n")
PH_IMAGE = (
    "    if (fetch && inl && st.inline_bytes) /* one stage block: an inline launch's */\n"
    "      mdr_stage_copy_image(st, e, have, slot, !(flags & MDR_STAGE_DEVICE_IDS), copy, copy_s, &hv);\n",
    "    if (fetch && inl && st.inline_bytes) { /* one stage block: an inline launch's */\n"
    "      mdr_stage_copy_image(st, e, have, slot, !(flags & MDR_STAGE_DEVICE_IDS), copy, copy_s, &hv);\n"
    "      lab[1] = MDR_LAB_CLOCK();\n"
    "    }\n")
PH_VOTES = (
    "      late = true;\n    }\n    tokens = hv.x;\n",
    "      late = true;\n    }\n    lab[2] = MDR_LAB_CLOCK();\n    tokens = hv.x;\n")
PH_IDS = (
    "    mdr_stage_fetch_scalars((const uint32_t *)ids, (uint32_t *)st.token_ids, nvec * MDR_STAGE_IDS_PER_VEC, copy);\n"
    "    tokens = hv.x;\n",
    "    mdr_stage_fetch_scalars((const uint32_t *)ids, (uint32_t *)st.token_ids, nvec * MDR_STAGE_IDS_PER_VEC, copy);\n"
    "    lab[1] = lab[2] = MDR_LAB_CLOCK();\n"
    "    tokens = hv.x;\n")
PH_BAR = (
    "  __syncthreads(); /* every load of the slot has completed */\n",
    "  lab[3] = MDR_LAB_CLOCK();\n"
    "  __syncthreads(); /* every load of the slot has completed */\n"
    "  lab[4] = MDR_LAB_CLOCK();\n")
PH_END = (
    "      *(volatile uint64_t *)st.ack = step + 1;\n    }\n  }\n}\n",
    "      *(volatile uint64_t *)st.ack = step + 1;\n    }\n  }\n"
    "  lab[5] = MDR_LAB_CLOCK();\n"
    "#if defined(__CUDA_ARCH__)\n"
    "  if (inl) {\n"
    "    const unsigned long long g = mdr_lab_gt();\n"
    "    long long v[5], w[5];\n"
    "#pragma unroll\n"
    "    for (int i = 0; i < 5; i++) {\n"
    "      v[i] = lab[i + 1] ? lab[i + 1] - lab[0] : -1ll;\n"
    "      w[i] = __shfl_sync(0xffffffffu, v[i], 0);\n"
    "    }\n"
    "    if (threadIdx.x == 1 && ((g >> 12) & 63u) == 20u)\n"
    "      printf(\"phases inputs=%u tokens=%u seqs=%u img=%u dev=%u tab=%d t0=%lld,%lld,%lld,%lld,%lld \"\n"
    "             \"t1=%lld,%lld,%lld,%lld,%lld ns=%lld\\n\", st.n_inputs, copy, copy_s, st.inline_bytes,\n"
    "             (flags & MDR_STAGE_DEVICE_IDS) != 0u, ptable != nullptr, w[0], w[1], w[2], w[3], w[4], v[0], v[1],\n"
    "             v[2], v[3], v[4],\n"
    "             (long long)(g - lab_g0));\n"
    "  }\n"
    "#endif\n"
    "}\n")
PHASES = [(CUH, PH_INC), (CUH, PH_START), (CUH, PH_IMAGE), (CUH, PH_VOTES), (CUH, PH_IDS), (CUH, PH_BAR), (CUH, PH_END)]

# phasesimg: phases, and inside the image's copy (mdr_stage_copy_image,
# its first round) four more stamps in each of threads 0 and 1: [6] its
# image vector arrived, [7] its lane's piece known (the table entry
# arrived), [8] the pieces' bounds taken from every lane (the shuffles),
# [9] its vectors' stores issued. Each of [6]-[8] first reads the value it
# waits for (a mov of it: the warp stalls there until it is in), so the
# stamps may hold the copy back a little; phases alone does not. A
# "phasesimg ..." line a printed launch, in the bench logs.
PHI_SIG = (
    "                                                     uint64_t image, bool ids, uint32_t copy_t, uint32_t copy_s,\n"
    "                                                     uint4 *hdr) {\n",
    "                                                     uint64_t image, bool ids, uint32_t copy_t, uint32_t copy_s,\n"
    "                                                     uint4 *hdr, long long *lab = nullptr) {\n"
    "#if defined(__CUDA_ARCH__)\n"
    "#define MDR_LAB_WAIT(x) asm volatile(\"{ .reg .b32 lab_t; mov.b32 lab_t, %0; }\" : : \"r\"((unsigned)(x)))\n"
    "#else\n"
    "#define MDR_LAB_WAIT(x) (void)(x)\n"
    "#endif\n")
PHI_LOADED = (
    "    if (base == 0 && hdr && tid == 0) *hdr = r[0];\n",
    "    if (base == 0 && hdr && tid == 0) *hdr = r[0];\n"
    "    if (lab && base == 0 && tid < 2u) {\n"
    "      MDR_LAB_WAIT(r[0].x);\n"
    "      lab[0] = MDR_LAB_CLOCK();\n"
    "    }\n")
PHI_PIECE = (
    "      dst = e.dst;\n    }\n",
    "      dst = e.dst;\n    }\n"
    "    if (lab && base == 0 && tid < 2u) {\n"
    "      MDR_LAB_WAIT(len ^ (uint32_t)dst);\n"
    "      lab[1] = MDR_LAB_CLOCK();\n"
    "    }\n")
PHI_BOUNDS = (
    "#pragma unroll\n"
    "    for (uint32_t u = 0; u < R; u++)\n"
    "      if (base + u * MDR_STAGE_BLOCK + mine < nv && part[u]) mdr_stage_store_part(to[u], r[u], part[u]);\n"
    "  }\n",
    "    if (lab && base == 0 && tid < 2u) {\n"
    "      MDR_LAB_WAIT(part[0] ^ (uint32_t)to[0]);\n"
    "      lab[2] = MDR_LAB_CLOCK();\n"
    "    }\n"
    "#pragma unroll\n"
    "    for (uint32_t u = 0; u < R; u++)\n"
    "      if (base + u * MDR_STAGE_BLOCK + mine < nv && part[u]) mdr_stage_store_part(to[u], r[u], part[u]);\n"
    "    if (lab && base == 0 && tid < 2u) lab[3] = MDR_LAB_CLOCK();\n"
    "  }\n")
PHI_START = (PH_START[0], PH_START[1].replace("long long lab[6] = {0};", "long long lab[10] = {0};"))
PHI_IMAGE = (PH_IMAGE[0], PH_IMAGE[1].replace("copy, copy_s, &hv);\n      lab[1]", "copy, copy_s, &hv, lab + 6);\n      lab[1]"))
PHI_END = (PH_END[0], PH_END[1]
           .replace("    long long v[5], w[5];\n", "    long long v[9], w[9];\n")
           .replace("    for (int i = 0; i < 5; i++) {\n", "    for (int i = 0; i < 9; i++) {\n")
           .replace("printf(\"phases inputs=", "printf(\"phasesimg inputs=")
           .replace("t0=%lld,%lld,%lld,%lld,%lld \"\n", "t0=%lld,%lld,%lld,%lld,%lld,%lld,%lld,%lld,%lld \"\n")
           .replace("\"t1=%lld,%lld,%lld,%lld,%lld ns=%lld", "\"t1=%lld,%lld,%lld,%lld,%lld,%lld,%lld,%lld,%lld ns=%lld")
           .replace("w[0], w[1], w[2], w[3], w[4], v[0], v[1],\n             v[2], v[3], v[4],",
                    "w[0], w[1], w[2], w[3], w[4], w[5], w[6], w[7], w[8],\n"
                    "             v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7], v[8],"))
assert PHI_START[1] != PH_START[1] and PHI_IMAGE[1] != PH_IMAGE[1]
assert PHI_END[1].count("v[9]") == 1 and PHI_END[1].count("phasesimg") == 1 and PHI_END[1].count("w[8]") == 1 \
    and PHI_END[1].count("%lld,%lld,%lld,%lld,%lld,%lld,%lld,%lld,%lld") == 2
PHASESIMG = [(CUH, PH_INC), (CUH, PHI_SIG), (CUH, PHI_LOADED), (CUH, PHI_PIECE), (CUH, PHI_BOUNDS), (CUH, PHI_START),
             (CUH, PHI_IMAGE), (CUH, PH_VOTES), (CUH, PH_IDS), (CUH, PH_BAR), (CUH, PHI_END)]

# devpass: a step with inputs runs the device-input pass and its barrier
# whether or not an input is device-resident (as before the warp vote): the
# vote's effect alone.
DEVPASS = [(CUH, ("    const bool device_inputs = __ballot_sync(0xffffffffu, have && e.src != 0 && e.src != e.dst) != 0u;\n",
                  "    const bool device_inputs = __ballot_sync(0xffffffffu, have && e.src != 0) != 0u || st.n_inputs != 0u;\n"))]

# idswarp: an inline device-id step's last warp, which copies the ids
# (mdr_stage_device_ids_ahead), takes no part in the image's copy when the
# image's vectors do not reach it (images to 3.5 KiB), so the ids' round
# trip no longer delays that warp's share of the copy: span (call 10 of
# bench/results/h200-2026-12-03-session22/) has the device-id step's stage
# block ending 0.26-0.64 us after the host-id step's, the stage block being
# the inline kernel's critical path at 1-8 tokens.
IDSWARP = [(CUH, (
    "    if (fetch && inl && st.inline_bytes) /* one stage block: an inline launch's */\n"
    "      mdr_stage_copy_image(st, e, have, slot, !(flags & MDR_STAGE_DEVICE_IDS), copy, copy_s, &hv);\n",
    "    if (fetch && inl && st.inline_bytes) { /* one stage block: an inline launch's */\n"
    "      if (!(pre && threadIdx.x >= MDR_STAGE_BLOCK - 32u && (st.inline_bytes + 15u) / 16u <= MDR_STAGE_BLOCK - 32u))\n"
    "        mdr_stage_copy_image(st, e, have, slot, !(flags & MDR_STAGE_DEVICE_IDS), copy, copy_s, &hv);\n"
    "    }\n"))]

# inlsame: an inline step whose launch parameters (image included) are the
# same as at its graph's last node update launches the graph without
# updating the node again (the node holds them already). mdr-bench stages
# the same ids every step, so its inline steps then launch a graph whose
# node was not updated since the last launch, as every ring step does: at
# seed policy the ring's steps take some 0.3 us more GPU time than inline
# ones that the block stamps do not place in the blocks. Equal to base: the
# update is not what the ring lacks; slower: a launch right after a node
# update runs faster.
GC = "graphs/graph_cache.c"
INLSAME = [(GC, (
    "      write_step(c, call, ids, copy, copy_seqs, (unsigned char *)e->inl->param + e->inl->slot_offset);\n"
    "      st = mdr_be_fused_inline_update(c->b, e->exec, e->inl_node, e->inl);\n"
    "      if (st != MDR_OK) return st;\n",
    "      write_step(c, call, ids, copy, copy_seqs, (unsigned char *)e->inl->param + e->inl->slot_offset);\n"
    "      static unsigned char lab_prev[MDR_STAGE_INLINE_PARAM_MAX];\n"
    "      static const void *lab_exec;\n"
    "      if (lab_exec != (const void *)e->exec || memcmp(lab_prev, e->inl->param, e->inl->param_bytes) != 0) {\n"
    "        st = mdr_be_fused_inline_update(c->b, e->exec, e->inl_node, e->inl);\n"
    "        if (st != MDR_OK) return st;\n"
    "        memcpy(lab_prev, e->inl->param, e->inl->param_bytes);\n"
    "        lab_exec = (const void *)e->exec;\n"
    "      }\n"))]

# lb1: the staged kernels' static and table-inline forms under
# __launch_bounds__(256, 1): ptxas then gives them 72 registers where it
# holds them at 64 (ptxas -v), fewer blocks a SM for the zeroing; whether
# the stage block's rounds of loads gain more than the zeroing loses.
KFU = "kernels/zero_fused.cu"
LB1 = [(KFU, ("__global__ void __launch_bounds__(ZF_BLOCK)\n    zero_static_kernel(",
              "__global__ void __launch_bounds__(ZF_BLOCK, 1)\n    zero_static_kernel(")),
       (KFU, ("__global__ void __launch_bounds__(ZF_BLOCK)\n    zero_table_inline_kernel(",
              "__global__ void __launch_bounds__(ZF_BLOCK, 1)\n    zero_table_inline_kernel("))]

# span: a diagnostic. Every block of a staged zero_static_kernel launch
# (ring or inline), and of the inline list and table kernels
# (zero_list_inline_kernel, zero_table_inline_kernel: small steps under
# MDR_ROWS_ALL), stamps its start and end (%globaltimer, ns); the last
# block to finish prints, one launch in 64, where the stage blocks ran
# against the zeroing blocks, all relative to the launch's first block:
# stage0/stage1 the stage blocks' first start and last end, z0 the first
# zeroing block's start, zlast the last zeroing block's start (a later
# wave), zend the last zeroing block's end, kernel the launch's span, gap
# the time from the previous stamped launch's end to this one's start;
# dev=1 for a launch whose ids come from the device (DEVICE_IDS).
# "span ..." lines in the bench logs; the report takes their medians. Does
# a ring step's stage block finish last, or hold a zeroing block back? Does
# an inline device-id step's?
SPAN_KERNEL_HEAD = (
    "template <int CAP, int STAGED>\n__global__ void __launch_bounds__(ZF_BLOCK)\n    zero_static_kernel(",
    "#include <stdio.h>\n"
    "__device__ __forceinline__ unsigned long long zf_lab_now() {\n"
    "  unsigned long long t;\n"
    "  asm volatile(\"mov.u64 %0, %%globaltimer;\" : \"=l\"(t));\n"
    "  return t;\n"
    "}\n"
    "struct zf_lab_acc {\n"
    "  unsigned long long t0, s0, s1, z0, zl, ze, prev_end, launches;\n"
    "  unsigned done;\n"
    "};\n"
    "__device__ zf_lab_acc zf_lab = {~0ull, ~0ull, 0ull, ~0ull, 0ull, 0ull, 0ull, 0ull, 0u};\n"
    "struct zf_lab_span {\n"
    "  unsigned long long t;\n"
    "  int role, kind;\n"
    "  unsigned tokens, inputs, dev;\n"
    "  __device__ zf_lab_span(int staged, unsigned first, unsigned tok, unsigned n, unsigned d)\n"
    "      : t(0), role(0), kind(staged), tokens(tok), inputs(n), dev(d) {\n"
    "    if (staged && (gridDim.y > 1 ? blockIdx.y == 0 : blockIdx.x < first))\n"
    "      role = gridDim.y > 1 && blockIdx.x >= first ? 2 : 1; /* 1 stage, 2 an idle block of row 0 */\n"
    "    if (threadIdx.x == 0) t = zf_lab_now();\n"
    "  }\n"
    "  __device__ ~zf_lab_span() {\n"
    "    if (!kind) return;\n"
    "    __syncthreads();\n"
    "    if (threadIdx.x) return;\n"
    "    const unsigned long long e = zf_lab_now();\n"
    "    atomicMin(&zf_lab.t0, t);\n"
    "    if (role == 1) {\n"
    "      atomicMin(&zf_lab.s0, t);\n"
    "      atomicMax(&zf_lab.s1, e);\n"
    "    } else if (role == 0) {\n"
    "      atomicMin(&zf_lab.z0, t);\n"
    "      atomicMax(&zf_lab.zl, t);\n"
    "      atomicMax(&zf_lab.ze, e);\n"
    "    }\n"
    "    __threadfence();\n"
    "    if (atomicAdd(&zf_lab.done, 1u) != gridDim.x * gridDim.y - 1u) return;\n"
    "    __threadfence();\n"
    "    volatile zf_lab_acc *v = &zf_lab;\n"
    "    const unsigned long long t0 = v->t0, s0 = v->s0, s1 = v->s1, z0 = v->z0, zl = v->zl, ze = v->ze;\n"
    "    const unsigned long long end = ze > s1 ? ze : s1;\n"
    "    if ((v->launches & 63u) == 20u)\n"
    "      printf(\"span kind=%s tokens=%u inputs=%u dev=%u gx=%u gy=%u stage0=%lld stage1=%lld z0=%lld \"\n"
    "             \"zlast=%lld zend=%lld kernel=%lld gap=%lld\\n\", kind == 2 ? \"inline\" : \"ring\", tokens, inputs, dev,\n"
    "             gridDim.x, gridDim.y, s0 == ~0ull ? -1ll : (long long)(s0 - t0),\n"
    "             s0 == ~0ull ? -1ll : (long long)(s1 - t0), z0 == ~0ull ? -1ll : (long long)(z0 - t0),\n"
    "             z0 == ~0ull ? -1ll : (long long)(zl - t0), z0 == ~0ull ? -1ll : (long long)(ze - t0),\n"
    "             (long long)(end - t0), v->prev_end ? (long long)(t0 - v->prev_end) : -1ll);\n"
    "    v->launches = v->launches + 1;\n"
    "    v->prev_end = end;\n"
    "    v->t0 = ~0ull;\n"
    "    v->s0 = ~0ull;\n"
    "    v->s1 = 0;\n"
    "    v->z0 = ~0ull;\n"
    "    v->zl = 0;\n"
    "    v->ze = 0;\n"
    "    __threadfence();\n"
    "    v->done = 0;\n"
    "  }\n"
    "};\n"
    "template <int CAP, int STAGED>\n__global__ void __launch_bounds__(ZF_BLOCK)\n    zero_static_kernel(")
SPAN_GUARD = (
    "  const unsigned first = STAGED == ZF_STAGED ? mdr_stage_blocks_of(p.flags) : STAGED ? 1u : 0u;\n",
    "  const unsigned first = STAGED == ZF_STAGED ? mdr_stage_blocks_of(p.flags) : STAGED ? 1u : 0u;\n"
    "  zf_lab_span lab_span(STAGED, first, (unsigned)p.tokens, p.stage.n_inputs,\n"
    "                       (p.flags & MDR_STAGE_DEVICE_IDS) != 0u);\n")


def span_inline(kernel, params):
    """The span stamps in an inline kernel (its block 0 the stage block)."""
    head = f"    {kernel}(const __grid_constant__ {params}<IMG> a) {{\n"
    return (KFU, (head, head + "  zf_lab_span lab_span(2, 1u, (unsigned)a.p.tokens, a.p.stage.n_inputs,\n"
                                "                       (a.p.flags & MDR_STAGE_DEVICE_IDS) != 0u);\n"))

# drvlaunch: the graph launch through the driver's cuGraphLaunch (its entry
# point taken once, at the first launch) where main calls the runtime's
# cudaGraphLaunch, as node updates already go: what the runtime's wrapper
# costs a step on the host. A failed driver launch launched nothing, and
# the runtime's call is tried.
DRVLAUNCH = [("src/backend_cuda.c", (
    "static mdr_status cuda_graph_launch(mdr_backend *b, void *exec, mdr_stream s) {\n"
    "  CU_HANDLE(cudaGraphLaunch((cudaGraphExec_t)exec, (cudaStream_t)s), \"cudaGraphLaunch\");\n",
    "static mdr_status cuda_graph_launch(mdr_backend *b, void *exec, mdr_stream s) {\n"
    "  static PFN_cuGraphLaunch_v10000 lab_launch;\n"
    "  static int lab_looked;\n"
    "  if (!lab_looked) {\n"
    "    enum cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;\n"
    "    void *fn = NULL;\n"
    "    lab_looked = 1;\n"
    "    if (cudaGetDriverEntryPointByVersion(\"cuGraphLaunch\", &fn, 10000, cudaEnableDefault, &q) == cudaSuccess &&\n"
    "        q == cudaDriverEntryPointSuccess)\n"
    "      memcpy(&lab_launch, &fn, sizeof fn);\n"
    "    (void)cudaGetLastError();\n"
    "  }\n"
    "  if (lab_launch && lab_launch((CUgraphExec)exec, (CUstream)s) == CUDA_SUCCESS) return MDR_OK;\n"
    "  CU_HANDLE(cudaGraphLaunch((cudaGraphExec_t)exec, (cudaStream_t)s), \"cudaGraphLaunch\");\n"))]

# lbN: every zeroing kernel that can carry a stage block under
# __launch_bounds__(ZF_BLOCK, N). ptxas gives the staged kernels 64
# registers (the stage code's), where the unstaged static kernel takes 32:
# four resident blocks a SM for the zeroing instead of eight. N = 8 holds
# them at 32 (the stage code spills, in its one block), N = 6 at 40: whether
# the zeroing blocks' occupancy is worth the stage block's spills.
def launch_bounds(n):
    heads = ["__global__ void __launch_bounds__(ZF_BLOCK)\n    zero_static_kernel(",
             "__global__ void __launch_bounds__(ZF_BLOCK) zero_list_kernel(",
             "__global__ void __launch_bounds__(ZF_BLOCK) zero_table_kernel(",
             "__global__ void __launch_bounds__(ZF_BLOCK)\n    zero_list_inline_kernel(",
             "__global__ void __launch_bounds__(ZF_BLOCK)\n    zero_table_inline_kernel("]
    return [(KFU, (h, h.replace("(ZF_BLOCK)", f"(ZF_BLOCK, {n})"))) for h in heads]

# tablelb6: the table kernel (DYNAMIC's node update) under
# __launch_bounds__(ZF_BLOCK, ZF_BLOCKS_PER_SM): 40 registers, its stage
# code spilling, so that six blocks a SM fit. Main instead sizes its grid
# at the blocks a SM that fit with its 64 registers (the occupancy API, at
# preload); before that, a grid of six a SM ran in one and a half waves.
TABLELB6 = [(KFU, ("__global__ void __launch_bounds__(ZF_BLOCK) zero_table_kernel(",
                   "__global__ void __launch_bounds__(ZF_BLOCK, ZF_BLOCKS_PER_SM) zero_table_kernel("))]

# xltable: the extra-large class (steps with inputs at 3-8 sequences) in
# the table form (about 5 KiB of parameters) instead of the chunk list's
# (about 9.4 KiB): the node update's host cost against the list form's GPU
# gain (0.93-0.97x of the table form at 2-8 sequences, session 16).
XLTABLE = [(KFU, ("  if (n <= MDR_ZERO_MAX_SEGS && cls <= MDR_STAGE_INLINE_XL_BYTES) {\n",
                  "  if (n <= MDR_ZERO_MAX_SEGS && cls <= MDR_STAGE_INLINE_LARGE_BYTES) {\n"))]
# largetable: the large class (1-2 sequences) in the table form too (about
# 2 KiB against 6.2 KiB): the list form for ids-only steps alone.
LARGETABLE = [(KFU, (XLTABLE[0][1][0], XLTABLE[0][1][0].replace("MDR_STAGE_INLINE_XL_BYTES", "MDR_STAGE_INLINE_BYTES")))]
# (and the test of the list form in every class expects it where it stays)
LIST_CASES = ("               {MDR_STAGE_INLINE_BYTES, MDR_STAGE_INLINE_BYTES},\n"
              "               {MDR_STAGE_INLINE_BYTES + 1, MDR_STAGE_INLINE_LARGE_BYTES},\n"
              "               {MDR_STAGE_INLINE_LARGE_BYTES, MDR_STAGE_INLINE_LARGE_BYTES},\n"
              "               {MDR_STAGE_INLINE_LARGE_BYTES + 1, MDR_STAGE_INLINE_XL_BYTES},\n"
              "               {MDR_STAGE_INLINE_XL_BYTES, MDR_STAGE_INLINE_XL_BYTES}};\n")
XLTABLE.append(("tests/test_stage_inline.c", (LIST_CASES, LIST_CASES.split("\n               {MDR_STAGE_INLINE_LARGE_BYTES + 1")[0] + "};\n")))
LARGETABLE.append(("tests/test_stage_inline.c", (LIST_CASES, LIST_CASES.split("\n               {MDR_STAGE_INLINE_BYTES + 1")[0] + "};\n")))
LARGETABLE.append(("tests/test_stage_inline.c", (
    "  cr_assert(funcs[0] != funcs[1] && funcs[1] != funcs[2] && funcs[0] != funcs[2], \"a kernel a class\");\n",
    "  cr_assert(funcs[0] != NULL, \"the small class's kernel\");\n")))

# large256: a diagnostic. The large image class at 256 bytes, not 1152:
# the device-table step's image (ids, positions and lengths: 64-208 bytes
# at 1-8 sequences) in a parameter block some 900 bytes smaller, the
# whole-table step's at 1 sequence (576 bytes) in the extra-large class.
# The question: whether the parameter block's size, which each launch of
# the node reads whole, is what the device-table step still pays over ids
# only (small class) at 1-2 sequences under MDR_ROWS_ALL
# (bench/results/h200-2026-12-04-session25/, call 4).
LARGE256 = [(LAYOUT, ("#define MDR_STAGE_INLINE_LARGE_BYTES 1152u\n", "#define MDR_STAGE_INLINE_LARGE_BYTES 256u\n")),
            # (and the class test's large images fit 256 bytes)
            ("tests/test_stage_inline.c", ("MDR_STAGE_INLINE_BYTES + 1, 576, 1088, MDR_STAGE_INLINE_LARGE_BYTES};",
                                           "MDR_STAGE_INLINE_BYTES + 1, 200, 240, MDR_STAGE_INLINE_LARGE_BYTES};"))]

# seedinline: the larger image classes inline at any plan length
# (LARGE_INLINE_ZERO_MAX at 1 GiB); and the test of the 32 MiB rule expects
# the long plan's steps inline.
SEEDINLINE = [(GC, ("#define LARGE_INLINE_ZERO_MAX (32u << 20)\n",
                    "#define LARGE_INLINE_ZERO_MAX (1u << 30)\n")),
              ("tests/test_stage_inline.c", ("s1.inline_steps - s0.inline_steps, mib[k] > 32 ? 0u : 1u,",
                                             "s1.inline_steps - s0.inline_steps, 1u,"))]

# ownlate: the fallback of a lane's entry from the launch's own table
# (room left zeroed: the table in device memory) tested after the image's
# loads are issued. On main the test sits where the entry is loaded, so the
# warp waits there for the entry's parameter load (in-order issue: the
# branch needs it), and the image's loads, which need no entry, go out a
# round trip later (the PTX of zero_list_inline_kernel<1152>: the branch on
# the entry's dst right after its ld.param, the image's ld.v4 after it).
# An ids-only step (small class, no table) waits for one round. The
# question: is that second round what every step with inputs pays at 1-2
# sequences under MDR_ROWS_ALL (bench/results/h200-2026-12-04-session25/,
# call 5)? ptxas -v is the same as base for every kernel.
OWN_ENTRY = (
    "/* An inline launch's image copied (FETCH | INLINE with the image's bytes in\n",
    "/* A lane's entry read from the launch's own copy of the table\n"
    " * (mdr_stage_block's ptable): the entry in device memory in its place when\n"
    " * the caller left that room zeroed (an entry's destination is never 0).\n"
    " * Its test waits for the entry's load, so callers place it after the loads\n"
    " * that need no entry. */\n"
    "__device__ __forceinline__ void mdr_stage_own_entry(const mdr_stage_desc &st, bool have, mdr_stage_input &e) {\n"
    "  if (have && e.dst == 0) e = ((const mdr_stage_input *)st.inputs)[(threadIdx.x & 31u) - 1u];\n"
    "}\n\n"
    "/* An inline launch's image copied (FETCH | INLINE with the image's bytes in\n")
OWN_SIG = (
    "__device__ __forceinline__ void mdr_stage_copy_image(const mdr_stage_desc &st, const mdr_stage_input &e, bool have,\n"
    "                                                     uint64_t image, bool ids, uint32_t copy_t, uint32_t copy_s,\n"
    "                                                     uint4 *hdr) {\n",
    "__device__ __forceinline__ void mdr_stage_copy_image(const mdr_stage_desc &st, mdr_stage_input &e, bool have,\n"
    "                                                     bool own, uint64_t image, bool ids, uint32_t copy_t,\n"
    "                                                     uint32_t copy_s, uint4 *hdr) {\n")
OWN_WAIT = (
    "    if (base == 0 && hdr && tid == 0) *hdr = r[0];\n",
    "    if (base == 0 && own) mdr_stage_own_entry(st, have, e); /* the entry's wait, after the image's loads */\n"
    "    if (base == 0 && hdr && tid == 0) *hdr = r[0];\n")
OWN_LOAD = (
    "  bool have;\n"
    "  if (ptable && st.n_inputs <= MDR_STAGE_INLINE_TABLE) {\n"
    "    /* the launch's own copy of the table, when its caller wrote one (an\n"
    "     * entry's destination is never 0); else the table in device memory */\n"
    "    have = mdr_stage_lane_entry(st, ptable, e);\n"
    "    if (have && e.dst == 0) e = ((const mdr_stage_input *)st.inputs)[(threadIdx.x & 31u) - 1u];\n"
    "  } else {\n"
    "    have = mdr_stage_lane_entry(st, (const mdr_stage_input *)st.inputs, e);\n"
    "  }\n",
    "  /* the launch's own copy of the table (its caller may have left it\n"
    "   * zeroed: mdr_stage_own_entry), else the table in device memory */\n"
    "  const bool own = ptable && st.n_inputs <= MDR_STAGE_INLINE_TABLE;\n"
    "  const bool have = own ? mdr_stage_lane_entry(st, ptable, e)\n"
    "                        : mdr_stage_lane_entry(st, (const mdr_stage_input *)st.inputs, e);\n")
OWN_COPY = (
    "    if (fetch && inl && st.inline_bytes) /* one stage block: an inline launch's */\n"
    "      mdr_stage_copy_image(st, e, have, slot, !(flags & MDR_STAGE_DEVICE_IDS), copy, copy_s, &hv);\n"
    "    else if (fetch)\n"
    "      mdr_stage_copy_slot(st, e, have, slot, !(flags & MDR_STAGE_DEVICE_IDS), copy, copy_s, blk == 0 ? &hv : nullptr,\n"
    "                          blk, blocks);\n",
    "    if (fetch && inl && st.inline_bytes) { /* one stage block: an inline launch's */\n"
    "      mdr_stage_copy_image(st, e, have, own, slot, !(flags & MDR_STAGE_DEVICE_IDS), copy, copy_s, &hv);\n"
    "    } else {\n"
    "      if (own) mdr_stage_own_entry(st, have, e);\n"
    "      if (fetch)\n"
    "        mdr_stage_copy_slot(st, e, have, slot, !(flags & MDR_STAGE_DEVICE_IDS), copy, copy_s,\n"
    "                            blk == 0 ? &hv : nullptr, blk, blocks);\n"
    "    }\n")
OWNLATE = [(CUH, OWN_ENTRY), (CUH, OWN_SIG), (CUH, OWN_WAIT), (CUH, OWN_LOAD), (CUH, OWN_COPY)]

# idslarge: a diagnostic. Ids-only inline steps take the large image class
# (the list form's parameters with the input table's room: about 6.4 KiB
# where the small class's are 4.6 KiB) instead of the small one, their stage
# code unchanged (no inputs: the ids' own path). Whether what every step
# with inputs pays over ids only at 1-2 sequences under MDR_ROWS_ALL goes
# with the larger class's launch (then ids only pays it here too) or with
# the stage block's work for the inputs (then ids only stays as it is).
# stage_inline's class tests encode the rule this changes, so the variant is
# validated without them (SUITES_OF).
IDSLARGE = [(LAYOUT, ("  if (b <= MDR_STAGE_INLINE_BYTES && st->n_inputs == 0) return MDR_STAGE_INLINE_BYTES;\n", "")),
            (GC, ("(image_bytes > MDR_STAGE_INLINE_BYTES || c->staging.n_inputs > 0) &&",
                  "(image_bytes > MDR_STAGE_INLINE_BYTES || c->staging.n_inputs > 0 || 1) &&"))]

# idspad: a diagnostic. The small class's list-form parameters (ids-only
# inline steps at short plans) padded between the list and the image to the
# large class's size: its chunk list, table room and image, 6400 bytes
# (4592 on main). If idslarge's ids-only steps pay what steps with inputs
# pay at 1-2 sequences, this says whether the block's size is the cost (it
# pays it too) or the larger class's kernel and its stage path (it does
# not). The graph cache writes the image at the launch's slot_offset, which
# follows the padding.
IDSPAD = [(KFU, ("struct zf_list_inline_params_t {\n  zf_list_params_t<ZF_LIST_INLINE> p;\n  uint4 inline_slot[IMG / 16];\n",
                 "struct zf_list_inline_params_t {\n  zf_list_params_t<ZF_LIST_INLINE> p;\n"
                 "  uint4 lab_pad[(MDR_STAGE_INLINE_TABLE * sizeof(mdr_stage_input) + MDR_STAGE_INLINE_LARGE_BYTES - IMG) / 16];\n"
                 "  uint4 inline_slot[IMG / 16];\n"))]

# largelist256: the large image class in the list form with a 256-chunk
# list when the count's plan fits it (GLM-5.3 under MDR_ROWS_ALL at 1-2
# tokens: 214 and 254 chunks): 2176 bytes of list parameters, the input
# table's room and the 1152-byte image, 4096 bytes in all, under the small
# class's 4592, where the 544-chunk list makes 6400. If idslarge and idspad
# put what steps with inputs pay at 1-2 sequences on the parameter block's
# size, this is the candidate that keeps the inputs and sheds the size. A
# kernel of its own (zero_list256_large_kernel), in the preload table for
# the driver's node update. stage_inline's layout tests hold the 544-chunk
# list, so it is validated without them (SUITES_OF).
LARGELIST256 = [
    (KFU, ("static_assert(zf_list_inline_ok<MDR_STAGE_INLINE_BYTES>() && zf_list_inline_ok<MDR_STAGE_INLINE_LARGE_BYTES>() &&\n",
           "struct zf_list256_large_params {\n"
           "  zf_list_params_t<256> p;\n"
           "  mdr_stage_input table[MDR_STAGE_INLINE_TABLE];\n"
           "  uint4 inline_slot[MDR_STAGE_INLINE_LARGE_BYTES / 16];\n"
           "};\n"
           "static_assert(zf_inline_layout_ok<zf_list256_large_params, MDR_STAGE_INLINE_LARGE_BYTES>() &&\n"
           "                  sizeof(zf_list256_large_params) <= 4096,\n"
           "              \"the 256-chunk large class: within 4 KiB\");\n"
           "static_assert(zf_list_inline_ok<MDR_STAGE_INLINE_BYTES>() && zf_list_inline_ok<MDR_STAGE_INLINE_LARGE_BYTES>() &&\n")),
    (KFU, ("template <unsigned IMG>\n__global__ void __launch_bounds__(ZF_BLOCK)\n"
           "    zero_table_inline_kernel(const __grid_constant__ zf_table_inline_params_t<IMG> a) {\n",
           "__global__ void __launch_bounds__(ZF_BLOCK)\n"
           "    zero_list256_large_kernel(const __grid_constant__ zf_list256_large_params a) {\n"
           "  if (blockIdx.x == 0) {\n"
           "    mdr_stage_inline_block(a.p.stage, a.p.flags, (uint32_t)a.p.tokens, (uint64_t)(uintptr_t)&a.inline_slot[0],\n"
           "                           a.table);\n"
           "    return;\n"
           "  }\n"
           "  zf_clear_span(mdr_zero_list_span(a.p.chunk[blockIdx.x - 1]));\n"
           "}\n\n"
           "template <unsigned IMG>\n__global__ void __launch_bounds__(ZF_BLOCK)\n"
           "    zero_table_inline_kernel(const __grid_constant__ zf_table_inline_params_t<IMG> a) {\n")),
    (KFU, ("extern \"C\" int mdr_cuda_zero_inline_launch(",
           "static void zf_list256_build(const uint64_t *words, uint32_t k, uint64_t tokens, const mdr_stage_desc *stage,\n"
           "                             mdr_stage_inline_launch *out) {\n"
           "  zf_list256_large_params a;\n"
           "  memset(&a, 0, sizeof a);\n"
           "  memcpy(a.p.chunk, words, k * sizeof *words);\n"
           "  a.p.n = k;\n"
           "  a.p.tokens = tokens;\n"
           "  a.p.flags = stage->flags & (MDR_STAGE_FETCH | MDR_STAGE_INLINE | MDR_STAGE_DEVICE_IDS);\n"
           "  a.p.stage = *stage;\n"
           "  memset(out, 0, sizeof *out);\n"
           "  out->func = (const void *)zero_list256_large_kernel;\n"
           "  out->grid[0] = k + 1;\n"
           "  out->grid[1] = out->grid[2] = 1;\n"
           "  out->block[0] = ZF_BLOCK;\n"
           "  out->block[1] = out->block[2] = 1;\n"
           "  out->param_bytes = sizeof a;\n"
           "  out->slot_offset = offsetof(zf_list256_large_params, inline_slot);\n"
           "  out->table_offset = offsetof(zf_list256_large_params, table);\n"
           "  memcpy(out->param, &a, sizeof a);\n"
           "}\n\n"
           "extern \"C\" int mdr_cuda_zero_inline_launch(")),
    (KFU, ("      else if (cls == MDR_STAGE_INLINE_LARGE_BYTES)\n"
           "        zf_list_inline_build<MDR_STAGE_INLINE_LARGE_BYTES>(words, k, tokens, stage, out);\n",
           "      else if (cls == MDR_STAGE_INLINE_LARGE_BYTES && k <= 256)\n"
           "        zf_list256_build(words, k, tokens, stage, out);\n"
           "      else if (cls == MDR_STAGE_INLINE_LARGE_BYTES)\n"
           "        zf_list_inline_build<MDR_STAGE_INLINE_LARGE_BYTES>(words, k, tokens, stage, out);\n")),
    (KFU, ("      (const void *)zero_list_inline_kernel<MDR_STAGE_INLINE_XL_BYTES>,\n",
           "      (const void *)zero_list_inline_kernel<MDR_STAGE_INLINE_XL_BYTES>, (const void *)zero_list256_large_kernel,\n")),
    ("kernels/zero_fused.h", ("#define MDR_CUDA_ZERO_KERNELS 19\n", "#define MDR_CUDA_ZERO_KERNELS 20\n")),
]

# onealloc: a diagnostic in mdr-bench alone. The inputs' destinations in
# one allocation, each at a 256-byte aligned offset, where base gives each
# its own: whether the stores of a step with inputs to allocations the
# ids-only step never touches (a store is issued before the stage block
# ends and completes before the kernel does) cost what such a step pays
# over ids only at 1-2 sequences. Measured: no
# (bench/results/h200-2026-12-05-session32/, call 3).
BR = "bench/bench_runner.c"
ONEALLOC = [
    (BR, ("    CHECK(r->b, mdr_backend_alloc(r->b, n * sizeof(uint32_t), &r->input_dst[i]));\n",
          "    if (i == 0) {\n"
          "      size_t all = 0;\n"
          "      for (int j = 0; j < N_STEP_INPUTS; j++) all += (rows[j] * width[j] * sizeof(uint32_t) + 255u) / 256u * 256u;\n"
          "      CHECK(r->b, mdr_backend_alloc(r->b, all, &r->input_dst[0]));\n"
          "    } else {\n"
          "      r->input_dst[i] = r->input_dst[i - 1] + (rows[i - 1] * width[i - 1] * sizeof(uint32_t) + 255u) / 256u * 256u;\n"
          "    }\n")),
    (BR, ("    if (r->input_dst[i]) mdr_backend_free(r->b, r->input_dst[i]);\n",
          "    if (r->input_dst[i] && i == 0) mdr_backend_free(r->b, r->input_dst[i]);\n")),
]

# imgpair and pairall: mdr_stage_copy_image's thread-to-vector map by
# 32-byte sectors: thread (lane, warp w) of W warps takes vector
# 2 (lane / 2) W + 2 w + lane % 2 of each MDR_STAGE_BLOCK (a bijection, thread 0
# vector 0). imgpair for the images main deals (at most
# MDR_STAGE_IMAGE_DEALT vectors), pairall for every image.
MINE_MAIN = ("  const uint32_t mine = mdr_stage_image_dealt(nv) ? lane * (MDR_STAGE_BLOCK / 32u) + tid / 32u : tid;\n")
PAIR_MAP = "(lane >> 1) * (MDR_STAGE_BLOCK / 16u) + (tid >> 5) * 2u + (lane & 1u)"
IMGPAIR = [(CUH, (MINE_MAIN, f"  const uint32_t mine = mdr_stage_image_dealt(nv) ? {PAIR_MAP} : tid;\n"))]
PAIRALL = [(CUH, (MINE_MAIN, f"  const uint32_t mine = {PAIR_MAP};\n"))]
# wordtail: mdr_stage_store_part's part-vector in words where aligned.
WORDTAIL = [(CUH, ("  for (uint32_t b = 0; b < n; b++) {\n"
                   "    const uint32_t w = b < 4u ? v.x : b < 8u ? v.y : b < 12u ? v.z : v.w;\n",
                   "  uint32_t b0 = 0;\n"
                   "  if ((to & 3u) == 0)\n"
                   "    for (; b0 + 4u <= n; b0 += 4u) *(uint32_t *)(to + b0) = b0 < 4u ? v.x : b0 < 8u ? v.y : b0 < 12u ? v.z : v.w;\n"
                   "  for (uint32_t b = b0; b < n; b++) {\n"
                   "    const uint32_t w = b < 4u ? v.x : b < 8u ? v.y : b < 12u ? v.z : v.w;\n"))]

VARIANTS = {
    "base": [],
    "xltable": XLTABLE,
    "largetable": LARGETABLE,
    "tablelb6": TABLELB6,
    "lb8": launch_bounds(8),
    "lb6": launch_bounds(6),
    "drvlaunch": DRVLAUNCH,
    "phases": PHASES,
    "phasesimg": PHASESIMG,
    "span": [(KFU, SPAN_KERNEL_HEAD), (KFU, SPAN_GUARD),
             span_inline("zero_list_inline_kernel", "zf_list_inline_params_t"),
             span_inline("zero_table_inline_kernel", "zf_table_inline_params_t")],
    "inline512": inline_bytes(512),
    "inline2k": inline_bytes(2048),
    "fine": FINE + [(CUH, fine_copy(False))],
    "twice": FINE + [(CUH, fine_copy(True))],
    "devpass": DEVPASS,
    "idswarp": IDSWARP,
    "lb1": LB1,
    "inlack": [(CUH, ("    if (last && (flags & MDR_STAGE_ADVANCE) && !inl) {\n",
                      "#if defined(__CUDA_ARCH__) /* the device only: the emulation checks the ack word */\n"
                      "    if (inl && fetch && st.ack && st.counter)\n"
                      "      *(volatile uint64_t *)st.ack = *(volatile const uint64_t *)st.counter;\n"
                      "#endif\n"
                      "    if (last && (flags & MDR_STAGE_ADVANCE) && !inl) {\n"))],
    "inlsame": INLSAME,
    "seedinline": SEEDINLINE,
    "large256": LARGE256,
    "ownlate": OWNLATE,
    "idslarge": IDSLARGE,
    "idspad": IDSPAD,
    "largelist256": LARGELIST256,
    "onealloc": ONEALLOC,
    "imgpair": IMGPAIR,
    "pairall": PAIRALL,
    "wordtail": WORDTAIL,
    "pairword": IMGPAIR + WORDTAIL,
}

# Switch variants: base's build, run with these variables set (validation,
# host check and benches). V+S runs switch S on variant V's build.
SWITCHES = {
    "onestage": {"MDR_STAGE_SPREAD": "0"},
    "ring": {"MDR_STAGE_INLINE": "0"},
    "rtupdate": {"MDR_NODE_UPDATE_DRIVER": "0"},
}


def switch_of(name):
    """The environment a variant runs with: a switch's, V+S's switch's, or none."""
    if name is None:
        return {}
    if name in SWITCHES:
        return SWITCHES[name]
    _, plus, s = name.partition("+")
    return SWITCHES.get(s, {}) if plus else {}


def build_owner(name):
    """The variant whose build a name runs on: base for a switch, V for V+S."""
    if name in SWITCHES:
        return "base"
    v, plus, _ = name.partition("+")
    return v if plus else name

# The suites that validate a variant (tests/CMakeLists.txt: the Criterion
# suites by name; stage_emulated as staging_emulated, and with its spread and
# inline cases as staging_emulated_spread and staging_emulated_inline, which
# run the stage block's copy on the host), and what to build.
SUITES = "^(stage_inline|staging|staging_emulated(_spread|_inline)?|step_inputs|graph_cache)$"
# variants validated by other suites: those that change the class rule or
# the parameter layout stage_inline's tests hold run the others only
SUITES_NO_LAYOUT = "^(staging|staging_emulated(_spread|_inline)?|step_inputs|graph_cache)$"
SUITES_OF = {"idslarge": SUITES_NO_LAYOUT, "idspad": SUITES_NO_LAYOUT, "largelist256": SUITES_NO_LAYOUT}
TARGETS = ["mdr-bench", "test_stage_inline", "test_staging", "stage_emulated", "test_step_inputs",
           "test_graph_cache"]
BENCH_ARGS = ["--strategies", "graph-fused,graph-fused-inputs", "--tokens", "1,2,4,8,16,24,32,64",
              "--presets", "glm-5.3-flash-tp2", "--cpu-reps", "4000", "--force"]
# The host-backend run that shows which counts go inline (CPU only, a few reps).
HOST_INLINE_ARGS = ["--backend", "host", "--strategies", "graph-fused,graph-fused-inputs",
                    "--tokens", "1,2,3,4,8,16,24,25,32,64,124,128,256", "--presets", "glm-5.3-flash-tp2",
                    "--reps", "3", "--cpu-reps", "3", "--force"]
SKIP_TOP = ("build", ".git", ".device-", "bench-out")


def say(msg):
    print(f"stage_lab: {msg}", flush=True)


# Variants given as NAME=DIR: name -> the source tree they are built from.
TREES = {}


def copy_tree(dst, out, root=ROOT):
    """The source tree root into dst: no build folders, no .git, no carried
    device trees, no bench outputs, and not OUT_DIR when it is inside."""
    out_abs = os.path.abspath(out)

    def ignore(folder, names):
        skip = set()
        for n in names:
            full = os.path.abspath(os.path.join(folder, n))
            if folder == root and n.startswith(SKIP_TOP):
                skip.add(n)
            elif n == "__pycache__" or full == out_abs or (n == "target" and os.path.basename(folder) == "rust"):
                skip.add(n)
        return skip

    shutil.rmtree(dst, ignore_errors=True)
    shutil.copytree(root, dst, ignore=ignore, symlinks=True)


def apply_patches(name, src):
    """Apply the variant's patches in src; each must match exactly once."""
    for fname, (old, new) in VARIANTS.get(name, []):
        path = os.path.join(src, fname)
        text = open(path).read()
        n = text.count(old)
        if n != 1:
            say(f"{name}: the patch for {fname} matches {n} times (want 1); text not found once:\n{old}")
            return False
        open(path, "w").write(text.replace(old, new))
    return True


def check_patches():
    """Apply every variant's patches to a scratch copy of the files they
    touch (no build): exit 1 if any does not match exactly once."""
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        for name in VARIANTS:
            src = os.path.join(tmp, name)
            for fname in {f for f, _ in VARIANTS[name]}:
                os.makedirs(os.path.dirname(os.path.join(src, fname)), exist_ok=True)
                shutil.copy(os.path.join(ROOT, fname), os.path.join(src, fname))
            if apply_patches(name, src):
                print(f"stage_lab: {name}: {len(VARIANTS[name])} patch(es) apply")
            else:
                ok = False
    return 0 if ok else 1


def run_logged(cmd, log, cwd=None, name=None, cpu=None):
    """cmd with its output in log; a switch variant's variables set when
    name is one; pinned to one CPU when cpu is not None."""
    env = dict(os.environ, **switch_of(name))
    pin = None if cpu is None else (lambda: os.sched_setaffinity(0, {cpu}))
    with open(log, "a") as f:
        f.write("$ " + ("" if cpu is None else f"(on CPU {cpu}) ") +
                " ".join([f"{k}={v}" for k, v in switch_of(name).items()] + cmd) + "\n")
        f.flush()
        return subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, cwd=cwd, env=env,
                              preexec_fn=pin).returncode


def build(out, name, jobs):
    """Copy, patch, configure and build one variant; its build folder, or
    None (the reason is in OUT_DIR/<name>/build.log)."""
    vdir = os.path.join(out, name)
    os.makedirs(vdir, exist_ok=True)
    src, bld, log = os.path.join(vdir, "src"), os.path.join(vdir, "build"), os.path.join(vdir, "build.log")
    open(log, "w").close()
    say(f"building {name} ({bld}, -j{jobs}; log {log})")
    copy_tree(src, out, TREES.get(name, ROOT))
    if not apply_patches(name, src):
        return None
    rc = run_logged(["cmake", "-S", src, "-B", bld, "-DCMAKE_BUILD_TYPE=RelWithDebInfo",
                     "-DCMAKE_CUDA_ARCHITECTURES=90", "-DMDR_REQUIRE_TESTS=ON"], log)
    if rc == 0:
        rc = run_logged(["cmake", "--build", bld, "-j", str(jobs), "--target"] + TARGETS, log)
    if rc != 0:
        say(f"{name}: build FAILED (rc {rc}); see {log}")
        return None
    return bld


def validate(out, name, bld):
    """The variant's own step-input suites (GPU cases skip without a GPU)."""
    log = os.path.join(out, name, "ctest.log")
    open(log, "w").close()
    suites = SUITES_OF.get(name.split("+")[0], SUITES)
    say(f"testing {name} (ctest -R '{suites}'; log {log})")
    rc = run_logged(["ctest", "--output-on-failure", "--no-tests=error", "-R", suites], log, cwd=bld, name=name)
    if rc != 0:
        say(f"{name}: validation FAILED (rc {rc}): never timed; see {log}")
    return rc == 0


def read_rows(path):
    try:
        with open(path, newline="") as f:
            return list(csv.DictReader(f))
    except OSError:
        return []


def host_inline(out, name, bld):
    """Which counts go inline, from a short host-backend run of mdr-bench;
    a line per strategy."""
    d = os.path.join(out, name, "host-inline")
    say(f"host inline check {name} (mdr-bench --backend host; log {d}.log)")
    open(d + ".log", "w").close()
    rc = run_logged([os.path.join(bld, "bench", "mdr-bench")] + HOST_INLINE_ARGS + ["--out", d], d + ".log", name=name)
    if rc != 0:
        return [f"{name}: host inline check FAILED (rc {rc})"]
    marks = {}
    for r in read_rows(os.path.join(d, "results.csv")):
        if r.get("policy") != "all":
            continue
        marks.setdefault(r["strategy"], []).append((int(r["tokens"]), int(r.get("inline_steps") or 0) > 0))
    lines = []
    for strat, tl in sorted(marks.items()):
        inl = [str(t) for t, i in sorted(tl) if i]
        ring = [str(t) for t, i in sorted(tl) if not i]
        lines.append(f"{name:10s} {strat:20s} inline at {','.join(inl) or '-'}; ring at {','.join(ring) or '-'}")
    return lines


def has_gpu():
    if not shutil.which("nvidia-smi"):
        return False
    r = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True)
    return r.returncode == 0 and "GPU" in r.stdout


def fnum(v):
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


def med(vals):
    vals = [v for v in vals if v is not None]
    return statistics.median(vals) if vals else None


def report(out, names):
    """Per preset, policy, tokens and strategy: every variant's GPU median
    (x_floor), CPU median and inline mark, the medians over its runs, with
    GPU and CPU ratios to base."""
    data = {}  # (preset, policy, tokens, strategy) -> name -> lists
    runs = {}
    for n in names:
        vdir = os.path.join(out, n)
        dirs = sorted(d for d in os.listdir(vdir) if d.startswith("bench-")) if os.path.isdir(vdir) else []
        runs[n] = 0
        for d in dirs:
            rows = read_rows(os.path.join(vdir, d, "results.csv"))
            runs[n] += bool(rows)
            for r in rows:
                k = (r["preset"], r["policy"], int(r["tokens"]), r["strategy"])
                e = data.setdefault(k, {}).setdefault(n, {"gpu": [], "xf": [], "cpu": [], "inl": [], "copy": []})
                e["copy"].append(fnum(r.get("copy_us")))
                e["gpu"].append(fnum(r.get("gpu_us_med")))
                e["xf"].append(fnum(r.get("x_floor")))
                e["cpu"].append(fnum(r.get("cpu_us_med")))
                e["inl"].append(int(r.get("inline_steps") or 0) > 0)
    lines = ["stage_lab: medians over each variant's runs (" +
             ", ".join(f"{n} {runs[n]}" for n in names) + "); GPU us (x_floor) / CPU us, "
             "'i' when steps went inline; ratios to base (GPU, CPU)"]
    cur = None
    for k in sorted(data, key=lambda k: (k[0], k[1], k[3], k[2])):
        if (k[0], k[1]) != cur:
            cur = (k[0], k[1])
            lines.append(f"\n== {k[0]}, policy {k[1]}")
            lines.append(f"{'tokens':>6s} {'strategy':20s} " + " ".join(f"{n:>34s}" for n in names))
        base = data[k].get("base")
        bg = med(base["gpu"]) if base else None
        bc = med(base["cpu"]) if base else None
        cells = []
        for n in names:
            e = data[k].get(n)
            if not e:
                cells.append(f"{'-':>34s}")
                continue
            g, xf, c = med(e["gpu"]), med(e["xf"]), med(e["cpu"])
            cell = (f"{g:.2f}" if g is not None else "-") + (f"({xf:.2f})" if xf is not None else "") + "/" + \
                (f"{c:.2f}" if c is not None else "-") + ("i" if any(e["inl"]) else "")
            if n != "base" and base:
                rg = f"{g / bg:.3f}" if g and bg else "-"
                rc = f"{c / bc:.3f}" if c and bc else "-"
                cell += f" [{rg},{rc}]"
            cells.append(f"{cell:>34s}")
        lines.append(f"{k[2]:6d} {k[3]:20s} " + " ".join(cells))
    lines += inputs_over_ids(data, names)
    lines += span_report(out, names)
    lines += phases_report(out, names)
    return lines


SPAN_FIELDS = ("stage0", "stage1", "z0", "zlast", "zend", "kernel", "gap")


def stamp_lines(out, names, prefixes):
    """(variant, fields) of each line of the variants' bench logs
    (bench-*.log) that starts with one of prefixes: the diagnostics'
    printed stamps, their key=value words as a dict. (Which case printed a
    line cannot be read from its place in the log: the device's printf
    output reaches stdout at synchronisations, buffered, while mdr-bench's
    progress goes to stderr; a stamp line says what it needs itself.)"""
    for n in names:
        vdir = os.path.join(out, n)
        logs = sorted(f for f in os.listdir(vdir) if f.startswith("bench-") and f.endswith(".log")) \
            if os.path.isdir(vdir) else []
        for f in logs:
            for line in open(os.path.join(vdir, f), errors="replace"):
                if line.startswith(prefixes):
                    yield n, dict(x.split("=", 1) for x in line.split()[1:] if "=" in x)


PHASE_POINTS = ("img", "vote", "bar<", "bar>", "end", "in", "piece", "bounds", "stored")


def phases_report(out, names):
    """The phases and phasesimg stamps ("phases ..." and "phasesimg ..."
    lines of the bench logs): per variant, inputs, tokens, sequences, image
    bytes, device ids and whether the launch carries the input table in its
    parameters (tab: the larger classes; 0 the small class, whose steps at
    seed policy may share the other fields; -1 in logs from before the
    field), the medians of thread 0's stamps (SM cycles from
    the stage block's entry; thread 1's where they differ by more than 32
    cycles, as t1) and of the block's span in ns."""
    groups = {}
    for n, kv in stamp_lines(out, names, ("phases ", "phasesimg ")):
        try:
            k = (n,) + tuple(int(kv[x]) for x in ("inputs", "tokens", "seqs", "img", "dev")) + \
                (int(kv.get("tab", -1)),)
            t0 = [int(x) for x in kv["t0"].split(",")]
            t1 = [int(x) for x in kv["t1"].split(",")]
            ns = int(kv["ns"])
        except (KeyError, ValueError):
            continue
        if len(t0) != len(t1) or len(t0) > len(PHASE_POINTS):
            continue
        groups.setdefault(k, []).append((t0, t1, ns))
    if not groups:
        return []
    width = max(len(v[0][0]) for v in groups.values())
    lines = ["\n== phases stamps (SM cycles from the stage block's entry, thread 0 [thread 1 where it differs]; "
             "ns the block's span; medians over n launches; -1: not reached)",
             f"{'variant':>10s} {'inputs':>6s} {'tokens':>6s} {'seqs':>4s} {'img':>5s} {'dev':>3s} {'tab':>3s} "
             f"{'n':>4s} " +
             " ".join(f"{x:>11s}" for x in PHASE_POINTS[:width]) + f" {'ns':>6s}"]
    for k in sorted(groups):
        v = groups[k]
        w = len(v[0][0])
        cols = []
        for i in range(w):
            a = statistics.median(r[0][i] for r in v)
            b = statistics.median(r[1][i] for r in v)
            cols.append(f"{a:.0f}" if abs(a - b) <= 32 else f"{a:.0f}[{b:.0f}]")
        lines.append(f"{k[0]:>10s} {k[1]:6d} {k[2]:6d} {k[3]:4d} {k[4]:5d} {k[5]:3d} {k[6]:3d} {len(v):4d} " +
                     " ".join(f"{c:>11s}" for c in cols) + f" {statistics.median(r[2] for r in v):6.0f}")
    return lines


def span_report(out, names):
    """The span variant's stamps ("span ..." lines of the bench logs): per
    variant, launch kind, tokens and inputs, the medians of each field (ns
    from the launch's first block) and how many launches they cover."""
    groups = {}
    for n, kv in stamp_lines(out, names, ("span ",)):
        try:
            k = (n, kv["kind"] + ("/dev" if kv.get("dev") == "1" else ""), int(kv["tokens"]),
                 int(kv["inputs"]), kv["gx"] + "x" + kv["gy"])
            vals = [int(kv[x]) for x in SPAN_FIELDS]
        except (KeyError, ValueError):
            continue
        groups.setdefault(k, []).append(vals)
    if not groups:
        return []
    lines = ["\n== span stamps (ns from the launch's first block; medians over n launches)",
             f"{'variant':>14s} {'kind':>10s} {'tokens':>6s} {'inputs':>6s} {'grid':>9s} {'n':>5s} " +
             " ".join(f"{x:>7s}" for x in SPAN_FIELDS)]
    for k in sorted(groups):
        v = groups[k]
        cols = [statistics.median(r[i] for r in v) for i in range(len(SPAN_FIELDS))]
        lines.append(f"{k[0]:>14s} {k[1]:>10s} {k[2]:6d} {k[3]:6d} {k[4]:>9s} {len(v):5d} " +
                     " ".join(f"{c:7.0f}" for c in cols))
    return lines


def inputs_over_ids(data, names):
    """Per preset and policy, each variant's step with inputs over its
    ids-only step (medians over its runs): +GPU, +CPU, the copy floor the
    bench measured beside it (copy_us: a memcpy of the same input bytes
    into pinned memory) and +CPU net of it."""
    lines = []
    groups = sorted({(k[0], k[1]) for k in data})
    for pre, pol in groups:
        toks = sorted({k[2] for k in data if k[:2] == (pre, pol)})
        rows = []
        for t in toks:
            ids = data.get((pre, pol, t, "graph-fused"), {})
            inp = data.get((pre, pol, t, "graph-fused-inputs"), {})
            cells = []
            for n in names:
                a, b = ids.get(n), inp.get(n)
                if not a or not b or med(a["cpu"]) is None or med(b["cpu"]) is None:
                    cells.append(f"{'-':>34s}")
                    continue
                ga, gb = med(a["gpu"]), med(b["gpu"])
                dg = f"{gb - ga:+.2f}" if ga is not None and gb is not None else "-"
                dc = med(b["cpu"]) - med(a["cpu"])
                cp = med(b["copy"])
                net = f"{dc - cp:+.2f}" if cp is not None else "-"
                cpt = f"{cp:.2f}" if cp is not None else "-"
                cells.append(f"{dg + ' / ' + f'{dc:+.2f}' + ' ' + cpt + ' ' + net:>34s}")
            if any(c.strip() != "-" for c in cells):
                rows.append(f"{t:6d} {'':20s} " + " ".join(cells))
        if rows:
            lines.append(f"\n== {pre}, policy {pol}: with inputs over ids only, +GPU / +CPU, the copy floor, "
                         "+CPU net of it (us)")
            lines += rows
    return lines


def main():
    args = sys.argv[1:]
    if args == ["--check-patches"]:
        sys.exit(check_patches())
    extra = None
    if "--" in args:
        extra = args[args.index("--") + 1:]
        args = args[:args.index("--")]
    runs, bench, builds, report_only, pin = 2, True, 1, False, None
    pos = []
    i = 0
    while i < len(args):
        a = args[i]
        if a == "--runs":
            runs = int(args[i + 1])
            i += 1
        elif a == "--builds":
            builds = max(1, int(args[i + 1]))
            i += 1
        elif a == "--pin":
            pin = int(args[i + 1])
            i += 1
        elif a == "--no-bench":
            bench = False
        elif a == "--report-only":
            report_only = True
        elif a.startswith("--"):
            sys.exit(f"stage_lab: unknown option {a}\n\n{__doc__}")
        else:
            pos.append(a)
        i += 1
    if not pos:
        sys.exit(__doc__)
    out, names = os.path.abspath(pos[0]), []
    for a in pos[1:] or list(VARIANTS):
        n, eq, tree = a.partition("=")
        if eq:
            tree = os.path.abspath(tree)
            if not n or n in VARIANTS or n in TREES or not os.path.isfile(os.path.join(tree, "CMakeLists.txt")):
                sys.exit(f"stage_lab: {a!r}: want NAME=DIR with a new NAME and a source tree in DIR")
            TREES[n] = tree
        names.append(n)
    for n in names:
        v, plus, s = n.partition("+")
        if plus:
            if (v not in VARIANTS and v not in TREES) or s not in SWITCHES:
                sys.exit(f"stage_lab: {n!r}: want VARIANT+SWITCH (switches: {', '.join(SWITCHES)})")
            if v not in names:
                sys.exit(f"stage_lab: {n!r} runs on {v}'s build: name {v} too")
        elif n not in VARIANTS and n not in TREES and n not in SWITCHES:
            sys.exit(f"stage_lab: no variant {n!r} (have {', '.join(list(VARIANTS) + list(SWITCHES))})")
    if any(n in SWITCHES for n in names) and "base" not in names:
        sys.exit("stage_lab: a switch variant runs on base's build: name base too")
    os.makedirs(out, exist_ok=True)
    if report_only:
        text = "\n".join(report(out, names)) + "\n"
        open(os.path.join(out, "stage_lab.txt"), "w").write(text)
        print(text)
        return 0

    built = [n for n in names if build_owner(n) == n]
    builds = min(builds, len(built))
    jobs = max(1, (os.cpu_count() or 2) // builds)
    with concurrent.futures.ThreadPoolExecutor(max_workers=builds) as pool:
        blds = dict(zip(built, pool.map(lambda n: build(out, n, jobs), built)))
    for n in names:
        if build_owner(n) != n:
            os.makedirs(os.path.join(out, n), exist_ok=True)
            blds[n] = blds[build_owner(n)]
    status, inline_lines, good = {}, [], []
    for n in names:
        if blds[n] is None:
            status[n] = "build FAILED"
            continue
        if not validate(out, n, blds[n]):
            status[n] = "validation FAILED (not timed)"
            continue
        status[n] = "validated"
        good.append(n)
        inline_lines += host_inline(out, n, blds[n])

    head = ["stage_lab: " + "; ".join(f"{n} {status[n]}" for n in names),
            "which counts go inline (host backend, mdr-bench graph-fused and graph-fused-inputs, ALL policy):"]
    head += ["  " + l for l in inline_lines]
    if not bench:
        head.append("benches not run (--no-bench)")
    elif not has_gpu():
        head.append("benches skipped: no GPU found (nvidia-smi -L)")
    elif not good:
        head.append("benches skipped: no variant validated")
    else:
        bargs = extra if extra is not None else BENCH_ARGS
        for r in range(1, runs + 1):
            for n in good:
                d = os.path.join(out, n, f"bench-{r}")
                say(f"bench {n} run {r}/{runs} (--out {d})")
                log = d + ".log"
                open(log, "w").close()
                rc = run_logged([os.path.join(blds[n], "bench", "mdr-bench")] + bargs + ["--out", d], log, name=n,
                                cpu=pin)
                if rc != 0:
                    head.append(f"bench {n} run {r}: FAILED rc {rc} (see {log})")
        head += report(out, good)
    text = "\n".join(head) + "\n"
    open(os.path.join(out, "stage_lab.txt"), "w").write(text)
    print(text)
    return 0 if all(status[n] == "validated" for n in names) else 1


if __name__ == "__main__":
    sys.exit(main())
