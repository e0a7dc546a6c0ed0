"""Reading one large JSON object without holding it whole.

``squeue --json`` of a busy cluster is hundreds of MiB on Slurm 24.11 and later;
``json.loads`` of it holds the bytes, the text and every job's dict at once, several times
the answer (measured with ``benchmarks/bench_snapshot_memory.py``: docs/benchmarks.md, "The
snapshot at 15,000 jobs"). Here the
object's top level is walked by hand and the arrays named by the caller are handed over one
item at a time, each item decoded by the standard library's own (C) scanner, so at most a
buffer of text and one item are held. Everything else at the top level (``meta``,
``errors``, ...) is small and returned as a dict.
"""

from __future__ import annotations

import json
import re
from typing import Any, Callable

_WS = re.compile(r"[ \t\n\r]*")
_DECODER = json.JSONDecoder()
_AFTER_SCALAR = " \t\n\r,]}"
CHUNK = 1 << 20


class JsonStreamError(ValueError):
    """The text is not one JSON object (or not the shape asked for)."""


class _Text:
    """A growing window on the text read so far: ``buf[pos:]`` is still to be parsed."""

    def __init__(self, read: Callable[[int], str], chunk: int) -> None:
        self.read = read
        self.chunk = chunk
        self.buf = ""
        self.pos = 0
        self.eof = False
        self.consumed = 0       # characters dropped from the front of buf

    def more(self, at_least: int = 0) -> bool:
        """Read the next piece of text (at least ``at_least`` characters asked for); False
        at the end."""
        if self.eof:
            return False
        data = self.read(max(self.chunk, at_least))
        if not data:
            self.eof = True
            return False
        self.consumed += self.pos
        self.buf = self.buf[self.pos:] + data
        self.pos = 0
        return True

    def peek(self) -> str:
        """The next character that is not white space ('' at the end), not consumed."""
        while True:
            self.pos = _WS.match(self.buf, self.pos).end()
            if self.pos < len(self.buf) or not self.more():
                return self.buf[self.pos:self.pos + 1]

    def take(self, allowed: str) -> str:
        """The next character that is not white space, consumed; it must be one of
        ``allowed``."""
        char = self.peek()
        if not char or char not in allowed:
            raise self.error("expected " + " or ".join(repr(c) for c in allowed))
        self.pos += 1
        return char

    def value(self) -> Any:
        """The next JSON value. A value cut by the end of the buffer is decoded again with
        twice the text (so a value of n characters costs O(n), not O(n^2 / chunk))."""
        self.peek()
        while True:
            try:
                val, end = _DECODER.raw_decode(self.buf, self.pos)
            except json.JSONDecodeError as exc:
                if self.more(at_least=len(self.buf) - self.pos):
                    continue
                raise self.error(f"not JSON ({exc.msg})") from None
            # a number or literal not followed by a delimiter may go on in the next piece
            # ("2" of "2.5", "2.5" of "2.5e3")
            if (not isinstance(val, (dict, list, str))
                    and (end == len(self.buf) or self.buf[end] not in _AFTER_SCALAR)
                    and self.more(at_least=len(self.buf) - self.pos)):
                continue
            self.pos = end
            return val

    def error(self, what: str) -> JsonStreamError:
        near = self.buf[self.pos:self.pos + 60]
        return JsonStreamError(f"{what} at character {self.consumed + self.pos}: {near!r}")


def stream_object(read: Callable[[int], str],
                  items: dict[str, Callable[[Any], None] | None],
                  chunk: int = CHUNK) -> tuple[dict, dict[str, int]]:
    """Parse the JSON object that ``read(n)`` returns piece by piece (``''`` at the end).

    For each top-level key in ``items`` whose value is an array, every element is handed to
    ``items[key]`` as soon as it is decoded (``None``: dropped) and the array is not kept.
    Returns (the other top-level members, {key: elements handed over} for the arrays
    streamed). A key of ``items`` whose value is not an array is returned like the others,
    for the caller to refuse. ``JsonStreamError`` for anything but one JSON object."""
    text = _Text(read, chunk)
    top: dict = {}
    counts: dict[str, int] = {}
    text.take("{")
    if text.peek() == "}":
        text.pos += 1
    else:
        while True:
            if text.peek() != '"':
                raise text.error("expected a member name")
            name = text.value()
            text.take(":")
            if name in items and text.peek() == "[":
                text.pos += 1
                counts[name] = counts.get(name, 0) + _stream_array(text, items[name])
            else:
                top[name] = text.value()
            if text.take(",}") == "}":
                break
    if text.peek() != "":
        raise text.error("text after the JSON object")
    return top, counts


def _stream_array(text: _Text, take: Callable[[Any], None] | None) -> int:
    count = 0
    if text.peek() == "]":
        text.pos += 1
        return 0
    while True:
        item = text.value()
        count += 1
        if take is not None:
            take(item)
        del item
        if text.take(",]") == "]":
            return count
