#!/bin/bash
# Models from torch's default exporter (torch.export, `dynamo=True`) through the torch backend on the
# GPU, beside the TorchScript export of the same network (same random weights): both must be timed,
# and at about the same latency, since the opset-17 rewrite (deployopt/backends/onnx2torch_opset.py)
# changes what onnx2torch reads, not the network. One device call, about 3 minutes, 8 SMs:
#   OUT=/tmp/dyn bash benchmarks/run_dynamo_export_gpu.sh; tar czf $OUT/dyn.tgz -C /tmp dyn
# Needs torchvision and onnxscript (the device image has both) and the carried .whl.
set -u
source "$(dirname "${BASH_SOURCE[0]}")/device_env.sh"  # the carried .whl wheels, PYTHONPATH, step
D=${OUT:?set OUT to the results folder}
mkdir -p "$D/onnx"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >"$D/gpu.txt"
T=${TARGET:-$(grep -q H100 "$D/gpu.txt" && echo h100 || echo h200)}
ARCHS=${ARCHS:-"mobilenet_v2 resnet18 convnext_tiny"}
# the same weights for both exports: check_architectures seeds torch before building each network
step export_torchscript 300 python3 benchmarks/check_architectures.py --export-only --batch 8 --size 224 \
    --workdir "$D/onnx" --only $ARCHS
step export_dynamo 300 python3 benchmarks/check_architectures.py --export-only --batch 8 --size 224 --dynamo \
    --workdir "$D/onnx" --only $ARCHS
for a in $ARCHS; do
    for e in "" _dynamo; do
        step "bench_${a}${e}" 120 python3 -m deployopt bench "$D/onnx/${a}${e}_b8.onnx" --backend torch --sms 8 \
            --runs 200 --json -o "$D/bench_${a}${e}.json"
    done
done
step optimize_mobilenet_v2_dynamo 300 python3 -m deployopt optimize "$D/onnx/mobilenet_v2_dynamo_b8.onnx" \
    --target "$T" --sms 8 --backend torch --max-evals 8 -o "$D/optimize" --force
rm -rf "$D/onnx" "$D/optimize/model.onnx" "$D/optimize/model.onnx.data"  # large; the report says what ran
