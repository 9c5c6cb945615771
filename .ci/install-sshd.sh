#!/bin/sh
# Install OpenSSH server and iproute2 for the network-namespace test hosts
# (tests/infra/sshhosts.py). Idempotent; returns at once when already installed.
# A policy-rc.d that exits 101 stops the package from starting a system-wide sshd on :22.
set -eu

if command -v sshd >/dev/null 2>&1 || [ -x /usr/sbin/sshd ]; then
    if command -v ip >/dev/null 2>&1; then
        exit 0
    fi
fi

if [ "$(id -u)" -ne 0 ]; then
    echo "install-sshd.sh: must run as root (apt-get)" >&2
    exit 77
fi

policy=/usr/sbin/policy-rc.d
if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' >"$policy"
    chmod 0755 "$policy"
    trap 'rm -f "$policy"' EXIT
fi

export DEBIAN_FRONTEND=noninteractive
# Update the package lists only when they are missing (a fresh container).
if [ -z "$(ls -A /var/lib/apt/lists 2>/dev/null | grep -v -e lock -e partial || true)" ]; then
    apt-get update -qq
fi
if ! apt-get install -y -qq --no-install-recommends openssh-server openssh-client iproute2 >/dev/null; then
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends openssh-server openssh-client iproute2 >/dev/null
fi
echo "install-sshd.sh: $(/usr/sbin/sshd -V 2>&1 | head -n1 || true)"
