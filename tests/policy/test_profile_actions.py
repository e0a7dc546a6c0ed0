"""The actions a profile lists (``actions``): the cycle runs them in that order, the
flags say the same when a profile lists none, and a bad list is a one-line error naming
the file and the key."""

import pytest

from policy_builders import kinds, node, pending, running, snapshot
from slurm_marl.policy.framework import run_cycle
from slurm_marl.policy.profile import (ProfileError, builtin_profiles, load_profile,
                                       profile_from_mapping)


def _profile(actions=None, **flags):
    data = {"name": "t", "order": {"plugin": "tiresias_las"}, "place": {"consolidate": 1.0}}
    if actions is not None:
        data["actions"] = actions
    return profile_from_mapping({**data, **flags})


def _demoted_and_new():
    """One 4-GPU node held by a demoted job (queue 1) and a new 4-GPU job (queue 0): the
    new job cannot start on free GPUs."""
    n1 = node("n1", groups=(4,))
    old = running(1, {"n1": (0, 1, 2, 3)}, attained=3300.0, start=0.0, time_limit_s=7200.0)
    new = pending(2, 4, submit=900.0)
    return snapshot([n1], [old, new])


def test_flags_give_the_default_order():
    assert _profile(preemption=True, backfill=True).action_order == (
        "allocate", "preempt", "backfill", "reserve")
    assert _profile(preemption=True, backfill=True, backfill_reserve=False).action_order \
        == ("allocate", "preempt", "backfill")
    assert _profile(backfill_reserve=True).action_order == ("allocate",)
    for name in builtin_profiles():
        prof = load_profile(name)
        assert prof.actions == () and prof.action_order[0] == "allocate"


def test_listed_actions_set_the_flags():
    prof = _profile(["allocate", "backfill"])
    assert (prof.preemption, prof.backfill, prof.backfill_reserve) == (False, True, False)
    prof = _profile(["allocate", "backfill", "reserve", "preempt"])
    assert (prof.preemption, prof.backfill, prof.backfill_reserve) == (True, True, True)
    assert prof.action_order == ("allocate", "backfill", "reserve", "preempt")


def test_listing_the_default_order_decides_as_the_flags():
    snap = _demoted_and_new()
    for flags in ({"preemption": True, "backfill": True},
                  {"preemption": True, "backfill": True, "backfill_reserve": False},
                  {"backfill": True}, {}):
        by_flags = _profile(**flags)
        listed = _profile(list(by_flags.action_order))
        assert run_cycle(snap, listed) == run_cycle(snap, by_flags)


def test_without_preempt_the_job_waits():
    snap = _demoted_and_new()
    with_preempt = run_cycle(snap, _profile(["allocate", "preempt", "backfill"]))
    assert [d.job_id for d in kinds(with_preempt, "Preempt")] == [1]
    without = run_cycle(snap, _profile(["allocate", "backfill"]))
    assert not kinds(without, "Preempt") and not kinds(without, "Place")


def test_reserve_before_preempt_reserves_instead_of_preempting():
    snap = _demoted_and_new()
    first = run_cycle(snap, _profile(["allocate", "preempt", "backfill", "reserve"]))
    assert kinds(first, "Preempt") and [p.start_now for p in kinds(first, "Place")] == [True]
    reserved = run_cycle(snap, _profile(["allocate", "backfill", "reserve", "preempt"]))
    assert not kinds(reserved, "Preempt")
    assert [(p.job_id, p.start_now) for p in kinds(reserved, "Place")] == [(2, False)]


@pytest.mark.parametrize("actions, fragment", [
    ('["allocate", "steal"]', "unknown action(s) ['steal']"),
    ('["preempt", "allocate"]', 'must start with "allocate"'),
    ('["allocate", "preempt", "preempt"]', "lists an action twice"),
    ('["allocate", "reserve"]', '"reserve" needs "backfill"'),
    ('"allocate"', "must be a list of action names"),
])
def test_bad_actions_are_one_line_naming_file_and_key(tmp_path, actions, fragment):
    path = tmp_path / "bad.toml"
    path.write_text(f'actions = {actions}\n[order]\nplugin = "fifo"\n')
    with pytest.raises(ProfileError) as err:
        load_profile(path)
    message = str(err.value)
    assert "\n" not in message and str(path) in message and "'actions'" in message
    assert fragment in message


def test_actions_and_flags_are_not_both_given(tmp_path):
    path = tmp_path / "both.toml"
    path.write_text('actions = ["allocate"]\npreemption = true\n[order]\nplugin = "fifo"\n')
    with pytest.raises(ProfileError, match="'actions' and \\['preemption'\\] both given"):
        load_profile(path)


def test_a_profile_built_in_code_whose_flags_disagree_with_its_actions_is_refused():
    from dataclasses import replace

    from slurm_marl.policy.profile import Profile, ProfileError

    listed = Profile(name="p", order="fifo", actions=("allocate", "preempt"), preemption=True,
                     backfill_reserve=False)
    assert listed.action_order == ("allocate", "preempt")
    with pytest.raises(ProfileError, match="disagree"):
        replace(listed, preemption=False)
