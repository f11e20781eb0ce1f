"""Which built-in target a Jetson is, from what `jetson/runner.py --env-only` read on it.

Why: with `--remote` every model is timed on the board, and the candidate widths come from
`--target`. A wrong --target (an Orin NX 16GB named orin-nano-8gb) was caught only after the first
measurement (`measured_elsewhere`: SM count, compute capability), and not at all where those agree
(orin-nano-8gb and orin-nx-8gb: 8 SMs, 8.7 both). The board says which module it is, to any user:

- the device tree's `compatible` (runner: "compatible") names the module by NVIDIA part number,
  pBBBB-SSSS (board ID, SKU), as "nvidia,<carrier>+<module>" and/or "nvidia,<module>", e.g.
  "nvidia,p3737-0000+p3701-0005", "nvidia,p3701-0005", "nvidia,tegra234" on an AGX Orin 64GB;
  older boards give a name of the developer kit instead ("nvidia,p3450-0000", "nvidia,quill");
- /proc/meminfo's MemTotal (runner: "mem_total_kib"): the module's memory less what firmware and
  the kernel keep, so rounded up to a power of two it is the memory the module is sold with;
- the device tree's `model` (runner: "board"): free text, used only where `compatible` names no
  module (a carrier board's own device tree), and to tell Orin Nano from Orin NX at 8 GB.

Sources of the tables (module names and SKUs, never our guesses unless marked):
- jetson_stats' MODULE_NAME_TABLE, part number -> module
  (https://github.com/rbonghi/jetson_stats/blob/master/jtop/core/jetson_variables.py, which cites
  NVIDIA's L4T 32.3.1 and r35.2.1 Quick Start guides);
- NVIDIA's "Jetson Module EEPROM Layout" (L4T 32.7.x Developer Guide, board IDs 3668, 3448, 2888,
  3310, 3489, 3636, 2180 and their SKUs: https://docs.nvidia.com/jetson/archives/l4t-archived/
  l4t-3275/Tegra%20Linux%20Driver%20Package%20Development%20Guide/jetson_eeprom_layout.html);
- NVIDIA's Jetson.GPIO, which tells the modules apart by these same compatible strings
  (compats_nano, compats_tx2, compats_xavier, compats_nx, compats_jetson_orins,
  compats_jetson_orins_nx, compats_jetson_orins_nano in
  https://github.com/NVIDIA/jetson-gpio/blob/master/lib/python/Jetson/GPIO/gpio_pin_data.py);
- "-super" after a p3767 part (JetPack 6.2's Super power modes) is in the compatible lists of
  NVIDIA's r36 device-tree overlays ("nvidia,p3768-0000+p3767-0005-super", ...), and
  https://github.com/anduril/jetpack-nixos/pull/488 reports such modules' compatible;
- that the AGX Orin developer kit's module (p3701-0000) has the 64GB module's GPU, 16 SMs at
  1300 MHz: this repository's agx-orin-32gb.json notes.

NEVER RUN AGAINST A REAL BOARD: tests/test_board_target.py feeds it strings as boards print them;
it says which were seen in a public source and which are assumed.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Module:
    """One Jetson module (a part number): the built-in target it is, if one ships."""

    name: str
    target: str | None
    memory_gb: int | None  # None: not fixed by the part number (a developer-kit module)
    #: Words the device tree's model carries for this module's line ("Orin Nano" / "Orin NX"): where
    #: the model names a line, a guess from memory keeps only that line's modules.
    line: str | None = None
    #: False: an industrial or other rarely met variant, named only by its own part number, never
    #: guessed from its family and memory alone (it would make every guess ambiguous).
    guessed: bool = True
    #: Why there is no target (target None), or what to know about the one there is.
    note: str = ""


#: Where a note names the board (no_target): detect_remote_target puts the host it asked there.
BOARD_HOST = "USER@HOST"


def no_target(nearest: str) -> str:
    """A module's note where no built-in target has its GPU: the command that makes a profile of it.
    It said `deployopt calibrate` alone, which is the command that had just failed (calibrate
    --remote without --target reads the board, and this board names no target): calibrate needs a
    --target for the GPU's facts and --name for a profile under a name of its own (a built-in name
    is refused), and `nearest`, the built-in target of the same GPU architecture, or a `targets
    --json` copy of it edited to this GPU, gives those facts."""
    return (
        f"no built-in target has its GPU: calibrate a profile of it with `deployopt calibrate --remote "
        f"{BOARD_HOST} --target {nearest} --name NAME` (for this GPU's own SM count and clock, --target "
        f"a `deployopt targets --target {nearest} --json` copy edited to them), then use --target NAME"
    )


#: Part number -> module, for the Jetsons deployopt ships targets of and their siblings. Names and
#: memory as in jetson_stats' MODULE_NAME_TABLE and NVIDIA's EEPROM layout page (3489-0080, 3448-0003
#: and 3668-0003 are named there), or in NVIDIA's module names where neither gives the memory
#: (Xavier NX 8GB, TX2 8GB, TX2i 8GB, TX2 NX 4GB, TX1 4GB, AGX Orin Industrial 64GB).
MODULES: dict[str, Module] = {
    "p3767-0000": Module("Jetson Orin NX 16GB", "orin-nx-16gb", 16, "Orin NX"),
    "p3767-0001": Module("Jetson Orin NX 8GB", "orin-nx-8gb", 8, "Orin NX"),
    "p3767-0003": Module("Jetson Orin Nano 8GB", "orin-nano-8gb", 8, "Orin Nano"),
    "p3767-0004": Module("Jetson Orin Nano 4GB", "orin-nano-4gb", 4, "Orin Nano"),
    "p3767-0005": Module("Jetson Orin Nano 8GB (developer kit module)", "orin-nano-8gb", 8, "Orin Nano"),
    "p3701-0000": Module(
        "Jetson AGX Orin (developer kit module)",
        "agx-orin-64gb",
        None,
        note="the developer kit's module has the 64GB module's GPU (16 SMs at 1300 MHz) whatever its memory",
    ),
    "p3701-0004": Module("Jetson AGX Orin 32GB", "agx-orin-32gb", 32),
    "p3701-0005": Module("Jetson AGX Orin 64GB", "agx-orin-64gb", 64),
    "p3701-0002": Module(
        "Jetson IGX Orin (developer kit)", None, None, guessed=False, note=no_target("agx-orin-64gb")
    ),
    "p3701-0008": Module(
        "Jetson AGX Orin Industrial", None, 64, guessed=False, note=no_target("agx-orin-64gb")
    ),
    "p3668-0000": Module("Jetson Xavier NX (developer kit module)", "xavier-nx", 8),
    "p3668-0001": Module("Jetson Xavier NX", "xavier-nx", 8),
    "p3668-0003": Module("Jetson Xavier NX 16GB", "xavier-nx", 16),
    "p2888-0001": Module("Jetson AGX Xavier 16GB", "agx-xavier", 16),
    "p2888-0003": Module("Jetson AGX Xavier 32GB", "agx-xavier", 32),
    "p2888-0004": Module("Jetson AGX Xavier 32GB", "agx-xavier", 32),
    "p2888-0005": Module("Jetson AGX Xavier 64GB", "agx-xavier", 64),
    "p2888-0006": Module(
        "Jetson AGX Xavier 8GB",
        None,
        8,
        note="NVIDIA lists it as its own module with a smaller GPU than the agx-xavier target's "
        "(its SM count is not confirmed here); " + no_target("agx-xavier"),
    ),
    "p2888-0008": Module(
        "Jetson AGX Xavier Industrial", None, 32, guessed=False, note=no_target("agx-xavier")
    ),
    "p3448-0000": Module("Jetson Nano (developer kit module)", "nano", 4),
    "p3448-0002": Module("Jetson Nano", "nano", 4),
    "p3448-0003": Module("Jetson Nano 2GB", "nano", 2, note="the 2GB Nano has the 4GB one's GPU"),
    "p3310-1000": Module("Jetson TX2", "tx2", 8),
    "p3489-0080": Module("Jetson TX2 4GB", "tx2", 4),
    "p3489-0888": Module("Jetson TX2 4GB", "tx2", 4),
    "p3489-0000": Module("Jetson TX2i", None, 8, guessed=False, note=no_target("tx2")),
    "p3636-0001": Module("Jetson TX2 NX", "tx2", 4),
    "p2180-1000": Module("Jetson TX1", None, 4, note=no_target("nano")),  # Maxwell, CC 5.3, as the Nano
}

#: Module families by board ID (the part number's first half): what a SKU not in MODULES belongs to.
FAMILIES = {
    "p3767": "Jetson Orin NX / Orin Nano",
    "p3701": "Jetson AGX Orin",
    "p3668": "Jetson Xavier NX",
    "p2888": "Jetson AGX Xavier",
    "p3448": "Jetson Nano",
    "p3310": "Jetson TX2",
    "p3489": "Jetson TX2 4GB / TX2i",
    "p3636": "Jetson TX2 NX",
    "p2180": "Jetson TX1",
}

#: Compatible entries that name a developer kit (or a board's code name) rather than a module, as
#: NVIDIA's Jetson.GPIO lists them, with the modules each can be: a part number, or a family's
#: board ID (any of its guessed modules).
SYSTEMS: dict[str, tuple[str, ...]] = {
    "p3450-0000": ("p3448-0000",),  # Jetson Nano developer kit (P3449 carrier + P3448-0000)
    "p3450-0002": ("p3448-0002",),
    "jetson-nano": ("p3448",),
    "p2771-0000": ("p3310", "p3489", "p3636"),  # Jetson TX2 developer kit
    "p2771-0888": ("p3489-0888",),
    "quill": ("p3310-1000",),  # TX2's code name
    "storm": ("p3489-0888",),  # TX2 4GB's
    "lightning": ("p3489-0000",),  # TX2i's
    "p2972-0000": ("p2888",),  # Jetson AGX Xavier developer kit
    "p2972-0006": ("p2888",),
    "jetson-xavier": ("p2888",),
    "galen-industrial": ("p2888-0008",),
    "jetson-xavier-industrial": ("p2888-0008",),
    "p2371-2180": ("p2180-1000",),  # Jetson TX1 developer kit
    "jetson-cv": ("p2180-1000",),
}

#: Where the compatible list names no module at all (a carrier maker's own device tree): the
#: model's words, free text, as a last resort.
MODEL_FAMILIES = (
    (re.compile(r"AGX Orin", re.I), "p3701"),
    (re.compile(r"Orin (NX|Nano)", re.I), "p3767"),
    (re.compile(r"Xavier NX", re.I), "p3668"),
    (re.compile(r"AGX Xavier|Jetson-AGX|jetson-xavier", re.I), "p2888"),
    (re.compile(r"Jetson Nano|jetson-nano", re.I), "p3448"),
    (re.compile(r"\bTX2\b|quill|storm", re.I), "p3310 p3489 p3636"),
)

_PART = re.compile(r"^(p\d{4})-(\d{4})(?:-[a-z]?\d{2,3})?(-super)?$")  # a revision: -a01, -b00, -500


@dataclass(frozen=True)
class BoardMatch:
    """The built-in target a board is (None: not known), and `why`: what was read and how it
    decided, or why it could not."""

    target: str | None
    why: str


def nominal_memory_gb(mem_total_kib: int) -> int:
    """The memory a module is sold with: MemTotal rounded up to a power of two of GiB (the kernel
    and firmware keep less than half of it: an 8 GB module shows about 7.3 GiB)."""
    gib = mem_total_kib / (1 << 20)
    return 1 << max(0, math.ceil(math.log2(gib)))


def _memory_gb(env: Mapping[str, Any]) -> int | None:
    mem = env.get("mem_total_kib")
    if isinstance(mem, int) and not isinstance(mem, bool) and mem > 0:
        return nominal_memory_gb(mem)
    return None


def _parts(compatible: Sequence[str]) -> tuple[list[tuple[str, bool]], list[str], list[str]]:
    """What `compatible` names, in its order: modules [(part number, "-super")], developer kits
    (SYSTEMS keys), and part numbers of neither (another board's). A module is the part after the
    "+" of "nvidia,<carrier>+<module>", or a lone "nvidia,<part>"."""
    modules: list[tuple[str, bool]] = []
    systems: list[str] = []
    unknown: list[str] = []
    for entry in compatible:
        piece = entry.strip().removeprefix("nvidia,").split("+")[-1]
        m = _PART.match(piece)
        part = f"{m.group(1)}-{m.group(2)}" if m else piece
        if part in SYSTEMS:
            systems.append(part)
        elif m is None:
            continue
        elif m.group(1) in FAMILIES:
            modules.append((part, bool(m.group(3))))
        elif part not in unknown:
            unknown.append(part)
    return modules, systems, unknown


def _guessed(board_ids: Sequence[str]) -> list[str]:
    """The modules of these families a guess may land on (MODULES order)."""
    return [part for part, mod in MODULES.items() if part[:5] in board_ids and mod.guessed]


def _expand(names: Sequence[str]) -> list[str]:
    """Part numbers and board IDs (SYSTEMS values) -> the part numbers they can be."""
    out: list[str] = []
    for name in names:
        out += [p for p in ([name] if name in MODULES else _guessed([name])) if p not in out]
    return out


def read_summary(env: Mapping[str, Any]) -> str:
    """What the board said (model, compatible, MemTotal), for a line that explains a decision."""
    said = []
    if env.get("board"):
        said.append(f"model {str(env['board'])!r}")
    compatible = env.get("compatible")
    if isinstance(compatible, list) and compatible:
        said.append(f"compatible {', '.join(map(str, compatible))!r}")
    memory = _memory_gb(env)
    if memory is not None:
        said.append(f"MemTotal {env['mem_total_kib']:,} kB ({memory} GB)")
    return "; ".join(said) or "no device-tree model, compatible or MemTotal"


def target_for_board(env: Mapping[str, Any]) -> BoardMatch:
    """The built-in target `env` (jetson/runner.py's board environment) describes. Which modules the
    board can be comes from the first of: the module part numbers in the device tree's compatible,
    a developer kit's name there, the model's words; MemTotal, then Orin Nano / Orin NX in the
    model, narrow those down. None, with what was read, where that leaves no module deployopt
    has a target for, or more than one target. Pure: no file, no ssh."""
    model = str(env.get("board") or "")
    raw = env.get("compatible")
    modules, systems, unknown = _parts([str(c) for c in raw] if isinstance(raw, list) else [])
    known = list(dict.fromkeys(p for p, _ in modules if p in MODULES))
    if known:
        parts, source = known, f"compatible names {', '.join(known)}"
    elif modules:  # a family we know, a SKU we do not: any module of that family
        named = list(dict.fromkeys(p for p, _ in modules))
        family = FAMILIES[named[0][:5]]
        parts = _guessed([p[:5] for p in named])
        source = f"compatible names {', '.join(named)}, a {family} SKU not in the module table"
    elif systems:
        parts = _expand([m for s in dict.fromkeys(systems) for m in SYSTEMS[s]])
        source = f"compatible names {', '.join(dict.fromkeys(systems))}"
    else:
        ids = next((ids for pattern, ids in MODEL_FAMILIES if pattern.search(model)), None)
        if ids is None:
            what = (
                f"module {', '.join(unknown)} is not one deployopt has a target for"
                if unknown
                else "the board names no Jetson module deployopt knows"
            )
            return BoardMatch(None, f"{what} ({read_summary(env)})")
        parts = _guessed(ids.split())
        source = f"only the free-text model {model!r} says which Jetson this is"
    return _narrow(parts, source, env, super_mode=any(s for _, s in modules))


def _narrow(parts: list[str], source: str, env: Mapping[str, Any], super_mode: bool) -> BoardMatch:
    """The one target `parts` (the modules the board can be, per `source`) leave after MemTotal and
    the model's Orin Nano / Orin NX, or None and why."""
    memory, model = _memory_gb(env), str(env.get("board") or "")
    candidates, by = list(parts), []
    if memory is not None:
        fit = [p for p in candidates if MODULES[p].memory_gb in (None, memory)]
        if not fit:
            names = ", ".join(f"{MODULES[p].name} ({MODULES[p].memory_gb} GB)" for p in candidates)
            return BoardMatch(
                None, f"{source}: {names}, but the board has {memory} GB: which module? ({read_summary(env)})"
            )
        if len(fit) < len(candidates):
            by.append(f"its {memory} GB")
        candidates = fit
    lines = {MODULES[p].line for p in candidates} - {None}
    said = [line for line in sorted(lines, key=str) if line and line.lower() in model.lower()]
    if len(said) == 1 and len(lines) > 1:
        candidates = [p for p in candidates if MODULES[p].line == said[0]]
        by.append(f"{said[0]!r} in its model")
    targets = list(dict.fromkeys(MODULES[p].target for p in candidates))
    if len(targets) > 1:

        def names(t: str | None) -> str:
            return " / ".join(MODULES[p].name for p in candidates if MODULES[p].target == t)

        options = " or ".join(f"{t or 'no target'} ({names(t)})" for t in targets)
        narrowed = f", with {' and '.join(by)}" if by else ""
        return BoardMatch(
            None, f"{source}{narrowed}: that is {options}, and nothing read tells which ({read_summary(env)})"
        )
    module = MODULES[candidates[0]]
    name = " / ".join(dict.fromkeys(MODULES[p].name for p in candidates))
    decided = f"{source}{', with ' + ' and '.join(by) if by else ''}: {name}"
    if module.target is None:
        return BoardMatch(None, f"{decided}: {module.note} ({read_summary(env)})")
    how = [decided]
    if memory is not None and not by:
        agrees = module.memory_gb == memory
        how.append(f"MemTotal {'agrees' if agrees else 'says'} ({memory} GB)")
    if module.note:
        how.append(module.note)
    if super_mode:
        how.append("in a JetPack Super mode, whose GPU clock passes the target's")
    return BoardMatch(module.target, "; ".join(how))


def board_is_not(target: str, env: Mapping[str, Any]) -> str | None:
    """Why the board a measurement's environment describes (the runner's `compatible`, MemTotal,
    model) is another built-in target than `target`, or None when it is that one, cannot say, or
    `target` is not built in. The SM-count check (`measured_elsewhere`) cannot tell an Orin Nano 8GB
    from an Orin NX 8GB; the part number can. optimize's report says it, as the run's first line
    did (`--target X, but the board ... is Y`), so report.md keeps it after the terminal is gone."""
    from deployopt.targets import builtin_names

    if not env.get("compatible") or target not in builtin_names():
        return None
    match = target_for_board(env)
    if match.target is None or match.target == target:
        return None
    where = f" at {env['remote']}" if env.get("remote") else ""
    return (
        f"the board{where} is {match.target} ({match.why}), not {target}: the latencies are that "
        f"board's, the candidate widths and wave columns {target}'s; give --target {match.target}"
    )


# ----------------------------------------------------------------------------------------------
# asking the board (ssh): what `targets --remote` and `optimize --remote` without --target read


#: What optimize's line adds when the board has no python3 for reading which Jetson it is: trtexec
#: needs none, and --target skips the read (optimize then goes on without its answer).
NO_PYTHON3_FOR_THE_READ = (
    "it reads which Jetson the board is, as no --target was given: --target T skips that read "
    "(`deployopt targets` lists them), and --backend trtexec needs no python3 on the board otherwise"
)


def read_remote_board(host: str, timeout_s: float | None = None, without_python3: str = "") -> dict[str, Any]:
    """The board environment `python3 runner.py --env-only` prints on `host` (USER@HOST). The runner
    goes there as `--backend tensorrt --remote` sends it, by that session itself (its work folder
    made, runner.py copied into it, ssh and scp from deployopt.remote), so an unreachable board, a
    missing python3 or the runner's own refusal read the same one line as there, which adds
    `without_python3` (the caller's way around the read) where python3 is missing. Short limits
    (--timeout, at most 120 s): nothing is built. `timeout_s` None: the command has no --timeout
    (`targets --remote`), so a step that times out does not say --timeout raises its limit."""
    import json

    from deployopt.backends.base import MeasureOptions, get_backend
    from deployopt.backends.tensorrt_remote import NO_TIMEOUT_OPTION, RemoteRunnerSession, python3_missing
    from deployopt.errors import BackendFailed
    from deployopt.remote import RemoteFailed, tail

    extra: dict[str, Any] = {"remote": host}
    if timeout_s is None:
        extra[NO_TIMEOUT_OPTION] = True
    options = (
        MeasureOptions(extra=extra) if timeout_s is None else MeasureOptions(timeout_s=timeout_s, extra=extra)
    )
    with RemoteRunnerSession(get_backend("tensorrt"), options) as session:
        short = session.short_s
        session.preflight()  # the work folder; an unreachable board fails here, in one line
        runner = session._send_runner(short)
        try:
            out = session.board.run_limited(
                ["python3", str(runner), "--env-only"], "runner.py --env-only", short
            )
        except RemoteFailed as exc:
            said = session._runner_error(exc)
            if without_python3 and python3_missing(exc):
                said = f"{said}; {without_python3}"
            raise BackendFailed(said) from None
    try:
        doc = json.loads(out)
    except ValueError:
        doc = None
    if not isinstance(doc, dict):
        raise BackendFailed(
            f"runner.py --env-only on {host} printed no environment: {tail(out) or 'nothing'}"
        )
    return doc


def detect_remote_target(
    host: str, timeout_s: float | None = None, without_python3: str = ""
) -> tuple[dict[str, Any], BoardMatch]:
    """(the board's environment, the target it is) for the board at `host` (read_remote_board's
    `without_python3`)."""
    env = read_remote_board(host, timeout_s, without_python3)
    match = target_for_board(env)
    return env, BoardMatch(match.target, match.why.replace(BOARD_HOST, host))  # the command as it is run


@dataclass(frozen=True)
class RemoteTarget:
    """The target a `--remote` command uses, and the stderr line to print about it (or None)."""

    target: str
    note: str | None = None  # the target was read from the board: from what
    warning: str | None = None  # the user's --target is not what the board says it is


def target_for_remote(given: str | None, host: str, timeout_s: float | None = None) -> RemoteTarget:
    """`given` (the user's --target, kept whatever the board says) or, when None, the target read
    from the board (one-line TargetError where it names none). With both, a warning where they
    disagree; a board that answers but cannot say which it is then says nothing (the first
    measurement's SM count and compute capability are still checked). An unreachable board fails
    now either way, in one line: the run could not have gone on."""
    from deployopt.errors import BackendUnavailable, DeployoptError, TargetError

    if given is None:
        _, match = detect_remote_target(host, timeout_s, NO_PYTHON3_FOR_THE_READ)
        if match.target is None:
            raise TargetError(
                f"--target not given and the board at {host} does not say which it is: {match.why}"
            )
        return RemoteTarget(
            match.target, note=f"target: {match.target}, read from the board at {host} ({match.why})"
        )
    try:
        _, match = detect_remote_target(host, timeout_s)
    except BackendUnavailable:
        raise
    except DeployoptError:
        return RemoteTarget(given)
    from deployopt.targets import builtin_names

    if match.target is None or match.target == given or given not in builtin_names():
        return RemoteTarget(given)  # a profile of the user's own: not ours to second-guess
    return RemoteTarget(
        given,
        warning=f"--target {given}, but the board at {host} is {match.target} ({match.why}); "
        f"keeping --target {given}",
    )
