"""The rich ``Console`` for what people read: tables and reports of the command line.

rich sizes a console to its terminal. When the output is a pipe or a file it has no terminal
to measure and assumes 80 columns, so a wider table is squeezed into them and its column
headers are cut ("comple…"). Here output that is not a terminal gets a console as wide as
``PIPED_WIDTH`` instead: a table keeps its natural width, whole headers and cells, and long
lines are not wrapped. ``$COLUMNS``, when set, still decides, as it does for rich.
"""

from __future__ import annotations

import os

from rich.console import Console

PIPED_WIDTH = 1000


def output_console(*, stderr: bool = False, **kwargs) -> Console:
    """A ``Console`` on stdout (or stderr): the terminal's width, else ``PIPED_WIDTH``."""
    console = Console(stderr=stderr, **kwargs)
    if ("width" not in kwargs and not console.is_terminal
            and not os.environ.get("COLUMNS", "").strip().isdigit()):
        console.width = PIPED_WIDTH
    return console
