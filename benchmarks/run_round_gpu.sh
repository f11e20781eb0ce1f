#!/bin/bash
# A held-out round of wave-model sweeps (docs/wave_model_evaluation.md), on the H200:
#   bash benchmarks/run_round_gpu.sh 9 default   # PyTorch's default search at 8, 16 and 132 SMs
#   bash benchmarks/run_round_gpu.sh 9 all       # every cuDNN engine timed at 8, 16 and 132 SMs
#   bash benchmarks/run_round_gpu.sh 9 repeats   # the default search again, in new processes
#   bash benchmarks/run_round_gpu.sh 11 all-repeats  # every engine again, into all_repeats/
#   bash benchmarks/run_round_gpu.sh 10 default  # round ten's shapes, likewise
#   bash benchmarks/run_round_gpu.sh 11 default  # round eleven (pre-registered with preregister_round.py)
#   bash benchmarks/run_round_gpu.sh 12 default  # round twelve (pre-registered 2026-12-05)
#   bash benchmarks/run_round_gpu.sh 13 default  # round thirteen (pre-registered 2026-12-05)
# Results into $OUT/{default,repeats,all_engines,all_repeats}/round<N>_<sms>.json, one file per SM count,
# rewritten after every sweep (a run cut by its time limit keeps what it finished); split them into
# one file per sweep with benchmarks/split_sweeps.py. Carry .whl (onnx-graphsurgeon) for deployopt.
set -u
source "$(dirname "${BASH_SOURCE[0]}")/device_env.sh"  # the carried .whl wheels, PYTHONPATH
D=${OUT:?set OUT to the results folder}
case ${1:?round: 9 to 13} in
9) SHAPES=bg,bh,bi,bj,bk,bl,bm,bn ;;
10) SHAPES=bo,bp,bq,br,bs,bt,bv,bx ;;
11) SHAPES=by,bz,ca,cb,cc,cd,ce,cf ;;
12) SHAPES=cg,ch,ci,cj,ck,cl,cm,cn ;;
13) SHAPES=co,cp,cq,cr,cs,ct,cu,cv ;;
*) echo "unknown round $1" >&2; exit 2 ;;
esac
R=$1
shift
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
case ${1:?default, all, repeats or all-repeats} in
default|repeats)
    mkdir -p "$D/$1"
    for sms in 8 16 0; do  # 0: the whole GPU
        timeout 170 python benchmarks/staircase_sweeps.py --sms $sms --shapes $SHAPES \
            --out "$D/$1/round${R}_$sms.json"
    done ;;
all|all-repeats)
    F=$([ "$1" = all ] && echo all_engines || echo all_repeats)
    mkdir -p "$D/$F"
    # SMS="8 16" to leave out the whole GPU; every engine takes longer on few SMs (limits: 560 s;
    # LIMIT=N sets one limit for each SM count)
    for sms in ${SMS:-8 16 0}; do
        timeout ${LIMIT:-$((sms == 8 ? 220 : sms == 16 ? 190 : 150))} \
            python benchmarks/staircase_sweeps.py --sms $sms --shapes $SHAPES --benchmark-limit 0 \
            --out "$D/$F/round${R}_$sms.json"
    done ;;
esac
