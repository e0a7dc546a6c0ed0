import pytest

from slurm_marl.daemon.config import ConfigError, load_config, parse_config


def test_defaults_and_overrides():
    cfg = parse_config({"agent": {"interval_s": 2, "managed_partitions": ["a", "b"],
                                  "preempt_partitions": ["b"]}})
    assert cfg.agent.interval_s == 2.0 and cfg.agent.managed_partitions == ("a", "b")
    assert cfg.metrics.address == "127.0.0.1" and cfg.agent.shadow is False
    cfg = parse_config({"agent": {"managed_partitions": ["a", "b"], "profile": "las-lif",
                                  "partition_profiles": {"b": "/etc/knobs.toml"}}})
    assert cfg.agent.partition_profiles == (("b", "/etc/knobs.toml"),)
    assert [cfg.agent.profile_for(p) for p in ("a", "b")] == ["las-lif", "/etc/knobs.toml"]


@pytest.mark.parametrize("data,needle", [
    ({"agnt": {}}, "unknown section [agnt]"),
    ({"agent": {"intervall_s": 1}}, "unknown key agent.intervall_s"),
    ({"agent": {"interval_s": "often"}}, "agent.interval_s: expected a number"),
    ({"agent": {"interval_s": 0.01}}, "outside"),
    ({"agent": {"shadow": "yes"}}, "expected true or false"),
    ({"agent": {"managed_partitions": "gpu"}}, "expected a list of strings"),
    ({"agent": {"managed_partitions": []}}, "nothing to manage"),
    ({"agent": {"preempt_partitions": ["x"]}}, "not in agent.managed_partitions"),
    ({"metrics": {"port": 70000}}, "outside"),
    ({"log": {"level": "LOUD"}}, "log.level"),
    ({"slurm": {"write_retries": 1.5}}, "whole number"),
    ({"agent": {"partition_profiles": ["gpu"]}}, "agent.partition_profiles: expected a table"),
    ({"agent": {"partition_profiles": {"gpu": 3}}}, "expected a table of partition"),
    ({"agent": {"partition_profiles": {"gpu": " "}}}, "expected a table of partition"),
    ({"agent": {"partition_profiles": {"cpu": "las-lif"}}},
     "agent.partition_profiles ['cpu'] are not in agent.managed_partitions"),
])
def test_bad_values_name_the_key(data, needle):
    with pytest.raises(ConfigError) as err:
        parse_config(data, "cfg.toml")
    assert needle in str(err.value) and "cfg.toml" in str(err.value)


def test_file_errors(tmp_path):
    with pytest.raises(ConfigError, match="not found"):
        load_config(tmp_path / "missing.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("[agent\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(bad)


def test_example_config_is_valid_and_documents_every_key():
    from pathlib import Path
    from dataclasses import fields
    from slurm_marl.daemon import config as C

    example = Path(__file__).parents[2] / "src/slurm_marl/data/systemd/config.example.toml"
    cfg = load_config(example)
    assert cfg == C.Config(source=str(example))  # the example shows the defaults
    text = example.read_text()
    for section in (C.SlurmSection, C.AgentSection, C.MetricsSection, C.LogSection):
        for f in fields(section):
            assert f"\n{f.name} = " in text, f"{f.name} undocumented"
