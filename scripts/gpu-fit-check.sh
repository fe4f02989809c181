#!/usr/bin/env bash
# `oomscope fit`'s answers on a real GPU, checked by runs with PyTorch's own allocator (no
# oomscope): for a machine with an NVIDIA GPU and PyTorch, transformers and torchvision.
#
#   scripts/gpu-fit-check.sh [OUT_DIR]      # default gpu-fit-check-out; BUDGET seconds (480)
#
# In order, each while the budget lasts:
# 1. `oomscope fit` of examples/torch/fit_resnet.py (fp32) on the GPU: probes, replay, its
#    own check runs under oomscope's allocator: OUT_DIR/fit-resnet.json.
# 2. Its answer and the next batch run without oomscope (PyTorch's caching allocator):
#    OUT_DIR/own.jsonl gets {"model", "amp", "batch", "trained", ...peaks} per run.
# 3. The same own-allocator runs for answers found earlier: GPT2_ANSWER (fp32) and
#    GPT2_BF16_ANSWER (bf16 autocast), each with the next batch.
# 4. `oomscope fit` of ResNet-50 with bf16 autocast (OUT_DIR/fit-resnet-bf16.json), its
#    answer and the next batch run as in 2.
# 5. Unless SIDE_FITS=0, `oomscope fit --no-check` of ResNet-50 fp32 with --batch 32 and 64
#    (what the replay says those batches need: OUT_DIR/fit-resnet-bB.json).
# 6. Where fit's check contradicted its answer: that check again under `oomscope run`, with
#    PyTorch's cuDNN debugging on (each algorithm that failed, and why): OUT_DIR/repro.log.
# OWN_FIRST="MODEL:AMP:BATCH ..." runs those with PyTorch's own allocator before anything else.
# $OOMSCOPE names the oomscope binary (default target/release/oomscope).
set -u
cd "$(dirname "$0")/.."
out=${1:-gpu-fit-check-out}
py=${PYTHON:-python3}
bin=${OOMSCOPE:-target/release/oomscope}
mkdir -p "$out"
log="$out/log.txt"
: > "$log"
: > "$out/own.jsonl"
deadline=$((SECONDS + ${BUDGET:-480}))
note() { echo "$*" | tee -a "$log"; }
left() { echo $((deadline - SECONDS)); }

{
    date -u +%Y-%m-%dT%H:%M:%SZ
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
    "$py" -c 'import torch, transformers, torchvision
print("torch", torch.__version__, "cuda", torch.version.cuda,
      "transformers", transformers.__version__, "torchvision", torchvision.__version__)'
    # Whether an OOM reaches PyTorch as its own c10::OutOfMemoryError (cuDNN's fallback).
    OOMSCOPE_DEVICE=sim:1GiB "$py" -c 'import ctypes, sys, torch
print("c10 OutOfMemoryError available:", ctypes.CDLL(sys.argv[1]).oomscope_c10_oom_available())' \
        "$(dirname "$bin")/liboomscope.so"
} > "$out/machine.txt" 2>&1
cat "$out/machine.txt" | tee -a "$log"

# own MODEL PROGRAM AMP BATCH: a run with PyTorch's own allocator; did it train?
own() {
    local model=$1 prog=$2 amp=$3 b=$4 o rc t0=$SECONDS
    if [ "$(left)" -lt 30 ]; then note "== own allocator: $model $amp batch $b: skipped"; return; fi
    o=$(timeout "$(left)" "$py" "$prog" --batch "$b" --amp "$amp" --steps 3 2>>"$log")
    rc=$?
    line=$(echo "$o" | grep '^{' | tail -n 1)
    [ -z "$line" ] && line='{}'
    "$py" -c 'import json,sys; d=json.loads(sys.argv[1]); d.update(model=sys.argv[2], amp=sys.argv[3], batch=int(sys.argv[4]), trained=sys.argv[5]=="0"); print(json.dumps(d))' \
        "$line" "$model" "$amp" "$b" "$rc" >> "$out/own.jsonl"
    note "== own allocator: $model $amp batch $b: exit $rc, $((SECONDS - t0)) s"
}

# fit NAME ARGS... -- CMD...: `oomscope fit --format json ARGS` into OUT_DIR/NAME.json
fit() {
    local name=$1 t0=$SECONDS l
    shift
    l=$(left)
    if [ "$l" -lt 40 ]; then note "== oomscope $name: skipped, $l s left"; return; fi
    note "== oomscope $name: fit $* (timeout $l s)"
    timeout "$l" "$bin" fit --format json "$@" > "$out/$name.json" 2> "$out/$name.err"
    note "== oomscope $name: exit $?, $((SECONDS - t0)) s"
}

largest() { "$py" -c 'import json,sys; print(json.load(open(sys.argv[1]))["largest_batch"] or 0)' "$1" 2>/dev/null || echo 0; }

for spec in ${OWN_FIRST:-}; do
    IFS=: read -r m a b <<< "$spec"
    own "$m" "examples/torch/fit_${m%50}.py" "$a" "$b"
done

fit fit-resnet --batch 128 -- "$py" examples/torch/fit_resnet.py --batch '{batch}'
l=$(largest "$out/fit-resnet.json")
if [ "$l" -gt 0 ]; then
    own resnet50 examples/torch/fit_resnet.py fp32 "$l"
    own resnet50 examples/torch/fit_resnet.py fp32 $((l + 1))
fi
read -r c cap <<< "$("$py" -c 'import json,sys; d=json.load(open(sys.argv[1])); print(d.get("contradicted") or 0, d["device"]["capacity"])' "$out/fit-resnet.json" 2>/dev/null || echo 0 0)"
if [ "$c" -gt 0 ] && [ "$(left)" -gt 60 ]; then
    note "== repro: the check at $c under oomscope run --limit $cap"
    TORCH_CUDNN_V8_API_DEBUG=1 PYTHONUNBUFFERED=1 timeout "$(left)" "$bin" run --device cuda --limit "$cap" \
        --dump-dir "$out/repro-dumps" -- "$py" examples/torch/fit_resnet.py --batch "$c" > "$out/repro.log" 2>&1
    note "== repro: exit $?"
    tail -n 40 "$out/repro.log" | tee -a "$log"
fi
if [ -n "${GPT2_ANSWER:-}" ]; then
    own gpt2 examples/torch/fit_gpt2.py fp32 "$GPT2_ANSWER"
    own gpt2 examples/torch/fit_gpt2.py fp32 $((GPT2_ANSWER + 1))
fi
if [ -n "${GPT2_BF16_ANSWER:-}" ]; then
    own gpt2 examples/torch/fit_gpt2.py bf16 "$GPT2_BF16_ANSWER"
    own gpt2 examples/torch/fit_gpt2.py bf16 $((GPT2_BF16_ANSWER + 1))
fi
fit fit-resnet-bf16 --batch 128 -- "$py" examples/torch/fit_resnet.py --batch '{batch}' --amp bf16
l=$(largest "$out/fit-resnet-bf16.json")
if [ "$l" -gt 0 ]; then
    own resnet50 examples/torch/fit_resnet.py bf16 "$l"
    own resnet50 examples/torch/fit_resnet.py bf16 $((l + 1))
fi
if [ "${SIDE_FITS:-1}" = 1 ]; then
    for b in 32 64; do
        fit fit-resnet-b$b --no-check --batch $b -- "$py" examples/torch/fit_resnet.py --batch '{batch}'
    done
fi
nvidia-smi --query-compute-apps=pid,used_memory --format=csv | tee -a "$log"
note "== done in $SECONDS s"
cat "$out/own.jsonl"
