"""Opening an onnxruntime session when onnxruntime is older than the onnx that wrote the model.

pip installs the newest onnx and the newest onnxruntime for a Python independently, and onnx can
run ahead: on Python 3.10, onnx 1.23 writes IR 14 and onnxruntime 1.23 reads up to IR 11; on 3.9,
onnx 1.19 writes IR 12 and onnxruntime 1.19 reads up to 10. A model made or re-saved with
`onnx.helper.make_model` there ("Unsupported model IR version: 14, max supported IR version: 11")
could not be checked or timed at all, though its opset is one onnxruntime runs. The IR version
only bounds which file features a model may use; a copy that says the newest version onnxruntime
reads, when its opsets allow that, loads, and a model that really uses a newer feature still
fails with onnxruntime's own message. The file itself is never changed.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import onnx

#: onnxruntime's refusal of a model whose IR version is newer than it reads
_IR_LIMIT = re.compile(r"Unsupported model IR version: (\d+), max supported IR version: (\d+)")

#: protobuf's limit on one serialized message (a bigger model keeps its weights outside the file)
_MAX_BYTES = 2**31 - 1
#: a model the caller releases goes to onnxruntime as a file above this size (below it, the bytes
#: in memory cost less than writing them out)
RELEASE_BYTES = 64 << 20


#: the warning onnxruntime prints (in ANSI colour, on stderr) as it is imported where its cache
#: folder cannot be written (HOME unwritable: cron, a service user); it says nothing about a model
_TELEMETRY_LINE = b"Failed to persist telemetry device ID"


#: one holder of fd 2 at a time (`stderr_filtered`): two threads loading models each swapped fd 2
#: for their own hold, and the last to finish put back the other's, leaving the process's stderr
#: pointing at a deleted file for good (review of d27ce72). Reentrant: a hold inside a hold is fine.
_STDERR_HOLD = threading.RLock()
if hasattr(os, "register_at_fork"):  # a child forked while another thread held: its own lock, free
    os.register_at_fork(after_in_child=lambda: globals().__setitem__("_STDERR_HOLD", threading.RLock()))
#: how long the end of a hold waits for its last lines to be passed on: a child process that
#: inherited the hold's pipe as its stderr keeps it open past the hold
_FORWARD_WAIT_S = 10.0


def _write_all(fd: int, data: bytes) -> None:
    while data:
        data = data[os.write(fd, data) :]


def _forward(read_end: int, dest: int, drop: Callable[[bytes], bool]) -> None:
    """Pass each line read from `read_end` to `dest` as it comes, but those `drop` matches."""
    rest = b""
    try:
        while chunk := os.read(read_end, 1 << 16):
            *lines, rest = (rest + chunk).split(b"\n")
            kept = b"".join(line + b"\n" for line in lines if not drop(line + b"\n"))
            if kept:
                _write_all(dest, kept)
        if rest and not drop(rest):
            _write_all(dest, rest)
    except OSError:  # stderr itself gone (a closed terminal): nothing left to say it on
        pass
    finally:
        os.close(read_end)


@contextlib.contextmanager
def stderr_filtered(drop: Callable[[bytes], bool]) -> Iterator[None]:
    """While the block runs, fd 2 (where onnxruntime's C++ logger writes, past Python's sys.stderr)
    goes through a pipe whose lines are passed on to the real stderr as they come, but those `drop`
    matches. Passed on at once, not held to the end: a native crash inside the block (onnxruntime's
    `[E:...]` line) shows once the pump has passed it on (a crash at once can still lose it). One
    holder at a time (`_STDERR_HOLD`); a child process started in the block writes its stderr through
    the pipe too, and the block's end waits up to _FORWARD_WAIT_S for it. deployopt holds only around
    onnxruntime's import. No stderr (2>&-, None) or no pipe: the block runs as is."""
    with _STDERR_HOLD:
        try:
            sys.stderr.flush()
            saved = os.dup(2)
        except (OSError, ValueError, AttributeError):
            yield
            return
        try:
            read_end, write_end = os.pipe()
        except OSError:
            os.close(saved)
            yield
            return
        try:
            os.dup2(write_end, 2)
        finally:
            os.close(write_end)
        pump = threading.Thread(target=_forward, args=(read_end, saved, drop), daemon=True)
        pump.start()
        try:
            yield
        finally:
            with contextlib.suppress(OSError, ValueError, AttributeError):
                sys.stderr.flush()  # Python's own writes in the block go out in their order
            os.dup2(saved, 2)  # the pipe's last write end closes: the pump reads to its end
            pump.join(_FORWARD_WAIT_S)
            if not pump.is_alive():  # else it may still write there: the descriptor is left open
                os.close(saved)


def import_onnxruntime() -> Any:
    """`import onnxruntime`, without the one line it writes to stderr as it is imported where
    ~/.cache is not writable ("[W:onnxruntime ... telemetry_1ds.cc] Failed to persist telemetry
    device ID"): bench, verify and optimize printed it under cron. onnxruntime writes it at import,
    before its log severity can be set, so its stderr is filtered for the import (`stderr_filtered`);
    anything else it says there (errors) still shows. Every deployopt import of onnxruntime goes
    through here: the first one is the one that prints."""
    if "onnxruntime" in sys.modules:
        return sys.modules["onnxruntime"]
    with stderr_filtered(lambda line: _TELEMETRY_LINE in line):
        import onnxruntime
    return onnxruntime


#: The distribution that installs the same `onnxruntime` module as the CPU one deployopt requires,
#: built with the CUDA EP: PyPI's onnxruntime-gpu, and Jetson Zoo's onnxruntime_gpu wheels (one name:
#: pip normalizes `_` to `-`). pip sees two projects, so installing deployopt next to it writes the
#: CPU onnxruntime over it (the CUDA EP gone), and either one's uninstall removes the other's files.
GPU_DISTRIBUTION = "onnxruntime-gpu"
CUDA_EP = "CUDAExecutionProvider"


def _distribution_version(name: str) -> str | None:
    """The installed version of the distribution `name` (its metadata, not what imports), or None."""
    from importlib import metadata

    try:
        return metadata.version(name)
    except Exception:  # not installed, or metadata without a version: nothing to say of it
        return None


def _on_jetson() -> bool:
    """A Jetson (L4T writes /etc/nv_tegra_release): onnxruntime-gpu comes from Jetson Zoo's wheels
    there, not from PyPI."""
    import platform

    return platform.machine() == "aarch64" and Path("/etc/nv_tegra_release").exists()


def gpu_reinstall_command(version: str) -> str:
    """The commands that leave onnxruntime-gpu `version` alone in the environment."""
    remove = "pip uninstall -y onnxruntime onnxruntime-gpu && "
    if _on_jetson():
        return f"{remove}pip install <Jetson Zoo's onnxruntime_gpu {version} wheel for this JetPack>"
    return f"{remove}pip install onnxruntime-gpu=={version}"


def mixed_install_warning(ort: Any = None) -> str | None:
    """One line where onnxruntime's install is broken for a GPU run, with the commands that fix it;
    None where it is not. Broken: the onnxruntime and onnxruntime-gpu distributions both installed
    (one module, whichever was written last: `pip install deployopt` after onnxruntime-gpu wrote the
    CPU one over it and timed on the CPU without a word), or onnxruntime-gpu's metadata present while
    the module imported has no CUDAExecutionProvider. `ort`: the imported module (imported here when
    not given; an import that fails is said the same way where onnxruntime-gpu's metadata is there,
    as an uninstall of the CPU distribution leaves it)."""
    gpu = _distribution_version(GPU_DISTRIBUTION)
    if gpu is None:
        return None
    cpu = _distribution_version("onnxruntime")
    fix = gpu_reinstall_command(gpu)
    if ort is None:
        try:
            ort = import_onnxruntime()
        except ImportError as exc:
            from deployopt.errors import first_line, shorten

            # "No module named 'onnxruntime'": the CPU distribution's uninstall removed the files
            # both listed; anything else is onnxruntime's own reason, said as it is
            why = shorten(first_line(exc))
            return f"onnxruntime-gpu {gpu} is installed but `import onnxruntime` fails ({why}): {fix}"
    try:
        providers = list(ort.get_available_providers())
    except Exception:
        providers = []
    imported = getattr(ort, "__version__", "?")
    if cpu is not None:
        ran = (
            "without the CUDA EP: runs on the CPU"
            if CUDA_EP not in providers
            else "with the CUDA EP, for now"
        )
        return (
            f"onnxruntime {cpu} and onnxruntime-gpu {gpu} are both installed over one `onnxruntime` module "
            f"({imported} imported, {ran}; uninstalling either breaks the other): {fix}"
        )
    if CUDA_EP not in providers:
        return (
            f"onnxruntime-gpu {gpu} is installed but the onnxruntime imported ({imported}) has no "
            f"{CUDA_EP} (its files overwritten): {fix}"
        )
    return None


def inference_session(
    ort: Any,
    model: onnx.ModelProto | str | os.PathLike[str],
    options: Any,
    providers: list[str],
    *,
    release: bool = False,
    as_file: bool = False,
) -> Any:
    """`ort.InferenceSession` of a model (in memory, or a file, whose external data is then found
    beside it), retried once with the IR version lowered (see the module) when onnxruntime refuses
    it as too new and its opsets allow it. Any other failure raises onnxruntime's error; a retry
    that fails raises the retry's (what else is wrong with the model).

    A model in memory over protobuf's 2 GiB (its weights read from external data) cannot be passed
    as bytes: it goes to a temporary folder as a model and its weights file, and onnxruntime is
    given that path (what onnx and onnxruntime ask for such a model).

    `release`: the caller is done with the model's weights. Above RELEASE_BYTES they go to that
    temporary file too and are dropped from `model` before onnxruntime reads them: the model, its
    serialized copy and onnxruntime's were held at once (`bench --backend ort` of a 753 MiB
    ConvNeXt peaked at 3.5 GB, onnxruntime alone at 0.9-1.4 GB).

    `as_file`: the caller keeps the model's weights (it edits or reads the model after), but above
    RELEASE_BYTES onnxruntime gets it by that temporary file all the same, not as bytes: onnxruntime's
    Python session keeps the bytes it was given for as long as it lives, so optimize's fidelity
    reference (one session for the whole run) and `profile --backend ort` held the weights once more
    beside the model and onnxruntime's own copy."""
    from deployopt.onnx_proto import serialized_size  # model.ByteSize(), counted without serializing

    size = serialized_size(model) if isinstance(model, onnx.ModelProto) else 0
    if isinstance(model, onnx.ModelProto) and (
        size > _MAX_BYTES or ((release or as_file) and size > RELEASE_BYTES)
    ):
        from deployopt.model import _save_with_external_data

        with contextlib.ExitStack() as stack:
            path: Path | None = None
            try:
                tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix="deployopt-ort-"))
                path = Path(tmp) / "model.onnx"
                _save_with_external_data(model, path, "model.onnx.data")
            except OSError:
                if size > _MAX_BYTES:  # no other way to hand it over
                    raise
                # TMPDIR full or unwritable: as bytes, as a smaller model goes (its weights are
                # still in `model`: dropped only once written)
                path = None
            if path is not None:
                if release:
                    del model.graph.initializer[:]
                try:
                    return ort.InferenceSession(str(path), options, providers=providers)
                except Exception as exc:
                    limit = _IR_LIMIT.search(str(exc))
                    if limit is None or not _lower_file_ir(path, int(limit.group(2))):
                        raise
                # outside the handler, as below: a file that fails again says what else is wrong
                return ort.InferenceSession(str(path), options, providers=providers)
    source: bytes | str | None = (
        model.SerializeToString() if isinstance(model, onnx.ModelProto) else str(model)
    )
    try:
        return ort.InferenceSession(source, options, providers=providers)
    except Exception as exc:
        limit = _IR_LIMIT.search(str(exc))
        if limit is None:
            raise
        # without its traceback: onnxruntime's frames in it hold the refused bytes
        refused, readable = exc.with_traceback(None), int(limit.group(2))
    # the refused bytes go before the lowered ones are made: both at once were twice the model (a
    # 64 MiB weight's ranking held 128 MiB on Python 3.10's older onnxruntime)
    source = None
    lowered = _ir_lowered(model, readable)
    if lowered is None and not isinstance(model, onnx.ModelProto):
        # a file too big to lower as bytes (over 2 GiB with its weights): its graph lowered in a
        # folder of links to its own folder's files, where its weights are found as they were
        with tempfile.TemporaryDirectory(prefix="deployopt-ort-") as tmp:
            src = Path(model).resolve()
            for f in src.parent.iterdir():
                if f != src:
                    (Path(tmp) / f.name).symlink_to(f)
            copy = Path(tmp) / src.name
            shutil.copyfile(src, copy)
            if not _lower_file_ir(copy, readable):
                raise refused
            return ort.InferenceSession(str(copy), options, providers=providers)
    if lowered is None:
        raise refused
    # outside the handler: a copy that fails too says what else is wrong (an op onnxruntime lacks)
    return ort.InferenceSession(lowered, options, providers=providers)


def _lower_file_ir(path: Path, readable: int) -> bool:
    """The model file at `path` (its weights in a file beside it) rewritten to say IR version
    `readable`, where its opsets allow; False where they do not. Only its small graph file is
    rewritten: `_ir_lowered`'s bytes cannot hold a model over 2 GiB, the reason it is a file."""
    header = onnx.load(str(path), load_external_data=False)
    needed = oldest_ir_version(header)
    if needed is None or needed > readable or header.ir_version <= readable:
        return False
    header.ir_version = readable
    onnx.save(header, str(path))
    return True


def _ir_lowered(model: onnx.ModelProto | str | os.PathLike[str], readable: int) -> bytes | None:
    """The model's bytes saying IR version `readable`, or None where its opsets need a newer one or
    it is too big to pass as bytes."""
    if not isinstance(model, onnx.ModelProto):
        try:
            model = onnx.load(str(model))  # external data read from beside it, as onnxruntime does
        except Exception:  # onnxruntime's own error says what is wrong with the file
            return None
    needed = oldest_ir_version(model)
    if needed is None or needed > readable or model.ir_version <= readable:
        return None
    # the model itself says `readable` while it is serialized, then what it said: a copy of it
    # (CopyFrom) was the whole model again
    said = model.ir_version
    model.ir_version = readable
    try:
        if model.ByteSize() > _MAX_BYTES:
            return None
        return model.SerializeToString()
    finally:
        model.ir_version = said


def oldest_ir_version(model: onnx.ModelProto) -> int | None:
    """The oldest IR version the model's opsets allow (what any onnxruntime that runs them reads);
    None for an opset newer than this onnx knows."""
    try:
        return onnx.helper.find_min_ir_version_for(list(model.opset_import), ignore_unknown=True)
    except Exception:
        return None
