#!/bin/sh
# Install Debian's headless-capable Chromium (and a font, so screenshots show text) for the
# HTML-report browser tests (tests/report/). Idempotent; returns at once when installed.
set -eu

if command -v chromium >/dev/null 2>&1 && fc-list 2>/dev/null | grep -qi dejavu; then
    exit 0
fi
sh "$(dirname "$0")/apt-install.sh" install-browser.sh chromium fonts-dejavu-core fontconfig
echo "install-browser.sh: $(chromium --version 2>/dev/null || echo 'chromium installed')"
