"""One check for a backend option given empty (an unset shell variable), `refuse_empty_backend`:
staircase's and calibrate's --measure, bench's and profile's --backend and optimize's --backend
each wrote it out, and each command's line is the helper's."""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_runner import run_cli

from deployopt.errors import DeployoptError


def test_the_helper_passes_a_name_or_nothing_and_refuses_empty() -> None:
    from deployopt.cli.app import refuse_empty_backend

    refuse_empty_backend("--backend", None)
    refuse_empty_backend("--backend", "ort")
    with pytest.raises(DeployoptError) as info:
        refuse_empty_backend("--measure", "")
    assert (
        str(info.value)
        == "--measure '': no backend named; choose one of: ort, torch, tensorrt, trtexec, model"
    )
    with pytest.raises(DeployoptError, match=r"^--backend '': no backend named; choose one of: auto, ort$"):
        refuse_empty_backend("--backend", "", ["auto", "ort"])


@pytest.mark.parametrize(
    ("args", "option", "choices"),
    [
        (
            ["staircase", "-t", "nano", "--input", "1x16x8x6", "--out-channels", "16,32", "--measure", ""],
            "--measure",
            None,
        ),
        (["calibrate", "-t", "nano", "--measure", ""], "--measure", None),
        (["bench", "MODEL", "-b", ""], "--backend", None),
        (["profile", "MODEL", "-b", ""], "--backend", None),
        (["optimize", "MODEL", "-t", "nano", "-b", "", "-o", "OUT"], "--backend", "optimize"),
    ],
    ids=["staircase", "calibrate", "bench", "profile", "optimize"],
)
def test_each_command_says_the_helpers_line(
    monkeypatch, capsys, tmp_path: Path, zoo_model_path, args: list[str], option: str, choices: str | None
) -> None:
    from deployopt.cli.app import refuse_empty_backend

    model = str(zoo_model_path("resnet_projection"))
    args = [model if a == "MODEL" else str(tmp_path / "out") if a == "OUT" else a for a in args]
    code, out, err = run_cli(monkeypatch, capsys, *args)
    assert (code, out) == (2, ""), err
    if choices == "optimize":
        from deployopt.optimize import BACKEND_CHOICES

        with pytest.raises(DeployoptError) as info:
            refuse_empty_backend(option, "", BACKEND_CHOICES)
    else:  # what these commands take: 'model' predicts, and each of them refuses it
        from deployopt.backends.base import MEASURING_BACKENDS

        with pytest.raises(DeployoptError) as info:
            refuse_empty_backend(option, "", MEASURING_BACKENDS)
    assert err == f"error: {info.value}\n"
    assert not (tmp_path / "out").exists()
