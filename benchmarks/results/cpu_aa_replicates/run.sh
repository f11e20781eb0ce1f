#!/bin/bash
# A/A and A/B series: 16 rounds, each `bench --repeat 3` of the bundled model (A) then of its 1.2x wider twin (W)
D=/work/main/.venv/bin/deployopt
for i in $(seq -w 1 16); do
  $D bench resnet56_pruned_cifar.onnx --backend ort --runs 20 --warmup 5 --repeat 3 -o a$i.json > /dev/null || exit 1
  $D bench resnet56_x120.onnx --backend ort --runs 20 --warmup 5 --repeat 3 -o w$i.json > /dev/null || exit 1
done
date -u > done.txt
