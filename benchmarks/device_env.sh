# Sourced by the benchmarks/run_*_gpu.sh device scripts, from the repository root:
#   source "$(dirname "${BASH_SOURCE[0]}")/device_env.sh"
# The device machine has no onnx2torch or onnx-graphsurgeon and no network to fetch them, so their
# wheels travel with the working tree in .whl/ (carry .whl in the device call); install them into
# /tmp/site and put it, with the repository root for deployopt, on PYTHONPATH.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD

# step NAME TIMEOUT CMD...: run one command of a device script, keeping its stdout, stderr and exit
# status in the results folder $D (NAME.out, NAME.err, a line of rc.txt)
step() {
    local name=$1 limit=$2
    shift 2
    timeout "$limit" "$@" >"$D/$name.out" 2>"$D/$name.err"
    echo "$name $?" >>"$D/rc.txt"
}
