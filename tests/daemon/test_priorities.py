"""Priority writes: Slurm's order equals the policy's with as few writes as possible."""

from hypothesis import given, settings
from hypothesis import strategies as st

from slurm_marl.daemon.priorities import longest_decreasing, plan_priorities

LOW, HIGH = 1_000_001, 4_294_967_293


def test_longest_decreasing_run():
    assert longest_decreasing([9, 7, 8, 5, None, 3]) in ({0, 1, 3, 5}, {0, 2, 3, 5})
    assert longest_decreasing([]) == set()
    assert longest_decreasing([None, None]) == set()
    assert len(longest_decreasing([1, 2, 3])) == 1


def test_a_new_arrival_costs_one_write_not_one_per_job_below_it():
    first = plan_priorities([None] * 5, LOW, HIGH)
    assert first == sorted(first, reverse=True) and len(set(first)) == 5
    # a job arrives at rank 2: the five others keep their values
    arrived = first[:2] + [None] + first[2:]
    second = plan_priorities(arrived, LOW, HIGH)
    assert [a == b for a, b in zip(arrived, second)].count(False) == 1
    assert second == sorted(second, reverse=True) and len(set(second)) == 6


def test_a_demotion_costs_one_write():
    prios = plan_priorities([None] * 6, LOW, HIGH)
    demoted = prios[:1] + prios[2:] + prios[1:2]   # the 2nd job falls to the end
    again = plan_priorities(demoted, LOW, HIGH)
    assert sum(a != b for a, b in zip(demoted, again)) == 1


def test_values_written_by_someone_else_are_rewritten():
    out = plan_priorities([4294901759, None, 50], LOW, HIGH)   # Slurm's own, none, too low
    assert all(LOW <= v <= HIGH for v in out) and out == sorted(out, reverse=True)


def test_no_room_in_a_gap_spreads_everything_again():
    out = plan_priorities([LOW + 2, None, None, LOW + 1], LOW, HIGH)
    assert out == sorted(out, reverse=True) and len(set(out)) == 4
    assert out[0] - out[1] >= 1 and out[-1] >= LOW


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(st.none(), st.integers(0, 5_000_000)), max_size=60))
def test_any_current_priorities_give_the_policys_order_and_keep_a_longest_run(current):
    out = plan_priorities(current, LOW, LOW + 3_000_000)
    assert all(a > b for a, b in zip(out, out[1:]))
    assert all(LOW <= v <= LOW + 3_000_000 for v in out)
    usable = [v if v is not None and LOW <= v <= LOW + 3_000_000 else None for v in current]
    kept = sum(a == b for a, b in zip(usable, out) if a is not None)
    assert kept >= len(longest_decreasing(usable)) or kept == 0
