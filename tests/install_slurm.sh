#!/usr/bin/env bash
# Install what the SLURM tests need (tests/workflow/test_slurm.py): Debian's munge and SLURM 22.05
# packages. Idempotent; never fails: where SLURM cannot be installed (no root, no apt-get, no
# network), it says so and the SLURM tests skip with that reason.
set -u
have_all() {
  for binary in munged slurmctld slurmd sbatch squeue scancel sinfo; do
    command -v "$binary" >/dev/null 2>&1 || [ -x "/usr/sbin/$binary" ] || return 1
  done
}
have_all && exit 0
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
  echo "install_slurm.sh: SLURM is not installed and cannot be (needs root and apt-get)"
  exit 0
fi
export DEBIAN_FRONTEND=noninteractive
if apt-get update -qq >/dev/null && apt-get install -y -qq munge slurmd slurmctld slurm-client >/dev/null; then
  echo "install_slurm.sh: installed munge and SLURM"
else
  echo "install_slurm.sh: apt-get could not install SLURM"
fi
exit 0
