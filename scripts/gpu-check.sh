#!/usr/bin/env bash
# The GPU check of `oomscope run`, for a machine with an NVIDIA GPU and PyTorch:
#
#   scripts/gpu-check.sh [OUT_DIR]        # builds target/release if needed
#
# 1. A ResNet training loop under `oomscope run`, started at a batch that does not fit: the
#    report must name the module and op holding the most memory, the script's
#    `except torch.cuda.OutOfMemoryError` must run, and halving the batch must recover.
# 2. Step time and peak reserved memory, PyTorch's allocator against oomscope's with and
#    without op names, side by side (3 interleaved rounds, medians).
# Everything it prints is also in OUT_DIR (default gpu-check-out); docs/gpu-check.md says
# what to look for and where the figures go.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-gpu-check-out}
mkdir -p "$out"
log="$out/gpu-check.log"
exec > >(tee "$log") 2>&1

bin=target/release/oomscope
if [ ! -x "$bin" ] || [ ! -f target/release/liboomscope.so ]; then
    cargo build --release
fi
py=${PYTHON:-python3}
echo "== machine"
date -u +%Y-%m-%dT%H:%M:%SZ
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
"$py" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "gpu", torch.cuda.get_device_name(0))'

echo "== 1. a training loop driven into OOM by its batch size"
rm -rf "$out/dumps"
set +e
"$bin" run --dump-dir "$out/dumps" -- "$py" examples/torch/train.py --batch "${BATCH:-2048}" --steps 5 \
    >"$out/train.stdout" 2>"$out/train.stderr"
rc=$?
set -e
cat "$out/train.stdout"
grep -A 16 "Allocated memory by op" "$out/train.stderr" | head -18 || true
grep -A 8 "^Verdict" "$out/train.stderr" | head -9 || true
ls -la "$out/dumps"
ok=1
grep -q '"oom_at_batch"' "$out/train.stdout" || { echo "FAIL: the script's OOM handler did not run"; ok=0; }
grep -q '"trained_at_batch"' "$out/train.stdout" || { echo "FAIL: halving the batch did not recover"; ok=0; }
# `ResNet.layer1.0.conv1/conv2d`: the module path and the torch function.
grep -qE ' [A-Za-z0-9_]+\.[A-Za-z0-9_.]+/[A-Za-z_][A-Za-z0-9_]*$' "$out/train.stderr" || { echo "FAIL: no module/op names in the report"; ok=0; }
[ "$rc" = 0 ] || { echo "FAIL: exit code $rc"; ok=0; }
dump=$(ls "$out"/dumps/*-oom1.dump.json 2>/dev/null | head -1)
[ -n "$dump" ] && "$bin" report "$dump" --format summary | head -20

echo "== 2. step time and peak memory, side by side"
b=${BENCH_BATCH:-128}
for round in 1 2 3; do
    "$py" examples/torch/bench.py --batch "$b" | tee -a "$out/bench.jsonl"
    "$bin" run --no-ops --dump-dir "$out/dumps-bench" -- "$py" examples/torch/bench.py --batch "$b" | sed 's/"allocator": "oomscope"/"allocator": "oomscope --no-ops"/' | tee -a "$out/bench.jsonl"
    "$bin" run --dump-dir "$out/dumps-bench" -- "$py" examples/torch/bench.py --batch "$b" | tee -a "$out/bench.jsonl"
done
"$py" - "$out/bench.jsonl" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
by = {}
for r in rows:
    by.setdefault(r["allocator"], []).append(r)
base = statistics.median(r["step_ms"] for r in by["pytorch"])
print(f"| allocator | step (median of 3 runs) | vs PyTorch | peak reserved | peak allocated |")
print(f"|---|---|---|---|---|")
for name in ["pytorch", "oomscope --no-ops", "oomscope"]:
    rs = by.get(name, [])
    if not rs:
        continue
    ms = statistics.median(r["step_ms"] for r in rs)
    print(f"| {name} | {ms:.2f} ms | {100 * (ms / base - 1):+.1f}% | {max(r['peak_reserved'] for r in rs) / 2**30:.2f} GiB | {max(r['peak_allocated'] for r in rs) / 2**30:.2f} GiB |")
print(f"(model {rows[0]['model']}, batch {rows[0]['batch']}, {rows[0]['gpu']}, torch {rows[0]['torch']})")
PY
if [ "$ok" = 1 ]; then echo "GPU CHECK PASSED"; else echo "GPU CHECK FAILED"; exit 1; fi
