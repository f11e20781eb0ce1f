"""GPU targets: built-in profiles (one JSON data file per GPU), the local GPU, calibrated profiles.

A target is the set of facts the wave model needs (SM count, per-SM occupancy limits, clock) plus
the model's parameters for it, fitted on that GPU or derived from a similar one. Each figure keeps
the source it came from, because half the Jetson numbers on the web are for another power mode.
"""

from __future__ import annotations

import difflib
import json
import math
import os
import warnings
from dataclasses import dataclass, field, replace
from functools import cache
from pathlib import Path
from typing import Any

from deployopt import paths
from deployopt.errors import CacheWarning, DeployoptWarning, TargetError, no_such_file, range_error
from deployopt.fileio import read_json_input
from deployopt.waves import DTYPES, WaveParams, default_params, shown_as_json

DATA_DIR = Path(__file__).resolve().parent / "data"
FITTED_DIR = Path(__file__).resolve().parent / "fitted"

# Targets without their own fit borrow one measured on the same SM design.
FIT_BORROWED = {"h100": "h200"}
#: cache folders an unreadable-cache warning was given for (_warn_unreadable_cache)
_UNREADABLE_SAID: set[Path] = set()
#: The `deployopt_profile` version `deployopt calibrate` writes and `load_profile` reads.
PROFILE_VERSION = 1
#: Compute capability majors NVIDIA GPUs have: Kepler (3) to Blackwell (10-12); there was no 4. A
#: hand-edited [99, 9] was taken as a Hopper (the wave model's tables fall back to the nearest CC below).
CC_MAJORS = (3, 5, 6, 7, 8, 9, 10, 11, 12)
#: Generous but physical bounds of a profile's GPU facts, and why: a value outside is a typo or a unit
#: slip (a clock in GHz, shared memory in KB), and predicted latencies of 1e305 µs or Infinity (not
#: JSON) where it was taken as given.
FACT_RANGES: dict[str, tuple[int, int, str]] = {
    "sms": (1, 1024, "the largest GPUs have under 200 SMs"),
    "full_sms": (1, 1024, "the largest GPUs have under 200 SMs"),
    "cuda_cores": (1, 1024 * 256, "at most 1024 SMs of 256 cores"),
    "clock_mhz": (10, 10_000, "MHz; GPU clocks run from about 100 to 3000 MHz"),
    "max_threads_per_sm": (1, 4096, "2048 on any GPU so far"),
    "max_blocks_per_sm": (1, 256, "32 on any GPU so far"),
    "max_warps_per_sm": (1, 256, "64 on any GPU so far"),
    "shared_mem_per_sm": (1, 4 * 2**20, "bytes; 228 KB on any GPU so far"),
    "shared_mem_per_block": (1, 4 * 2**20, "bytes; 227 KB on any GPU so far"),
    "registers_per_sm": (1, 2**20, "65536 on any GPU so far"),
    "registers_per_block": (1, 2**20, "65536 on any GPU so far"),
}


@dataclass(frozen=True)
class Target:
    """One GPU as the wave model sees it. `params` maps dtype → WaveParams (fitted or default)."""

    name: str
    display_name: str
    compute_capability: tuple[int, int]
    sms: int
    cuda_cores: int
    clock_mhz: float
    max_threads_per_sm: int
    max_blocks_per_sm: int
    max_warps_per_sm: int
    shared_mem_per_sm: int
    shared_mem_per_block: int
    registers_per_sm: int
    registers_per_block: int
    sources: dict[str, str] = field(default_factory=dict, hash=False, compare=False)
    params: dict[str, WaveParams] = field(default_factory=dict, hash=False, compare=False)
    kind: str = ""
    software: dict[str, str] = field(default_factory=dict, hash=False, compare=False)  # JetPack / TRT / CUDA
    notes: str = ""
    full_sms: int | None = None  # the SM count before an --sms override (None: not overridden)
    origin: str = "built-in"  # "built-in", "local GPU (torch)", or the calibrated profile's path
    #: loaded from a profile `deployopt calibrate` wrote (its fitted params were measured on this
    #: GPU), not from a `targets --json` copy whose fitted params are a built-in fit carried along
    calibrated: bool = field(default=False, compare=False)

    @property
    def cc(self) -> str:
        return f"{self.compute_capability[0]}.{self.compute_capability[1]}"

    @property
    def cores_per_sm(self) -> int:
        return self.cuda_cores // max(self.sms if self.full_sms is None else self.full_sms, 1)

    @property
    def fast_int8(self) -> bool:
        """Native INT8 math (dp4a or INT8 tensor cores): CC 6.1 and 7.0 on. Maxwell and the other
        Pascals have none — Jetson Nano (5.3) and TX2 (6.2): TensorRT reports
        platform_has_fast_int8 False there and runs an INT8 build slower than FP16."""
        cc = tuple(self.compute_capability)
        return cc == (6, 1) or cc >= (7, 0)

    def dtypes(self) -> tuple[str, ...]:
        """The dtypes worth building for this GPU (and that the wave model predicts for it)."""
        return DTYPES if self.fast_int8 else tuple(d for d in DTYPES if d != "int8")

    def check_dtype(self, dtype: str) -> None:
        """A one-line TargetError for a dtype this GPU has no use for (predicted or measured)."""
        if dtype not in DTYPES:
            raise TargetError(f"unknown dtype {dtype!r}; choose one of: {', '.join(DTYPES)}")
        if dtype not in self.dtypes():
            raise TargetError(
                f"--dtype int8: {self.display_name} (compute capability {self.cc}) has no native INT8, and "
                "TensorRT runs INT8 there slower than FP16 ('Int8 support requested on hardware without "
                "native Int8 support'); use --dtype fp16"
            )

    def wave_params(self, dtype: str) -> WaveParams:
        """The model parameters for `dtype`: this target's fit, else defaults for its CC."""
        self.check_dtype(dtype)
        if dtype in self.params:
            return self.params[dtype]
        return default_params(self.compute_capability, dtype, self.clock_mhz)

    def with_sms(self, sms: int | None) -> Target:
        """What-if: the same GPU with fewer SMs (a green context, a gated power mode)."""
        if sms is None:
            return self
        full = self.full_sms or self.sms
        if isinstance(sms, bool) or not isinstance(sms, int) or sms < 1:
            raise TargetError(f"--sms must be a positive integer, not {sms!r}")
        if sms > full:
            raise TargetError(f"--sms {sms}: {self.name} has only {full} SM{'' if full == 1 else 's'}")
        return replace(self, sms=sms, full_sms=full)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "display_name": self.display_name,
            "kind": self.kind,
            "compute_capability": list(self.compute_capability),
            "sms": self.sms,
            **({"full_sms": self.full_sms} if self.full_sms is not None else {}),
            "cuda_cores": self.cuda_cores,
            "clock_mhz": self.clock_mhz,
            "max_threads_per_sm": self.max_threads_per_sm,
            "max_blocks_per_sm": self.max_blocks_per_sm,
            "max_warps_per_sm": self.max_warps_per_sm,
            "shared_mem_per_sm": self.shared_mem_per_sm,
            "shared_mem_per_block": self.shared_mem_per_block,
            "registers_per_sm": self.registers_per_sm,
            "registers_per_block": self.registers_per_block,
            "software": dict(self.software),
            "notes": self.notes,
            "origin": self.origin,
            "sources": dict(self.sources),
            "fast_int8": self.fast_int8,
            "params": {dt: self.wave_params(dt).to_json() for dt in self.dtypes()},
        }


_FIELDS = (
    "name",
    "display_name",
    "compute_capability",
    "sms",
    "cuda_cores",
    "clock_mhz",
    "max_threads_per_sm",
    "max_blocks_per_sm",
    "max_warps_per_sm",
    "shared_mem_per_sm",
    "shared_mem_per_block",
    "registers_per_sm",
    "registers_per_block",
)


def measured_elsewhere(target: Target, env: dict[str, Any]) -> str | None:
    """Why the GPU a measurement reports (its `sms`, `compute_capability`: TensorRT, the Jetson
    runner, trtexec) is not `target`, or None when it is or does not say. optimize measures on one
    GPU and takes candidate widths and wave columns from the target's profile: `--target nano`
    with `--remote` on an Orin searched the Nano's staircase on the Orin's timings, and no line said."""
    differs = gpu_differences(target, env)
    if not differs:
        return None
    return (
        f"{measured_gpu(env)} is not {target.name} ({'; '.join(differs)}): the latencies are that GPU's, "
        "the candidate widths and wave columns the target's; give the --target that matches it "
        "(`deployopt targets`)"
    )


def gpu_differences(target: Target, env: dict[str, Any]) -> list[str]:
    """How the GPU a measurement's environment records differs from `target`: its SM count (the
    target's, or its --sms what-if's) and compute capability; [] when they agree or it says neither."""
    sms, cc = env.get("sms"), env.get("compute_capability")
    full = target.full_sms or target.sms
    differs = []
    if isinstance(sms, int) and sms not in (full, target.sms):  # --sms: a green context of that many
        differs.append(f"{sms} SMs, the target {full}")
    if isinstance(cc, str) and cc != target.cc:
        differs.append(f"compute capability {cc}, the target {target.cc}")
    return differs


def measured_gpu(env: dict[str, Any]) -> str:
    """The GPU a measurement's environment names, and the board it was on ('NVIDIA H200')."""
    gpu = env.get("gpu") or env.get("device") or "the GPU measured"
    return f"{gpu} at {env['remote']}" if env.get("remote") else str(gpu)


#: The newest ONNX opset each TensorRT release's parser documents (onnx-tensorrt docs/operators.md
#: of that release: "TensorRT 8.2 supports operators up to Opset 13", 8.5 up to 17, "10.0 supports
#: operators in the inclusive range of opset 9 to opset 20"), by (major, minor) from that release on.
TENSORRT_MAX_OPSET = ((8, 0, 13), (8, 5, 17), (10, 0, 20))


def _changed_since(node: Any, opset: int, max_opset: int) -> bool:
    """Whether `node` at `opset` is one a parser of ops up to `max_opset` has not met: an op newer
    than that, or a version whose inputs or attributes this node uses were not there yet
    (ReduceMean 18 reading its axes as an input, Split 18's num_outputs, Resize 19's antialias).
    Read from onnx.defs, not a list: an attribute added since and left unset or at its default
    (BatchNormalization 14's training_mode, Reshape 14's allowzero), an input renamed (15's
    input_mean) or a version that only added types (Relu 14) is no change for the parser."""
    import onnx

    try:
        new = onnx.defs.get_schema(node.op_type, opset, "")
    except onnx.defs.SchemaError:
        return False  # not an ONNX op this onnx knows: nothing to say
    if new.since_version <= max_opset:
        return False
    try:
        old = onnx.defs.get_schema(node.op_type, max_opset, "")
    except onnx.defs.SchemaError:
        return True  # the op is newer than the parser
    used = [i for i, name in enumerate(node.input) if name]
    variadic = bool(old.inputs) and old.inputs[-1].option == onnx.defs.OpSchema.FormalParameterOption.Variadic
    if any(i >= len(old.inputs) and not variadic for i in used):
        return True
    return any(a.name not in old.attributes and not _is_default(a, new) for a in node.attribute)


def _is_default(attr: Any, schema: Any) -> bool:
    """Whether the node sets `attr` to its schema's default (exporters write allowzero=0 and
    training_mode=0): no different from leaving it out."""
    from onnx import helper

    default = schema.attributes[attr.name].default_value if attr.name in schema.attributes else None
    if default is None or not default.name:
        return False
    return helper.get_attribute_value(attr) == helper.get_attribute_value(default)


def opset_beyond_tensorrt(target: Target, model: Any) -> str | None:
    """A warning when the target's TensorRT (its JetPack's, `software`) documents ops only up to an
    opset older than some of the model's: the torch exporter's default writes opset 18 and more,
    whose ReduceMean, Split, Pad, Resize and LayerNormalization JetPack 4.6's and 5.1's parsers
    may not read. None when it has none such, or when the target names no TensorRT."""
    version = target.software.get("tensorrt", "")
    try:
        major, minor = (int(v) for v in version.split(".")[:2])
    except ValueError:
        return None
    known = [m for ma, mi, m in TENSORRT_MAX_OPSET if (major, minor) >= (ma, mi)]
    opset = next((d.version for d in model.opset_import if d.domain in ("", "ai.onnx")), None)
    if not known or opset is None or opset <= known[-1]:
        return None
    changed = sorted(
        {
            n.op_type
            for n in model.graph.node
            if n.domain in ("", "ai.onnx") and _changed_since(n, opset, known[-1])
        }
    )
    if not changed:
        return None
    jetpack = target.software.get("jetpack")
    on = f"JetPack {jetpack}, {target.name}" if jetpack else target.name
    names = ", ".join(changed[:4]) + (" …" if len(changed) > 4 else "")
    return (
        f"the model is ONNX opset {opset}, and its {names} nodes use what changed after opset "
        f"{known[-1]}, the newest TensorRT {version} ({on}) documents: its parser may not read the "
        "models written from it; "
        f"export at opset {known[-1]} (torch.onnx.export(..., dynamo=False, opset_version={known[-1]}))"
    )


def measured_on_host(flag: str, target: Target, consequence: str) -> str:
    """The warning for a GPU target timed on this machine's CPU (ort's CPU provider, torch without
    CUDA): `flag` is the option that chose the backend, `consequence` what the CPU's numbers decide."""
    return (
        f"{flag} measures on this machine's CPU, not on the GPU of {target.name}: {consequence} "
        "(measure on the GPU: torch on CUDA, tensorrt or trtexec)"
    )


def sm_count(sms: int) -> str:
    """'1 SM' / '8 SMs': the Nano and TX2 have one or two SMs, and tables print the count often."""
    return f"{sms} SM{'' if sms == 1 else 's'}"


def _json_type(value: Any) -> str:
    """What a JSON reader calls the value's type (null, array), not Python's (NoneType, list)."""
    for kind, name in ((bool, "boolean"), (dict, "object"), (list, "array"), (str, "string")):
        if isinstance(value, kind):
            return name
    return "null" if value is None else "number"


def target_from_json(d: dict[str, Any], origin: str = "built-in") -> Target:
    """Build a Target from a data-file dict; `params` (dtype → WaveParams dict) is optional."""
    missing = [k for k in _FIELDS if k not in d]
    if missing:
        raise TargetError(f"target profile {origin}: missing {', '.join(missing)}")

    def positive(key: str, kind: type = int) -> Any:
        # a hand-edited profile (a power-mode what-if) is user input: one line, not a traceback
        value = d[key]
        what = "an integer" if kind is int else "a number"
        number = value if isinstance(value, (int, float)) and not isinstance(value, bool) else None
        # int(Infinity) was an OverflowError traceback; 2.5 SMs and NaN are no count either
        fraction = kind is int and isinstance(number, float) and not number.is_integer()
        if number is None or fraction or not number > 0:
            raise TargetError(f"target profile {origin}: {key} must be {what} above 0, not {value!r}")
        if not math.isfinite(number):  # a clock of Infinity predicted the fixed cost alone for any conv
            raise TargetError(
                f"target profile {origin}: {key} must be a finite number above 0, not {value!r}"
            )
        if message := range_error(key, number, *FACT_RANGES[key]):
            raise TargetError(f"target profile {origin}: {message}")
        return kind(number)

    for key in (
        "sources",
        "software",
    ):  # free text per key; a list or a number here is a hand edit gone wrong
        if d.get(key) is not None and not isinstance(d[key], dict):
            raise TargetError(
                f"target profile {origin}: {key} must be an object of name → text, not {_json_type(d[key])}"
            )

    cc = d["compute_capability"]
    pair = isinstance(cc, (list, tuple)) and len(cc) == 2
    if not (pair and all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in cc)):
        raise TargetError(f"target profile {origin}: compute_capability must be [major, minor], not {cc!r}")
    if cc[0] not in CC_MAJORS or not 0 <= cc[1] <= 9:
        majors = f"{CC_MAJORS[0]} or {CC_MAJORS[1]}-{CC_MAJORS[-1]}"
        raise TargetError(
            f"target profile {origin}: compute_capability {list(cc)} is no NVIDIA GPU's: the major is "
            f"{majors}, the minor 0-9"
        )
    for key, required in (("name", True), ("display_name", True), ("kind", False), ("notes", False)):
        # str() named a target 'None' or "['x']"; a kind of 5 printed as one
        value = d.get(key, "")
        if not isinstance(value, str) or (required and not value.strip()):
            what = "a non-empty string" if required else "a string"
            raise TargetError(f"target profile {origin}: {key} must be {what}, not {shown_as_json(value)}")
    for key in ("sources", "software"):
        for item, value in (d.get(key) or {}).items():
            if not isinstance(value, str):  # software {"cuda": null} printed "cuda None"
                raise TargetError(
                    f"target profile {origin}: {key} {item!r} must be a string, not {shown_as_json(value)}"
                )
    params = _params_from_json(d.get("params"), origin)
    sms = positive("sms")
    full_sms = None if d.get("full_sms") is None else positive("full_sms")
    if full_sms is not None and full_sms < sms:  # "8/2" SMs in the table, "has only 2 SMs" for --sms 4
        raise TargetError(
            f"target profile {origin}: full_sms {full_sms} is fewer than sms {sms} (full_sms is the "
            "GPU's SM count before an --sms what-if)"
        )
    target = Target(
        name=str(d["name"]),
        display_name=str(d["display_name"]),
        compute_capability=(int(cc[0]), int(cc[1])),
        sms=sms,
        cuda_cores=positive("cuda_cores"),
        clock_mhz=positive("clock_mhz", float),
        max_threads_per_sm=positive("max_threads_per_sm"),
        max_blocks_per_sm=positive("max_blocks_per_sm"),
        max_warps_per_sm=positive("max_warps_per_sm"),
        shared_mem_per_sm=positive("shared_mem_per_sm"),
        shared_mem_per_block=positive("shared_mem_per_block"),
        registers_per_sm=positive("registers_per_sm"),
        registers_per_block=positive("registers_per_block"),
        sources=dict(d.get("sources") or {}),
        params=params,
        kind=d.get("kind", ""),
        software=dict(d.get("software") or {}),
        notes=d.get("notes", ""),
        full_sms=full_sms,
        origin=origin,
    )
    target = replace(target, params=_upgraded_cc7_families(target))
    _check_families_fit(target, origin)
    return target


#: The shared memory a block of the default Volta/Turing (compute capability 7.x) kernel families
#: asked before 839ae8d cut it to 64 KB: calibrate wrote the families it started from into every
#: profile, so each T4 profile from then holds this, 8 KB more than a T4 SM has.
OLD_CC7_FAMILY_SHARED_MEM = 73728


def _upgraded_cc7_families(target: Target) -> dict[str, WaveParams]:
    """`target`'s params, with a cc 7.x family still asking OLD_CC7_FAMILY_SHARED_MEM a block where
    the SM has less (a T4 profile calibrated before 839ae8d) asking the SM's shared memory instead,
    as the defaults were cut: _check_families_fit refused such a profile as a hand edit after an
    upgrade. No prediction changes: blocks_per_sm prices a block too large for the SM at one block
    per SM, and one that fills the SM's shared memory is one block per SM too."""
    have = target.shared_mem_per_sm
    if target.compute_capability >= (8, 0) or have >= OLD_CC7_FAMILY_SHARED_MEM:
        return target.params
    params = {}
    for dtype, p in target.params.items():
        families = tuple(
            replace(f, shared_mem_bytes=have) if f.shared_mem_bytes == OLD_CC7_FAMILY_SHARED_MEM else f
            for f in p.families
        )
        params[dtype] = replace(p, families=families) if families != p.families else p
    return params


def _params_from_json(raw: Any, origin: str) -> dict[str, WaveParams]:
    """A profile's `params`: dtype → WaveParams, each under its own dtype's key. A key no dtype has
    ("bf16") was kept and never used; an int8 key holding fp16 parameters predicted INT8 with them
    and labelled the prediction fp16."""
    if raw is None:
        return {}
    if not isinstance(raw, dict):  # [] was taken as no params
        raise TargetError(
            f"target profile {origin}: params must be an object of dtype → parameters, not {_json_type(raw)}"
        )
    params: dict[str, WaveParams] = {}
    for dtype, p in raw.items():
        if dtype not in DTYPES:
            raise TargetError(
                f"target profile {origin}: params {dtype!r}: no dtype the wave model has "
                f"({', '.join(DTYPES)})"
            )
        try:
            params[dtype] = WaveParams.from_json(p)
        except (AttributeError, KeyError, TypeError, ValueError) as exc:
            why = f"{type(exc).__name__}: {exc}"  # fp16's and fp32's have the same keys: say whose
            raise TargetError(f"target profile {origin}: unreadable {dtype} params ({why})") from None
        if params[dtype].dtype != dtype:
            raise TargetError(
                f"target profile {origin}: params {dtype!r} holds {params[dtype].dtype} parameters "
                f"('{params[dtype].name}'); each dtype's parameters go under its own key"
            )
    return params


def _check_families_fit(target: Target, origin: str) -> None:
    """A kernel family whose block cannot run on one of the target's SMs (more shared memory,
    threads or registers than an SM has) was priced at one block per SM: a hand edit gone wrong, so
    one line naming it."""
    for dtype, params in target.params.items():
        for fam in params.families:
            over = [
                (what, need, have)
                for what, need, have in (
                    ("shared_mem_bytes", fam.shared_mem_bytes, target.shared_mem_per_sm),
                    ("threads", fam.threads, target.max_threads_per_sm),
                    (
                        "registers (threads × registers_per_thread)",
                        fam.threads * fam.registers_per_thread,
                        target.registers_per_sm,
                    ),
                )
                if need > have
            ]
            if over:
                what, need, have = over[0]
                raise TargetError(
                    f"target profile {origin}: {dtype} family {fam.name!r}: {what} {need} is more than one "
                    f"SM has ({have}): its block could never run"
                )


def _fitted_params(name: str) -> dict[str, WaveParams]:
    path = FITTED_DIR / f"{FIT_BORROWED.get(name, name)}.json"
    if not path.exists():
        return {}
    doc = json.loads(path.read_text())
    return {dt: WaveParams.from_json(p) for dt, p in doc.get("params", {}).items()}


@cache
def _builtin(name: str) -> Target:
    d = json.loads((DATA_DIR / f"{name}.json").read_text())
    d = dict(d, params={})
    target = target_from_json(d)
    return replace(target, params=_fitted_params(name))


def builtin_names() -> list[str]:
    return sorted(p.stem for p in DATA_DIR.glob("*.json"))


def _own_copy(target: Target) -> Target:
    """`target` with dicts of its own: a built-in is cached once per process (`_builtin`), and a
    what-if edit of the caller's `params` changed what every later get_target returned. (Frozen
    WaveParams need no copy; a read-only mapping would not pickle into a worker.)"""
    return replace(
        target, params=dict(target.params), sources=dict(target.sources), software=dict(target.software)
    )


def list_targets() -> list[Target]:
    """Every built-in target, Jetsons first (by SM count), then the discrete GPUs."""
    targets = [_own_copy(_builtin(n)) for n in builtin_names()]
    return sorted(targets, key=lambda t: (t.kind != "jetson", t.sms, t.clock_mhz, t.name))


def cache_dir() -> Path:
    """Where calibrated profiles live (deployopt.paths.cache_dir("targets"))."""
    return paths.cache_dir("targets")


def cached_profiles() -> dict[str, Path]:
    """Profiles in the user cache under names no built-in target has (`calibrate --name mine`), by
    name: `--target mine` loads them, so `deployopt targets` lists them beside the built-in ones
    (a cached profile of a built-in name replaces that target's row instead)."""
    builtin = set(builtin_names())
    try:
        if not cache_dir().is_dir():
            return {}
        # `local` and a name ending .json are not read as names: no --target reaches them
        found = sorted(
            p
            for p in cache_dir().glob("*.json")
            if p.stem not in builtin | {"local"} and not p.stem.endswith(".json")
        )
    except OSError as exc:
        _warn_unreadable_cache(exc)
        return {}
    return {p.stem: p for p in found}


def cached_profile(name: str) -> Path | None:
    """The user cache's profile for `--target name`, or None. A cache that cannot be looked in (a
    HOME or DEPLOYOPT_CACHE_DIR inside another user's mode-700 folder) holds none, said once: its
    Permission denied failed every --target, the built-in ones too."""
    path = cache_dir() / f"{name}.json"
    try:
        return path if path.exists() else None
    except OSError as exc:
        _warn_unreadable_cache(exc)
        return None


def _warn_unreadable_cache(exc: OSError) -> None:
    """The one warning (a process, a cache folder) for a cache of calibrated profiles that cannot
    be looked in: every --target looks, and the CLI shows each warning."""
    where = cache_dir()
    if where in _UNREADABLE_SAID:
        return
    _UNREADABLE_SAID.add(where)
    warnings.warn(
        f"cannot look in the target cache {where}: {exc.strerror or exc}; its calibrated profiles are "
        "not used, the built-in targets are (DEPLOYOPT_CACHE_DIR moves the cache)",
        CacheWarning,
        stacklevel=3,
    )


#: The most a target profile may hold: calibrate writes about 40 KB (its sweeps included); a larger
#: file is no profile, and reading one whole (a 10 GB file given as --target) filled memory first.
PROFILE_MAX_BYTES = 16 << 20


def load_profile(path: str | os.PathLike[str]) -> Target:
    """A calibrated profile written by `deployopt calibrate` (target facts + fitted params), or one
    target as `deployopt targets --target T --json` prints it, edited for a what-if: a Jetson power
    mode's clock or SM count. Its default (unfitted) parameters are dropped and derived again from
    the edited facts; fitted ones are kept as they are, except a fit to host-CPU timings
    (host_cpu_fit): its GPU facts are used with default parameters, and a warning says so."""
    target, host_fit = _read_profile(path)
    if host_fit:
        _warn_host_fit(Path(path), target.name, host_fit, "its GPU facts predict with default parameters")
    return target


def _read_profile(path: str | os.PathLike[str]) -> tuple[Target, str | None]:
    """load_profile's target, and why its fit was not used (host_cpu_fit), without a warning."""
    path = Path(path)
    if path.is_dir():  # was "cannot read target profile D: [Errno 21] Is a directory: 'D'"
        raise TargetError(f"{path}: is a folder, expected a target profile (.json)")
    try:
        text = read_json_input(path, TargetError, "a target profile (.json)", PROFILE_MAX_BYTES).decode()
        if not text.strip():  # was "Expecting value: line 1 column 1 (char 0)"
            raise TargetError(f"{path}: empty file, expected a target profile (.json)")
        doc = json.loads(text)
    except OSError as exc:
        raise TargetError(f"cannot read target profile {path}: {exc.strerror or exc}") from None
    except json.JSONDecodeError as exc:
        raise TargetError(f"cannot read target profile {path}: {exc}") from None
    except RecursionError:  # '[' × 100 000: json's parser recurses
        raise TargetError(f"cannot read target profile {path}: JSON nested too deeply") from None
    except UnicodeDecodeError:  # a model or an image given as --target
        raise TargetError(f"{path} is not a deployopt target profile (not JSON text)") from None
    if isinstance(doc, dict) and "target" not in doc and {"compute_capability", "clock_mhz"} <= set(doc):
        d = dict(doc)  # `targets --target T --json`
        params = d.get("params") if isinstance(d.get("params"), dict) else {}
        d["params"] = {dt: p for dt, p in params.items() if isinstance(p, dict) and p.get("fitted")}
        d.pop("full_sms", None)
    elif isinstance(doc, dict) and "target" not in doc and {"compute_capability", "clock_mhz"} & set(doc):
        missing = sorted({"compute_capability", "clock_mhz"} - set(doc))
        raise TargetError(f"{path}: a `targets --json` profile needs {' and '.join(missing)}")
    elif not isinstance(doc, dict) or "target" not in doc:
        raise TargetError(
            f"{path} is not a deployopt target profile (neither calibrate's, with a 'target' key, nor "
            "one from `targets --target T --json`)"
        )
    elif not isinstance(doc["target"], dict):
        raise TargetError(f"{path}: 'target' must be an object of GPU facts, not {_json_type(doc['target'])}")
    elif "deployopt_profile" not in doc:  # calibrate writes it in every profile
        raise TargetError(
            f"{path} is not a deployopt target profile: it has a 'target' key but no 'deployopt_profile' "
            f"version (`deployopt calibrate` writes {PROFILE_VERSION})"
        )
    else:
        d = dict(doc["target"])
        d["params"] = doc.get("params", {})
    version = doc.get("deployopt_profile", PROFILE_VERSION)
    if type(version) is not int or version != PROFILE_VERSION:  # 99 or "two" was read as version 1
        raise TargetError(
            f"{path}: unsupported profile version {version!r} (deployopt_profile); this "
            f"deployopt reads version {PROFILE_VERSION}: calibrate again, or use the deployopt that wrote it"
        )
    d.pop("origin", None)
    from_calibrate = isinstance(doc, dict) and "target" in doc
    host_fit = host_cpu_fit(doc.get("measured_with")) if from_calibrate else None
    if host_fit and isinstance(d.get("params"), dict):
        # a fit to host-CPU timings (calibrate before 13e34d9 wrote one): its parameters describe no
        # GPU; the GPU facts stay, the parameters are derived from them as for an uncalibrated profile
        d["params"] = {
            dt: p for dt, p in d["params"].items() if not (isinstance(p, dict) and p.get("fitted"))
        }
    target = target_from_json(d, origin=str(path))
    if not from_calibrate and target.name in builtin_names():
        # a what-if edit of a built-in's facts (a power mode's clock): its source now is the file,
        # where the data sheet's line ("625 MHz max") was printed beside 1020 MHz
        base, now = _builtin(target.name).to_json(), target.to_json()
        edited = [k for k in _FIELDS[2:] if now[k] != base[k]]
        sources = {k: f"edited in {path} (built-in {target.name}: {base[k]})" for k in edited}
        target = replace(target, sources={**target.sources, **sources})
    calibrated = from_calibrate and any(p.fitted for p in target.params.values())
    return replace(target, calibrated=calibrated), host_fit


#: How a profile's measured_with names a host CPU as its device: ort's "CPUExecutionProvider", torch's
#: "CPU (no CUDA device)", a plain "cpu".
_CPU_DEVICE_PREFIX = "cpu"


def host_cpu_fit(measured_with: Any) -> str | None:
    """Why a calibrated profile's fit describes the host CPU, not a GPU, from what it says it was
    measured with (`calibrate` writes measured_with), or None where it names a GPU or does not
    tell. The rule of calibrate's own refusal (cli/targets_cmd.py _check_on_gpu): onnxruntime on its
    CPU provider, torch without CUDA. A deployopt before 13e34d9 (2026-12-03) recorded no device for
    ort ({"backend": "ort", "runs": 5, ...}) and calibrated on onnxruntime's CPU provider as well as
    on its CUDA one: such a profile may be a CPU fit, so its fit is not used either (`_NO_DEVICE`,
    worded as such: not asserted to be one; the GPU provider names itself in `device` since)."""
    if not isinstance(measured_with, dict) or measured_with.get("remote"):  # a board's GPU over ssh
        return None
    backend = measured_with.get("backend")
    device = measured_with.get("device")
    if isinstance(device, str) and device.strip().lower().startswith(_CPU_DEVICE_PREFIX):
        return f"measured with {backend} on {device}"
    if backend == "ort" and not device:
        return _NO_DEVICE
    return None


#: host_cpu_fit's reason for an ort profile without a device: it may be a CPU fit or a GPU one
_NO_DEVICE = "measured with ort, no device recorded"


#: profiles (path, size, mtime) the host-CPU-fit warning was given for in this process: every
#: get_target of a run (the optimizer's, the wave model's session) reads the file again
_HOST_FIT_SAID: set[tuple[str, int, int]] = set()


def _warn_host_fit(path: Path, name: str, why: str, instead: str) -> None:
    """One warning a profile: the file, why its fit is not used, what is used instead, what to do."""
    try:
        st = path.stat()
        key = (str(path.resolve()), st.st_size, st.st_mtime_ns)
    except OSError:
        key = (str(path), 0, 0)
    if key in _HOST_FIT_SAID:
        return
    _HOST_FIT_SAID.add(key)
    said = (
        f"{path}: recorded no device for its ort timings (as `calibrate` wrote before it refused "
        "onnxruntime's CPU provider, 2026-12-03), so it may be a fit to host-CPU timings and its fit "
        "is not used"
        if why == _NO_DEVICE
        else f"{path}: calibrated from host-CPU timings ({why}), not from the GPU's, so its fit is not used"
    )
    warnings.warn(
        f"{said}: {instead}; re-run `deployopt calibrate -t {name}` on the GPU, or delete the file",
        DeployoptWarning,
        stacklevel=3,
    )


def get_target(name_or_path: str | os.PathLike[str], sms: int | None = None) -> Target:
    """Resolve a target: "local" (the GPU present), a profile path, a calibrated profile in the user
    cache, or a built-in name. A calibrated profile of the same name wins over the built-in one,
    so `deployopt calibrate --target orin-nano-8gb` changes what that name predicts for this user.
    The Target returned is the caller's own: editing its params changes no other caller's."""
    if isinstance(name_or_path, os.PathLike):  # a Path to a profile was an AttributeError (.endswith)
        name_or_path = os.fspath(name_or_path)
    if not isinstance(name_or_path, str):
        raise TargetError(
            "a target is a name (see `deployopt targets`) or a profile's path, "
            f"not a {type(name_or_path).__name__}"
        )
    if name_or_path == "local":
        from deployopt.targets.local import read_local_target

        target = read_local_target()
    elif name_or_path.endswith(".json") or os.sep in name_or_path:
        if not Path(name_or_path).exists():
            raise no_such_file(name_or_path, TargetError)
        target = load_profile(name_or_path)
    elif (cached := cached_profile(name_or_path)) is not None:
        # named as --target reaches it: a profile copied in under another file name (calibrate's
        # h200-8sm as h200.json) was listed as h200-8sm, a name --target then called unknown
        target, host_fit = _read_profile(cached)
        if host_fit and name_or_path in builtin_names():
            # a CPU fit under a built-in name (`calibrate -t orin-nano-8gb --measure ort` before
            # 13e34d9): the built-in target, parameters and all, as if the file were not there
            instead = f"--target {name_or_path} is the built-in target, with its built-in parameters"
            _warn_host_fit(cached, name_or_path, host_fit, instead)
            target = _own_copy(_builtin(name_or_path))
        else:
            if host_fit:
                instead = "its GPU facts predict with default parameters"
                _warn_host_fit(cached, name_or_path, host_fit, instead)
            target = replace(target, name=name_or_path)
    elif name_or_path in builtin_names():
        target = _own_copy(_builtin(name_or_path))
    else:
        # a cached profile of a built-in name (h100.json) was listed twice
        names = [*builtin_names(), "local", *cached_profiles()]
        close = difflib.get_close_matches(name_or_path.lower(), names, n=1, cutoff=0.6)
        hint = f"did you mean {close[0]!r}? " if close else ""
        raise TargetError(
            f"unknown target {name_or_path!r}; {hint}choose one of: {', '.join(names)} (or a profile .json)"
        )
    return target.with_sms(sms)


def cc_limits(cc: tuple[int, int]) -> dict[str, int] | None:
    """Per-SM limits of a compute capability: a built-in target's that has it, else the CUDA guide's
    table (deployopt.kernels.SM_LIMITS: 8.6 and 8.9 have no built-in target, and `local` on an RTX
    3090 took an H100's 32 blocks and 64 warps an SM); None when neither knows it."""
    for t in list_targets():
        if t.compute_capability == tuple(cc):
            return {k: getattr(t, k) for k in _FIELDS[6:]}
    from deployopt.kernels import SM_LIMITS  # lazy: it imports the backends

    limits = SM_LIMITS.get(f"{cc[0]}.{cc[1]}")
    if limits is None:
        return None
    return {
        "max_threads_per_sm": limits.threads,
        "max_blocks_per_sm": limits.blocks,
        "max_warps_per_sm": limits.warps,
        "shared_mem_per_sm": limits.shared_memory,
        # a block may opt in to all of an SM's shared memory but the driver's reserve from CC 7.0
        # on (CUDA guide: 96 KB on 7.0, 99 KB on 8.6 and 8.9), to 48 KB before
        "shared_mem_per_block": (
            limits.shared_memory - limits.reserved_shared_per_block if tuple(cc) >= (7, 0) else 48 * 1024
        ),
        "registers_per_sm": limits.registers,
        "registers_per_block": 32768 if tuple(cc) in ((5, 3), (6, 2)) else 65536,
    }


def fitted_for_cc(cc: tuple[int, int]) -> dict[str, WaveParams]:
    """Fitted parameters shipped for a GPU of this compute capability (used by `local`)."""
    for t in list_targets():
        if t.compute_capability == tuple(cc) and t.params:
            return dict(t.params)
    return {}
