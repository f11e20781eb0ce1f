"""The torch backend's worker imports nothing from the folder deployopt runs in (torch.worker_command).

Found by the read-only review: the worker was `python -m deployopt.backends.torch_worker`, and -m
puts the current folder first on sys.path (the deployopt console script never has it there). A
user's copy.py beside the model made `--backend torch` fail with "PyTorch is not installed" while
`deployopt backends` said it was, their own onnx2torch.py (a conversion script) was imported and
run, and a deployopt/ checkout there replaced the worker's code (another protocol version).
"""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Callable
from pathlib import Path

import pytest
from cli_runner import run_cli

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("torch") is None or importlib.util.find_spec("onnx2torch") is None,
    reason="needs torch and onnx2torch",
)

#: Files a user may have in the folder they run deployopt from, each of which broke the worker.
USERS_FILES = {
    "copy.py": "x = 1\n",  # a standard-library name: torch's import failed on it
    "onnx2torch.py": 'open("RAN_USERS_ONNX2TORCH_PY", "w").write("ran")\n',  # their conversion script
    "deployopt/__init__.py": 'raise SystemExit("the deployopt of another checkout")\n',
}


@pytest.mark.parametrize("name", sorted(USERS_FILES))
def test_cli_bench_torch_runs_beside_a_users_module_of_a_library_name(
    name: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    zoo_model_path: Callable[[str], Path],
) -> None:
    """`bench --backend torch` run from a folder holding `name`: measured, and the file never ran."""
    folder = tmp_path / "here"
    (folder / name).parent.mkdir(parents=True)
    (folder / name).write_text(USERS_FILES[name])
    model = folder / "m.onnx"
    model.write_bytes(zoo_model_path("mobilenet_like").read_bytes())
    monkeypatch.chdir(folder)
    code, out, err = run_cli(
        monkeypatch, capsys, "bench", "m.onnx", "--backend", "torch", "--runs", "3", "--warmup", "1",
        "--dtype", "fp32", "--json",
    )  # fmt: skip
    assert code == 0, err
    timing = json.loads(out)
    assert timing["backend"] == "torch" and len(timing["samples_us"]) == 3, out
    assert not (folder / "RAN_USERS_ONNX2TORCH_PY").exists()
