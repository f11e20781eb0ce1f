#!/bin/bash
# Run from a scratch folder holding resnet56_pruned_cifar.onnx (examples/) and resnet56_x120.onnx (W: the
# bundled model's 27 inner widths x 1.2, rounded; made here if missing).
#   bash run.sh              A/A and A/B series: 16 rounds, each `bench --repeat 3` of the bundled model (A)
#                            then of its 1.2x wider twin (W)
#   bash run.sh interleaved  the same models with `bench --append`: 36 rounds, each one replicate of A into
#                            aa1.json, one of A into aa2.json (the A/A pair), one of W into w.json
D=/work/main/.venv/bin/deployopt
P=/work/main/.venv/bin/python
[ -f resnet56_x120.onnx ] || $P - <<'PY' || exit 1
import sys
import onnx
sys.path.insert(0, "/work/main/examples")
from make_examples import example_widths
from deployopt.zoo import resnet56_cifar
onnx.save(resnet56_cifar([round(1.2 * w) for w in example_widths()], batch=1, seed=0), "resnet56_x120.onnx")
PY
B="--backend ort --runs 20 --warmup 5"
if [ "$1" = interleaved ]; then
  date -u > started_interleaved.txt
  for i in $(seq 1 36); do
    $D bench resnet56_pruned_cifar.onnx $B --append -o aa1.json > /dev/null || exit 1
    $D bench resnet56_pruned_cifar.onnx $B --append -o aa2.json > /dev/null || exit 1
    $D bench resnet56_x120.onnx $B --append -o w.json > /dev/null || exit 1
  done
  date -u > done_interleaved.txt
  exit 0
fi
for i in $(seq -w 1 16); do
  $D bench resnet56_pruned_cifar.onnx $B --repeat 3 -o a$i.json > /dev/null || exit 1
  $D bench resnet56_x120.onnx $B --repeat 3 -o w$i.json > /dev/null || exit 1
done
date -u > done.txt
