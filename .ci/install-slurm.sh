#!/bin/sh
# Install Debian's Slurm (controller, node daemon, clients) and munge for the real test
# cluster (tests/infra/slurmcluster.py). Idempotent; returns at once when already installed.
# A policy-rc.d that exits 101 keeps the packages from starting system daemons.
set -eu

have_all=1
for bin in slurmctld slurmd sbatch munged; do
    if ! command -v "$bin" >/dev/null 2>&1 && [ ! -x "/usr/sbin/$bin" ]; then
        have_all=0
    fi
done
[ "$have_all" -eq 1 ] && exit 0

if [ "$(id -u)" -ne 0 ]; then
    echo "install-slurm.sh: must run as root (apt-get)" >&2
    exit 77
fi

policy=/usr/sbin/policy-rc.d
if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' >"$policy"
    chmod 0755 "$policy"
    trap 'rm -f "$policy"' EXIT
fi

export DEBIAN_FRONTEND=noninteractive
pkgs="slurmctld slurmd slurm-client munge"
if [ -z "$(ls -A /var/lib/apt/lists 2>/dev/null | grep -v -e lock -e partial || true)" ]; then
    apt-get update -qq
fi
if ! apt-get install -y -qq --no-install-recommends $pkgs >/dev/null; then
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends $pkgs >/dev/null
fi
echo "install-slurm.sh: $(slurmctld -V 2>&1 | head -n1 || true)"
