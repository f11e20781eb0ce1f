#!/bin/bash
# Mask-pruned torchvision ResNets (benchmarks/export_mask_pruned.py: 30 % of the pruned convs'
# filters zeroed by torch.nn.utils.prune, exported at their full widths, batch 8, 224²) through
# bench_optimize.py at 8 SMs (a green context: Orin Nano 8GB / Orin NX / AGX Xavier), torch backend,
# fp16: deployopt lossless and trim-10 % against the input, in interleaved rounds. Resumable: a
# second call with the same OUT and WORK continues (bench_optimize skips finished cases).
#   OUT=/tmp/mask WORK=/tmp/maskwork bash benchmarks/run_mask_pruned_gpu.sh; tar czf $OUT/mask.tgz -C $OUT .
# Carry .whl (onnx-graphsurgeon, onnx2torch) for deployopt.
set -u
source "$(dirname "${BASH_SOURCE[0]}")/device_env.sh"  # the carried .whl wheels, PYTHONPATH, step
D=${OUT:?set OUT to the results folder}
W=${WORK:-/tmp/maskwork}
mkdir -p "$D" "$W"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >"$D/gpu.txt"
python3 -c "import torch, torchvision; print(torch.__version__, torchvision.__version__, torch.backends.cudnn.version())" >"$D/versions.txt"
[ -f "$W/resnet18_mask30_b8.onnx" ] || step export 300 python3 benchmarks/export_mask_pruned.py --out "$W"
step bench 520 python3 benchmarks/bench_optimize.py --sms 8 \
    --onnx resnet18_mask30=$W/resnet18_mask30_b8.onnx --onnx resnet50_mask30=$W/resnet50_mask30_b8.onnx \
    --workdir "$W/bench" --out "$D/mask_pruned_sms8.json" --deadline ${DEADLINE:-480}
cp "$D"/*.out "$D"/*.err "$W/" 2>/dev/null
