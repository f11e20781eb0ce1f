"""Append-only record of an optimize run, so an interrupted search resumes without re-measuring.

One JSON object per line, each line flushed and fsync'd before the search goes on: a crash or a
Ctrl-C can at worst lose the line being written, which replay then ignores. Replay gives back
every end-to-end Timing (keyed by plan), every per-layer table value, and the configuration the
run was started with, so `--resume` can refuse a journal that belongs to a different run.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from deployopt.errors import DeployoptError
from deployopt.fileio import output_error
from deployopt.timing import Timing

JOURNAL_VERSION = 1


def plan_key(plan: dict[str, int], repeat: int = 0) -> str:
    """Canonical text of a plan: the same widths give the same key whatever the dict order.

    `repeat` > 0 names a re-measurement of the same plan (the final confirmation rounds)."""
    key = json.dumps({k: int(plan[k]) for k in sorted(plan)}, separators=(",", ":"))
    return f"{key}#{repeat}" if repeat else key


@dataclass
class Replay:
    """What a journal holds, ready for the search to consult instead of the device."""

    config: dict[str, Any] | None = None
    timings: dict[str, Timing] = field(default_factory=dict)  # plan_key -> end-to-end Timing
    layer_values: dict[str, float] = field(default_factory=dict)  # shape signature -> µs (median)
    fidelity: dict[str, dict[str, Any]] = field(default_factory=dict)  # plan_key -> fidelity record
    events: list[dict[str, Any]] = field(default_factory=list)
    done: bool = False


class Journal:
    """Writer for OUTDIR/journal.jsonl; `Journal.replay(path)` reads one back."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._fh = open(self.path, "a", encoding="utf-8")  # noqa: SIM115  (closed in close())
        except OSError as exc:  # read-only, a file where the folder goes: one line, not a traceback
            raise output_error(self.path, exc) from None

    def write(self, event: str, **data: Any) -> None:
        """Append one event and make it durable before returning; a full disk is one OutputError
        naming the journal (the lines already written still replay with --resume)."""
        line = json.dumps({"event": event, **data}, separators=(",", ":"), default=_json_default)
        try:
            self._fh.write(line + "\n")
            self._fh.flush()
            os.fsync(self._fh.fileno())
        except OSError as exc:
            raise output_error(self.path, exc) from None

    def close(self) -> None:
        """Close; a buffered line that cannot be written then is lost like a torn line, not an error."""
        if not self._fh.closed:
            with contextlib.suppress(OSError):
                self._fh.close()

    def __enter__(self) -> Journal:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @staticmethod
    def read(path: str | os.PathLike[str]) -> Iterator[dict[str, Any]]:
        """Events in order; a torn last line (killed mid-write) is skipped, a torn middle line is an error."""
        lines = Path(path).read_text(encoding="utf-8").splitlines()
        for i, line in enumerate(lines):
            if not line.strip():
                continue
            try:
                event = json.loads(line)
            except json.JSONDecodeError:
                if i == len(lines) - 1:
                    return
                raise DeployoptError(
                    f"{path}: line {i + 1} is not valid JSON; the journal is damaged"
                ) from None
            if not isinstance(event, dict):  # valid JSON, but no event: hand-edited or another file
                raise DeployoptError(f"{path}: line {i + 1} is not a journal event; the journal is damaged")
            yield event

    @classmethod
    def replay(cls, path: str | os.PathLike[str]) -> Replay:
        out = Replay()
        for ev in cls.read(path):
            out.events.append(ev)
            kind = ev.get("event")
            try:
                _replay_event(out, ev)
            except (KeyError, TypeError, ValueError, AttributeError) as exc:
                # a hand-edited or foreign line: what it lacks, not a traceback from deep in the search
                why = f"no {exc.args[0]!r}" if isinstance(exc, KeyError) else str(exc)
                raise DeployoptError(
                    f"{path}: a {kind!r} event is damaged ({why}); use --force to start over"
                ) from None
        return out


def _replay_event(out: Replay, ev: dict[str, Any]) -> None:
    """Fold one event into `out`; a field of the wrong shape raises KeyError/TypeError/ValueError."""
    kind = ev.get("event")
    if kind == "start":
        config = ev.get("config")
        if not isinstance(config, dict):
            raise TypeError("config is not an object")
        out.config = config
    elif kind == "measured":
        timing = Timing.from_json(ev["timing"])
        if not timing.samples_us or not all(
            isinstance(s, (int, float)) and not isinstance(s, bool) and math.isfinite(s) and s >= 0
            for s in timing.samples_us
        ):
            raise ValueError("samples_us must be finite latencies in µs")
        out.timings[plan_key(ev["plan"], ev.get("repeat", 0))] = timing
    elif kind == "sweep":
        out.layer_values.update({str(k): float(v) for k, v in ev.get("values", {}).items()})
    elif kind == "fidelity":
        out.fidelity[plan_key(ev["plan"])] = ev
    elif kind == "done":
        out.done = True


def _json_default(obj: Any) -> Any:
    if hasattr(obj, "to_json"):
        return obj.to_json()
    if isinstance(obj, (set, tuple)):
        return list(obj)
    if isinstance(obj, Path):
        return str(obj)
    try:
        import numpy as np

        if isinstance(obj, np.generic):
            return obj.item()
    except ImportError:  # pragma: no cover
        pass
    raise TypeError(f"cannot journal {type(obj).__name__}")
