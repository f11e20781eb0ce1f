#!/bin/bash
# Every GPU path of the CLI once, as a user runs it, on the device (the H200 or an H100, 8 SMs by a
# green context; --target is the GPU's own: h100 or h200, or TARGET=...): the release check before
# a stop lands. One device call, about 5 minutes:
#   OUT=/tmp/cli bash benchmarks/run_cli_check_gpu.sh; tar czf $OUT/cli.tgz -C /tmp cli
# (the device tool brings back a few files only: pack the folder into one, as here)
# Writes each command's stdout/stderr and exit status into $OUT (rc.txt lists them); nothing here
# is a timed test: the numbers are read off the files and recorded in docs by hand.
# Carry .whl (onnx-graphsurgeon, onnx2torch) for deployopt.
set -u
source "$(dirname "${BASH_SOURCE[0]}")/device_env.sh"  # the carried .whl wheels, PYTHONPATH, step
D=${OUT:?set OUT to the results folder}
mkdir -p "$D"
M=examples/resnet56_pruned_cifar.onnx
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >"$D/gpu.txt"
T=${TARGET:-$(grep -q H100 "$D/gpu.txt" && echo h100 || echo h200)}
# QUICK=1: only the steps a change since the last full check touches (optimize, bench, replicates,
# compare, bad input); the staircase, calibrate, profile and dynamic-shape steps are skipped, said in
# rc.txt (for a device call with little time left)
full() {
    if [ -n "${QUICK:-}" ]; then echo "$1 skipped (QUICK)" >>"$D/rc.txt"; else step "$@"; fi
}
step backends 60 python3 -m deployopt backends --json
step targets_local 60 python3 -m deployopt targets --target local --json
full staircase 120 python3 -m deployopt staircase --target "$T" --sms 8 --input 8x128x28x28 --kernel 3 \
    --out-channels 368:528:16 --measure torch --runs 50 --json --plot "$D/staircase.png"
full calibrate 200 python3 -m deployopt calibrate --target "$T" --sms 8 --measure torch -o "$D/${T}_sm8_profile.json"
full staircase_calibrated 60 python3 -m deployopt staircase --target "$D/${T}_sm8_profile.json" \
    --input 8x128x28x28 --kernel 3 --out-channels 368:528:16 --json
step optimize 300 python3 -m deployopt optimize $M --target "$T" --sms 8 --backend torch --batch 32 \
    --max-evals 12 -o "$D/optimize" --force
# resumed where it was measured: the journal's host facts (GPU name from nvidia-smi, driver, torch)
# must match this process's, so the finished run's answer and report come back, nothing timed again
step optimize_resume 120 python3 -m deployopt optimize $M --target "$T" --sms 8 --backend torch --batch 32 \
    --max-evals 12 -o "$D/optimize" --resume
# the per-layer cache is shared across targets of one device: another target name at the same 8 SMs
# reads every conv of the sweep from the first run's cache (report.md's per-layer line says how many)
step optimize_other_target 200 python3 -m deployopt optimize $M --target a100 --sms 8 --backend torch --batch 32 \
    --max-evals 4 -o "$D/optimize_other_target" --force
step bench_input 90 python3 -m deployopt bench $M --backend torch --sms 8 --batch 32 --runs 200 -o "$D/bench_input.json"
step bench_optimized 90 python3 -m deployopt bench "$D/optimize/model.onnx" --backend torch --sms 8 --batch 32 \
    --runs 200 -o "$D/bench_optimized.json"
step compare 30 python3 -m deployopt compare "$D/bench_input.json" "$D/bench_optimized.json" --json
full profile_kernels 120 python3 -m deployopt profile "$D/optimize/model.onnx" --backend torch --sms 8 --batch 32 \
    --kernels --json --trace-dir "$D/traces"
# a detector exported with dynamic batch, height and width, optimized at one size and timed on the
# GPU: model.onnx gets its dynamic dims back (checked on onnxruntime CPU) and still runs on the GPU
full export_dynamic 120 python3 -c "from pathlib import Path; from deployopt.zoo.yolo import export_yolo_like; \
export_yolo_like(Path('$D/yolo_dynamic.onnx'), size=320, batch=1, head='plain', dynamic=True)"
full optimize_dynamic 300 python3 -m deployopt optimize "$D/yolo_dynamic.onnx" --input-shape images:1x3x320x320 \
    --target "$T" --sms 8 --backend torch --max-evals 10 -o "$D/optimize_dynamic" --force
full bench_dynamic_384 90 python3 -m deployopt bench "$D/optimize_dynamic/model.onnx" --backend torch --sms 8 \
    --input-shape images:1x3x384x384 --runs 100 -o "$D/bench_dynamic_384.json"
# A/A, one run a side, is in check_2026-12-07 (six benches, aa_compare.py): 8 of 15 pairs called.
# Its runs' medians are also the replicates' below (each a fresh worker process), so that is not
# timed again here.
# replicated: each side three fresh worker processes (bench --repeat 3), judged on their medians;
# an A/A pair (the optimized model twice) and a real one (the input against the optimized model)
for side in rep_a rep_b rep_input; do
    m="$D/optimize/model.onnx"; [ "$side" = rep_input ] && m=$M
    step "bench_$side" 240 python3 -m deployopt bench "$m" --backend torch --sms 8 --batch 32 --runs 200 \
        --repeat 3 -o "$D/bench_$side.json"
done
step compare_rep_aa 60 python3 -m deployopt compare "$D/bench_rep_a.json" "$D/bench_rep_b.json" --json
step compare_rep_real 60 python3 -m deployopt compare "$D/bench_rep_input.json" "$D/bench_rep_a.json" --json
# bad input on a machine with a GPU: one line, exit 2
step bad_sms 60 python3 -m deployopt staircase --target "$T" --sms 1000 --input 8x128x28x28 --kernel 3 \
    --out-channels 16:64:16 --measure torch
step bad_empty_out 60 python3 -m deployopt bench $M --backend torch --sms 8 -o ''
cat "$D/rc.txt"
