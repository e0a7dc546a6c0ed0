"""`slurm-marl`: the admin command line. Every subcommand that prints data takes --json.

Subpackages own their commands (``topology/cli.py``, ``sim/cli.py``, ...); this module only
assembles them, importing each lazily-registered module so `slurm-marl --help` stays fast.
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
import os

import typer

app = typer.Typer(no_args_is_help=True, add_completion=False,
                  help="Scheduling agent for Slurm GPU clusters (Tiresias + learned placement).")

# (module, attribute, name, kind): kind "group" adds a Typer sub-app, "command" a function.
_PARTS = [
    ("slurm_marl.testcluster.cli", "app", "cluster", "group"),
    ("slurm_marl.slurm_integration.cli", "snapshot", "snapshot", "command"),
    ("slurm_marl.slurm_integration.readiness", "check_slurm", "check-slurm", "command"),
    ("slurm_marl.demo", "demo", "demo", "command"),
    ("slurm_marl.replay.cli", "replay", "replay", "command"),
    ("slurm_marl.topology.cli", "app", "topology", "group"),
    ("slurm_marl.topology.cli", "probe", "probe", "command"),
    ("slurm_marl.sim.cli", "simulate", "simulate", "command"),
    ("slurm_marl.sim.cli", "compare", "compare", "command"),
    ("slurm_marl.train.cli", "app", "train", "group"),
    ("slurm_marl.history_cli", "app", "history", "group"),
    ("slurm_marl.report_cli", "report", "report", "command"),
    ("slurm_marl.sweep.cli", "app", "sweep", "group"),
    ("slurm_marl.train.cli", "evaluate", "evaluate", "command"),
    ("slurm_marl.daemon.cli", "run", "run", "command"),
    ("slurm_marl.daemon.cli", "decisions", "decisions", "command"),
    ("slurm_marl.daemon.cli", "explain", "explain", "command"),
    ("slurm_marl.daemon.cli", "queues", "queues", "command"),
    ("slurm_marl.daemon.cli", "status", "status", "command"),
    ("slurm_marl.daemon.cli", "install_plugin", "install-plugin", "command"),
]


def _register() -> None:
    for module_name, attr, name, kind in _PARTS:
        if importlib.util.find_spec(module_name) is None:
            continue  # that part of the product is not built yet
        obj = getattr(importlib.import_module(module_name), attr, None)
        if obj is None:
            continue
        if kind == "group":
            app.add_typer(obj, name=name)
        else:
            app.command(name)(obj)


_register()


def version_text() -> str:
    """The installed distribution's version (``slurm-marl --version``)."""
    from importlib.metadata import PackageNotFoundError, version
    try:
        return f"slurm-marl {version('slurm-marl')}"
    except PackageNotFoundError:
        import slurm_marl
        return (f"slurm-marl {slurm_marl.__version__} (not installed: no package metadata; "
                f"running from {os.path.dirname(slurm_marl.__file__)})")


def _print_version(value: bool) -> None:
    if value:
        typer.echo(version_text())
        raise typer.Exit()


@app.callback()
def _options(version: bool = typer.Option(False, "--version", callback=_print_version,
                                          is_eager=True, help="Print the version and exit.")
             ) -> None:
    """Scheduling agent for Slurm GPU clusters (Tiresias + learned placement)."""


def main() -> None:
    logging.basicConfig(level=os.environ.get("SLURM_MARL_LOG", "INFO"),
                        format="%(levelname)s %(name)s: %(message)s")
    app()


if __name__ == "__main__":
    main()
