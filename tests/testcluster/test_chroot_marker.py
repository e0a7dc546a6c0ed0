"""The chroot marker: which packages a built chroot holds, so one built before a package was
added to the recipe gets that package instead of being taken as complete."""

import json

from slurm_marl.testcluster import chroot as C


def _marker(root, **fields):
    (root / C.MARKER).write_text(json.dumps(fields) + "\n")


def test_a_marker_listing_every_package_misses_none(tmp_path):
    _marker(tmp_path, version="24.11", packages=list(C.PACKAGES))
    assert C.is_complete(tmp_path) and C.missing_packages(tmp_path) == []


def test_a_marker_from_before_a_package_was_added_misses_it(tmp_path):
    _marker(tmp_path, version="24.11", packages=[p for p in C.PACKAGES if p != "python3-minimal"])
    assert C.missing_packages(tmp_path) == ["python3-minimal"]


def test_a_marker_without_a_list_or_unreadable_misses_all(tmp_path):
    _marker(tmp_path, version="24.11", slurm="slurm-wlm 24.11.5")  # the first markers
    assert C.missing_packages(tmp_path) == list(C.PACKAGES)
    (tmp_path / C.MARKER).write_text("not json")
    assert C.is_complete(tmp_path) and C.missing_packages(tmp_path) == list(C.PACKAGES)

