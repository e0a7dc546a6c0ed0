"""The one exception every topology parser raises, so callers catch one thing."""

from __future__ import annotations


class TopologyConfigError(ValueError):
    """A configuration file, command output or probe document that cannot be understood.

    The message always names where the problem is (``path:line``) when there is a place to
    name, so an admin can jump straight to it.
    """

    def __init__(self, message: str, path: str | None = None, line: int | None = None) -> None:
        self.path = path
        self.line = line
        self.reason = message
        where = ""
        if path is not None and line is not None:
            where = f"{path}:{line}: "
        elif path is not None:
            where = f"{path}: "
        super().__init__(f"{where}{message}")
