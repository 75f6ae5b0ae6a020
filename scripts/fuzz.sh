#!/usr/bin/env bash
# The fuzz targets: build, run, check, merge. Called by the Makefile:
#
#   scripts/fuzz.sh build            build every target with libFuzzer + ASan, and
#                                    fail unless each binary is instrumented for coverage
#   scripts/fuzz.sh run T SECONDS    fuzz target T (store, wal, record, history, cli, ops, shm)
#   scripts/fuzz.sh check SECONDS    run every target SECONDS from its checked-in corpus,
#                                    print its coverage, fail on a crash or on coverage
#                                    below the floor in Tests/Fuzz/floors (CI)
#   scripts/fuzz.sh merge T          minimize out/fuzz/T/corpus and Tests/Fuzz/T into
#                                    Tests/Fuzz/T (libFuzzer -merge=1)
#
# Corpora: Tests/Fuzz/T/ (checked in, minimized), out/fuzz/T/corpus (new inputs),
# out/fuzz/T/artifacts (crashes). A crash becomes a regression input in
# Tests/Fuzz/T/regressions/, which `make test` replays.
set -euo pipefail
cd "$(dirname "$0")/.."

SWIFT=${SWIFT:-swift}
BUILD=.build/fuzz
BIN=$BUILD/release
TARGETS=(store wal record history cli ops shm)

product() {
  case "$1" in
    store) echo FuzzStore ;; wal) echo FuzzWAL ;; record) echo FuzzRecord ;;
    history) echo FuzzHistory ;; cli) echo FuzzCLI ;; ops) echo FuzzOps ;; shm) echo FuzzShm ;;
    *) echo "unknown fuzz target $1 (one of: ${TARGETS[*]})" >&2; exit 2 ;;
  esac
}

build() {
  for t in "${TARGETS[@]}"; do
    # Both sanitizers in ONE -sanitize= flag: given as two, the compiler keeps
    # only the last and nothing is instrumented for coverage (TOOLING.md).
    # SwiftPM's own --sanitize=fuzzer is still needed to link libFuzzer's main.
    $SWIFT build -c release --product "$(product "$t")" --sanitize=fuzzer \
      -Xswiftc -sanitize=fuzzer,address -Xswiftc -DFUZZING --build-path "$BUILD"
  done
  # The guard: a binary without SanitizerCoverage sections runs blind.
  for t in "${TARGETS[@]}"; do
    local bin
    bin="$BIN/$(product "$t")"
    local sections
    sections=$(readelf -S "$bin" | grep -c '__sancov' || true)
    if [ "$sections" -lt 2 ]; then
      echo "fuzz: $bin has no coverage instrumentation (__sancov sections: $sections); libFuzzer would run blind" >&2
      exit 1
    fi
  done
  echo "fuzz: ${#TARGETS[@]} targets built, each instrumented for coverage"
}

# run T SECONDS [extra libFuzzer flags...]: fuzz T, growing out/fuzz/T/corpus.
run() {
  local t=$1 seconds=$2
  shift 2
  local out=out/fuzz/$t
  mkdir -p "$out/corpus" "$out/artifacts" "Tests/Fuzz/$t/regressions"
  "$BIN/$(product "$t")" -max_total_time="$seconds" -rss_limit_mb=4096 -timeout=30 -print_final_stats=1 \
    -artifact_prefix="$out/artifacts/" "$@" "$out/corpus" "Tests/Fuzz/$t" "Tests/Fuzz/$t/regressions"
}

floor() { awk -v t="$1" '$1 == t { print $2 }' Tests/Fuzz/floors; }

# check SECONDS: every target, two at a time (one per core), from a scratch
# copy of its checked-in corpus so nothing checked in changes.
check() {
  local seconds=$1 failed=0
  local logs=out/fuzz-check
  rm -rf "$logs"
  mkdir -p "$logs"
  local i=0
  for t in "${TARGETS[@]}"; do
    (
      mkdir -p "$logs/$t-corpus" "$logs/$t-artifacts"
      set +e
      "$BIN/$(product "$t")" -max_total_time="$seconds" -rss_limit_mb=4096 -timeout=30 -print_final_stats=1 \
        -artifact_prefix="$logs/$t-artifacts/" "$logs/$t-corpus" "Tests/Fuzz/$t" "Tests/Fuzz/$t/regressions" \
        >"$logs/$t.log" 2>&1
      echo $? >"$logs/$t.status"
    ) &
    i=$((i + 1))
    if [ $((i % 2)) -eq 0 ]; then wait; fi
  done
  wait
  printf "%-8s %8s %8s %8s %10s %8s  %s\n" target edges floor features corpus exec/s result
  for t in "${TARGETS[@]}"; do
    local status cov ft corp execs min result
    status=$(cat "$logs/$t.status")
    cov=$(grep -oE 'cov: [0-9]+' "$logs/$t.log" | tail -1 | awk '{print $2}')
    ft=$(grep -oE 'ft: [0-9]+' "$logs/$t.log" | tail -1 | awk '{print $2}')
    corp=$(grep -oE 'corp: [0-9]+/[0-9]+[a-zA-Z]*' "$logs/$t.log" | tail -1 | awk '{print $2}')
    execs=$(grep -oE 'stat::average_exec_per_sec: *[0-9]+' "$logs/$t.log" | awk '{print $2}')
    min=$(floor "$t")
    result=ok
    if [ "$status" -ne 0 ]; then
      result="CRASH (exit $status): see $logs/$t.log"
      failed=1
    elif [ -z "$cov" ] || [ -z "$min" ] || [ "$cov" -lt "$min" ]; then
      result="COVERAGE ${cov:-none} below the floor ${min:-unset}: is it instrumented?"
      failed=1
    elif grep -q 'no interesting inputs were found' "$logs/$t.log"; then
      result="BLIND: libFuzzer found no interesting inputs"
      failed=1
    fi
    printf "%-8s %8s %8s %8s %10s %8s  %s\n" "$t" "${cov:-?}" "${min:-?}" "${ft:-?}" "${corp:-?}" "${execs:-?}" "$result"
  done
  if [ "$failed" -ne 0 ]; then
    for t in "${TARGETS[@]}"; do
      if [ "$(cat "$logs/$t.status")" -ne 0 ]; then tail -40 "$logs/$t.log"; fi
    done
    exit 1
  fi
}

merge() {
  local t=$1
  local out=out/fuzz/$t
  local merged
  merged=$(mktemp -d)
  mkdir -p "$out/corpus" "Tests/Fuzz/$t"
  "$BIN/$(product "$t")" -merge=1 -rss_limit_mb=4096 -timeout=30 "$merged" "Tests/Fuzz/$t" "$out/corpus"
  find "Tests/Fuzz/$t" -maxdepth 1 -type f ! -name '.*' -delete
  cp "$merged"/* "Tests/Fuzz/$t/"
  rm -rf "$merged"
  echo "fuzz: Tests/Fuzz/$t holds $(find "Tests/Fuzz/$t" -maxdepth 1 -type f | wc -l) inputs"
}

case "${1:-}" in
  build) build ;;
  run) run "$2" "$3" "${@:4}" ;;
  check) check "${2:-30}" ;;
  merge) merge "$2" ;;
  *) sed -n '2,18p' "$0"; exit 2 ;;
esac
