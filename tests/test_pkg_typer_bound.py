"""typer's declared lower bound excludes every typer that allows a click it breaks with (bug bash 01).

pip keeps an installed typer that meets the bound, so `typer>=0.13` let `pip install deployopt` keep
typer 0.13-0.17.4 beside the click 8.2/8.3+ those allow, and the CLI then tracebacked: typer
0.13-0.15.3 + click >= 8.2 on every `--help` and missing argument (`TyperArgument.make_metavar()
takes 1 positional argument`; 0.15.4 alone pinned click < 8.2), typer 0.16-0.17.4 + click >= 8.3
on every missing argument (click's UNSET default reached the command as None). 0.17.5 (click < 8.3)
and 0.18.0 (click >= 8.0, 8.0.0 to 8.5.1 checked) gave `error: Missing argument 'MODEL'`, exit 2,
with every click they allow (checked in fresh venvs, 2026-12-07; the missing-argument line itself:
test_cli_surgery's usage errors).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from packaging.requirements import Requirement

REPO = Path(__file__).resolve().parents[1]

#: typer releases that allow a click they fail with (each checked with deployopt's CLI)
#: (0.15.4 pinned click < 8.2 and works, but 0.16.0-0.17.4 after it allow click 8.3 again)
BROKEN = ("0.13.0", "0.13.1", "0.14.0", "0.15.2", "0.16.0", "0.16.1", "0.17.0", "0.17.4")
#: the first that works with every click it allows, and later ones checked
WORKING = ("0.17.5", "0.18.0", "0.20.1", "0.24.2", "0.29.1")


def dependency(name: str) -> Requirement:
    """`name`'s requirement in pyproject.toml's [project] dependencies (read as text: tomllib is
    3.11+, and the tests run on 3.9 and 3.10 too)."""
    text = (REPO / "pyproject.toml").read_text()
    block = re.search(r"^dependencies = \[(.*?)^\]", text, re.M | re.S)
    assert block is not None
    found = [Requirement(s) for s in re.findall(r'^\s*"([^"]+)"', block.group(1), re.M)]
    matching = [r for r in found if r.name == name]
    assert len(matching) == 1, found
    return matching[0]


@pytest.mark.parametrize("version", BROKEN)
def test_the_typer_bound_excludes_typers_that_allow_a_click_they_break_with(version: str) -> None:
    assert version not in dependency("typer").specifier


@pytest.mark.parametrize("version", WORKING)
def test_the_typer_bound_admits_the_typers_that_work(version: str) -> None:
    assert version in dependency("typer").specifier
