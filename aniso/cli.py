"""The console command `aniso` (pyproject.toml): `aniso serve` (the dashboard), `aniso analyze ...` and every
other command of `python -m core` (docs/cli.md), with the same options, output and exit codes."""

from __future__ import annotations

import sys

from ._paths import ensure_core


def main(argv: list[str] | None = None) -> int:
    ensure_core()
    # lazy: core only once its folder is on sys.path (ensure_core)
    from core.entry.cli import main as core_main

    return core_main(argv, prog="aniso")


if __name__ == "__main__":
    sys.exit(main())
