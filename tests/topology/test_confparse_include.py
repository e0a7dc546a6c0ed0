"""An Include the OS cannot open is the parsers' own error, not an OSError."""

import pytest

from slurm_marl.topology.confparse import read_config_file
from slurm_marl.topology.errors import TopologyConfigError


def test_overlong_include_path_is_a_topology_config_error(tmp_path):
    target = "/tmp/" + "x" * 5000 + ".conf"
    conf = tmp_path / "slurm.conf"
    conf.write_text(f"ClusterName=c\nInclude {target}\n")
    with pytest.raises(TopologyConfigError) as err:
        read_config_file(conf)
    message = str(err.value)
    assert "\n" not in message and len(message) < 500
    assert message.startswith(f"{conf}:2: cannot open Include /tmp/xxx")
    assert "5010 characters" in message and err.value.line == 2


def test_any_oserror_checking_an_include_is_a_topology_config_error(tmp_path, monkeypatch):
    from pathlib import Path

    conf = tmp_path / "slurm.conf"
    conf.write_text("A=1\nInclude blocked/gres.conf\n")
    real_is_file = Path.is_file

    def is_file(self):
        if self.name == "gres.conf":
            raise PermissionError(13, "Permission denied", str(self))
        return real_is_file(self)

    monkeypatch.setattr(Path, "is_file", is_file)
    with pytest.raises(TopologyConfigError) as err:
        read_config_file(conf)
    assert str(err.value) == (f"{conf}:2: cannot open Include {tmp_path}/blocked/gres.conf: "
                              "Permission denied")
