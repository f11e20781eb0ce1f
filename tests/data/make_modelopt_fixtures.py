"""Record the Model Optimizer fixtures: small float nets from deployopt.zoo, quantized to INT8 QDQ
by NVIDIA Model Optimizer's ONNX path, the way a Jetson user prepares a model for TensorRT INT8.

Model Optimizer pulls in cupy and onnxruntime-gpu (which would replace the project's onnxruntime),
so it is not a test dependency: run this in a venv of its own, from the repository root:

    python3 -m venv /tmp/mo && /tmp/mo/bin/pip install "nvidia-modelopt[onnx]==0.47.0"
    PYTHONPATH=$PWD /tmp/mo/bin/python tests/data/make_modelopt_fixtures.py

It writes tests/data/modelopt_int8_<name>.onnx (the detector is exported with torch, which
Model Optimizer installs); tests/test_qdq_modelopt.py rebuilds each float
twin from the same zoo call (deterministic from its seed) and checks the quantized file against it.
Recorded with nvidia-modelopt 0.47.0, onnxruntime-gpu 1.24.4 (CPU calibration), 2026-12-03.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from zoo_models import MODELOPT_FLOAT_TWINS  # noqa: E402  (tests/zoo_models.py: the shared recipe)


def quantize(model: onnx.ModelProto, dest: Path) -> None:
    """INT8 QDQ with Model Optimizer's defaults (entropy calibration on 32 random images, CPU)."""
    with tempfile.TemporaryDirectory() as tmp:
        src, calib = Path(tmp) / "float.onnx", Path(tmp) / "calib.npy"
        onnx.save(model, src)
        dims = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
        rng = np.random.default_rng(0)
        np.save(calib, rng.standard_normal((32, *dims[1:])).astype(np.float32))
        subprocess.run(
            [
                sys.executable,
                "-m",
                "modelopt.onnx.quantization",
                "--onnx_path", str(src),
                "--quantize_mode", "int8",
                "--calibration_data", str(calib),
                "--calibration_eps", "cpu",
                "--output_path", str(dest),
            ],
            check=True,
        )  # fmt: skip


def main() -> None:
    for name, build in MODELOPT_FLOAT_TWINS.items():
        quantize(build(), HERE / f"modelopt_int8_{name}.onnx")


if __name__ == "__main__":
    main()
