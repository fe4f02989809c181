#!/usr/bin/env bash
# `oomscope fit`'s answer on a real GPU, checked by runs with PyTorch's own allocator (no
# oomscope): for a machine with an NVIDIA GPU and PyTorch, transformers and torchvision.
#
#   scripts/gpu-fit-check.sh [OUT_DIR]      # default gpu-fit-check-out; about 4 minutes
#
# 1. `oomscope fit` of examples/torch/fit_resnet.py on the GPU (probes, replay, its own
#    check runs under oomscope's allocator): OUT_DIR/fit-resnet.json.
# 2. The answer and the next batch run without oomscope (PyTorch's caching allocator):
#    OUT_DIR/own.jsonl gets {"model", "batch", "trained", ...peaks} per run.
# 3. The same for the GPT-2 answer given as GPT2_ANSWER (a batch fit found earlier), and
#    `oomscope fit` of GPT-2 with bf16 autocast if time is left.
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
deadline=$((SECONDS + ${BUDGET:-300}))
note() { echo "$*" | tee -a "$log"; }

# own MODEL PROGRAM BATCH: a run with PyTorch's own allocator; did it train?
own() {
    local model=$1 prog=$2 b=$3 o rc
    o=$("$py" "$prog" --batch "$b" --steps 3 2>>"$log")
    rc=$?
    line=$(echo "$o" | grep '^{' | tail -n 1)
    [ -z "$line" ] && line='{}'
    "$py" -c 'import json,sys; d=json.loads(sys.argv[1]); d.update(model=sys.argv[2], batch=int(sys.argv[3]), trained=sys.argv[4]=="0"); print(json.dumps(d))' \
        "$line" "$model" "$b" "$rc" >> "$out/own.jsonl"
    note "== own allocator: $model batch $b: exit $rc"
}

largest() { "$py" -c 'import json,sys; print(json.load(open(sys.argv[1]))["largest_batch"] or 0)' "$1" 2>/dev/null || echo 0; }

note "== oomscope fit resnet"
t0=$SECONDS
timeout 200 "$bin" fit --format json --batch 128 -- "$py" examples/torch/fit_resnet.py --batch '{batch}' \
    > "$out/fit-resnet.json" 2> "$out/fit-resnet.err"
note "== oomscope fit resnet: exit $?, $((SECONDS - t0)) s"
l=$(largest "$out/fit-resnet.json")
if [ "$l" -gt 0 ]; then
    own resnet50 examples/torch/fit_resnet.py "$l"
    own resnet50 examples/torch/fit_resnet.py $((l + 1))
fi
if [ -n "${GPT2_ANSWER:-}" ]; then
    own gpt2 examples/torch/fit_gpt2.py "$GPT2_ANSWER"
    own gpt2 examples/torch/fit_gpt2.py $((GPT2_ANSWER + 1))
fi
left=$((deadline - SECONDS))
if [ "$left" -gt 60 ]; then
    note "== oomscope fit gpt2 bf16 (timeout $left s)"
    t0=$SECONDS
    timeout "$left" "$bin" fit --format json --batch 32 -- "$py" examples/torch/fit_gpt2.py --batch '{batch}' --amp bf16 \
        > "$out/fit-gpt2-bf16.json" 2> "$out/fit-gpt2-bf16.err"
    note "== oomscope fit gpt2 bf16: exit $?, $((SECONDS - t0)) s"
else
    note "== oomscope fit gpt2 bf16: skipped, $left s left"
fi
nvidia-smi --query-compute-apps=pid,used_memory --format=csv | tee -a "$log"
note "== done in $SECONDS s"
cat "$out/own.jsonl"
