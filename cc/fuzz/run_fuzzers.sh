#!/usr/bin/env bash
# Runs every libFuzzer harness of a fuzz build (`make fuzz`), one at a time, for FUZZ_SECONDS
# each, on a scratch copy of its seed corpus, and prints executions and findings per harness.
# Exits 1 if any harness found something (a crash, sanitizer report, leak, timeout or OOM).
#
#   cc/fuzz/run_fuzzers.sh BUILD_DIR CORPUS_DIR [OP...]
#
# Seeds: CORPUS_DIR/<op>/ (never modified); working corpus: BUILD_DIR/work/<op>/ (started afresh
# from the seeds each run); findings: BUILD_DIR/findings/<op>/; logs: BUILD_DIR/logs/<op>.log.
# Reproduce a finding with: BUILD_DIR/<op>_fuzz BUILD_DIR/findings/<op>/crash-...
# (OPFORGE_FUZZ_VERBOSE=1 prints the decoded call's validation messages).
set -u
build=${1:?build dir}
corpus=${2:?corpus dir}
shift 2
seconds=${FUZZ_SECONDS:-60}
rss_mb=${FUZZ_RSS_MB:-2048}
timeout=${FUZZ_TIMEOUT:-20}

if [ $# -gt 0 ]; then
  ops=("$@")
else
  ops=()
  for bin in "$build"/*_fuzz; do
    [ -x "$bin" ] && ops+=("$(basename "${bin%_fuzz}")")
  done
fi
if [ ${#ops[@]} -eq 0 ]; then
  echo "run_fuzzers: no harnesses in $build (run make fuzz-build)" >&2
  exit 1
fi

failed=0
printf '%-32s %10s %9s %s\n' harness executions exec/s findings
for op in "${ops[@]}"; do
  bin="$build/${op}_fuzz"
  work="$build/work/$op"
  found="$build/findings/$op"
  log="$build/logs/$op.log"
  if [ ! -x "$bin" ]; then
    echo "run_fuzzers: no harness $bin" >&2
    failed=1
    continue
  fi
  rm -rf "$work" "$found"
  mkdir -p "$work" "$found" "$build/logs"
  if [ -d "$corpus/$op" ]; then cp "$corpus/$op"/* "$work"/ 2>/dev/null; fi
  # -use_value_profile: comparisons steer the search (most of a validate is comparisons).
  # -rss_limit_mb also caps single allocations (malloc_limit_mb defaults to it): a kernel that
  # allocates far more than its tensors need is a finding.
  ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1} UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1} \
    "$bin" -max_total_time="$seconds" -print_final_stats=1 -rss_limit_mb="$rss_mb" \
    -timeout="$timeout" -use_value_profile=1 -artifact_prefix="$found/" "$work" > "$log" 2>&1
  rc=$?
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  speed=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
  # slow-unit-* files are not findings (libFuzzer keeps them with -report_slow_units).
  findings=$(find "$found" -type f ! -name 'slow-unit-*' | sort)
  if [ -n "$findings" ] || [ $rc -ne 0 ]; then
    failed=1
    summary="$(echo "$findings" | grep -c .) file(s), exit $rc, log $log"
  else
    summary=none
  fi
  printf '%-32s %10s %9s %s\n' "${op}_fuzz" "${execs:-?}" "${speed:-?}" "$summary"
  if [ -n "$findings" ]; then
    echo "$findings" | sed 's/^/    /'
    grep -m3 -E 'ERROR: |FINDING|runtime error' "$log" | sed 's/^/    /'
  fi
done
exit $failed
