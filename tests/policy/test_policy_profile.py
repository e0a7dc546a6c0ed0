import pytest

from slurm_marl.policy.profile import (ProfileError, builtin_profiles, load_profile,
                                       plugin_keys, profile_from_mapping)

EXPECTED_BUILTINS = {"fifo-consolidate", "las-consolidate", "las-skew", "las-lif",
                     "gittins-consolidate", "srtf-consolidate"}


def test_builtins_load_and_name_themselves():
    names = set(builtin_profiles())
    assert EXPECTED_BUILTINS <= names
    for name in names:
        prof = load_profile(name)
        assert prof.name == name
        assert prof.order in plugin_keys("order")
        assert all(k in plugin_keys("place") for k, _ in prof.place)


def test_plugin_registries_match_the_brief():
    assert {"fifo", "tiresias_las", "tiresias_gittins", "srtf"} <= set(plugin_keys("order"))
    assert {"consolidate", "spread", "binpack", "least_interference",
            "tiresias_skew"} <= set(plugin_keys("place"))


def test_profile_fields():
    las = load_profile("las-consolidate")
    assert las.order == "tiresias_las" and las.preemption and las.backfill
    assert las.order_params["thresholds_gpu_s"] == (3250, 7200, 18000)
    assert las.place == (("consolidate", 1.0),)
    fifo = load_profile("fifo-consolidate")
    assert not fifo.preemption and not fifo.backfill


def test_load_from_path(tmp_path):
    path = tmp_path / "mine.toml"
    path.write_text('[order]\nplugin = "fifo"\n[place]\nspread = 2\nconsolidate = 0.5\n')
    prof = load_profile(path)
    assert prof.name == "mine"
    assert prof.place == (("spread", 2.0), ("consolidate", 0.5))


@pytest.mark.parametrize("text, fragment", [
    ('[order]\nplugin = "nope"\n', "order] plugin 'nope' is unknown"),
    ('[order]\nplugin = "fifo"\n[place]\nnope = 1\n', "[place] plugin 'nope' is unknown"),
    ('[order]\nplugin = "fifo"\n[place]\nspread = -1\n', "weight of 'spread'"),
    ('[order]\nplugin = "fifo"\nbogus = 1\n', "unknown parameter(s) ['bogus']"),
    ('[order]\nplugin = "tiresias_las"\nthresholds_gpu_s = [10, 5]\n', "strictly increasing"),
    ('[order]\nplugin = "tiresias_las"\nstarve_limit = -2\n', "starve_limit"),
    ('colour = "red"\n[order]\nplugin = "fifo"\n', "unknown key(s) ['colour']"),
    ('[order]\nplugin = "fifo"\n[place_params.spread]\n', "'spread' is not in [place]"),
    ('backfill = "yes"\n[order]\nplugin = "fifo"\n', "'backfill' must be true or false"),
    ('[place]\nspread = 1\n', "missing [order] table"),
    ('[order\n', "invalid TOML"),
])
def test_bad_profiles_name_the_file_and_key(tmp_path, text, fragment):
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(ProfileError) as err:
        load_profile(path)
    assert str(path) in str(err.value)
    assert fragment in str(err.value)


def test_unknown_builtin_lists_the_builtins():
    with pytest.raises(ProfileError, match="las-consolidate"):
        load_profile("no-such-profile")


def test_profile_from_mapping_validates_plugins():
    with pytest.raises(ProfileError, match="gpu_time_samples"):
        profile_from_mapping({"order": {"plugin": "tiresias_gittins",
                                        "gpu_time_samples": ["x"]}}, source="inline")
