"""Where the shared public data lives (Philly and Tiresias traces, Gavel measurements).

Looked up in ``$SLURM_MARL_DATA`` if set, else ``../shared/data`` next to the repository
(the layout of the development machines and CI), else ``../shared/data`` from the current
directory. Missing data is a clear error, never a silent skip.
"""

from __future__ import annotations

import os
from pathlib import Path

ENV_VAR = "SLURM_MARL_DATA"
REPO_ROOT = Path(__file__).resolve().parents[2]


class DataNotFound(FileNotFoundError):
    pass


def _candidates() -> list[Path]:
    return [REPO_ROOT.parent / "shared" / "data", Path.cwd().parent / "shared" / "data",
            Path.cwd() / ".." / ".." / "shared" / "data"]


def data_dir() -> Path:
    env = os.environ.get(ENV_VAR)
    if env:
        path = Path(env).expanduser()
        if not path.is_dir():
            raise DataNotFound(f"${ENV_VAR} points to {path}, which is not a directory")
        return path
    for path in _candidates():
        if path.is_dir():
            return path.resolve()
    raise DataNotFound(
        f"shared data not found: set ${ENV_VAR} to the folder holding traces/ and "
        f"interference/ (looked in {', '.join(str(p) for p in _candidates())})")


def data_file(relative: str) -> Path:
    """A file under the data folder, e.g. ``traces/philly.csv``."""
    base = data_dir()
    path = base / relative
    if not path.is_file():
        raise DataNotFound(f"{relative} is missing from the data folder {base}")
    return path
