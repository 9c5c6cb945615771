#!/bin/sh
# Install Debian's headless-capable Chromium (and a font, so screenshots show text) for the
# HTML-report browser tests (tests/report/). Idempotent; returns at once when installed.
# A policy-rc.d that exits 101 keeps any package from starting a service during install.
set -eu

if command -v chromium >/dev/null 2>&1 && fc-list 2>/dev/null | grep -qi dejavu; then
    exit 0
fi

if [ "$(id -u)" -ne 0 ]; then
    echo "install-browser.sh: must run as root (apt-get)" >&2
    exit 77
fi

policy=/usr/sbin/policy-rc.d
if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' >"$policy"
    chmod 0755 "$policy"
    trap 'rm -f "$policy"' EXIT
fi

export DEBIAN_FRONTEND=noninteractive
packages="chromium fonts-dejavu-core fontconfig"
# Update the package lists only when they are missing (a fresh container).
if [ -z "$(ls -A /var/lib/apt/lists 2>/dev/null | grep -v -e lock -e partial || true)" ]; then
    apt-get update -qq
fi
# shellcheck disable=SC2086  # the list is meant to split
if ! apt-get install -y -qq --no-install-recommends $packages >/dev/null; then
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends $packages >/dev/null
fi
echo "install-browser.sh: $(chromium --version 2>/dev/null || echo 'chromium installed')"
