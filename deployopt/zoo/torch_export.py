"""What the torch-defined zoo models share: the lazy torch import and the classifier export."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from deployopt.errors import DeployoptError, reraise_interrupt
from deployopt.fileio import atomic_path


def require_torch(what: str) -> Any:
    """torch, or a one-line error naming the export that needs it (torch is an optional extra)."""
    try:
        import torch
    except ImportError as exc:
        reraise_interrupt(exc)  # Ctrl-C inside torch's import: interrupted, not missing
        raise DeployoptError(f"{what} export needs PyTorch: pip install 'deployopt[torch]'") from None
    return torch


def export_classifier(model: Any, dest: Path, dummy: Any) -> Path:
    """An eval-mode image classifier to ONNX (opset 17, TorchScript exporter, input "input", output
    "logits", BatchNorm folded), written atomically: an interrupted export leaves no file."""
    import torch

    with atomic_path(dest, suffix=".onnx") as tmp, torch.no_grad():
        torch.onnx.export(
            model,
            (dummy,),
            str(tmp),
            dynamo=False,
            opset_version=17,
            input_names=["input"],
            output_names=["logits"],
            do_constant_folding=True,
        )
    return dest
