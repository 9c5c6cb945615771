#!/bin/sh
# Install Debian's Slurm (controller, node daemon, clients) and munge for the real test
# cluster (tests/infra/slurmcluster.py). Idempotent; returns at once when already installed.
set -eu

have_all=1
for bin in slurmctld slurmd sbatch munged; do
    if ! command -v "$bin" >/dev/null 2>&1 && [ ! -x "/usr/sbin/$bin" ]; then
        have_all=0
    fi
done
[ "$have_all" -eq 1 ] && exit 0

sh "$(dirname "$0")/apt-install.sh" install-slurm.sh slurmctld slurmd slurm-client munge
echo "install-slurm.sh: $(slurmctld -V 2>&1 | head -n1 || true)"
