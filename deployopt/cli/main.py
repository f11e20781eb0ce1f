"""Entry point: register every command module, turn user errors into one line and an exit code."""

from __future__ import annotations

import sys

from deployopt.cli import (  # noqa: F401  (each module registers its commands on `app`)
    backends_cmd,
    optimize_cmd,
    surgery_cmd,
    targets_cmd,
    verify_cmd,
)
from deployopt.cli.app import app, err_console
from deployopt.errors import DeployoptError


def main() -> None:
    try:
        app()
    except DeployoptError as exc:
        err_console.print(
            f"error: {exc}", style="red", markup=False, highlight=False, emoji=False, soft_wrap=True
        )
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        err_console.print("[bold red]interrupted[/]")
        sys.exit(130)


if __name__ == "__main__":
    main()
