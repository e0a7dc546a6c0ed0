"""Host folders bound into a chroot at their own paths (``ClusterSpec.host_paths``): which
are bound, and which are refused because the chroot has its own folder there."""

import pytest

from slurm_marl.testcluster import chroot as C
from slurm_marl.testcluster.errors import HarnessError


def test_only_the_outermost_paths_are_bound_each_once():
    paths = ("/opt/slurm-marl-x/venv/lib", "/opt/slurm-marl-x/venv", "/srv/slurm-marl-data",
             "/opt/slurm-marl-x/venv", "/opt/slurm-marl-xy")
    assert C.outermost(paths) == ["/opt/slurm-marl-x/venv", "/srv/slurm-marl-data",
                                  "/opt/slurm-marl-xy"]
    # a folder under one bound anyway (/tmp, /dev ...) is not bound again
    assert C.outermost(("/tmp/somewhere", "/dev/shm")) == []


def test_a_link_is_bound_as_the_folder_it_names(tmp_path):
    (tmp_path / "venv").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "venv")
    assert C.host_path_target(tmp_path / "root", str(tmp_path / "link")) == \
        tmp_path / "root" / str(tmp_path / "venv").lstrip("/")


def test_a_free_place_in_the_chroot_is_taken_at_the_same_path(tmp_path):
    root, host = tmp_path / "root", tmp_path / "host" / "python"
    host.mkdir(parents=True)
    root.mkdir()
    assert C.host_path_target(root, str(host)) == root / str(host).lstrip("/")
    (root / str(host).lstrip("/")).mkdir(parents=True)   # an empty folder: still free
    assert C.host_path_target(root, str(host)) == root / str(host).lstrip("/")


def test_a_folder_the_chroot_has_itself_or_a_strange_path_is_refused(tmp_path):
    root, host = tmp_path / "root", tmp_path / "host"
    host.mkdir()
    own = root / str(host).lstrip("/")
    own.mkdir(parents=True)
    (own / "python3").write_text("the chroot's own")
    with pytest.raises(HarnessError, match="has its own"):
        C.host_path_target(root, str(host))
    with pytest.raises(HarnessError, match="not an absolute existing folder"):
        C.host_path_target(root, "relative/path")
    with pytest.raises(HarnessError, match="not an absolute existing folder"):
        C.host_path_target(root, str(tmp_path / "missing"))
