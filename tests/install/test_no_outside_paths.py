"""Nothing in the repository sends a reader or the code outside it.

A user's clone has no ``shared`` folder beside it (the development machines' layout):
the docs, the code, the scripts, the benchmarks and the tests must name only what the clone
holds. Checked over the files themselves (bytes, so binaries count too), the same as
``grep -rn "\\.\\./shared" README.md docs src run.sh .ci benchmarks tests``.
"""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PLACES = ("README.md", "docs", "src", "run.sh", ".ci", "benchmarks", "tests")
# Built here, not written literally, so that this file does not find itself.
FORBIDDEN = ("../" + "shared", "/work/" + "shared")
SKIPPED_DIRS = {"__pycache__", ".pytest_cache", ".hypothesis"}


def _files():
    for place in PLACES:
        path = ROOT / place
        if path.is_file():
            yield path
            continue
        assert path.is_dir(), f"{place} is missing"
        for file in sorted(path.rglob("*")):
            parts = set(file.relative_to(ROOT).parts)
            if (file.is_file() and not parts & SKIPPED_DIRS
                    and not any(p.endswith(".egg-info") for p in parts)):
                yield file


def test_no_reference_to_a_folder_beside_the_repository():
    found = []
    checked = 0
    for file in _files():
        checked += 1
        data = file.read_bytes()
        for pattern in FORBIDDEN:
            if pattern.encode() in data:
                lines = [n for n, line in enumerate(data.splitlines(), 1)
                         if pattern.encode() in line]
                found.append(f"{file.relative_to(ROOT)}:{lines[0]}: {pattern}")
    assert checked > 200      # the walk saw the repository
    assert found == []
