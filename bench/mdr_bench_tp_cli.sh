#!/usr/bin/env bash
# CTest bench_tp_cli (label host): mdr-bench-tp's command line. Without two
# GPUs (or without NCCL) a run exits 77 with a "skipped:" line; with them a
# tiny run succeeds, writes its three files and ends with the headline.
# Refusals exit 2 with a message: bad lists, unknown options and paths,
# sizes that are not whole rows, an --out holding an earlier run's files
# (accepted with --force), bad --soak / --soak-algo / --soak-size values
# and their misuse, --barrier with another mode's options. --help and
# --version exit 0. With two GPUs a tiny soak (--soak 3000) and a tiny
# --barrier run (--reps 3: both barriers validated, barrier.csv written)
# must pass too (or skip, exit 77, where mdr's kernels or NCCL's device API
# are missing).
# Usage: bash bench/mdr_bench_tp_cli.sh PATH/TO/mdr-bench-tp WORK_DIR
set -u
bench=${1:?usage: mdr_bench_tp_cli.sh MDR_BENCH_TP WORK_DIR}
work=${2:?usage: mdr_bench_tp_cli.sh MDR_BENCH_TP WORK_DIR}
rm -rf "$work" && mkdir -p "$work" || exit 1
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
pass() { echo "ok: $*"; }

# The smallest run: one size, one count, 3 reps (a few seconds on two GPUs).
tiny=(--sizes 2K --tokens 1 --reps 3)

# expect_exit NAME CODE PATTERN ARGS...: exit status CODE, stderr matches PATTERN.
expect_exit() {
  local name=$1 code=$2 pattern=$3; shift 3
  "$bench" "$@" >"$work/$name.out" 2>"$work/$name.err"
  local rc=$?
  if [ "$rc" -ne "$code" ]; then fail "$name: exit $rc, expected $code: $*"; cat "$work/$name.err"; return; fi
  if grep -Eq -- "$pattern" "$work/$name.err"; then pass "$name: exit $rc: $(tail -1 "$work/$name.err")"
  else fail "$name: message does not match '$pattern':"; cat "$work/$name.err"; fi
}

# 1. a tiny run: skipped (77) without two GPUs, complete with them
"$bench" "${tiny[@]}" --out "$work/run" >"$work/run.out" 2>"$work/run.err"
rc=$?
if [ "$rc" -eq 77 ]; then
  if grep -q 'skipped:' "$work/run.err"; then pass "tiny run skipped (exit 77): $(tail -1 "$work/run.err")"
  else fail "exit 77 without a 'skipped:' message"; cat "$work/run.err"; fi
  [ -e "$work/run" ] && fail "a skipped run created its --out folder"
  gpu=0
elif [ "$rc" -eq 0 ]; then
  pass "tiny run on two GPUs"
  for f in results.json results.csv capture.csv; do [ -s "$work/run/$f" ] || fail "tiny run: $f missing"; done
  grep -q '"schema_version"' "$work/run/results.json" || fail "results.json lacks schema_version"
  grep -q '^== headline' "$work/run.out" || fail "no headline"
  grep -q '^columns' "$work/run.out" || fail "no column legend"
  grep -q '^mdr-graph vs floor' "$work/run.out" || fail "no 'mdr-graph vs floor' line"
  grep -q '^crossover, sweep sizes' "$work/run.out" || fail "no crossover line"
  grep -q '^== table' "$work/run.out" || fail "no closing table"
  tail -1 "$work/run.out" | grep -q '^| tokens | 8 KiB |' || { fail "last line is not the closing table's tokens row:"; tail -3 "$work/run.out"; }
  for p in mdr-1shot mdr-2shot mdr-dyn; do grep -q "\"path\": \"$p\"" "$work/run/results.json" || fail "results.json lacks $p"; done
  gpu=1
else
  fail "tiny run exited $rc (want 0 with two GPUs, 77 without)"; tail -5 "$work/run.err"
  gpu=-1
fi

# 2. an --out holding an earlier run's files: refused (2) without --force
mkdir -p "$work/held" && echo '{}' >"$work/held/results.json"
expect_exit out-held 2 'refusing to overwrite .*--force' "${tiny[@]}" --out "$work/held"
if [ "$gpu" -eq 0 ]; then
  expect_exit out-held-force 77 'skipped:' "${tiny[@]}" --out "$work/held" --force
elif [ "$gpu" -eq 1 ]; then
  if "$bench" "${tiny[@]}" --out "$work/held" --force >/dev/null 2>"$work/force.err"; then pass "--force overwrites"
  else fail "--force run exited non-zero"; cat "$work/force.err"; fi
fi

# 2b. the soak: skipped without two GPUs; with them a short one (the epoch wraps) passes
if [ "$gpu" -eq 0 ]; then
  expect_exit soak-skip 77 'skipped:' --soak 10 --out "$work/soak"
elif [ "$gpu" -eq 1 ]; then
  if "$bench" --soak 3000 --out "$work/soak" >"$work/soak.out" 2>"$work/soak.err"; then
    rc=0
  else
    rc=$?
  fi
  if [ "$rc" -eq 0 ]; then
    grep -q '^soak passed: wrong values 0' "$work/soak.out" && grep -q 'wrapped: yes' "$work/soak.out" \
      && [ -s "$work/soak/soak.json" ] && pass "soak of 3000 replays passed" \
      || { fail "soak: exit 0 without its lines or soak.json"; tail -5 "$work/soak.out"; }
  elif [ "$rc" -eq 77 ]; then pass "soak skipped (exit 77): $(tail -1 "$work/soak.err")"
  else fail "soak of 3000 replays exited $rc"; tail -5 "$work/soak.err"; fi
fi

# 2c. --barrier: skipped without two GPUs; with them a tiny run validates both barriers and writes its files
if [ "$gpu" -eq 0 ]; then
  expect_exit barrier-skip 77 'skipped:' --barrier --reps 3 --out "$work/barrier"
  [ -e "$work/barrier" ] && fail "a skipped --barrier run created its --out folder"
elif [ "$gpu" -eq 1 ]; then
  if "$bench" --barrier --reps 3 --out "$work/barrier" >"$work/barrier.out" 2>"$work/barrier.err"; then
    rc=0
  else
    rc=$?
  fi
  if [ "$rc" -eq 0 ]; then
    grep -q '^barrier: GPU us per barrier' "$work/barrier.out" && [ -s "$work/barrier/barrier.json" ] \
      && grep -q '^1,mdr,' "$work/barrier/barrier.csv" && grep -q '^1,nccl-lsa,' "$work/barrier/barrier.csv" \
      && pass "--barrier: both barriers validated and timed" \
      || { fail "--barrier: exit 0 without its table or files"; tail -5 "$work/barrier.out"; }
  elif [ "$rc" -eq 77 ]; then pass "--barrier skipped (exit 77): $(tail -1 "$work/barrier.err")"
  else fail "--barrier exited $rc"; tail -5 "$work/barrier.err"; fi
fi
mkdir -p "$work/held-barrier" && echo 'grid' >"$work/held-barrier/barrier.csv"
expect_exit barrier-out-held 2 'refusing to overwrite .*barrier.csv' --barrier --out "$work/held-barrier"

# 3. refusals: exit 2 and a message naming what is valid
expect_exit unknown-option 2 "unknown option '--nope'" --nope
expect_exit flag-with-value 2 'takes no value' --quick=yes
expect_exit missing-value 2 '--reps needs a value' --reps
expect_exit reps-zero 2 'positive integer' --reps 0
expect_exit reps-word 2 'positive integer' --reps=many
expect_exit empty-item 2 'item 2 .* is empty' --tokens 1,,8
expect_exit trailing-comma 2 'is empty' --sizes=2K,8K,
expect_exit size-not-rows 2 'not a multiple of 2048' --sizes 3000
expect_exit size-too-big 2 'over 512 MiB' --sizes 1024M
expect_exit tokens-too-big 2 'over 65536' --tokens 100000
expect_exit tokens-twice 2 'given twice' --tokens 8,8
expect_exit unknown-path 2 "unknown path 'fast'; valid: nccl-eager, nccl-graph, nccl-window, mdr-graph, mdr-graph-dev, mdr-1shot, mdr-2shot, mdr-dyn" \
  --paths fast
expect_exit nothing 2 'nothing to measure' --sizes none --tokens none
expect_exit empty-out 2 'empty folder name' --out=
expect_exit soak-zero 2 '--soak: expected a positive integer' --soak 0
expect_exit soak-word 2 '--soak: expected a positive integer' --soak=forever
expect_exit soak-negative 2 '--soak: expected a positive integer' --soak -5
expect_exit soak-suffix 2 '--soak: expected a positive integer' --soak 10K
expect_exit soak-too-many 2 '--soak: 2000000000 is over 1000000000' --soak 2000000000
expect_exit soak-missing 2 '--soak needs a value' --soak
expect_exit soak-twice 2 '--soak given twice' --soak 10 --soak 20
expect_exit soak-algo-unknown 2 "--soak-algo: unknown algorithm 'fast'; valid: auto, one-shot, two-shot" --soak 10 --soak-algo fast
expect_exit soak-algo-nccl 2 "nccl's all-reduce has no epoch" --soak 10 --soak-algo nccl
expect_exit soak-algo-alone 2 '--soak-algo needs --soak' --soak-algo two-shot
expect_exit soak-algo-twice 2 '--soak-algo given twice' --soak 10 --soak-algo auto --soak-algo one-shot
expect_exit soak-size-alone 2 '--soak-size needs --soak' --soak-size 8K
expect_exit soak-size-rows 2 '--soak-size: .* not a multiple of 2048' --soak 10 --soak-size 3000
expect_exit soak-size-1shot 2 'over MDR_ALL_REDUCE_ONE_SHOT_MAX_BYTES' --soak 10 --soak-algo one-shot --soak-size 4M
expect_exit soak-with-sizes 2 '--soak runs the soak alone: --sizes' --soak 10 --sizes 2K
expect_exit soak-with-paths 2 '--soak runs the soak alone: --paths' --soak 10 --paths mdr-dyn
expect_exit soak-with-quick 2 '--soak runs the soak alone: --quick' --soak 10 --quick
expect_exit barrier-with-value 2 '--barrier takes no value' --barrier=yes
expect_exit barrier-with-sizes 2 '--barrier runs the barrier comparison alone: --sizes' --barrier --sizes 2K
expect_exit barrier-with-paths 2 '--barrier runs the barrier comparison alone: --paths' --barrier --paths mdr-dyn
expect_exit barrier-with-norm 2 '--barrier runs the barrier comparison alone: --norm' --barrier --norm
expect_exit barrier-with-soak 2 '--barrier runs the barrier comparison alone: --soak' --soak 10 --barrier
expect_exit barrier-with-norm-tokens 2 '--norm-tokens needs --norm' --barrier --norm-tokens 8

# 4. --help and --version
if "$bench" --help >"$work/help.out" 2>&1 && grep -q -- '--tokens' "$work/help.out" && grep -q -- '--soak-algo' "$work/help.out" \
  && grep -q -- 'mdr-dyn' "$work/help.out" && grep -q -- '--barrier' "$work/help.out"; then pass "--help"
else fail "--help:"; cat "$work/help.out"; fi
if "$bench" --version >"$work/version.out" 2>&1 && grep -Eq '^mdr-bench-tp [0-9]+\.[0-9]+\.[0-9]+' "$work/version.out"
then pass "--version: $(head -1 "$work/version.out")"
else fail "--version:"; cat "$work/version.out"; fi

if [ "$failures" -ne 0 ]; then echo "$failures check(s) failed"; exit 1; fi
echo "all mdr-bench-tp command-line checks passed"
