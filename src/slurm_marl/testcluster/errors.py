"""The harness's one exception, in a module of its own so that ``harness``, ``chroot`` and
``versions`` can all raise it without importing each other in a circle."""


class HarnessError(RuntimeError):
    """The local cluster could not be installed, started or stopped."""
