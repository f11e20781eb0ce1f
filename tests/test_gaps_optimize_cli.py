"""optimize's one-line refusals in the words of its options: an unknown --backend names the option
(and a near name) as bench's and profile's do, and a --resume that adds or drops --remote says so
(`remote was the default, now "HOST"` / `--remote was HOST, now the default` read as settings)."""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_runner import one_error, run_cli
from test_board_target import board_tree
from test_optimize_remote import optimize_remote, two_convs
from test_tensorrt_remote import HOST

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "resnet56_pruned_cifar.onnx"


@pytest.fixture(autouse=True)
def _private_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("DEPLOYOPT_CACHE_DIR", str(tmp_path / "cache"))


@pytest.mark.parametrize(
    ("name", "said"),
    [
        ("tensorr", "unknown backend 'tensorr'; did you mean 'tensorrt'? choose one of: "),
        ("onnxruntime", "unknown backend 'onnxruntime'; did you mean 'ort'? choose one of: "),
        ("xyz", "unknown backend 'xyz'; choose one of: "),
    ],
)
def test_an_unknown_backend_names_the_option(
    name: str, said: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, _, err = run_cli(
        monkeypatch,
        capsys,
        "optimize",
        str(EXAMPLE),
        "-t",
        "nano",
        "--backend",
        name,
        "-o",
        str(tmp_path / "o"),
    )
    assert one_error(code, err) == f"error: {said}auto, tensorrt, trtexec, torch, ort, model for --backend\n"


def test_resume_with_remote_on_a_journal_written_here_says_remote_was_not_given(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    log = board_tree(tmp_path, monkeypatch, "agx-orin-64gb")
    model = two_convs(tmp_path / "host" / "net.onnx")
    out = tmp_path / "out"
    code, _, err = run_cli(
        monkeypatch, capsys, "optimize", str(model), "-t", "agx-orin-64gb", "-b", "model", "--max-evals", "4",
        "-o", str(out),
    )  # fmt: skip
    assert code == 0, err
    code, _, err = optimize_remote(monkeypatch, capsys, model, out, "--resume")
    assert one_error(code, err) == (
        f"error: --resume: {out}/journal.jsonl was written by a different run (--remote {HOST} was not given "
        "before); use --force to start over\n"
    )
    assert not log.exists()  # refused before the board was asked anything


def test_resume_without_remote_on_a_boards_journal_says_remote_was_given(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    board_tree(tmp_path, monkeypatch, "agx-orin-64gb")
    model = two_convs(tmp_path / "host" / "net.onnx")
    out = tmp_path / "out"
    code, _, err = optimize_remote(monkeypatch, capsys, model, out)
    assert code == 0, err
    code, _, err = run_cli(
        monkeypatch, capsys, "optimize", str(model), "-t", "agx-orin-64gb", "-b", "model", "--max-evals", "4",
        "-o", str(out), "--resume",
    )  # fmt: skip
    err = one_error(code, err)
    assert f"; --remote {HOST} was given before, not now; " in err, err
    # another board: both named, as any other option's change
    code, _, err = run_cli(
        monkeypatch, capsys, "optimize", str(model), "--remote", "me@other", "--max-evals", "4",
        "-o", str(out), "--resume",
    )  # fmt: skip
    assert f"(--remote was {HOST}, now me@other); use --force" in one_error(code, err)
