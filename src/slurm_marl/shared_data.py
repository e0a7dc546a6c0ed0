"""Where the public data lives (Philly and Tiresias traces, Gavel measurements, reference runs).

The data ships inside the package, in ``slurm_marl/data/public`` (its README says what each
file is, with its licence): a clone or an installed wheel has it. ``$SLURM_MARL_DATA``, when
set, points the lookup at another folder with the same layout (``traces/``,
``interference/``, ``reference/``) instead. Missing data is a clear error, never a silent
skip.
"""

from __future__ import annotations

import os
from pathlib import Path

ENV_VAR = "SLURM_MARL_DATA"
BUNDLED = Path(__file__).resolve().parent / "data" / "public"


class DataNotFound(FileNotFoundError):
    pass


def data_dir() -> Path:
    """``$SLURM_MARL_DATA`` if set, else the data shipped in the package."""
    env = os.environ.get(ENV_VAR)
    if env:
        path = Path(env).expanduser()
        if not path.is_dir():
            raise DataNotFound(f"${ENV_VAR} points to {path}, which is not a directory")
        return path
    if not BUNDLED.is_dir():
        raise DataNotFound(f"the package's data folder {BUNDLED} is missing (a broken "
                           f"install?); reinstall slurm-marl or set ${ENV_VAR}")
    return BUNDLED


def data_file(relative: str) -> Path:
    """A file under the data folder, e.g. ``traces/philly.csv``."""
    base = data_dir()
    path = base / relative
    if not path.is_file():
        raise DataNotFound(f"{relative} is missing from the data folder {base}")
    return path
