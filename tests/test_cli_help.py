"""Every command's --help at the widths terminals have: typer's rich table squeezed the help into
~18 characters at 80 columns, cut option names (`--no-fidelity-g…`) and showed Python types
(`<list[str]>`) where the user needed to know what to type."""

from __future__ import annotations

import inspect
import re

import pytest
import typer.main
from cli_runner import run_cli

from deployopt.cli.main import app

ROOT = typer.main.get_command(app)
COMMANDS: dict[str, typer.core.TyperCommand] = ROOT.commands  # type: ignore[attr-defined]
PYTHON_TYPE = re.compile(r"<\s*(str|int|float|bool|path|Path)\s*>|\b(list|tuple|dict)\[")


def _summary(help_text: str | None) -> str:
    """A command's first paragraph, what a help page starts with and the root lists."""
    return inspect.cleandoc(help_text or "").partition("\f")[0].split("\n\n")[0]


def _head(text: str, length: int = 25) -> str:
    """The first words of `text`, `length` characters or more (all of it when shorter)."""
    head = ""
    for word in text.split():
        head = f"{head} {word}" if head else word
        if len(head) >= length:
            break
    return head


@pytest.mark.parametrize("columns", [80, 120])
@pytest.mark.parametrize("name", ["", *COMMANDS])
def test_help_is_readable_at_terminal_widths(monkeypatch, capsys, name: str, columns: int) -> None:
    """`deployopt [COMMAND] --help` at 80 and 120 columns: fits the width; every option's long
    names whole (none cut with …); no Python type as a metavar; and the help text in a column wide
    enough to read: the first 25-odd characters of each option's help (and of each command summary)
    on one line, where the rich table at 80 columns wrapped them over two or three."""
    command = COMMANDS[name] if name else ROOT
    code, out, err = run_cli(monkeypatch, capsys, *([name] if name else []), "--help", columns=columns)
    assert code == 0 and err == "", err
    lines = out.splitlines()
    assert max(len(line) for line in lines) <= columns
    params = [p for p in command.params if not getattr(p, "hidden", False)]
    long_names = [o for p in params for o in (*p.opts, *p.secondary_opts) if o.startswith("--")]
    for option in [*long_names, "--help"]:
        assert re.search(rf"(?<![\w-]){re.escape(option)}(?![\w-])", out), f"{option} not whole:\n{out}"
    assert not re.search(r"-[\w-]*…", out), out  # an option name cut short
    assert not PYTHON_TYPE.search(out), out
    texts = [p.help for p in params if getattr(p, "help", None)]
    texts += [_summary(c.help) for c in COMMANDS.values()] if not name else [_summary(command.help)]
    for text in texts:
        head = _head(str(text))
        assert any(head in line for line in lines), f"{head!r} is not on one line:\n{out}"


def test_every_option_with_a_value_says_what_to_type() -> None:
    """An option that takes a value declares a metavar (N, FILE, NAME:SHAPE, ...): without one, typer
    shows the Python type (`<list[str]>` for --input-shape, whose value is NAME:1x3x224x224)."""
    bare = [
        f"{name} {param.opts[0]}"
        for name, command in COMMANDS.items()
        for param in command.params
        if param.param_type_name == "option" and not getattr(param, "is_flag", False) and not param.metavar
    ]
    assert bare == []
