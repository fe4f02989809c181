#!/usr/bin/env bash
# Runs one oomscope binary over every fixture and every kind of command the tests run, and
# keeps each command's stdout, stderr and exit code in OUT (one file a command), so that two
# builds can be compared byte for byte: a refactoring must leave every output as it was.
#
#   scripts/compare-outputs.sh BEFORE_BIN before/ JOBDIR
#   scripts/compare-outputs.sh AFTER_BIN after/ JOBDIR
#   diff -r before/ after/
#
# JOBDIR: a directory of a job's dumps, made once and read by both (its dumps carry pids and
# times); `scripts/compare-outputs.sh --make-job JOBDIR LIB` makes one with the C ABI.
set -uo pipefail
cd "$(dirname "$0")/.."

if [ "${1:-}" = "--make-job" ]; then
    dir=$2 lib=$3
    mkdir -p "$dir"
    for r in 0 1 2; do
        OOMSCOPE_LIB=$lib OOMSCOPE_DEVICE=sim:128MiB OOMSCOPE_DUMP_DIR=$dir OOMSCOPE_QUIET=1 \
            RANK=$r LOCAL_RANK=$r WORLD_SIZE=3 LOCAL_WORLD_SIZE=3 TORCHELASTIC_RUN_ID=compare \
            python3 tests/python/jobs/rank_state.py >/dev/null 2>&1
    done
    exit 0
fi

bin=$(realpath "$1") out=$2 jobdir=${3:-}
mkdir -p "$out"
n=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# One command: its line, exit code, stdout and stderr in OUT/NNNN.txt; files it writes under
# $tmp/o are appended.
run() {
    n=$((n + 1))
    local f
    f=$(printf '%s/%04d.txt' "$out" "$n")
    rm -rf "$tmp/o" && mkdir -p "$tmp/o"
    (cd "$tmp/o" && NO_COLOR=1 timeout 120 "$bin" "$@" >"$tmp/stdout" 2>"$tmp/stderr" </dev/null)
    local code=$?
    {
        echo "\$ oomscope $*"
        echo "exit $code"
        echo "--- stdout"
        cat "$tmp/stdout"
        echo "--- stderr"
        cat "$tmp/stderr"
        for w in "$tmp"/o/*; do
            [ -f "$w" ] || continue
            echo "--- file $(basename "$w")"
            cat "$w"
        done
    } | sed "s#$bin#BIN#g; s#$tmp/o#TMP#g; s#$(pwd)#ROOT#g" >"$f"
}

root=$(pwd)
for m in fixtures/messages*/*.txt fixtures/logs/*.txt; do
    run import "$root/$m"
    run import "$root/$m" --format json
done
# Real users' snapshots, where the checkout has them beside it.
for s in fixtures/torch-snapshots/*.pickle ../shared/data/torch-snapshots/*.pickle; do
    [ -f "$s" ] || continue
    s=$(realpath "$s")
    run import "$s"
    run import "$s" --format json
    run replay "$s"
    run replay "$s" --device 80GiB --set expandable_segments:True
done
for t in fixtures/traces/*.jsonl; do
    for limit in 64MiB 1GiB 18995773440; do
        run replay "$root/$t" --limit "$limit"
        run replay "$root/$t" --limit "$limit" --format json
        run replay "$root/$t" --limit "$limit" --allocator caching
    done
    run fit "$root/$t" --device 64MiB
    run fit "$root/$t" --device 80MiB --format json
done
for w in fixtures/workloads/*.json; do
    for limit in 1GiB 8GiB; do
        run replay "$root/$w" --limit "$limit"
        run replay "$root/$w" --limit "$limit" --batch 1 --format summary
    done
    run fit "$root/$w" --device 8GiB
    run fit "$root/$w" --device gtx-1080 --format json
done
for bad in fixtures/traces/bad/* fixtures/workloads/bad/*; do
    run replay "$root/$bad" --limit 1GiB
    run fit "$root/$bad" --device 1GiB
done
for d in fixtures/dumps/*.json tests/golden/*.dump.json; do
    for fmt in tf summary json html; do
        run report "$root/$d" --format "$fmt"
    done
    run export "$root/$d" --format perfetto -o trace.json
    run export "$root/$d" --format torch-snapshot -o snap.pickle
done
for fmt in tf summary json; do
    run demo --format "$fmt"
done
run demo --format html -o demo.html
if [ -n "$jobdir" ]; then
    for fmt in tf summary json html; do
        run report "$(realpath "$jobdir")" --format "$fmt"
    done
    run diff "$(realpath "$jobdir")"
fi
echo "$n commands, outputs in $out" >&2
