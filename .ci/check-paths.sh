#!/usr/bin/env bash
# Fail when a path of one machine appears in the project's own files: a test that names one
# checkout's venv passes there and fails in every other clone. Captured output of real tools
# under tests/data/ keeps the paths it was captured with.
set -euo pipefail
cd "$(dirname "$0")/.."
here="$(pwd -P)"
pattern='(^|[^A-Za-z0-9_.~-])/(work|root|home|Users)/'
found=0
while IFS= read -r -d '' file; do
    if grep -nE "$pattern" "$file" /dev/null || grep -nF "$here" "$file" /dev/null; then
        found=1
    fi
done < <(git ls-files -z --cached --others --exclude-standard -- src tests bench docs .ci README.md pyproject.toml \
         ':!:tests/data/**' ':!:.ci/check-paths.sh')
if [ "$found" -ne 0 ]; then
    echo "[check-paths] the lines above name a path of one machine; use paths relative to the repository, tmp_path or sys.executable" >&2
    exit 1
fi
echo "[check-paths] no machine-specific paths"
