"""Slurm's shared config syntax: comments, continuations, quotes, Include, errors."""

from pathlib import Path

import pytest

from slurm_marl.slurm_integration.text import logical_lines, strip_comment
from slurm_marl.topology.confparse import (natural_key, parse_config_text, read_config_file,
                                           split_pairs)
from slurm_marl.topology.errors import TopologyConfigError


def test_comments_are_dropped_but_escaped_hash_is_kept():
    assert strip_comment("Name=gpu # a comment") == "Name=gpu "
    assert strip_comment(r"Reason=bad\#1") == "Reason=bad#1"
    assert strip_comment("# whole line") == ""


def test_trailing_backslash_joins_lines_and_keeps_first_line_number():
    text = "A=1 \\\n   B=2 \\\n C=3\nD=4\n"
    assert list(logical_lines(text)) == [(1, "A=1 B=2 C=3"), (4, "D=4")]


def test_continuation_with_comment_after_backslash_is_joined():
    text = "A=1 \\ # first part\nB=2\n"
    assert list(logical_lines(text)) == [(1, "A=1 B=2")]


def test_quotes_protect_blanks():
    assert split_pairs('Reason="disk full" State=DRAIN', "f", 1) == (
        ("Reason", "disk full"), ("State", "DRAIN"))


@pytest.mark.parametrize("text,needle", [
    ("A=1 junk", "expected Key=Value"),
    ('A="open', "unterminated"),
    ("A=1 a=2", "given twice"),
    ("=1", "expected Key=Value"),
    ("1A=2", "invalid key"),
])
def test_bad_lines_name_file_and_line(text, needle):
    with pytest.raises(TopologyConfigError) as info:
        parse_config_text("Good=1\n" + text, "/etc/slurm/x.conf")
    assert needle in str(info.value)
    assert str(info.value).startswith("/etc/slurm/x.conf:2: ")
    assert info.value.line == 2 and info.value.path == "/etc/slurm/x.conf"


def test_include_relative_to_including_file_is_read_and_reported(tmp_path: Path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "extra.conf").write_text("X=2\n")
    main = tmp_path / "main.conf"
    main.write_text("A=1\nInclude sub/extra.conf\ninclude /nonexistent/file.conf\nB=3\n")
    parsed = read_config_file(main)
    assert [e.pairs for e in parsed.entries] == [(("A", "1"),), (("X", "2"),), (("B", "3"),)]
    found, missing = parsed.includes
    assert found.found and found.resolved_path == str(tmp_path / "sub" / "extra.conf")
    assert not missing.found and "NOT FOUND" in missing.describe()
    assert parsed.entries[1].source.path.endswith("extra.conf")


def test_nested_include_resolves_against_the_top_files_folder_and_expands_cluster(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "a.conf").write_text("Include b.conf\n")  # looked up beside main
    (tmp_path / "b.conf").write_text("B=1\n")
    (tmp_path / "site_nodes.conf").write_text("N=1\n")
    main = tmp_path / "main.conf"
    main.write_text("ClusterName=site\nInclude sub/a.conf\nInclude %c_nodes.conf\n")
    parsed = read_config_file(main)
    assert [e.pairs for e in parsed.entries] == [
        (("ClusterName", "site"),), (("B", "1"),), (("N", "1"),)]
    assert [i.found for i in parsed.includes] == [True, True, True]
    assert parsed.includes[2].target == "site_nodes.conf"


def test_include_loop_is_an_error(tmp_path: Path):
    (tmp_path / "a.conf").write_text("Include b.conf\n")
    (tmp_path / "b.conf").write_text("Include a.conf\n")
    with pytest.raises(TopologyConfigError, match="Include loop"):
        read_config_file(tmp_path / "a.conf")


def test_unreadable_and_binary_files_raise_the_one_error(tmp_path: Path):
    with pytest.raises(TopologyConfigError, match="cannot read"):
        read_config_file(tmp_path / "missing.conf")
    bad = tmp_path / "bin.conf"
    bad.write_bytes(b"A=\xff\xfe\n")
    with pytest.raises(TopologyConfigError, match="not UTF-8"):
        read_config_file(bad)


def test_natural_key():
    assert sorted(["nvidia10", "nvidia2", "nvidia1"], key=natural_key) == [
        "nvidia1", "nvidia2", "nvidia10"]
    assert sorted(["a1", "a-", "1a"], key=natural_key)  # never compares int with str
