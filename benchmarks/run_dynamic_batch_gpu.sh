#!/bin/bash
# The H200 check of 2026-12-03 behind benchmarks/results/h200_cli/dynamic_batch_2026-12-03/:
# bench and profile of the bundled example after the bench/profile CLI refactor, then optimize on a
# dynamic-batch model (torch backend, 8 SMs) and the written model timed at batch 4.
# Run on the device from the repository root, results into $OUT (the device tool's folder):
#   bash benchmarks/run_dynamic_batch_gpu.sh      (carry .whl: onnx2torch, onnx-graphsurgeon wheels)
set -u
source "$(dirname "${BASH_SOURCE[0]}")/device_env.sh"  # the carried .whl wheels, PYTHONPATH
D=${OUT:?set OUT to the results folder}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python -m deployopt bench examples/resnet56_pruned_cifar.onnx --backend torch --sms 8 --runs 50 \
    -o "$D/bench_r56_sms8.json"
python -m deployopt profile examples/resnet56_pruned_cifar.onnx --backend torch --sms 8 --json \
    > "$D/profile_r56_sms8.json"
python -c "
import onnx
from deployopt import zoo
onnx.save(zoo.with_dynamic_batch(zoo.mobilenet_like()), '$D/mobilenet_like_dynamic.onnx')"
python -m deployopt optimize "$D/mobilenet_like_dynamic.onnx" --target h200 --sms 8 --backend torch \
    --max-evals 8 -o "$D/opt_dyn" > "$D/opt_dyn.txt" 2>&1
python -c "
import onnx; m = onnx.load('$D/opt_dyn/model.onnx'); print('written input dim0:', m.graph.input[0].type.tensor_type.shape.dim[0])"
python -m deployopt bench "$D/opt_dyn/model.onnx" --backend torch --sms 8 --batch 4 --runs 30 --json \
    > "$D/bench_dyn_b4.json"
rm -f "$D/mobilenet_like_dynamic.onnx"
