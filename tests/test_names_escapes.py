"""Control characters in a model's names (an ESC sequence in a node or input name) are printed
escaped (`\\x1b`), in tables, notices and error lines alike, piped or not: they reached the
terminal raw, recolouring it. JSON keeps the names as they are (it escapes them itself)."""

from __future__ import annotations

import io
import json
import subprocess
from collections.abc import Callable
from pathlib import Path

import onnx
import pytest
from cli_runner import run_cli
from model_names import renamed
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from deployopt.cli.app import _console, print_notices, print_table

ESC_SUFFIX = "\x1b[31mRED\x1b[0m"


@pytest.fixture
def ansi_model(tmp_path: Path, zoo_model: Callable[[str], onnx.ModelProto]) -> Path:
    path = tmp_path / "ansi.onnx"
    onnx.save(renamed(zoo_model("mobilenet_like_dynamic"), lambda s: s + ESC_SUFFIX), path)
    return path


def test_analyze_prints_no_raw_escape(
    ansi_model: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run_cli(monkeypatch, capsys, "analyze", str(ansi_model))
    assert code == 0, err
    assert "\x1b" not in out and "\x1b" not in err
    assert "features.0.conv\\x1b[31mRED\\x1b[0m" in out  # the table's names, escaped
    # the notice's hint is a shell word that names the input when pasted (bash's $'...')
    assert "--input-shape $'input\\x1b[31mRED\\x1b[0m:Nx3x32x32'" in err, err


def test_error_line_escapes_the_names_it_lists(
    ansi_model: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run_cli(monkeypatch, capsys, "analyze", str(ansi_model), "--input-shape", "nope:1x3x32x32")
    assert code != 0
    assert "\x1b" not in err and "its inputs: input\\x1b[31mRED\\x1b[0m" in err, err
    assert len(err.strip().splitlines()) == 1


def test_json_keeps_names_as_they_are(
    ansi_model: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run_cli(monkeypatch, capsys, "analyze", str(ansi_model), "--json")
    assert code == 0, err
    ids = [g["id"] for g in json.loads(out)["groups"]]
    assert f"features.0.conv{ESC_SUFFIX}" in ids


def test_escape_controls_spells_c0_del_and_c1() -> None:
    from deployopt.cli.app import escape_controls

    assert escape_controls("a\x1b[0m\x07\x7f\x9b\tb\nc\rd") == "a\\x1b[0m\\x07\\x7f\\x9b\\tb\\nc\\rd"
    assert escape_controls("a\nb\x1b", keep="\n") == "a\nb\\x1b"
    assert escape_controls("plain ä层 name") == "plain ä层 name"


def _console_to(buf: io.StringIO) -> object:
    console = _console()
    console.file = buf
    return console


def test_print_notices_is_one_line_per_notice(monkeypatch: pytest.MonkeyPatch) -> None:
    """A newline in a name a notice quotes as it is is written `\\n`: the notice stays one line."""
    import deployopt.cli.app as app

    buf = io.StringIO()
    monkeypatch.setattr(app, "err_console", _console_to(buf))
    print_notices(["renamed node\nX\x1b]0;title\x07 → Y"])
    assert buf.getvalue() == "notice: renamed node\\nX\\x1b]0;title\\x07 → Y\n"


def test_tables_text_and_other_renderables_are_escaped() -> None:
    buf = io.StringIO()
    console = _console_to(buf)
    table = Table("name", "status")
    styled = Text.assemble(("frozen", "red"), ": constant 'b\x1b[2J' is shared")
    table.add_row("conv\x1b[31m", styled)
    print_table(table, console)  # type: ignore[arg-type]
    console.print(Panel("inside a panel \x9b31m"))  # type: ignore[attr-defined]
    console.print(Text.assemble(("a\x1bb", "bold"), " c"))  # type: ignore[attr-defined]
    out = buf.getvalue()
    assert "\x1b" not in out and "\x9b" not in out
    assert "conv\\x1b[31m" in out and "'b\\x1b[2J'" in out and "panel \\x9b31m" in out and "a\\x1bb c" in out


def test_escaped_text_keeps_its_styles_on_the_same_characters() -> None:
    from deployopt.cli.app import _escape_text

    text = Text.assemble("x\x1b", ("frozen", "red"), " y")
    escaped = _escape_text(text, "")
    assert escaped.plain == "x\\x1bfrozen y"
    (span,) = escaped.spans
    assert escaped.plain[span.start : span.end] == "frozen" and span.style == "red"


@pytest.mark.parametrize("name", ["images", "input.1", "in put", "it's", "in\x1b[31mput", "a\nb\\c'd\x85"])
def test_input_shape_hint_is_one_shell_word_naming_the_input(name: str) -> None:
    """bash reads the hint back as NAME:DIMS exactly; a plain name is left as it was."""
    from deployopt.model import input_shape_arg

    word = input_shape_arg(name, "1x3x32x32")
    if name in ("images", "input.1"):
        assert word == f"{name}:1x3x32x32"
    assert not any(ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F for c in word)
    said = subprocess.run(["bash", "-c", f"printf %s {word}"], capture_output=True, check=True).stdout
    assert said.decode() == f"{name}:1x3x32x32"
