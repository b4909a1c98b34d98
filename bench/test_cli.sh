#!/usr/bin/env bash
# CTest bench_cli (label host): mdr-bench's command line on the host backend.
# A small run succeeds and ends with the headline; a second run into the
# same --out is refused without --force and accepted with it; runs without
# --out get fresh folders; empty list items, unknown presets and strategies
# are refused with the valid names; --version works; the step-inputs table
# gives the copy floor and +CPU net of it; --pin binds the run to one CPU
# (read back from the kernel, recorded in results.json) and refuses a CPU
# the process may not run on.
# Usage: bash bench/test_cli.sh PATH/TO/mdr-bench WORK_DIR
set -u
bench=${1:?usage: test_cli.sh MDR_BENCH WORK_DIR}
work=${2:?usage: test_cli.sh MDR_BENCH WORK_DIR}
rm -rf "$work" && mkdir -p "$work" || exit 1
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
pass() { echo "ok: $*"; }

# A small host run: one preset, two counts, a few reps, M 64 (about a second).
small=(--backend host --m=64 --presets glm-5.3-flash-tp2 --tokens=1,8 --reps 3 --policies=seed)

# expect_refused NAME PATTERN ARGS...: exit status non-zero, stderr matches PATTERN.
expect_refused() {
  local name=$1 pattern=$2; shift 2
  if "$bench" "$@" >"$work/$name.out" 2>"$work/$name.err"; then fail "$name: accepted: $*"; return; fi
  if grep -Eq -- "$pattern" "$work/$name.err"; then pass "$name refused: $(tail -1 "$work/$name.err")"
  else fail "$name: message does not match '$pattern':"; cat "$work/$name.err"; fi
}

# 1. a small run into an explicit folder
if "$bench" "${small[@]}" --out "$work/run" >"$work/run.out" 2>"$work/run.err"; then
  pass "small host run"
  [ -s "$work/run/results.json" ] && [ -s "$work/run/results.csv" ] && [ -s "$work/run/plans.json" ] \
    || fail "small run: results.json, results.csv or plans.json missing"
  grep -q '"schema_version"' "$work/run/results.json" && grep -q '"git_revision"' "$work/run/results.json" \
    || fail "results.json lacks schema_version or git_revision"
  grep -q '"cpu_us_p99"' "$work/run/results.json" || fail "results.json lacks cpu_us_p99"
  grep -q '"cpu_reps": 3,' "$work/run/results.json" || fail "results.json lacks cpu_reps 3 (host: --reps)"
  grep -q 'reps 3 (CPU figures: 3)' "$work/run.out" || fail "the header does not give the CPU reps"
  tail -1 "$work/run.out" | grep -q '^wins' || { fail "last line is not the headline's 'wins' line:"; tail -3 "$work/run.out"; }
  grep -q '^== headline' "$work/run.out" || fail "no headline"
  grep -q '^columns' "$work/run.out" || fail "no column legend"
  grep -q 'do not predict the GPU ranking' "$work/run.out" || fail "no host-figures note"
else
  fail "small host run exited $?"; cat "$work/run.err"
fi

# 2. the same --out again: refused without --force, accepted with it
expect_refused again-no-force 'refusing to overwrite .*--force' "${small[@]}" --out "$work/run"
if "$bench" "${small[@]}" --out "$work/run" --force >/dev/null 2>"$work/force.err"; then pass "--force overwrites"
else fail "--force run exited non-zero"; cat "$work/force.err"; fi

# 3. without --out: a fresh folder per run, bench-out/latest to the newest
mkdir -p "$work/cwd"
( cd "$work/cwd" && "$bench" "${small[@]}" >/dev/null 2>&1 && "$bench" "${small[@]}" >/dev/null 2>&1 ) \
  || fail "runs without --out exited non-zero"
runs=$(find "$work/cwd/bench-out" -mindepth 1 -maxdepth 1 -type d 2>/dev/null | wc -l)
if [ "$runs" -eq 2 ] && [ -L "$work/cwd/bench-out/latest" ] && [ -s "$work/cwd/bench-out/latest/results.json" ]
then pass "two runs without --out: two folders, latest link"
else fail "runs without --out: $runs folders (want 2) or no bench-out/latest"; ls -la "$work/cwd/bench-out"; fi

# 3b. --cpu-reps: its own count of CPU-timed steps
if "$bench" "${small[@]}" --cpu-reps 7 --out "$work/cpu" >"$work/cpu.out" 2>"$work/cpu.err" \
   && grep -q 'reps 3 (CPU figures: 7)' "$work/cpu.out" && grep -q '"cpu_reps": 7,' "$work/cpu/results.json"
then pass "--cpu-reps 7 taken"
else fail "--cpu-reps 7 not taken"; cat "$work/cpu.err"; fi
expect_refused cpu-reps-zero '--cpu-reps: expected a positive integer' "${small[@]}" --cpu-reps 0 --out "$work/x0"

# 4. bad lists and names
expect_refused empty-item 'item 2 .* is empty' "${small[@]}" --tokens 1,,8 --out "$work/x1"
expect_refused trailing-comma 'is empty' "${small[@]}" --tokens=1,8, --out "$work/x2"
expect_refused unknown-preset "unknown preset 'no-such-model'; valid: .*qwen3-next-80b" \
  "${small[@]}" --presets no-such-model --out "$work/x3"
expect_refused unknown-strategy "unknown strategy 'fastest'; valid: eager-memset, .*graph-dynamic-count" \
  "${small[@]}" --strategies=fastest --out "$work/x4"
expect_refused unknown-option "unknown option '--nope'" --nope
expect_refused flag-with-value 'takes no value' --quick=yes

# 5. --version
if "$bench" --version >"$work/version.out" 2>&1 && grep -Eq '^mdr-bench [0-9]+\.[0-9]+\.[0-9]+' "$work/version.out" \
  && grep -q 'git revision' "$work/version.out"; then pass "--version: $(head -1 "$work/version.out")"
else fail "--version:"; cat "$work/version.out"; fi

# 6. the step-inputs table: the copy floor beside +CPU, and +CPU net of it
if "$bench" --backend host --m=64 --presets glm-5.3-flash-tp2 --tokens=1,32 --reps 3 --policies=all \
     --strategies graph-fused,graph-fused-inputs --out "$work/inputs" >"$work/inputs.out" 2>"$work/inputs.err"; then
  grep -Eq '^ +policy +tokens +ids CPU +inputs CPU +\+CPU +copy +\+CPU net$' "$work/inputs.out" \
    || fail "step inputs: no copy and +CPU net columns"
  grep -q 'net of the copy max' "$work/inputs.out" || fail "step inputs: the goal line does not give the net figure"
  # every row: +CPU net = +CPU - copy, the copy positive and larger at 32 tokens than at 1
  awk '/^step inputs:/ {on = 1; next} on && /^goal/ {on = 0} on && NF >= 6 && $(NF - 5) ~ /^[0-9]/ {
         n++; d = $(NF - 2); c = $(NF - 1); net = $NF
         if (c <= 0 || (d - c - net) > 0.011 || (net - d + c) > 0.011) bad = 1
         copy[n] = c }
       END { exit !(n == 2 && !bad && copy[2] > copy[1]) }' "$work/inputs.out" \
    || { fail "step inputs: the copy column or its net figure is wrong:"; sed -n '/^step inputs/,/^goal/p' "$work/inputs.out"; }
  head -1 "$work/inputs/results.csv" | grep -q ',copy_us$' || fail "results.csv: no copy_us column"
  awk -F, 'NR > 1 && $4 == "graph-fused-inputs" && $NF + 0 > 0 {i++}
           NR > 1 && $4 == "graph-fused" && $NF != "" {o++}
           END {exit !(i == 2 && o == 0)}' "$work/inputs/results.csv" \
    || fail "results.csv: copy_us not set for graph-fused-inputs alone"
  pass "step inputs: the copy floor and +CPU net of it"
else
  fail "step inputs host run exited $?"; cat "$work/inputs.err"
fi

# 7. a variant of the step with inputs beside its ids-only step: validated
# (the run dies on a wrong destination, or on a table in device memory that
# no longer holds what the engine wrote), its own table and goal line,
# copy_us set for it. Arguments: a label, the ids-only strategy, the
# variant, a pattern its table's title matches, its goal line's tag.
inputs_variant() {
  local label=$1 ids=$2 variant=$3 title=$4 tag=$5 dir="$work/$3"
  if "$bench" --backend host --m=64 --presets glm-5.3-flash-tp2 --tokens=1,32 --reps 3 --policies=all \
       --strategies "$ids,$variant" --out "$dir" >"$dir.out" 2>"$dir.err"; then
    grep -q "^step inputs: $variant .*$title.* beside $ids (ids only)" "$dir.out" \
      || fail "$label: no table beside $ids"
    grep -q "^goal (step inputs, $tag, " "$dir.out" || fail "$label: no goal line"
    awk -F, -v s="$variant" 'NR > 1 && $4 == s && $NF + 0 > 0 {i++} END {exit !(i == 2)}' "$dir/results.csv" \
      || fail "results.csv: copy_us not set for $variant"
    pass "$label: validated, its own table and goal line"
  else
    fail "$label host run exited $?"; cat "$dir.err"
  fi
}
inputs_variant "device step inputs" graph-fused-dev graph-fused-dev-inputs \
  'mdr_graph_cache_step_inputs_device)' "device ids"
inputs_variant "device table" graph-fused graph-fused-inputs-devtable \
  'block table per sequence in device memory, not staged, .*mdr_graph_cache_step_inputs)' "table on the device"

# 8. --pin: the first CPU this shell may run on, then refusals
cpu=$(awk '/^Cpus_allowed_list:/ {split($2, a, /[-,]/); print a[1]}' /proc/self/status)
if "$bench" "${small[@]}" --pin "$cpu" --out "$work/pinned" >"$work/pinned.out" 2>"$work/pinned.err"; then
  grep -Eq "^pinned: CPU $cpu \(--pin\); runs on CPUs $cpu\$" "$work/pinned.out" \
    || { fail "--pin $cpu: the process does not run on CPU $cpu alone:"; grep '^pinned' "$work/pinned.out"; }
  grep -Eq "\"pinned_cpu\": $cpu," "$work/pinned/results.json" || fail "--pin $cpu: results.json has no pinned_cpu $cpu"
  grep -Eq '"pinned_cpu": null,' "$work/run/results.json" || fail "unpinned run: results.json has no pinned_cpu null"
  grep -q '^pinned' "$work/run.out" && fail "unpinned run says pinned"
  pass "--pin $cpu"
else
  fail "--pin $cpu run exited $?"; cat "$work/pinned.err"
fi
expect_refused pin-word 'expected a CPU number' "${small[@]}" --pin x --out "$work/x5"
expect_refused pin-negative 'expected a CPU number' "${small[@]}" --pin=-1 --out "$work/x6"
expect_refused pin-not-allowed 'not a CPU this process may run on \(allowed: [0-9]' "${small[@]}" --pin 1048575 --out "$work/x7"

if [ "$failures" -ne 0 ]; then echo "$failures check(s) failed"; exit 1; fi
echo "all mdr-bench command-line checks passed"
