"""Every command line the docs show still parses: options get renamed or removed and the README,
docs/*.md and the result READMEs keep showing the old spelling, which only a reader finds (with a
`No such option` on the board, an hour into a session).

Scanned: fenced code blocks and inline code spans of README.md, docs/*.md and the READMEs under
jetson/, engines/, calibration_data/, examples/ and benchmarks/. Checked: `deployopt CMD ...` (and
`python -m deployopt ...`) against the typer app's click commands, `runner.py` against
jetson/runner.py's `build_parser()`, `benchmarks/NAME.py` against the parser that script builds.
For each line: the command exists, every `--option`/`-x` is one of its options, an option that
takes a value has one, and the whole argv parses (click's `make_context`, argparse's
`parse_args`), which converts values and counts arguments but runs no command. trtexec and shell
scripts (.sh) are left alone.

Synopsis notation is understood, so it does not fail: `[--opt VALUE]` is optional (checked as if
given), `a|b` and `[--x N | --no-y]` are alternatives (each checked), `[model]` and `...` are
elided arguments; values such as `N`, `FILE`, `USER@HOST`, `<path>`, `$OUT/x.json` are
placeholders (the option is checked, its value is not converted). An inline code span is often a
fragment (`deployopt apply --plan`), so only there may required arguments be missing.
"""

from __future__ import annotations

import argparse
import contextlib
import re
import runpy
import shlex
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any, Union
from unittest import mock

import pytest
import typer.main
from scripts import ROOT, load_script

from deployopt.cli.main import app
from deployopt.errors import DeployoptError

DOC_GLOBS = (
    "README.md",
    "docs/*.md",
    "jetson/**/README.md",
    "engines/**/README.md",
    "calibration_data/**/README.md",
    "examples/**/README.md",
    "benchmarks/**/README.md",
)

#: Lines shown on purpose that do not parse, by (doc, text the line contains): why each is there.
#: A stale entry (no line matches any more) fails test_allow_list_entries_are_all_still_needed.
ALLOWED: dict[tuple[str, str], str] = {
    ("benchmarks/results/h200_cli/rerun_2026-12-04/README.md", "-o ''"): (
        "the bad-input check it records: an empty -o is refused with one line (the mistake is the point)"
    ),
}

ROOT_COMMAND = typer.main.get_command(app)
#: click's exceptions, from wherever this typer takes click (vendored or the package)
CLICK = sys.modules[typer.BadParameter.__module__]
#: fenced blocks in these languages hold code or data, not shell lines
NOT_SHELL = {"python", "py", "json", "yaml", "toml", "csv", "diff", "markdown", "md"}
PYTHON = re.compile(r"python(\d+(\.\d+)?)?$")
ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")
SEPARATORS = {"|", "||", "&&", ";", "&"}
WRAPPERS = {"sudo", "time", "nohup", "exec", "env", "command"}
#: a value the reader fills in: N, FILE, R,G,B, USER@HOST, NAME:SHAPE, <path>, ..., $OUT/x.json
PLACEHOLDER = re.compile(r".*(\.\.\.|…|<[^>]*>|\$).*|[A-Z][A-Z0-9_]*([@:,/.=-][A-Z0-9_]+)*")
ELIDED = {"...", "…"}
COMMAND_WORD = re.compile(r"[a-z][a-z0-9-]*$")


@dataclass(frozen=True)
class Snippet:
    """One shell line (continuations joined) of a fenced block, or one inline code span."""

    doc: str
    line: int
    text: str
    fenced: bool
    env: tuple[tuple[str, str], ...] = ()  # NAME=value set by earlier lines of the same block
    raw: tuple[str, ...] = ()  # the doc's lines from `line` on that the snippet spans


def snippets(markdown: str, doc: str) -> list[Snippet]:
    """The fenced shell lines and inline code spans of one markdown file, with their line numbers."""
    found: list[Snippet] = []
    fence = ""
    language = ""
    paragraph: list[tuple[int, str]] = []
    pending: tuple[int, str, list[str]] | None = None  # a fenced line continued with `\`
    env: dict[str, str] = {}

    def flush_paragraph() -> None:
        found.extend(_code_spans(paragraph, doc))
        paragraph.clear()

    for number, line in enumerate(markdown.splitlines(), 1):
        opening = re.match(r"\s*(`{3,}|~{3,})\s*([^`\s]*)", line)
        if not fence:
            if opening:
                flush_paragraph()
                fence, language, env = opening.group(1), opening.group(2).lower(), {}
            elif not line.strip() or line.lstrip().startswith("|"):  # a table row: its own spans
                flush_paragraph()
                if line.strip():
                    found.extend(_code_spans([(number, line.replace("\\|", "|"))], doc))
            else:
                paragraph.append((number, line))
            continue
        marker = opening.group(1) if opening else ""
        if marker and line.strip() == marker and marker[0] == fence[0] and len(marker) >= len(fence):
            fence, pending = "", None  # the closing fence
            continue
        if language in NOT_SHELL:
            continue
        text = re.sub(r"^\s*\$ ", "", line) if pending is None else line
        start, text, raw = (
            (pending[0], f"{pending[1]} {text.strip()}", [*pending[2], line])
            if pending
            else (number, text.strip(), [line])
        )
        if text.endswith("\\") and not text.endswith("\\\\"):
            pending = (start, text[:-1].rstrip(), raw)
            continue
        pending = None
        if text and not text.startswith("#"):
            found.append(Snippet(doc, start, text, True, tuple(env.items()), tuple(raw)))
            env.update(_assignments(text))
    flush_paragraph()
    return found


def _code_spans(lines: list[tuple[int, str]], doc: str) -> list[Snippet]:
    """Inline code spans of one paragraph; a span may run over a line break (read as a space)."""
    if not lines:
        return []
    text = "\n".join(line for _, line in lines)
    spans = []
    for match in re.finditer(r"(?<!`)(`+)(?!`)(.+?)(?<!`)\1(?!`)", text, re.S):
        first = text.count("\n", 0, match.start())
        raw = tuple(line for _, line in lines[first : first + match.group(0).count("\n") + 1])
        spans.append(Snippet(doc, lines[first][0], " ".join(match.group(2).split()), False, (), raw))
    return spans


def _assignments(text: str) -> dict[str, str]:
    """`A="--backend torch --runs 200"` on a line of its own: later lines of the block say `$A`."""
    found: dict[str, str] = {}
    for part in re.split(r"\s*(?:;|&&)\s*", text):
        try:
            tokens = shlex.split(part, comments=True)
        except ValueError:
            continue
        if tokens and all(ASSIGNMENT.match(t) for t in tokens):
            found.update(t.split("=", 1) for t in tokens)  # type: ignore[misc]
    return found


# ---- from a line to the commands it runs -----------------------------------------------------


@dataclass
class Group:
    """`[ ... ]` in a synopsis: optional, its alternatives separated by `|` tokens."""

    alternatives: list[list[Item]] = field(default_factory=lambda: [[]])


Item = Union[str, Group]


def command_lines(snippet: Snippet) -> list[list[str]]:
    """The commands of a line, each a token list: split at `&&`, `|`, `;` (outside `[...]`),
    redirections dropped, `$VAR` set earlier in the block expanded, `ssh HOST 'cmd'` opened."""
    try:
        tokens = shlex.split(snippet.text, comments=True)
    except ValueError:  # an apostrophe in prose
        tokens = snippet.text.split()
    env = dict(snippet.env)
    expanded: list[str] = []
    for token in tokens:
        name = re.fullmatch(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?", token)
        expanded += shlex.split(env[name.group(1)]) if name and name.group(1) in env else [token]
    commands: list[list[str]] = [[]]
    depth = 0
    skip_next = False
    for token in expanded:
        if skip_next:
            skip_next = False
            continue
        if depth == 0 and (token in SEPARATORS or token in {"(", ")"}):
            commands.append([])
            continue
        if re.fullmatch(r"\d*(>>?|<|&>)", token):  # `> out.json`, `2> err.txt`
            skip_next = True
            continue
        if re.fullmatch(r"\d*(>>?|<|&>)[^>]*", token) and not token.startswith("<"):  # `2>&1`, `>x`
            continue
        depth = max(depth + token.count("[") - token.count("]"), 0)
        if depth == 0 and token.endswith(";"):
            commands[-1].append(token[:-1])
            commands.append([])
            continue
        commands[-1].append(token)
    result: list[list[str]] = []
    for command in commands:
        result += _unwrap(command)
    return [c for c in result if c]


def _unwrap(tokens: list[str]) -> list[list[str]]:
    """Drop `VAR=x` prefixes and `sudo`/`time`/`timeout 60`; `ssh [opts] HOST cmd` -> cmd."""
    while tokens and (ASSIGNMENT.match(tokens[0]) or tokens[0] in WRAPPERS):
        tokens = tokens[1:]
    if tokens[:1] == ["timeout"]:
        tokens = tokens[2:]
    if tokens[:1] == ["ssh"]:
        rest = tokens[1:]
        while rest and rest[0].startswith("-"):
            rest = rest[2:] if rest[0] in {"-o", "-p", "-i", "-l", "-J", "-F"} else rest[1:]
        remote = rest[1:]  # one quoted argument ('cd x && python3 runner.py ...') is a shell line
        return command_lines(Snippet("", 0, remote[0], True)) if len(remote) == 1 else [remote]
    return [tokens]


def _structure(tokens: list[str]) -> list[Item] | None:
    """Tokens with `[...]` made into optional groups; None where the brackets do not balance."""
    stack: list[Group] = [Group()]
    for token in tokens:
        core = token.lstrip("[")
        for _ in range(len(token) - len(core)):
            group = Group()
            stack[-1].alternatives[-1].append(group)
            stack.append(group)
        closing = len(core) - len(core.rstrip("]"))
        core = core.rstrip("]")
        if core == "|" and len(stack) > 1:
            stack[-1].alternatives.append([])
        elif core or token == "":  # `--models ''` is a value
            stack[-1].alternatives[-1].append(core)
        for _ in range(closing):
            if len(stack) == 1:
                return None
            stack.pop()
    return stack[0].alternatives[0] if len(stack) == 1 else None


def variants(tokens: list[str]) -> list[list[str]]:
    """Argument lists a synopsis stands for: every optional group given (its options are checked),
    alternative i of every `a|b` (in a token or a group) in variant i, elided `[model]` dropped."""
    items = _structure(tokens)
    if items is None:
        items = [t.strip("[]") for t in tokens if t.strip("[]")]
    count = max(_alternatives(items), default=1)
    return [_flatten(items, i) for i in range(count)]


def _alternatives(items: Sequence[Item]) -> list[int]:
    counts = []
    for item in items:
        if isinstance(item, Group):
            counts.append(len(item.alternatives))
            counts += [n for alt in item.alternatives for n in _alternatives(alt)]
        elif "|" in item:
            counts.append(len(item.split("|")))
    return counts


def _flatten(items: Sequence[Item], i: int) -> list[str]:
    out: list[str] = []
    for item in items:
        if isinstance(item, Group):
            chosen = item.alternatives[min(i, len(item.alternatives) - 1)]
            if chosen and (isinstance(chosen[0], Group) or chosen[0].startswith("-")):
                out += _flatten(chosen, i)  # `[model]`, `[flags]`: an elided argument
        elif "|" in item and not item.startswith("-"):
            alternatives = item.split("|")
            out.append(alternatives[min(i, len(alternatives) - 1)])
        else:
            out.append(item)
    return out


# ---- the programs: deployopt's click commands, the scripts' argparse parsers ------------------


@dataclass(frozen=True)
class Option:
    """One option string: how many values it takes (0 for a flag; '?', '*', '+' as argparse)."""

    nargs: int | str
    dest: str


@dataclass
class Program:
    """What a doc line runs: its options, and how to parse a whole argv (raising Rejected)."""

    name: str
    options: dict[str, Option]
    parse: Callable[[list[str], set[str], bool], None]  # argv, dropped option dests, fragment
    subcommands: dict[str, Program] = field(default_factory=dict)
    choices: dict[str, tuple[str, ...]] = field(default_factory=dict)  # dest -> accepted values


class Rejected(Exception):
    """The parser refused the argv; the message is its own."""


def _click_program(command: Any, name: str) -> Program:
    ctx = command.context_class(command, info_name=name)
    options = {o: Option(0, "help") for o in command.get_help_option_names(ctx)}
    for param in command.params:
        if param.param_type_name != "option":
            continue
        nargs = 0 if (param.is_flag or getattr(param, "count", False)) else param.nargs
        for opt in (*param.opts, *param.secondary_opts):
            options[opt] = Option(nargs, param.name)

    def parse(argv: list[str], dropped: set[str], fragment: bool) -> None:
        if any(a in options and options[a].dest == "help" for a in argv) or "--version" in argv:
            return  # eager: it would print; the names were checked
        try:  # parses and converts only: no command callback runs, and no option has a callback
            command.make_context(name, list(argv), resilient_parsing=False)
        except DeployoptError as exc:  # the CLI's own value parsers (an empty path)
            raise Rejected(str(exc)) from None
        except CLICK.UsageError as exc:
            if isinstance(exc, CLICK.MissingParameter) and (fragment or exc.param.name in dropped):
                return
            raise Rejected(" ".join(exc.format_message().split())) from None

    return Program(name, options, parse, choices=_deployopt_choices())


def _deployopt_choices() -> dict[str, tuple[str, ...]]:
    """Values deployopt checks in the command, not in click (these options are plain strings), so
    a misspelt `--mode trimm` parses: the sets the commands check against, from the code."""
    from deployopt.backends.base import DTYPES, REGISTRY
    from deployopt.fidelity import RESIZE_MODES
    from deployopt.search import MODES

    backends = (*REGISTRY, "auto")
    return {"mode": MODES, "resize": RESIZE_MODES, "backend": backends, "measure": backends, "dtype": DTYPES}


@cache
def deployopt_program() -> Program:
    program = _click_program(ROOT_COMMAND, "deployopt")
    program.subcommands = {
        name: _click_program(cmd, f"deployopt {name}")
        for name, cmd in ROOT_COMMAND.commands.items()  # type: ignore[attr-defined]
    }
    return program


class _Captured(Exception):
    def __init__(self, parser: argparse.ArgumentParser) -> None:
        self.parser = parser


def _capture(self: argparse.ArgumentParser, *args: Any, **kwargs: Any) -> Any:
    raise _Captured(self)


def _argparse_error(self: argparse.ArgumentParser, message: str) -> Any:
    raise Rejected(message)


@contextlib.contextmanager
def _script_sandbox() -> Iterator[None]:
    """sys.argv, sys.path and the modules a script imports from benchmarks/ as they were."""
    argv, path, modules = list(sys.argv), list(sys.path), set(sys.modules)
    try:
        yield
    finally:
        sys.argv[:], sys.path[:] = argv, path
        for name in set(sys.modules) - modules:
            where = getattr(sys.modules[name], "__file__", None) or ""
            if where.startswith(str(ROOT / "benchmarks")) or where.startswith(str(ROOT / "jetson")):
                del sys.modules[name]


def _script_parser(script: str) -> argparse.ArgumentParser | None:
    """The parser `script` builds: jetson/runner.py's build_parser(); a benchmark script, which
    builds its parser inline, is run as __main__ up to its parse_args call, which raises, so
    nothing after it runs (what a script did before parsing would run here: they build the parser
    first, as `--help` needs too). None: the script has no argparse parser."""
    source = (ROOT / script).read_text()
    if "ArgumentParser" not in source:
        return None
    with _script_sandbox():
        if "def build_parser(" in source:
            return load_script(script, "docs_" + Path(script).stem).build_parser()
        sys.argv[:] = [str(ROOT / script)]
        sys.path.insert(0, str((ROOT / script).parent))  # as `python script.py` has it
        parse_args = mock.patch.object(argparse.ArgumentParser, "parse_args", _capture)
        parse_known_args = mock.patch.object(argparse.ArgumentParser, "parse_known_args", _capture)
        with parse_args, parse_known_args:
            try:
                runpy.run_path(str(ROOT / script), run_name="__main__")
            except _Captured as captured:
                return captured.parser
    raise AssertionError(f"{script} builds an ArgumentParser but never parsed with it")


def _argparse_program(parser: argparse.ArgumentParser, name: str) -> Program:
    options: dict[str, Option] = {}
    subcommands: dict[str, Program] = {}
    for action in parser._actions:
        for opt in action.option_strings:
            options[opt] = Option(1 if action.nargs is None else action.nargs, action.dest)
        if isinstance(action, argparse._SubParsersAction):
            for sub, subparser in action.choices.items():
                subcommands[sub] = _argparse_program(subparser, f"{name} {sub}")

    def parse(argv: list[str], dropped: set[str], fragment: bool) -> None:
        if any(a in options and options[a].dest == "help" for a in argv):
            return
        with mock.patch.object(argparse.ArgumentParser, "error", _argparse_error):
            try:
                parser.parse_args(argv)
            except Rejected as exc:
                missing = re.match(r"the following arguments are required: (.*)", str(exc))
                names = set(re.split(r"[,/] ?", missing.group(1))) if missing else set()
                if missing and (fragment or names <= {o for o in options if options[o].dest in dropped}):
                    return
                raise

    return Program(name, options, parse, subcommands)


@cache
def script_program(script: str) -> Program:
    parser = _script_parser(script)
    if parser is None:  # takes file names (or nothing), no options
        return Program(script, {}, lambda argv, dropped, fragment: None)
    return _argparse_program(parser, script)


def program_of(tokens: list[str], fenced: bool) -> tuple[Program | str, list[str]] | None:
    """The program a command runs and its arguments; a string says why it cannot be checked;
    None: not a command these docs tests know (trtexec, pip, cd, ...). In an inline span a bare
    `name.py --opt` (`bench_optimize.py --pruned-only`) and a deployopt command without the
    `deployopt` (`bench -o result.json`) are commands; in a fenced block they are not (a file
    listing), unless run with python or ./."""
    head, rest = tokens[0], tokens[1:]
    if fenced and head.endswith(".py") and not head.startswith("./"):
        return None
    if PYTHON.match(Path(head).name):
        while rest and rest[0].startswith("-") and rest[0] != "-m":
            rest = rest[2:] if rest[0] in {"-X", "-W"} else rest[1:]
        if rest[:2] == ["-m", "deployopt"]:
            return deployopt_program(), rest[2:]
        if not rest or not rest[0].endswith(".py"):
            return None
        head, rest = rest[0], rest[1:]
    if head == "deployopt" or head.endswith("/bin/deployopt"):
        return deployopt_program(), rest
    options_follow = any(t.lstrip("[").startswith("-") for t in rest)
    if not fenced and head in deployopt_program().subcommands and options_follow:
        return deployopt_program(), tokens  # `bench -o result.json` in prose
    if not head.endswith(".py"):
        return None
    path = head.removeprefix("./")
    if Path(path).name == "runner.py" and path in {"runner.py", "jetson/runner.py"}:
        return script_program("jetson/runner.py"), rest
    if path.startswith("benchmarks/") or (ROOT / "benchmarks" / path).is_file():
        script = path if path.startswith("benchmarks/") else f"benchmarks/{path}"
        if not (ROOT / script).is_file():
            return f"no such script {script!r}", rest
        return script_program(script), rest
    return None


# ---- checking one argv --------------------------------------------------------------------------


def _is_option(token: str) -> bool:
    return token.startswith("-") and token != "-" and not re.match(r"-\.?\d", token)


def check_argv(program: Program, argv: list[str], fragment: bool) -> list[str]:
    """What is wrong with `argv` for `program`: unknown options, missing values, a refused parse."""
    if program.name == "deployopt":  # the group: options of its own, then a command
        if not argv or _is_option(argv[0]):
            unknown = [a for a in argv if _is_option(a) and a not in program.options]
            return [f"unknown option {a!r} (not an option of `deployopt`)" for a in unknown]
        word = argv[0]
        if word not in program.subcommands:
            if not COMMAND_WORD.match(word):
                return []  # `deployopt 0.1.0` (output), not a command
            return [f"no such command {word!r} (deployopt has: {', '.join(program.subcommands)})"]
        return check_argv(program.subcommands[word], argv[1:], fragment)
    problems: list[str] = []
    kept: list[str] = []  # argv without placeholder-valued options, for the full parse
    dropped: set[str] = set()
    options = program.options
    i = 0
    while i < len(argv):
        token = argv[i]
        i += 1
        if token == "--":
            kept += argv[i - 1 :]
            break
        if not _is_option(token):
            if token in program.subcommands:
                sub = program.subcommands[token]
                return problems or check_argv(sub, argv[i:], fragment)
            if token not in ELIDED:
                kept.append(token)
            continue
        name, equals, value = token.partition("=") if token.startswith("--") else (token, "", "")
        if name not in options and len(name) > 2 and name[:2] in options and not name.startswith("--"):
            name, equals, value = name[:2], "=", name[2:]  # -oFILE
        option = options.get(name)
        if option is None:
            problems.append(f"unknown option {name!r} (not an option of `{program.name}`)")
            continue
        if option.nargs == 0:
            if equals:
                problems.append(f"{name} is a flag: it takes no value ({token!r})")
            kept.append(name)
            continue
        if equals:
            values = [value]
        else:
            wanted = option.nargs if isinstance(option.nargs, int) else 1
            values = []
            while (
                i < len(argv)
                and not _is_option(argv[i])
                and (len(values) < wanted or option.nargs in ("*", "+"))
            ):
                values.append(argv[i])
                i += 1
            if len(values) < wanted and option.nargs not in ("?", "*"):
                if not (fragment and i == len(argv)):  # `deployopt bench -o` names the option
                    problems.append(f"{name} needs a value and has none")
                continue
        if any(PLACEHOLDER.fullmatch(v) for v in values):
            dropped.add(option.dest)
            continue
        kept += [name, *values]
        accepted = program.choices.get(option.dest)
        for bad in [v for value in values for v in value.split(",") if accepted and v not in accepted]:
            problems.append(f"{name} {bad!r}: not one of {', '.join(accepted)}")
    if not problems:
        try:
            program.parse(kept, dropped, fragment)
        except Rejected as exc:
            problems.append(str(exc))
    return problems


def check_snippet(snippet: Snippet) -> list[str]:
    """`DOC:LINE: COMMAND: problem` for each problem of the commands one doc line shows."""
    problems: list[str] = []
    for tokens in command_lines(snippet):
        found = program_of(tokens, snippet.fenced)
        if found is None:
            continue
        program, args = found
        shown = " ".join(t or "''" for t in tokens)
        if isinstance(program, str):
            problems.append(f"{snippet.doc}:{snippet.line}: `{shown}`: {program}")
            continue
        for argv in variants(args):
            for problem in check_argv(program, argv, fragment=not snippet.fenced):
                line = f"{snippet.doc}:{_line_of(snippet, problem)}: `{shown}`: {problem}"
                if line not in problems:
                    problems.append(line)
    return problems


def _line_of(snippet: Snippet, problem: str) -> int:
    """The doc line of the token a problem quotes ('--runz'), where a line runs over several."""
    quoted = re.search(r"'([^']+)'", problem)
    if quoted:
        for offset, raw in enumerate(snippet.raw):
            if re.search(rf"(?<![\w-]){re.escape(quoted.group(1))}(?![\w-])", raw):
                return snippet.line + offset
    return snippet.line


def doc_files() -> list[str]:
    return sorted({str(p.relative_to(ROOT)) for pattern in DOC_GLOBS for p in ROOT.glob(pattern)})


def doc_snippets(doc: str) -> list[Snippet]:
    return snippets((ROOT / doc).read_text(encoding="utf-8"), doc)


def _allowed(snippet: Snippet) -> tuple[str, str] | None:
    return next((key for key in ALLOWED if key[0] == snippet.doc and key[1] in snippet.text), None)


# ---- the tests ------------------------------------------------------------------------------


@pytest.mark.parametrize("doc", doc_files())
def test_every_command_line_in_the_docs_parses(doc: str) -> None:
    """A renamed or removed option, a missing value or a command that is gone, in any doc line."""
    problems = [p for s in doc_snippets(doc) if not _allowed(s) for p in check_snippet(s)]
    assert problems == [], "\n".join(problems)


def test_allow_list_entries_are_all_still_needed() -> None:
    """Each allowed line is still in its doc and still does not parse (else it is stale)."""
    for (doc, text), _why in ALLOWED.items():
        shown = [s for s in doc_snippets(doc) if text in s.text]
        assert shown, f"{doc}: no line contains {text!r} any more"
        assert any(check_snippet(s) for s in shown), f"{doc}: {text!r} parses now; drop it from ALLOWED"


def test_the_docs_show_commands_of_every_kind() -> None:
    """The scan finds the lines it is meant to check (an extractor that finds nothing passes)."""
    kinds: dict[str, int] = {}
    for doc in doc_files():
        for snippet in doc_snippets(doc):
            for tokens in command_lines(snippet):
                found = program_of(tokens, snippet.fenced)
                if found is not None and not isinstance(found[0], str):
                    kind = found[0].name.split()[0]
                    kinds[kind] = kinds.get(kind, 0) + 1
    assert kinds.get("deployopt", 0) >= 100, kinds
    assert kinds.get("jetson/runner.py", 0) >= 10, kinds
    assert sum(n for k, n in kinds.items() if k.startswith("benchmarks/")) >= 80, kinds


def test_no_deployopt_option_runs_code_while_parsing() -> None:
    """make_context runs option callbacks: this file parses every doc line, so none may have one
    (beyond --help and --version, whose lines are checked by name and not parsed)."""
    commands = [ROOT_COMMAND, *ROOT_COMMAND.commands.values()]  # type: ignore[attr-defined]
    with_callback = [
        f"{c.name} {p.opts[0]}" for c in commands for p in c.params if p.callback and p.name != "version"
    ]
    assert with_callback == []


def _problems(markdown: str) -> list[str]:
    return [p for s in snippets(markdown, "docs/x.md") for p in check_snippet(s)]


def test_a_renamed_option_fails_naming_the_doc_line_and_the_token() -> None:
    md = "# Title\n\n```\ndeployopt bench model.onnx --runz 50\n```\n\n"
    md += "Or `deployopt profile m.onnx\n--kernal`.\n"
    assert _problems(md) == [
        "docs/x.md:4: `deployopt bench model.onnx --runz 50`: unknown option '--runz' "
        "(not an option of `deployopt bench`)",
        "docs/x.md:8: `deployopt profile m.onnx --kernal`: unknown option '--kernal' "
        "(not an option of `deployopt profile`)",
    ]


def test_shell_shapes_are_read_as_a_shell_would() -> None:
    """Prompts, `\\` continuations, env prefixes, `&&`/`;`/`|` chains, redirections, comments,
    variables set in the block and ssh's remote command: each command found, each problem on the
    line its command starts."""
    md = """```bash
$ COLUMNS=80 deployopt bench model.onnx \\
    --runs 5 --json > r.json && deployopt compare a.json b.json --strictt   # not: --nope
cd x; python3 jetson/runner.py m.onnx --dtyp fp16 2>&1 | tee log
ssh user@jetson 'cd deployopt && python3 runner.py model.onnx --run 5'
A="--backend torch --smss 8"
deployopt bench m.onnx $A
python benchmarks/score_rounds.py --rounds 4
python benchmarks/no_such_script.py --x
```
"""
    assert [p.split(": ", 1)[0] + ": " + p.rsplit(": ", 1)[1] for p in _problems(md)] == [
        "docs/x.md:3: unknown option '--strictt' (not an option of `deployopt compare`)",
        "docs/x.md:4: unknown option '--dtyp' (not an option of `jetson/runner.py`)",
        "docs/x.md:5: unknown option '--run' (not an option of `jetson/runner.py`)",
        "docs/x.md:7: unknown option '--smss' (not an option of `deployopt bench`)",
        "docs/x.md:8: unknown option '--rounds' (not an option of `benchmarks/score_rounds.py`)",
        "docs/x.md:9: no such script 'benchmarks/no_such_script.py'",
    ]


def test_synopses_and_placeholders_are_not_failures() -> None:
    md = """```
deployopt staircase --target T [--sms N] --input 8x128x28x28 [--kernel 3] \\
    --out-channels 16:512:16 [--measure BACKEND [--runs 100] [--cudnn-engines N | --no-cudnn-benchmark]] \\
    [--plot out.png|.svg]
deployopt bench|profile <model.onnx> --remote USER@HOST -o $OUT/r.json [--input-shape ...]
deployopt optimize model.onnx --target nano [--backend auto|tensorrt|torch] [--mode lossless|trim]
python3 runner.py [model] [flags]
python benchmarks/bench_optimize.py --sms 8 --models '' --out OUT
```
A fragment: `deployopt apply --plan`, `bench -o`, `bench_optimize.py --out`.
"""
    assert _problems(md) == []


@pytest.mark.parametrize(
    "line, problem",
    [
        ("deployopt benchmark m.onnx", "no such command 'benchmark'"),
        ("deployopt bench m.onnx --runs --json", "--runs needs a value and has none"),
        ("deployopt bench m.onnx --json=yes", "--json is a flag: it takes no value ('--json=yes')"),
        ("deployopt bench m.onnx --no-json", "unknown option '--no-json'"),
        ("deployopt bench m.onnx --runs many", "Invalid value for '--runs'"),
        ("deployopt bench a.onnx b.onnx", "unexpected extra argument"),  # "(s)" since click 8.2
        ("deployopt apply model.onnx -o out.onnx", "Missing option '--plan'"),
        ("deployopt optimize m.onnx -t nano --mode trimm", "--mode 'trimm': not one of lossless, trim, grow"),
        ("deployopt bench m.onnx -b tensorrt --dtype fp16,fp64", "--dtype 'fp64': not one of"),
        ("python3 runner.py m.onnx --dtype fp8", "argument --dtype: invalid choice: 'fp8'"),
        ("python benchmarks/staircase_sweeps.py --sms 8", "the following arguments are required: --out"),
    ],
)
def test_what_a_fenced_line_gets_wrong_is_named(line: str, problem: str) -> None:
    """Each kind of problem, on a line in a fenced block (where the whole command must parse)."""
    problems = _problems(f"```\n{line}\n```\n")
    assert len(problems) == 1 and problems[0].startswith(f"docs/x.md:2: `{line}`: "), problems
    assert problem in problems[0], problems


@pytest.mark.parametrize(
    "doc, line, old, new",
    [
        (
            "docs/backends.md",
            "deployopt profile model.onnx --backend torch --kernels",
            "--kernels",
            "--kernel",
        ),
        ("jetson/README.md", "python3 runner.py model.onnx --dtype fp16", "--warmup", "--warm-up"),
        (
            "docs/optimize.md",
            "Command: `python benchmarks/bench_optimize.py --sms 8",
            "--deadline",
            "--limit",
        ),
        (
            "docs/wave_model_evaluation.md",
            "--out-channels 352:512:16 --measure torch --json",
            "--measure",
            "--measured",
        ),
    ],
)
def test_an_option_renamed_in_a_real_doc_fails_there(doc: str, line: str, old: str, new: str) -> None:
    """The docs as they are, one option renamed on one line: that line, that token, nothing else."""
    lines = (ROOT / doc).read_text(encoding="utf-8").splitlines()
    number = next(i for i, text in enumerate(lines) if line in text)
    lines[number] = lines[number].replace(old, new, 1)
    problems = [p for s in snippets("\n".join(lines), doc) if not _allowed(s) for p in check_snippet(s)]
    assert len(problems) == 1, problems
    assert re.match(rf"{doc}:{number + 1}: `.*`: unknown option '{new}'", problems[0]), problems
