"""Where deployopt keeps what outlives one run (calibrated targets, per-layer latency tables)."""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir(sub: str) -> Path:
    """`$DEPLOYOPT_CACHE_DIR/<sub>`, else `$XDG_CACHE_HOME/deployopt/<sub>`, else ~/.cache/deployopt/<sub>.

    One root for every cache, so a user can move or wipe all of it with one variable. A relative
    XDG_CACHE_HOME is ignored, as the XDG Base Directory spec says: it named a folder under
    whatever directory each run started in, one cache per working directory."""
    root = os.environ.get("DEPLOYOPT_CACHE_DIR")
    if root:
        return Path(root).expanduser() / sub
    xdg = Path(os.environ.get("XDG_CACHE_HOME") or "").expanduser()
    base = xdg if xdg.is_absolute() else Path.home() / ".cache"
    return base / "deployopt" / sub
