#!/bin/bash
# Round nine of the wave-model sweeps (held out; docs/wave_model.md), on the H200:
#   bash benchmarks/run_round9_gpu.sh default   # PyTorch's default search at 8, 16 and 132 SMs
#   bash benchmarks/run_round9_gpu.sh all       # every cuDNN engine timed at 8, 16 and 132 SMs
#   bash benchmarks/run_round9_gpu.sh repeats   # the default search again, in new processes
# Results into $OUT/<mode>/round9_<sms>.json (mode default writes default/) (one file per SM count, rewritten after every sweep,
# so a run cut by its time limit keeps what it finished); split them into one file per sweep with
# benchmarks/split_sweeps.py. Carry .whl (onnx-graphsurgeon) for deployopt's imports.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD
D=${OUT:?set OUT to the results folder}
SHAPES=bg,bh,bi,bj,bk,bl,bm,bn
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
case ${1:?default, all or repeats} in
default|repeats)
    mkdir -p "$D/$1"
    for sms in 8 16 0; do  # 0: the whole GPU
        timeout 170 python benchmarks/staircase_sweeps.py --sms $sms --shapes $SHAPES \
            --out "$D/$1/round9_$sms.json"
    done ;;
all)
    mkdir -p "$D/all_engines"
    for sms in 8 16 0; do
        timeout 150 python benchmarks/staircase_sweeps.py --sms $sms --shapes $SHAPES --benchmark-limit 0 \
            --out "$D/all_engines/round9_$sms.json"
    done ;;
esac
