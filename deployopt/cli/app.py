"""The typer app every command module registers on, and shared option parsing."""

from __future__ import annotations

import inspect
import json
import os
import re
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from rich.cells import cell_len
from rich.console import Console, ConsoleOptions
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.segment import Segment
from rich.table import Table
from rich.text import Span, Text
from typer.core import TyperCommand, TyperGroup

from deployopt.cli.progress import LineProgress
from deployopt.errors import DataError, DeployoptError, OutputError
from deployopt.fidelity import IMAGENET_MEAN, IMAGENET_STD, ImagePreprocess

if TYPE_CHECKING:
    pass


class PlainHelpCommand(TyperCommand):
    """A command whose --help is click's two-column layout, not typer's rich table. The table gives
    each option five columns (name, short name, --no- twin, type, help) and at 80 columns squeezed
    the help into ~18 characters and cut option names (`--no-fidelity-g…`); click's layout keeps
    names whole (a name too long for its column puts the help under it) at any width."""

    def format_help(self, ctx: Any, formatter: Any) -> None:
        super(TyperCommand, self).format_help(ctx, formatter)  # click's, past typer's rich branch

    def format_options(self, ctx: Any, formatter: Any) -> None:
        """typer's Arguments and Options sections, an argument named as the usage line names it
        (`model`, not typer's `model <Path>`: a Python type is not what to type)."""
        sections: dict[str, list[tuple[str, str]]] = {"Arguments": [], "Options": []}
        for param in self.get_params(ctx):
            record = param.get_help_record(ctx)
            if record is None:
                continue
            if param.param_type_name == "argument":
                record = (param.metavar or param.name or "", record[1])
            sections["Arguments" if param.param_type_name == "argument" else "Options"].append(record)
        for title, rows in sections.items():
            if rows:
                with formatter.section(title):
                    formatter.write_dl(rows)


class PlainHelpGroup(TyperGroup):
    """`deployopt --help` in the layout its commands' help has, the commands still under their
    panel headings (Optimize, Channel surgery, ...) with each summary whole, as rich showed them;
    click's own list ran every summary into one line cut at `...`."""

    def format_help(self, ctx: Any, formatter: Any) -> None:
        super(TyperGroup, self).format_help(ctx, formatter)

    def format_commands(self, ctx: Any, formatter: Any) -> None:
        panels: dict[str, list[tuple[str, str]]] = {}
        for name in self.list_commands(ctx):
            command = self.get_command(ctx, name)
            if command is None or command.hidden:
                continue
            text = inspect.cleandoc(command.short_help or command.help or "").partition("\f")[0]
            summary = " ".join(text.split("\n\n")[0].split())  # the first paragraph, as rich showed
            panel = getattr(command, "rich_help_panel", None) or "Commands"
            panels.setdefault(panel, []).append((name, summary))
        width = max((len(name) for rows in panels.values() for name, _ in rows), default=0)
        for panel, rows in panels.items():
            with formatter.section(panel):  # one name column for all panels, as rich aligned them
                formatter.write_dl([(name.ljust(width), summary) for name, summary in rows])


class _App(typer.Typer):
    """typer.Typer whose commands all get PlainHelpCommand (unless one names its own class)."""

    def command(self, *args: Any, **kwargs: Any) -> Any:
        kwargs.setdefault("cls", PlainHelpCommand)
        return super().command(*args, **kwargs)


app = _App(
    cls=PlainHelpGroup,
    name="deployopt",
    help="Fit CNN channel counts to how the GPU runs them: analyze, pad/trim, time, optimize.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    # `-h` as trtexec, polygraphy, pip and jetson/runner.py take it; no option is named -h. Every
    # command's context inherits this from the group's.
    context_settings={"help_option_names": ["-h", "--help"]},
)


def package_version() -> str:
    """The installed distribution's version; the source tree's `deployopt.__version__` when run
    from a checkout that is not installed (PYTHONPATH)."""
    from importlib import metadata

    try:
        return metadata.version("deployopt")
    except metadata.PackageNotFoundError:
        import deployopt

        return str(getattr(deployopt, "__version__", "unknown"))


def _print_version(value: bool) -> None:
    if value:
        console.print(f"deployopt {package_version()}", highlight=False)
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", callback=_print_version, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    """Fit CNN channel counts to how the GPU runs them: analyze, pad/trim, time, optimize."""


class Interrupted(Exception):
    """Ctrl-C with a message richer than `interrupted` (optimize: how to resume); exit 130. Not a
    KeyboardInterrupt, which typer turns into a silent exit 130 before the entry point sees it."""


class _Environ(Mapping[str, str]):
    """os.environ as the consoles read it (live: tests set COLUMNS), less what rich misreads:

    - COLUMNS and LINES that are not positive integers: rich took COLUMNS=0 (`export
      COLUMNS=$(tput cols)` in a 0x0 pty: `script`, `docker exec -t`) as a width of 0 and printed
      nothing, error lines and --json included; without them it measures the terminal, or takes 80;
    - FORCE_COLOR: rich took it to mean a terminal, so a CI log (which sets it for colour) got the
      live progress bar, redrawn into the file several times a second, in place of `progress:`
      lines. `_console` gives colour for it instead; whether the output is a terminal stays
      whether it is one."""

    HIDDEN = ("FORCE_COLOR",)
    SIZES = ("COLUMNS", "LINES")

    def __getitem__(self, key: str) -> str:
        value = os.environ[key]
        if key in self.HIDDEN or (key in self.SIZES and not (value.isdigit() and int(value) > 0)):
            raise KeyError(key)
        return value

    def __iter__(self) -> Iterator[str]:
        return (key for key in os.environ if key in self)

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def __contains__(self, key: object) -> bool:
        try:
            self[key]  # type: ignore[index]
        except KeyError:
            return False
        return True


#: C0 controls, DEL and C1 controls. A model's names (nodes, tensors, inputs, dim symbols) are
#: strings its file sets: an ESC sequence in one reached the terminal as it was, piped or not
#: (recoloured the rest of the output, moved the cursor, set the window title).
_CONTROLS = re.compile("[\x00-\x1f\x7f-\x9f]")
#: the same but the newline, which a rendered segment keeps (`_SafeConsole.render`)
_CONTROLS_BUT_NEWLINE = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f]")
_NAMED_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def escape_controls(text: str, keep: str = "") -> str:
    """`text` with each control character written as a Python repr writes it (`\\x1b`, `\\n`,
    `\\x9b`), but those in `keep` (a console keeps the newlines of its own multi-line output).
    Only printing does this: JSON and written models keep names as they are."""
    if not _CONTROLS.search(text):
        return text

    def spell(match: re.Match[str]) -> str:
        ch = match.group()
        return ch if ch in keep else _NAMED_ESCAPES.get(ch, f"\\x{ord(ch):02x}")

    return _CONTROLS.sub(spell, text)


def _escape_text(text: Text, keep: str) -> Text:
    """A rich Text with `escape_controls` applied, its styles over the same characters."""
    plain = text.plain
    if not _CONTROLS.search(plain):
        return text
    pieces: list[str] = []
    starts = [0] * (len(plain) + 1)  # where each old character starts in the new text
    for i, ch in enumerate(plain):
        starts[i + 1] = starts[i] + len(piece := escape_controls(ch, keep))
        pieces.append(piece)
    spans = [
        Span(starts[min(sp.start, len(plain))], starts[min(sp.end, len(plain))], sp.style)
        for sp in text.spans
    ]
    return Text(
        "".join(pieces),
        style=text.style,
        justify=text.justify,
        overflow=text.overflow,
        no_wrap=text.no_wrap,
        end=text.end,
        tab_size=text.tab_size,
        spans=spans,
    )


class CellLines(str):
    """A table cell of several lines by design, one per item (analyze --waves: one width tip a
    line). A table's cells are printed with every newline escaped (`_escaped`), a name's newline
    broke a row; the items here are escaped when made, and the newlines between them kept."""

    def __new__(cls, items: Iterable[str]) -> CellLines:
        return super().__new__(cls, "\n".join(escape_controls(item) for item in items))


def _escaped(obj: Any, keep: str = "\n") -> Any:
    """`obj` as printed: a str or Text escaped (`escape_controls`), a Table's title, headers and
    cells escaped in place, before the layout (an escape is wider than the character it spells);
    any other renderable as it is (`_SafeConsole.render` escapes what it renders). A table's
    title, caption and cells hold names, so their newlines are escaped too (`\\n`: a node named
    with one broke its row into two); headers and footers are the code's own, lines kept
    (`median\\nµs`), and a CellLines cell keeps the lines it was made with."""
    if isinstance(obj, CellLines):
        return obj
    if isinstance(obj, str):
        return escape_controls(obj, keep)
    if isinstance(obj, Text):
        return _escape_text(obj, keep)
    if isinstance(obj, Table):
        for attr in ("title", "caption"):
            setattr(obj, attr, _escaped(getattr(obj, attr), ""))
        for column in obj.columns:
            column.header = _escaped(column.header, keep)
            column.footer = _escaped(column.footer, keep)
            column._cells[:] = [_escaped(cell, "") for cell in column._cells]
        return obj
    if isinstance(obj, _AtLeast):
        obj.renderable = _escaped(obj.renderable, keep)
    return obj


class _SafeConsole(Console):
    """A Console that never writes a control character a string or Text held (`escape_controls`;
    newlines stay): an ESC in a model's node name printed in a table, a notice or an error line
    reached the terminal raw. Styles are rich's own codes, added after this."""

    def print(self, *objects: Any, **kwargs: Any) -> None:
        super().print(*(_escaped(o) for o in objects), **kwargs)

    def render(self, renderable: Any, options: ConsoleOptions | None = None) -> Iterator[Segment]:
        """Every segment rendered, escaped where a renderable not printed by `print` (a live
        progress bar's description) holds a control character; rich's own cursor and screen
        codes are control segments, passed as they are."""
        for segment in super().render(renderable, options):
            if segment.control or not _CONTROLS_BUT_NEWLINE.search(segment.text):
                yield segment
            else:
                yield Segment(escape_controls(segment.text, "\n"), segment.style, segment.control)


def _console(stderr: bool = False) -> Console:
    """A literal console: output carries user strings (model paths, ONNX names, plan labels), and
    rich markup or emoji codes would rewrite them ("models [v2]/m.onnx" printed as "models
    /m.onnx", ":b:" as an emoji). Colour is given with style=/Text, never with markup.

    FORCE_COLOR (any value but empty, as force-color.org has it) colours output that is not a
    terminal, in the 16 standard colours a CI log renders, and changes nothing else; NO_COLOR
    still wins (rich strips the colour)."""
    stream = sys.stderr if stderr else sys.stdout
    try:
        terminal = stream.isatty()
    except (AttributeError, ValueError):  # none, or closed
        terminal = False
    forced = os.environ.get("FORCE_COLOR", "") != "" and not terminal
    return _SafeConsole(
        stderr=stderr,
        markup=False,
        emoji=False,
        color_system="standard" if forced else "auto",
        _environ=_Environ(),
    )


console = _console()
err_console = _console(stderr=True)


def print_notices(notices: Sequence[str]) -> None:
    """What loading changed, as `optimize` and `verify` print it: `notice:` (the word the reports'
    `notices` keys use), where analyze and apply printed `note:` for the same notices. One line
    each: a newline in a name the notice quotes is written `\\n`."""
    for notice in notices:
        line = f"notice: {escape_controls(notice)}"
        err_console.print(line, style="yellow", markup=False, highlight=False, soft_wrap=True)


def print_json(doc: Any) -> None:
    """`--json`'s document on stdout: plain JSON (indent 2, ASCII), whatever the terminal. rich's
    print_json coloured the keys under FORCE_COLOR, which many CI configurations set, so the
    output was no JSON; and it wrote non-ASCII as it is, which a stdout that is not UTF-8 could not
    take. Flushed, so a reader that has gone (`| head`) is found here. No stdout (`>&-`): nowhere,
    as rich prints then."""
    if sys.stdout is not None:
        sys.stdout.write(json.dumps(doc, indent=2) + "\n")
        sys.stdout.flush()


#: A folded column (a name) keeps at least this many characters a line, or its longest word if
#: shorter: at 40 columns rich shrank profile's layer and op columns to nothing.
FOLD_MIN_WIDTH = 10


def _units(cell: Any, whole_lines: bool) -> list[str]:
    """What a cell must not be broken inside: its lines (a no-wrap column) or its words."""
    text = cell.plain if isinstance(cell, Text) else str(cell)
    return text.split("\n") if whole_lines else text.split()


def print_table(table: Table, out: Console | None = None) -> None:
    """Print `table` (on `out`, default stdout) with every number whole at any width: a pipe or a
    CI log is 80 columns, a narrow terminal 40. A column that does not fold (numbers, units, a tile
    such as 128x128) is at least as wide as its longest word, header included (its longest line
    where it does not wrap), so a cell wraps between words, never inside one; a folded column (a
    name) keeps FOLD_MIN_WIDTH characters a line. Where even that cannot fit, the table runs past
    the width rather than being cropped: rich cut a no-wrap `1300` MHz to `130` without a mark,
    and squeezed the narrow columns of a table that could not fit to nothing (the CC and SMs of
    `targets` at 40 columns), so it is laid out in the width its minima take."""
    out = out or console
    _escaped(table)  # before the widths are measured: an escape is wider than its character
    _, right, _, left = table.padding
    needed = len(table.columns) + 1  # a rule between columns and at each edge, at most
    for column in table.columns:
        units = [u for cell in (column.header, *column.cells) for u in _units(cell, column.no_wrap)]
        longest = max(map(cell_len, units), default=1)
        floor = min(longest, FOLD_MIN_WIDTH) if column.overflow == "fold" else longest
        column.min_width = max(column.min_width or 0, floor)
        needed += column.min_width + left + right
    out.print(_AtLeast(table, needed), crop=False)


class _AtLeast:
    """`renderable` laid out in the console's width, or in `width` where that is wider (a table's
    width would expand it to that width; this is only the most it may take)."""

    def __init__(self, renderable: Any, width: int) -> None:
        self.renderable = renderable
        self.width = width

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> Iterator[Segment]:
        yield from console.render(self.renderable, options.update_width(max(options.max_width, self.width)))


def expand_user(value: str) -> Path:
    """`value` with a leading `~` or `~user` expanded: the shell leaves `--out=~/runs` as it is
    (no expansion after `--opt=`), and a folder literally named `~` was created in the working
    folder, reported as `wrote ~/runs/` (read as $HOME; its clean-up, `rm -rf ~`, deletes $HOME).
    A `~user` that names no user (or no home to be found) stays as given."""
    path = Path(value)
    try:
        return path.expanduser()
    except RuntimeError:
        return path


def output_option(default: Any, *names: str, help: str, folder: bool = False) -> Any:
    """An output path option (`-o`, `--plot`, `--trace-dir`) that refuses an empty path before any
    work: typer turns '' into Path('.'), so `-o ''` (an unset shell variable) wrote into the current
    folder, or was reported as '.' being a folder. The raw text is checked, so `-o .` still works."""
    label = "/".join(sorted(names, key=len))  # -o/--output

    def parse(value: str) -> Path:
        if not value:
            raise DeployoptError(f"{label}: empty path; give a {'folder' if folder else 'file'} path")
        # a folder named `-` was created where standard output was meant (optimize -o -, exit 0);
        # the raw text is checked: `-o ./-` names such a folder on purpose, and a file's parent
        # folder called `-` (fp16 -o -/a.onnx) is no `-o -`
        if folder and value == "-":
            raise OutputError("cannot write into -: give a folder name ('-' is not standard output here)")
        # Path() drops a trailing slash: `-o out/` wrote a file named `out`
        if not folder and value.endswith(("/", os.sep)):
            raise OutputError(f"cannot write {value}: a path ending in '/' is a folder; give a file path")
        return expand_user(value)

    return typer.Option(default, *names, help=help, parser=parse, metavar="DIR" if folder else "FILE")


def input_path(label: str, what: str) -> Callable[[str], Path]:
    """A parser for a path that is read: typer turns '' into Path('.'), so `--calibration-data
    "$DATA"` with DATA unset read the current folder's images as calibration data, and a model or
    plan given as '' was reported as '.: is a folder'."""

    def parse(value: str) -> Path:
        if not value:
            raise DeployoptError(f"{label}: empty path; give {what}")
        return expand_user(value)

    return parse


def cudnn_engines_option() -> object:
    """`--cudnn-engines N`, shared by every command that measures on the torch backend."""
    return typer.Option(
        None,
        "--cudnn-engines",
        metavar="N",
        help="torch: cuDNN engines cudnn.benchmark times per conv (0 = all; default PyTorch's 10). "
        "All engines find faster kernels at some widths, as TensorRT's tactic timing does; under "
        "--sms the default 10 are those cuDNN ranks best for the whole GPU, so use 0 to emulate a "
        "small GPU.",
    )


CALIBRATION_DATA_HELP = (
    "--dtype int8: data TensorRT calibrates on (a folder of images, made into tensors by "
    "--scale/--mean/--std/--bgr/--resize, or .npy/.npz preprocessed like the model's input), or a "
    "calibration table (.cache/.calib/.table) from an earlier run, "
    "only read; trtexec cannot calibrate and takes only a table."
)


def calibration_data_option(help: str = CALIBRATION_DATA_HELP) -> object:
    """`--calibration-data`: one declaration (the path check, the metavar) for every command that
    takes it; `help` says what the command does with it (default: INT8 in `bench` and `profile`)."""
    return typer.Option(
        None,
        "--calibration-data",
        parser=input_path("--calibration-data", "a folder or file path"),
        metavar="PATH",
        help=help,
    )


# --mean/--std/--bgr/--scale/--resize: how calibration images become input tensors, declared once
# for every command that reads images (verify, apply, optimize, bench, profile) and parsed by
# `image_preprocess`; the defaults are ImageNet's (torchvision), wrong for a YOLO model (1/255,
# no mean/std) or a Caffe-style BGR one, which must be able to say so everywhere the images go.


def mean_option() -> Any:
    """`--mean`: per-channel mean subtracted after --scale (RGB order)."""
    return typer.Option(
        None,
        "--mean",
        metavar="R,G,B",
        help="Per-channel image mean: 3 values, or 1 for every channel "
        f"(default {','.join(map(str, IMAGENET_MEAN))}).",
    )


def std_option() -> Any:
    """`--std`: per-channel std divided by after the mean (RGB order)."""
    return typer.Option(
        None,
        "--std",
        metavar="R,G,B",
        help="Per-channel image std: 3 values, or 1 for every channel "
        f"(default {','.join(map(str, IMAGENET_STD))}).",
    )


def bgr_option() -> Any:
    """`--bgr`: Caffe/OpenCV-trained models take blue first."""
    return typer.Option(False, "--bgr", help="Feed images as BGR (mean/std still given in RGB order).")


def scale_option() -> Any:
    """`--scale`: the pixel factor before mean/std (1/255: pixels to 0–1)."""
    return typer.Option(
        None, "--scale", metavar="FLOAT", help="Pixel scale applied before mean/std (default 1/255)."
    )


def resize_option() -> Any:
    """`--resize`: how an image of another size meets the input's H×W."""
    return typer.Option(
        None,
        "--resize",
        metavar="stretch|crop",
        help=(
            "stretch (default): resize to H×W; crop: keep the aspect ratio, cover H/0.875 × W/0.875, "
            "centre crop H×W."
        ),
    )


def _floats(value: str, option: str) -> tuple[float, ...]:
    items = value.replace(" ", "").split(",")
    if value.strip() and any(not v for v in items):  # 0.5,,0.5: a value left out, not skipped
        raise DataError(f"{option} {value!r}: an empty item in the list (two commas, or one at an end)")
    try:
        vals = tuple(float(v) for v in items if v)
    except ValueError:
        raise DataError(
            f"{option} {value!r}: expected numbers separated by commas, e.g. 0.485,0.456,0.406"
        ) from None
    if not vals:
        raise DataError(f"{option} {value!r}: expected at least one number")
    return vals


def image_preprocess(
    calibration_data: Path | None,
    mean: str | None,
    std: str | None,
    bgr: bool,
    scale: float | None,
    resize: str | None,
) -> ImagePreprocess:
    """The image options as one checked ImagePreprocess (defaults for those not given), or a
    one-line DataError: a bad value, or options given with nothing to act on (no
    --calibration-data: the inputs are random; a calibration table: its ranges are calibrated
    already). With .npy/.npz data, fed as it is, one stderr note says they are unused."""
    given = {"--mean": mean, "--std": std, "--bgr": bgr or None, "--scale": scale, "--resize": resize}
    named = [name for name, value in given.items() if value is not None]
    mean_values = IMAGENET_MEAN if mean is None else _floats(mean, "--mean")
    std_values = IMAGENET_STD if std is None else _floats(std, "--std")
    # each was ignored without a word where it has nothing to act on
    if calibration_data is None and named:
        raise DataError(
            f"{', '.join(named)}: image preprocessing, and without --calibration-data the inputs "
            "are random; give images with --calibration-data"
        )
    pre = ImagePreprocess(
        mean=tuple(mean_values),
        std=tuple(std_values),
        scale=1 / 255 if scale is None else scale,
        channel_order="BGR" if bgr else "RGB",
        resize="stretch" if resize is None else resize,
    )
    pre.check()
    if named and calibration_data is not None:
        from deployopt.backends.trtexec import is_calibration_table
        from deployopt.fidelity import holds_arrays

        if is_calibration_table(calibration_data):
            raise DataError(
                f"{', '.join(named)}: image preprocessing, and --calibration-data {calibration_data} is a "
                "calibration table (its ranges are calibrated already); give the images to calibrate on"
            )
        if holds_arrays(calibration_data):
            err_console.print(
                f"note: {', '.join(named)} unused: {calibration_data} holds .npy/.npz arrays, fed to the "
                "model as they are (image preprocessing applies to images)",
                style="yellow",
                markup=False,
                highlight=False,
                soft_wrap=True,
            )
    return pre


def refuse_empty_backend(option: str, value: str | None, choices: Iterable[str] | None = None) -> None:
    """One line for a backend option given empty (`--backend "$B"`, `--measure "$B"` with B unset),
    which bench and profile took as ort and staircase as no --measure, without a word; None (not
    given) and a name pass. `choices`: what the option takes, default every registered backend
    (optimize's --backend adds auto)."""
    if value is None or value:
        return
    if choices is None:
        from deployopt.backends.base import REGISTRY

        choices = REGISTRY
    raise DeployoptError(f"{option} '': no backend named; choose one of: {', '.join(choices)}")


#: --timeout's ceiling (a week): the worker waits use it as a lock timeout, which overflows near 1e10 s.
MAX_TIMEOUT_S = 7 * 24 * 3600


def check_timeout(timeout: float) -> None:
    """--timeout: seconds above 0, at most a week (NaN passed `<= 0`; inf overflows a queue wait)."""
    if not 0 < timeout <= MAX_TIMEOUT_S:
        raise DeployoptError(
            f"--timeout {timeout:g}: must be a number of seconds above 0, at most {MAX_TIMEOUT_S}"
        )


def timeout_option(
    help_text: str = "Seconds per model before the worker is killed (torch, tensorrt, trtexec, --remote; ort "
    "runs in-process, with no limit).",
    default: float | None = 600.0,
) -> object:
    """`--timeout SECONDS`, per model built and timed (bench, profile, optimize) or per conv
    (calibrate, staircase --measure); `default` None where the command must tell a --timeout given
    from none (staircase refuses one without --measure)."""
    return typer.Option(default, "--timeout", metavar="SECONDS", help=help_text)


def remote_option(sweep: bool = False) -> object:
    """`--remote USER@HOST`: trtexec or jetson/runner.py on a Jetson over ssh (bench, profile,
    optimize; `sweep`: staircase and calibrate, which copy conv models, not the user's)."""
    what = (
        "the sweep's one-conv models are copied with scp. --measure trtexec: "
        "/usr/src/tensorrt/bin/trtexec there; tensorrt (the default): jetson/runner.py with the board's "
        "python3."
        if sweep
        else "the model is copied with scp. trtexec: /usr/src/tensorrt/bin/trtexec there; tensorrt "
        "(optimize's auto): jetson/runner.py with the board's python3."
    )
    return typer.Option(
        None,
        "--remote",
        metavar="USER@HOST",
        help=f"Build and time on this board over ssh (USER@HOST, key-based login); {what}",
    )


def remote_target_option(what: str) -> object:
    """`--target`, given or (with --remote) read from the board by `resolve_target`: optimize,
    calibrate and staircase. `what`: what the target is to this command."""
    return typer.Option(
        None,
        "--target",
        "-t",
        metavar="TARGET",
        help=f"{what}; required, except with --remote, where the board says which it is.",
    )


def missing_option(ctx: typer.Context, name: str) -> Exception:
    """click's own missing-option error for the parameter `name` (`Missing option '--target'`), for
    an option required only in some cases (--target and --measure: not with --remote). Its class is
    taken from wherever this typer takes click (vendored or not)."""
    missing = sys.modules[typer.BadParameter.__module__].MissingParameter
    return missing(ctx=ctx, param=next(p for p in ctx.command.params if p.name == name))


def resolve_target(ctx: typer.Context, target: str | None, remote: str | None, timeout: float) -> str:
    """--target, or with --remote and no --target the board's own (deployopt.targets.board), said
    on stderr in one line; with both, a warning where they disagree. Without either: click's own
    missing-option error, as when --target was a required option. Once that warning is said, the
    measurement's own TargetMismatchWarning (another SM count or compute capability) is not said
    again for the rest of the command: it is the same disagreement, found by the first timing."""
    if not remote:  # None, or '' (an unset shell variable): no board, as everywhere else
        if target is None:
            raise missing_option(ctx, "target")
        return target
    from deployopt.targets.board import target_for_remote

    chosen = target_for_remote(target, remote, timeout)
    if chosen.note:
        err_console.print(chosen.note, markup=False, highlight=False, soft_wrap=True)
    if chosen.warning:
        err_console.print(
            f"warning: {chosen.warning}", style="yellow", markup=False, highlight=False, soft_wrap=True
        )
        import warnings

        from deployopt.errors import TargetMismatchWarning

        # main() runs each command under warnings.catch_warnings(): the filter ends with the command
        warnings.filterwarnings("ignore", category=TargetMismatchWarning)
    return chosen.target


def measure_extra(remote: str | None, timing_cache: Path | None) -> dict[str, Any]:
    """MeasureOptions.extra for --remote and --timing-cache: the board, and the cache's path (with
    --remote the board keeps it under this file's name, so nothing is written here, and the path is
    not probed here). A backend without TensorRT engines refuses the cache when opened."""
    from deployopt.fileio import check_output_file

    extra: dict[str, Any] = {"remote": remote} if remote else {}
    if timing_cache is not None:
        check_output_file(timing_cache, probe=not remote)
        extra["timing_cache"] = str(timing_cache)
    return extra


def option_given(param: str) -> bool:
    """Whether the command line gave the option `param` (click's record of where its value came
    from), not its default: `--warmup 20` given to trtexec is as unused as `--warmup 5000`
    (bench, profile and optimize refuse it). click's
    current context is found where typer keeps click (vendored in recent typer, a dependency
    before), as cli.main finds its ClickException."""
    import importlib

    core = next(c for c in typer.Context.__mro__ if c.__module__.endswith(".core"))
    ctx = importlib.import_module(core.__module__.rpartition(".")[0] + ".globals").get_current_context(
        silent=True
    )
    source = ctx.get_parameter_source(param) if ctx is not None else None
    return source is not None and source.name not in ("DEFAULT", "DEFAULT_MAP")


def progress_bar(disable: bool) -> Progress:
    """The live bar on stderr of a long measurement (optimize's sweep and evaluations, calibrate's
    and staircase's convs): what, a bar, done/total, elapsed; gone once done, off with `disable`
    (--json). When stderr is not a terminal (a pipe, a CI log, `nohup ... > log 2>&1`), plain
    `progress:` lines instead, of a task that takes a while (deployopt.cli.progress.LineProgress),
    one each interval while it runs, advanced or not: a run of an hour on a board said nothing
    until its end, hung or slow alike, and a hung one now keeps saying where it is stuck. A log
    under FORCE_COLOR is no terminal either (`_console`): the bar was redrawn into it."""
    if not disable and not err_console.is_terminal:
        return LineProgress(err_console)
    return Progress(
        TextColumn("{task.description}", markup=False),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=err_console,
        transient=True,
        disable=disable or not err_console.is_terminal,
    )


def timing_cache_option(help_text: str) -> object:
    """`--timing-cache FILE`: a TensorRT timing cache read and updated by every build (bench,
    profile, optimize on the tensorrt and trtexec backends)."""
    return output_option(None, "--timing-cache", help=help_text)


def cudnn_benchmark_option() -> object:
    """`--no-cudnn-benchmark`, beside `--cudnn-engines` on every command that measures on torch."""
    return typer.Option(
        True,
        "--cudnn-benchmark/--no-cudnn-benchmark",
        help="torch: --no-cudnn-benchmark turns cuDNN's autotuner off, so its heuristics pick each "
        "conv's kernel without timing any: PyTorch's own default, what an untuned PyTorch program "
        "runs (on the H200 at 8 SMs a median 1.3x slower per conv than autotuned, "
        "docs/wave_model_evaluation.md).",
        show_default=False,
    )


def note_cudnn_search(
    backend: object, sms: int | None, cudnn_engines: int | None, cudnn_benchmark: bool
) -> None:
    """One stderr note when a green context meets PyTorch's default engine search: cuDNN ranks its
    engines for the whole GPU, so the 10 it times are not those a GPU of `sms` SMs would pick
    (measured on the H200: docs/backends.md). Nothing to say on a real Jetson (no --sms)."""
    if sms is None or cudnn_engines is not None or not cudnn_benchmark:
        return
    if not getattr(backend, "can_choose_cudnn_engines", False):
        return
    err_console.print(
        f"note: under --sms {sms} cuDNN still ranks its engines for the whole GPU, and PyTorch's "
        "default search times only the 10 ranked best there; add --cudnn-engines 0 to time all "
        "of them (as TensorRT does on the board), or --no-cudnn-benchmark for untuned PyTorch",
        style="yellow",
        markup=False,
        highlight=False,
        soft_wrap=True,
    )


def whole_number(text: str) -> int:
    """An integer written in ASCII digits (a sign and spaces around allowed): int() also took
    '1_28' as 128 and full-width '８' as 8, so a typo ran as another width
    (targets' sizes and widths, --input-shape's dims). ValueError otherwise."""
    text = text.strip(" \t")
    if not re.fullmatch(r"[+-]?[0-9]+", text):
        raise ValueError(f"not an integer in ASCII digits: {text!r}")
    return int(text)


def parse_input_shapes(values: list[str] | None) -> dict[str, list[int]]:
    """Parse repeated `NAME:1x3x224x224` options into {name: [1, 3, 224, 224]}; each dim by
    `whole_number`, as int() ran `1x3x1_6x16` at 16 wide and took full-width digits."""
    shapes: dict[str, list[int]] = {}
    for value in values or []:
        name, sep, dims = value.rpartition(":")
        if not sep or not name:
            raise DeployoptError(f"--input-shape {value!r}: expected NAME:DIMS such as input:1x3x224x224")
        try:
            parsed = [whole_number(d) for d in dims.lower().split("x")]
        except ValueError:
            raise DeployoptError(
                f"--input-shape {value!r}: dimensions must be integers in ASCII digits joined by 'x', "
                "such as input:1x3x224x224"
            ) from None
        if not parsed or any(d < 1 for d in parsed):
            raise DeployoptError(f"--input-shape {value!r}: dimensions must be positive")
        if name in shapes and shapes[name] != parsed:  # the last one won silently
            given = "x".join(map(str, shapes[name]))
            raise DeployoptError(
                f"--input-shape {value!r}: {name!r} was already given as {given}; give each input once"
            )
        shapes[name] = parsed
    return shapes
