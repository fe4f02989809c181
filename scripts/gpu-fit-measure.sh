#!/usr/bin/env bash
# Measured peak GPU memory of two training programs by batch size, with PyTorch's own
# allocator, to check `oomscope fit` against. For a machine with an NVIDIA GPU (an H100) and
# PyTorch + transformers + torchvision (python3, or $PYTHON):
#
#   scripts/gpu-fit-measure.sh [OUT_DIR]      # default gpu-fit-out; about 4-6 minutes
#
# OUT_DIR/machine.txt      GPU, driver, torch/transformers/torchvision versions
# OUT_DIR/measured.jsonl   one JSON line per (model, amp, batch) run that finished:
#                          examples/torch/fit_gpt2.py at batch 8 16 32 and
#                          examples/torch/fit_resnet.py at batch 32 64 128, fp32 and bf16,
#                          3 steps each, with peak_allocated and peak_reserved
# OUT_DIR/log.txt          stderr of every run, each run's exit code and time
# OUT_DIR/snapshots.tar.gz torch.cuda.memory snapshots (_dump_snapshot) of gpt2 batch 8 and
#                          resnet50 batch 32, fp32 and bf16, as snapshots/NAME.pickle (under
#                          16 MiB: the largest are dropped if not, and the log says so; the
#                          loose pickles are removed once packed)
# OUT_DIR/fit-*.json/.err  `oomscope fit` on both programs, if target/release/oomscope exists
#
# No `set -e`: a run that fails (an OOM, a missing package) must not stop the others.
set -u
cd "$(dirname "$0")/.."
out=${1:-gpu-fit-out}
py=${PYTHON:-python3}
mkdir -p "$out/snapshots"
log="$out/log.txt"
: > "$log"
: > "$out/measured.jsonl"
deadline=$((SECONDS + 500)) # the whole script must end within 9 minutes
bin=${OOMSCOPE:-target/release/oomscope}

note() { echo "$*" | tee -a "$log"; }

{
    date -u +%Y-%m-%dT%H:%M:%SZ
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
    "$py" -c 'import torch, transformers, torchvision
print("torch", torch.__version__, "cuda", torch.version.cuda,
      "transformers", transformers.__version__, "torchvision", torchvision.__version__)'
} > "$out/machine.txt" 2>&1
cat "$out/machine.txt" | tee -a "$log"

# run NAME JSON_DEST CMD...: runs CMD, appends its JSON line to JSON_DEST, stderr to the log.
run() {
    local name=$1 dest=$2
    shift 2
    local t0=$SECONDS o rc
    note "== $name: $*"
    o=$("$@" 2>>"$log")
    rc=$?
    echo "$o" | grep '^{' | tail -n 1 >> "$dest"
    note "== $name: exit $rc, $((SECONDS - t0)) s"
}

for amp in fp32 bf16; do
    for b in 8 16 32; do
        run "gpt2 $amp batch $b" "$out/measured.jsonl" \
            "$py" examples/torch/fit_gpt2.py --batch "$b" --amp "$amp" --steps 3
    done
    for b in 32 64 128; do
        run "resnet50 $amp batch $b" "$out/measured.jsonl" \
            "$py" examples/torch/fit_resnet.py --batch "$b" --amp "$amp" --steps 3
    done
done

for amp in fp32; do
    FIT_SNAPSHOT="$out/snapshots/gpt2-b8-$amp.pickle" run "snapshot gpt2 $amp batch 8" \
        "$out/snapshots/runs.jsonl" "$py" examples/torch/fit_gpt2.py --batch 8 --amp "$amp"
    FIT_SNAPSHOT="$out/snapshots/resnet50-b32-$amp.pickle" run "snapshot resnet50 $amp batch 32" \
        "$out/snapshots/runs.jsonl" "$py" examples/torch/fit_resnet.py --batch 32 --amp "$amp"
done

# Pack the snapshots; while the archive is over 16 MiB, drop the largest snapshot.
limit=$((16 * 1024 * 1024))
while :; do
    rm -f "$out/snapshots.tar.gz"
    tar -czf "$out/snapshots.tar.gz" -C "$out" snapshots
    size=$(stat -c %s "$out/snapshots.tar.gz")
    note "== snapshots.tar.gz: $size bytes"
    [ "$size" -le "$limit" ] && break
    big=$(ls -S "$out"/snapshots/*.pickle 2>/dev/null | head -n 1)
    if [ -z "$big" ]; then
        note "== snapshots.tar.gz over 16 MiB with no snapshot in it; removed"
        rm -f "$out/snapshots.tar.gz"
        break
    fi
    note "== dropped $(basename "$big") ($(stat -c %s "$big") bytes) to keep the archive under 16 MiB"
    rm -f "$big"
done
ls -l "$out/snapshots" | tee -a "$log"
# The archive holds them: drop the loose copies so OUT_DIR stays small to copy back.
[ -f "$out/snapshots.tar.gz" ] && rm -f "$out"/snapshots/*.pickle

# Then `oomscope fit` on the GPU (its probes, its replay, its check runs near the card's
# memory), if a build is here ($OOMSCOPE, else target/release/oomscope): at most 200 s each.
if [ -x "$bin" ]; then
    for m in gpt2 resnet gpt2-bf16; do
        left=$((deadline - SECONDS))
        t=$((left < 200 ? left : 200))
        if [ "$t" -le 5 ]; then
            note "== oomscope fit $m: skipped, no time left"
            continue
        fi
        note "== oomscope fit $m (timeout $t s)"
        t0=$SECONDS
        prog=examples/torch/fit_${m%-bf16}.py
        amp=fp32
        [ "$m" != "${m%-bf16}" ] && amp=bf16
        timeout "$t" "$bin" fit --format json --batch 32 -- \
            "$py" "$prog" --batch '{batch}' --amp "$amp" \
            > "$out/fit-$m.json" 2> "$out/fit-$m.err"
        note "== oomscope fit $m: exit $?, $((SECONDS - t0)) s"
    done
else
    note "== target/release/oomscope not built: oomscope fit not run"
fi


nvidia-smi --query-compute-apps=pid,used_memory --format=csv | tee -a "$log"
note "== done in $SECONDS s; $(wc -l < "$out/measured.jsonl") runs in measured.jsonl"
cat "$out/measured.jsonl"
