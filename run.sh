#!/usr/bin/env bash
# slurm-marl's two entry points, for a fresh Debian 12 machine (run as root, or with sudo):
#   bash run.sh demo   the main job: a real local Slurm cluster + the agent on a real trace
#   bash run.sh test   the whole test suite (real Slurm daemons included)
#   bash run.sh test-versions   the real-Slurm tests (tests/slurm) again on Slurm 24.11 and
#                      26.05, each from a Debian chroot (built on first use, ~40 s each)
#   bash run.sh schedmd-tests   SchedMD's own testsuite/python (Debian's source of the
#                      installed Slurm) on a local cluster, Slurm alone vs gate + agent
# Both install what they need first: Debian packages (Slurm 22.05, munge, slurmdbd and
# MariaDB for accounting, hwloc) and a virtualenv with the pinned Python dependencies.
# Re-runs skip what is already there.
set -euo pipefail
cd "$(dirname "$0")"
VENV=${SLURM_MARL_VENV:-.venv}

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

install_system() {
  local need=()
  # chromium: the report's HTML is rendered headless in tests/sim/test_report_html.py
  for bin in slurmctld slurmd sbatch munged slurmdbd mariadbd lstopo-no-graphics systemd-analyze \
      chromium; do
    PATH="$PATH:/usr/sbin:/sbin" command -v "$bin" >/dev/null 2>&1 || need+=("$bin")
  done
  python3 -c 'import ensurepip, venv' >/dev/null 2>&1 || need+=(python3-venv)
  if [ ${#need[@]} -gt 0 ]; then
    echo "installing Debian packages (missing: ${need[*]})" >&2
    as_root apt-get update -qq
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      slurmctld slurmd slurm-client munge slurmdbd mariadb-server hwloc-nox systemd \
      chromium python3 python3-venv python3-dev \
      >/dev/null
  fi
}

install_python() {
  [ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
  local stamp="$VENV/.slurm-marl-installed"
  local want; want=$(sha256sum pyproject.toml | cut -d' ' -f1)
  if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
    echo "installing Python dependencies into $VENV" >&2
    "$VENV/bin/pip" install -q --upgrade pip >/dev/null 2>&1 || true
    # torch first and exactly pinned: a CPU wheel; any range would pull a CUDA build
    "$VENV/bin/pip" install -q "torch==2.13.0"
    "$VENV/bin/pip" install -q -e '.[test]'
    echo "$want" > "$stamp"
  fi
}

# side_by_side LABEL CMD... -- LABEL CMD...: the commands at once, each with its own log;
# then, in order, each one's slowest tests and summary (its whole log if it failed). Exits
# with the first failure's status (pytest's 5, no tests collected, included), else 0.
side_by_side() {
  local logs; logs=$(mktemp -d)
  local labels=() pids=() cmd=()
  while [ $# -gt 0 ]; do
    local label=$1; shift
    cmd=()
    while [ $# -gt 0 ] && [ "$1" != "--" ]; do cmd+=("$1"); shift; done
    [ $# -gt 0 ] && shift
    "${cmd[@]}" > "$logs/${#pids[@]}.log" 2>&1 &
    labels+=("$label"); pids+=("$!")
  done
  local rc=0 i status
  for i in "${!pids[@]}"; do
    echo "== ${labels[$i]} ==" >&2
    if wait "${pids[$i]}"; then
      tail -n 16 "$logs/$i.log" >&2     # the slowest tests and the summary
    else
      status=$?
      cat "$logs/$i.log" >&2            # the whole log: every failure with its output
      echo "failed: ${labels[$i]} (exit $status)" >&2
      [ "$rc" = 0 ] && rc=$status
    fi
  done
  rm -rf "$logs"
  return "$rc"
}

cmd=${1:-}
shift || true
case "$cmd" in
  demo)
    install_system; install_python
    exec "$VENV/bin/slurm-marl" demo "$@" ;;
  test)
    install_system; install_python
    export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
    # Import rules first (pyproject.toml [tool.importlinter], docs/architecture.md).
    "$VENV/bin/lint-imports" --no-cache || { echo "import rules broken" >&2; exit 1; }
    # The slowest tests are listed at the end: CI's time budget is watched from there.
    # The whole suite runs in 3 pytest workers, a test file each at a time (pytest-xdist,
    # --dist loadfile: a module's tests share its Slurm cluster): the real-Slurm tests
    # mostly wait on Slurm, and one after the other took 13 of CI's 30 minutes.
    if [ $# -eq 0 ]; then set -- -n 3 --dist loadfile; fi
    exec "$VENV/bin/python" -m pytest -q --durations=15 "$@" ;;
  test-versions)
    install_system; install_python
    export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
    # Both versions at once, each in 3 workers as above: the real-Slurm tests mostly wait
    # on Slurm.
    side_by_side \
      "tests/slurm on Slurm 24.11" env SLURM_MARL_SLURM_VERSION=24.11 \
        "$VENV/bin/python" -m pytest -q -p no:cacheprovider -n 3 --dist loadfile \
        --durations=10 tests/slurm "$@" -- \
      "tests/slurm on Slurm 26.05" env SLURM_MARL_SLURM_VERSION=26.05 \
        "$VENV/bin/python" -m pytest -q -p no:cacheprovider -n 3 --dist loadfile \
        --durations=10 tests/slurm "$@" ;;
  schedmd-tests)
    install_system; install_python
    # SchedMD's testsuite/python from Debian's source package of the installed Slurm
    # (cached under .cache/schedmd-testsuite/), once with Slurm alone and once with the
    # gate + agent; exit 1 if any test ends differently (docs/operations.md).
    exec "$VENV/bin/python" -m slurm_marl.testcluster.schedmd "$@" ;;
  setup)
    install_system; install_python ;;
  *)
    echo "usage: bash run.sh demo|test|test-versions|schedmd-tests|setup [args...]" >&2; exit 2 ;;
esac
