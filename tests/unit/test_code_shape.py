"""The code's shape, as the architecture asks it (docs/architecture.md): no function or
method of radon's complexity grade E or F, no module over 450 lines. A change that grows
one past that splits it along its concerns instead."""

from pathlib import Path

from radon.complexity import cc_rank, cc_visit

SRC = Path(__file__).resolve().parents[2] / "src" / "slurm_marl"
MAX_LINES = 450


def _modules() -> list[Path]:
    found = sorted(SRC.rglob("*.py"))
    assert len(found) > 100, f"the package's modules were not found under {SRC}"
    return found


def _blocks(block):
    yield block
    for inner in getattr(block, "methods", ()) or ():
        yield inner
    for inner in getattr(block, "closures", ()) or ():
        yield from _blocks(inner)


def test_no_function_of_complexity_grade_e_or_f():
    bad = set()
    for path in _modules():
        for top in cc_visit(path.read_text()):
            for block in _blocks(top):
                if cc_rank(block.complexity) in "EF":
                    bad.add(f"{path.relative_to(SRC)}:{block.lineno} {block.name} "
                            f"{cc_rank(block.complexity)} ({block.complexity})")
    bad = sorted(bad)
    assert not bad, "functions of grade E/F (split them into named steps):\n" + "\n".join(bad)


def test_no_module_over_450_lines():
    long = [f"{p.relative_to(SRC)}: {n}" for p in _modules()
            if (n := len(p.read_text().splitlines())) > MAX_LINES]
    assert not long, f"modules over {MAX_LINES} lines (split along their concerns):\n" \
        + "\n".join(long)
