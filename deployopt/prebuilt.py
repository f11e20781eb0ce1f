"""A serialized TensorRT engine given where a model goes: `bench|profile FILE.engine` times it as it is.

Why a module of its own: users ship engines (`optimize --remote` brings the chosen plan's back as
OUTDIR/model.engine) and time the same file week after week; the tensorrt backend (here and through
the board's runner), trtexec (`--loadEngine`) and the CLI must agree on what an engine is (by its
name, as jetson/runner.py's is_serialized_engine decides), what cannot apply to one (it is built:
no calibration, no precision, no batch override) and how its result says so. Light on purpose (no
onnx, no numpy): `compare` and the CLI's early refusals import it.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from deployopt.errors import DeployoptError

#: File endings of serialized TensorRT engines (jetson/runner.py's is_serialized_engine).
ENGINE_SUFFIXES = (".engine", ".plan", ".trt")
#: The backends that can time an engine file: TensorRT's own runtime (here or the runner on a
#: board) and trtexec --loadEngine (here or on a board).
ENGINE_BACKENDS = ("tensorrt", "trtexec")
#: How `timed` says what an engine's precision is: the one it was built with; --dtype changes
#: nothing and is kept only as `dtype_label` (jetson/runner.py says the same words, a test keeps
#: the two equal).
AS_BUILT = "precision as built, --dtype only a label"
PREBUILT = f"a prebuilt engine ({AS_BUILT})"


def is_engine_file(path: str | os.PathLike[str]) -> bool:
    """Whether `path` names a serialized TensorRT engine (by its ending, any case)."""
    return str(path).lower().endswith(ENGINE_SUFFIXES)


def not_onnx(path: str | os.PathLike[str]) -> str:
    """The loader's one line for an engine given to a command that reads the ONNX graph (optimize,
    analyze, apply, verify ...): an engine is compiled for one GPU and TensorRT version, its
    channels cannot be read or edited."""
    return (
        f"{path}: a serialized TensorRT engine, not an ONNX model: an engine cannot be analyzed or edited "
        "(its layers are compiled for one GPU); give the ONNX model it was built from (`deployopt bench` "
        "and `profile` time an engine as it is, --backend tensorrt or trtexec)"
    )


def refuse_engine_backend(path: str | os.PathLike[str], backend: str) -> None:
    """torch, onnxruntime and the wave model read the ONNX graph, which an engine does not hold."""
    if is_engine_file(path) and backend not in ENGINE_BACKENDS:
        raise DeployoptError(
            f"{Path(path).name} is a serialized TensorRT engine: only --backend tensorrt or trtexec can "
            f"time it (here or with --remote), not {backend!r}, which reads the ONNX graph: give the ONNX "
            "model it was built from"
        )


def refuse_engine_options(
    path: str | os.PathLike[str], batch: int | None, calibration_data: str | os.PathLike[str] | None
) -> None:
    """What cannot apply to an engine, refused before anything runs: calibration data (its INT8
    ranges were fixed when it was built) and --batch (a batch override needs the input names and
    dims, which only TensorRT can read from an engine; a dynamic-shape engine takes --input-shape
    NAME:SHAPE within the optimization profile it was built with, a static one runs at its own)."""
    if not is_engine_file(path):
        return
    name = Path(path).name
    if calibration_data is not None:
        raise DeployoptError(
            f"--calibration-data: {name} is a prebuilt engine, its precision and INT8 ranges were fixed "
            "when it was built; time it without calibration data, or calibrate when building it from "
            "the ONNX model"
        )
    if batch is not None:
        raise DeployoptError(
            f"--batch: {name} is a prebuilt engine, whose input names and shapes are not known before "
            "TensorRT loads it; for an engine built with a dynamic-shape optimization profile give "
            "--input-shape NAME:SHAPE (within that profile); a static engine runs at its own shape"
        )


def mark_prebuilt(environment: dict[str, Any], dtype: str) -> None:
    """Record in a result's environment that it timed a prebuilt engine. `dtype` is only the label
    the user gave, so it is not recorded as `dtype` (which compare reads as the precision built)."""
    environment.pop("dtype", None)
    environment["prebuilt_engine"] = True
    environment["dtype_label"] = dtype


def prebuilt_profile_timed(timed: str) -> str:
    """A per-layer profile's `timed` of an engine given as the model."""
    return f"{timed}, of {PREBUILT}"
