#!/bin/sh
# apt-install.sh WHO PACKAGE...: install Debian packages for a test suite, as the install-*.sh
# scripts need it. Must run as root (exit 77 otherwise, which setup.sh reports).
# A policy-rc.d that exits 101 keeps any package from starting a system service during install.
set -eu

who=$1
shift
if [ "$(id -u)" -ne 0 ]; then
    echo "$who: must run as root (apt-get)" >&2
    exit 77
fi

policy=/usr/sbin/policy-rc.d
if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' >"$policy"
    chmod 0755 "$policy"
    trap 'rm -f "$policy"' EXIT
fi

export DEBIAN_FRONTEND=noninteractive
# Update the package lists only when they are missing (a fresh container), or when the install
# fails on stale lists.
if [ -z "$(ls -A /var/lib/apt/lists 2>/dev/null | grep -v -e lock -e partial || true)" ]; then
    apt-get update -qq
fi
if ! apt-get install -y -qq --no-install-recommends "$@" >/dev/null; then
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "$@" >/dev/null
fi
