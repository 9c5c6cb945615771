#!/bin/sh
# Install OpenSSH server and iproute2 for the network-namespace test hosts
# (tests/infra/sshhosts.py). Idempotent; returns at once when already installed.
set -eu

if command -v sshd >/dev/null 2>&1 || [ -x /usr/sbin/sshd ]; then
    if command -v ip >/dev/null 2>&1; then
        exit 0
    fi
fi
sh "$(dirname "$0")/apt-install.sh" install-sshd.sh openssh-server openssh-client iproute2
echo "install-sshd.sh: $(/usr/sbin/sshd -V 2>&1 | head -n1 || true)"
