#!/bin/bash
# Grouped convs (ResNeXt-style, g = 4, 8, 32) against the wave model, which prices them per conv
# group (GEMM N = K/g, K = C/g·R·S; kernel alignment from K/g, and C/g below 8): measured staircases
# beside the predicted ones (`deployopt staircase --measure torch --json`, cuDNN through PyTorch,
# default search), and input channels per conv group swept by timing one-conv models
# (`deployopt bench`), the case `analyze` once offered 20 of 24 channels per conv group for.
# None of these shapes is in the fitted sweeps (benchmarks/staircases*/ hold groups 1 and depthwise).
#   OUT=/tmp/grouped bash benchmarks/run_grouped_gpu.sh
# Carry .whl (onnx-graphsurgeon, onnx2torch) for deployopt.
set -u
source "$(dirname "${BASH_SOURCE[0]}")/device_env.sh"  # the carried .whl wheels, PYTHONPATH, step
D=${OUT:?set OUT to the results folder}
W=${WORK:-/tmp/groupedwork}
mkdir -p "$D" "$W"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >"$D/gpu.txt"
python3 -c "import torch; print(torch.__version__, torch.backends.cudnn.version())" >"$D/versions.txt"
sc() {  # sc NAME SMS DTYPE ARGS...: one measured staircase, its JSON in $D/NAME.json
    local name=$1 sms=$2 dtype=$3
    shift 3
    local smsarg=()
    [ "$sms" != full ] && smsarg=(--sms "$sms")
    step "$name" 240 python3 -m deployopt staircase --target h200 "${smsarg[@]}" --dtype "$dtype" \
        --measure torch --json "$@"
    mv "$D/$name.out" "$D/$name.json"
}
sc g4_k_fp16_8sm 8 fp16 --input 8x96x28x28 --kernel 3 --groups 4 --out-channels 64:160:4
sc g4_k_fp32_8sm 8 fp32 --input 8x96x28x28 --kernel 3 --groups 4 --out-channels 64:160:4
sc g4_k_fp16_full full fp16 --input 8x96x28x28 --kernel 3 --groups 4 --out-channels 64:160:4
sc g8_k_fp16_8sm 8 fp16 --input 8x128x14x14 --kernel 3 --groups 8 --out-channels 64:256:8
sc g32_k_fp16_8sm 8 fp16 --input 8x256x28x28 --kernel 3 --groups 32 --out-channels 128:512:32
sc g32_k_fp16_full full fp16 --input 8x256x28x28 --kernel 3 --groups 32 --out-channels 128:512:32
# input channels per conv group: g = 4, K = 96, C/g = 16 … 28 (one-conv models, timed end to end)
python3 - "$W" <<'PY'
import sys
from pathlib import Path
import onnx
from deployopt.layers import ConvShape, conv_model
for cg in range(16, 29, 2):
    shape = ConvShape(n=8, c=4 * cg, h=28, w=28, k=96, r=3, s=3, pad=(1, 1), groups=4)
    onnx.save(conv_model(shape), str(Path(sys.argv[1]) / f"g4_c{cg}.onnx"))
PY
for cg in 16 18 20 22 24 26 28; do
    step "g4_c${cg}_bench" 120 python3 -m deployopt bench "$W/g4_c$cg.onnx" --backend torch --sms 8 \
        --dtype fp16 --runs 200 -o "$D/g4_c${cg}_fp16_8sm_bench.json"
done
