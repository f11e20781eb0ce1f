"""Entry point: register every command module, turn user errors into one line and an exit code."""

from __future__ import annotations

import sys

# Each module registers its commands on `app`; import order is the order of `deployopt --help`.
# isort: off
from deployopt.cli import optimize_cmd  # noqa: F401
from deployopt.cli import surgery_cmd  # noqa: F401
from deployopt.cli import verify_cmd  # noqa: F401
from deployopt.cli import targets_cmd  # noqa: F401
from deployopt.cli import backends_cmd  # noqa: F401
from deployopt.cli import compare_cmd  # noqa: F401

# isort: on
from deployopt.cli.app import app, err_console
from deployopt.errors import DeployoptError


def _fail(message: str, code: int) -> None:
    """The one line every user error ends in, and its exit code."""
    err_console.print(
        f"error: {message}", style="red", markup=False, highlight=False, emoji=False, soft_wrap=True
    )
    sys.exit(code)


def main() -> None:
    try:
        app()
    except DeployoptError as exc:
        _fail(str(exc), exc.exit_code)
    except MemoryError as exc:  # a --batch or --input-shape too large for this machine
        detail = str(exc).strip().splitlines()[0] if str(exc).strip() else "allocation failed"
        _fail(f"out of memory: {detail}; try a smaller --batch or --input-shape", 2)
    except KeyboardInterrupt:
        err_console.print("interrupted", style="bold red")
        sys.exit(130)


if __name__ == "__main__":
    main()
