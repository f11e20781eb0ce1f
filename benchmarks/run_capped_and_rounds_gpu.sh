#!/bin/bash
# Does `deployopt bench` warn when a power cap holds the clock down, and (on a GPU other than the
# H200, e.g. an H100, whose target borrows the H200's wave-model fit) does that fit hold there?
#   OUT=... bash benchmarks/run_capped_and_rounds_gpu.sh capped     # bench two heavy VGG16-CIFAR workloads
#   OUT=... bash benchmarks/run_capped_and_rounds_gpu.sh lengths    # the capped one over 100 and 2000 runs,
#                                                                   # then compare of the two
#   OUT=... bash benchmarks/run_capped_and_rounds_gpu.sh rounds 11 10  # held-out rounds, default search,
#                                                                     # 8/16/all SMs (run_round_gpu.sh)
#   OUT=... bash benchmarks/run_capped_and_rounds_gpu.sh engines 11    # every cuDNN engine timed
# One stage per invocation; chain invocations in one device call. Each packs what it has into
# $OUT/<gpu>_<stage>.tgz (<gpu>: h100, h200, ...; the device returns at most 8 files). Carry .whl.
# Then: benchmarks/split_sweeps.py on the round files, benchmarks/score_gpu_transfer.py.
set -u
source "$(dirname "${BASH_SOURCE[0]}")/device_env.sh"
D=${OUT:?set OUT to the results folder}
W=/tmp/h100_work
mkdir -p "$W"
nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm --format=csv,noheader | tee -a "$W/gpu.txt"
G=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | sed 's/^NVIDIA //' | grep -oiE '\b[a-z]{1,2}[0-9]{1,4}\b' | head -1 | tr A-Z a-z)
stage=${1:?capped, lengths, rounds or engines}
shift
case $stage in
capped)
    # VGG16-CIFAR (13 convs) at batch 1024, and the same net with every conv 512 wide at batch 256:
    # several ms of tensor-core work per pass, timed back to back for seconds.
    python3 - "$W" <<'EOF'
import sys
import onnx
from deployopt.zoo import vgg16_cifar
onnx.save(vgg16_cifar(), f"{sys.argv[1]}/vgg16_cifar.onnx")
onnx.save(vgg16_cifar(widths=[512] * 13), f"{sys.argv[1]}/vgg16_cifar_w512.onnx")
EOF
    for spec in "vgg16_cifar 1024" "vgg16_cifar_w512 256"; do
        set -- $spec
        nvidia-smi -q -d PERFORMANCE >"$W/smi_before_$1.txt"
        python3 -m deployopt bench "$W/$1.onnx" --backend torch --dtype fp16 --batch "$2" --runs 600 --warmup 50 \
            -o "$W/bench_$1_b$2.json" >"$W/bench_$1_b$2.out" 2>&1
        echo "bench $1 batch $2 rc=$?" | tee -a "$W/bench_$1_b$2.out"
        nvidia-smi -q -d PERFORMANCE,CLOCK >"$W/smi_after_$1.txt"
        cat "$W/bench_$1_b$2.out"
    done
    (cd "$W" && tar czf "$D/${G:-gpu}_capped.tgz" gpu.txt smi_before_* smi_after_* bench_*)
    rm -f "$W"/vgg16_cifar*.onnx ;;
lengths)
    # the 512-wide net, capped: does its median depend on how long it is timed, and does compare flag it?
    python3 - "$W" <<'EOF'
import sys
import onnx
from deployopt.zoo import vgg16_cifar
onnx.save(vgg16_cifar(widths=[512] * 13), f"{sys.argv[1]}/w512.onnx")
EOF
    for r in 100 2000; do
        python3 -m deployopt bench "$W/w512.onnx" --backend torch --dtype fp16 --batch 256 --runs $r --warmup 20 \
            -o "$W/bench_w512_runs$r.json" >"$W/bench_w512_runs$r.out" 2>&1
        echo "runs $r rc=$?" >>"$W/bench_w512_runs$r.out"
        cat "$W/bench_w512_runs$r.out"
    done
    python3 -m deployopt compare "$W/bench_w512_runs100.json" "$W/bench_w512_runs2000.json" >"$W/compare.out" 2>&1
    echo "compare rc=$?" >>"$W/compare.out"
    cat "$W/compare.out"
    (cd "$W" && tar czf "$D/${G:-gpu}_lengths.tgz" gpu.txt bench_w512_* compare.out)
    rm -f "$W/w512.onnx" ;;
rounds|engines)
    for r in "$@"; do
        mode=$([ "$stage" = rounds ] && echo default || echo all)
        OUT=$W bash "$(dirname "${BASH_SOURCE[0]}")/run_round_gpu.sh" "$r" "$mode" 2>&1 | tee -a "$W/rounds.out"
        tar czf "$D/${G:-gpu}_$stage.tgz" -C "$W" gpu.txt rounds.out $(cd "$W" && ls -d default all_engines 2>/dev/null)
    done ;;
*) echo "unknown stage $stage" >&2; exit 2 ;;
esac
