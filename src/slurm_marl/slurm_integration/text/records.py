"""``Key=Value`` records as ``scontrol show <thing> [-o]`` prints them.

Pure functions, no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from slurm_marl.slurm_integration.text.errors import SlurmTextError

# A key starts a word with a letter and holds letters, digits, ``_`` and also ``/ : .``
# (``scontrol show job`` prints ``NtasksPerN:B:S:C=`` and ``Socks/Node=``).
_FIELD_START = re.compile(r"(?:^|(?<=\s))([A-Za-z][A-Za-z0-9_/:.]*)=")
_PLAIN_KEY = re.compile(r"[A-Za-z][A-Za-z0-9_]*")


def split_fields(line: str, *, to_end: Iterable[str] = ()) -> list[tuple[str, str]]:
    """``Key=Value`` pairs of one line of ``scontrol show`` output, in order.

    Values may hold blanks (``OS=Linux 6.1 #1 SMP``): a value runs to the next word that
    starts ``Key=``. A key named in ``to_end`` (any case; ``Reason`` of a node) takes the rest
    of the line. Text before the first key is dropped."""
    line = line.strip()
    enders = {k.lower() for k in to_end}
    matches = list(_FIELD_START.finditer(line))
    pairs: list[tuple[str, str]] = []
    for i, m in enumerate(matches):
        key = m.group(1)
        if key.lower() in enders:
            pairs.append((key, line[m.end():].strip()))
            break
        end = matches[i + 1].start() if i + 1 < len(matches) else len(line)
        pairs.append((key, line[m.end():end].strip()))
    return pairs


def parse_kv_line(line: str) -> dict[str, str]:
    """``Key=Value Key2=Value with spaces`` as ``scontrol show -o`` prints it (a key given
    twice keeps its last value)."""
    return dict(split_fields(line))


def scontrol_records(text: str, head: str, *, to_end: Iterable[str] = ()
                     ) -> list[tuple[int, list[tuple[str, str]]]]:
    """Records of ``scontrol show <thing>``, one per ``head=`` (e.g. ``NodeName``): with
    ``-o`` one line each, without it one line and the indented lines after it. Returns
    (line number of the record's first line, its pairs). Raises ``SlurmTextError``."""
    records: list[tuple[int, list[tuple[str, str]]]] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        pairs = split_fields(raw, to_end=to_end)
        if not pairs:
            raise SlurmTextError(f"expected Key=Value pairs, found {raw.strip()[:40]!r}",
                                 number)
        if pairs[0][0].lower() == head.lower():
            records.append((number, pairs))
        elif records:
            records[-1][1].extend(pairs)
        else:
            raise SlurmTextError(f"expected a {head}= record first", number)
    return records


def strict_fields(line: str) -> list[tuple[str, str]]:
    """``split_fields`` for output whose values never hold blanks (``scontrol show
    topology``): a word that is not ``Key=Value`` or a key given twice raises."""
    for word in line.split():
        key, sep, _ = word.partition("=")
        if not sep or not key:
            raise SlurmTextError(f"expected Key=Value, found {word!r}")
        if not _PLAIN_KEY.fullmatch(key):
            raise SlurmTextError(f"invalid key {key!r}")
    pairs = split_fields(line)
    seen: set[str] = set()
    for key, _ in pairs:
        if key.lower() in seen:
            raise SlurmTextError(f"key {key!r} given twice on one line")
        seen.add(key.lower())
    return pairs
