#!/usr/bin/env bash
# A real-GPU check of the torch backend's clock record (docs/backends.md, "clocks"): how fast the SM
# clock drops after a loop against nvidia-smi's start-up time (clock_after_loop_gpu.py), and what
# `deployopt bench --json` records for the bundled example at 8 SMs and on the full GPU.
# Run from the repository root on the device machine, carrying .whl:  OUT=... bash benchmarks/run_clock_check_gpu.sh
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/device_env.sh"
mkdir -p "$OUT"
python3 benchmarks/clock_after_loop_gpu.py --out "$OUT/clock_after_loop.json" 2>&1 | tee "$OUT/clock_check.out"
for sms in 8 full; do
    extra=(); [[ $sms == full ]] || extra=(--sms "$sms")
    python3 -m deployopt bench examples/resnet56_pruned_cifar.onnx --backend torch --dtype fp16 --batch 32 \
        "${extra[@]}" -o "$OUT/bench_clock_sms${sms}.json" >>"$OUT/clock_check.out" 2>&1
    echo "bench sms=$sms rc=$?" >>"$OUT/clock_check.out"
done
exit 0
