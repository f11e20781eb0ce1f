#!/usr/bin/env bash
# The non-conv traffic term (deployopt/traffic.py) against the conv-only table, on the GPU, in one
# session per call: bench_optimize.py --ab-traffic runs lossless with the term, trim with it, and
# lossless without it, then times every answer in interleaved rounds (traffic_ab: term vs conv-only).
# Run from the repository root on the device machine, carrying .whl; resumable (the work folder
# stays on a warm machine), so a second call with the same arguments finishes what the first began:
#   OUT=... bash benchmarks/run_traffic_ab_gpu.sh SMS MODELS [extra bench_optimize.py args]
# e.g. `bash benchmarks/run_traffic_ab_gpu.sh 8 resnet56 --seeds 0,1,2` (add --ab-traffic-trim for
# trim against trim too). Also, when MODELS is
# resnet56, the CLI's optimize on the bundled example at --max-evals 12 (docs/optimize.md's case).
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/device_env.sh"
SMS=$1 MODELS=$2
TAG=${TAG:-${MODELS//,/_}}  # file names without commas (the device tool returns plain names only)
shift 2
WORK=/root/keep/traffic_work
mkdir -p "$WORK" "$OUT"
if [[ $MODELS == resnet56 && ! -e $WORK/cli_done ]]; then
    timeout 240 python3 -m deployopt optimize examples/resnet56_pruned_cifar.onnx --target h200 --sms 8 \
        --backend torch --batch 32 --max-evals 12 -o "$WORK/cli_optimize" --force \
        >"$OUT/cli_optimize.out" 2>&1
    echo "rc=$?" >>"$OUT/cli_optimize.out"
    cp "$WORK/cli_optimize/report.json" "$OUT/cli_optimize_report.json" 2>/dev/null
    touch "$WORK/cli_done"
fi
# The GPU's clocks and clock-event (throttle) reasons while the benchmark runs, once a second, and
# nvidia-smi's full clock/performance report before and after: a slowdown mid-run would show here.
SMI_FIELDS=timestamp,clocks.sm,clocks.max.sm,clocks.mem,clocks.applications.graphics,clocks_event_reasons.active,temperature.gpu,power.draw,power.limit,pstate
{ echo "== before"; nvidia-smi -q -d CLOCK,PERFORMANCE,POWER,TEMPERATURE; } >"$OUT/nvidia_smi_sms${SMS}_${TAG}.txt" 2>&1
nvidia-smi --query-gpu="$SMI_FIELDS" --format=csv -lms 1000 >"$OUT/clocks_sms${SMS}_${TAG}.csv" 2>&1 &
SMI_PID=$!
python3 benchmarks/bench_optimize.py --sms "$SMS" --models "$MODELS" --ab-traffic --workdir "$WORK" \
    --out "$WORK/optimize_sms${SMS}_${TAG}_traffic_ab.json" --deadline "${DEADLINE:-420}" "$@" \
    >"$OUT/bench_sms${SMS}_${TAG}.out" 2>&1
echo "rc=$?" >>"$OUT/bench_sms${SMS}_${TAG}.out"
kill "$SMI_PID" 2>/dev/null
{ echo "== after"; nvidia-smi -q -d CLOCK,PERFORMANCE,POWER,TEMPERATURE; } >>"$OUT/nvidia_smi_sms${SMS}_${TAG}.txt" 2>&1
cp "$WORK/optimize_sms${SMS}_${TAG}_traffic_ab.json" "$OUT/" 2>/dev/null
exit 0
