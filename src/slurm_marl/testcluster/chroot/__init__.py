"""A newer Slurm in a Debian chroot next to the host's own Slurm (measured on a Debian 12 host).

Debian 12 ships Slurm 22.05; 24.11 comes with trixie and 26.05 with forky. Each is built
once into ``/var/cache/slurm-marl/chroot-<version>`` (``SLURM_MARL_CHROOT_CACHE`` moves the
cache): ``debootstrap --variant=minbase`` from Debian's mirror, then ``apt-get install
--no-install-recommends`` of Slurm's daemons, clients, munge, slurmdbd, MariaDB and
python3-minimal (job scripts the harness submits, such as the replay's payload, are
standard-library Python scripts and run inside) inside. A marker file written last says the
chroot is complete and lists the packages it holds; anything else found there is a
half-built chroot and is built again, and a complete chroot that lacks a package added to
``PACKAGES`` since it was built gets just that package (``ensure_chroot``).

Running it:

- daemons run inside (``chroot ROOT slurmctld ...``, see ``daemon_argv``) with /proc, /sys,
  /dev, /dev/pts and /tmp bind-mounted (``mount_binds``; ``hold``/``release`` share them
  between clusters and unmount them after the last), so a cluster folder under /tmp has
  the same path inside and out; job scripts run inside too. A cluster may ask for more host
  folders, read-only at their own paths where the chroot has nothing (``host_paths``: a
  job running the host's interpreter and virtualenv; the chroot then needs ``libffi8``).
  Slurm >= 23.11 also needs a
  ``cgroup.conf`` with ``CgroupPlugin=disabled`` beside slurm.conf (slurmd otherwise stops
  on "No filesystem mounted on /sys/fs/cgroup");
- clients must match the daemons (a 22.05 client gets "Invalid Protocol Version"), so
  host-side code runs the chroot's own squeue/sinfo/scontrol/sbatch/sacct through the
  chroot's dynamic loader (``client_argv``); they then load Slurm's plugins from the
  ``PluginDir`` of slurm.conf, which must name the chroot's plugin folder by its host path
  (``plugin_dir``). Inside the chroot that same path resolves through the symlink
  ``ROOT/ROOT -> /`` made at build time, so one slurm.conf serves daemons and clients.
  ``write_client_wrappers`` puts small executables for them in a folder, for code that
  calls plain ``squeue``/``sbatch`` from PATH or through a SlurmRunner's ``bin_dir``.

Nothing here runs a shell: every command is an argument list. ``layout`` says where things
are in a chroot and how to run them, ``mounts`` binds the host's folders in and shares them
between clusters, ``build`` builds a chroot; their public names are importable from here.
"""

from slurm_marl.testcluster.chroot.build import (APT_ENV, MIRROR, ensure_chroot,
                                                 ensure_debootstrap)
from slurm_marl.testcluster.chroot.layout import (BIN_DIRS, BIND_MOUNTS, CACHE_ENV,
                                                  CLIENTS, DEFAULT_CACHE, LIBRARY_DIRS,
                                                  LOADER, MARKER, PACKAGES,
                                                  PLUGIN_DIRS, PYTHON, SLURM_SUITES,
                                                  cache_dir, chroot_path, client_argv,
                                                  daemon_argv, is_complete, missing_packages,
                                                  plugin_dir, resolve_in_root, suite_of,
                                                  write_client_wrappers)
from slurm_marl.testcluster.chroot.mounts import (hold, host_path_target, mount_binds,
                                                  mounts_under, outermost, release,
                                                  unmount_binds)

__all__ = ["APT_ENV", "BIN_DIRS", "BIND_MOUNTS", "CACHE_ENV", "CLIENTS", "DEFAULT_CACHE",
           "LIBRARY_DIRS", "LOADER", "MARKER", "MIRROR", "PACKAGES", "PLUGIN_DIRS", "PYTHON",
           "SLURM_SUITES", "cache_dir", "chroot_path", "client_argv", "daemon_argv",
           "ensure_chroot", "ensure_debootstrap", "hold", "host_path_target", "is_complete",
           "missing_packages", "mount_binds", "mounts_under", "outermost", "plugin_dir",
           "release", "resolve_in_root", "suite_of", "unmount_binds", "write_client_wrappers"]
