#!/usr/bin/env bash
# The run's report.md on the workflow's summary page (the run folder under REPORTS, if one was written).
set -euo pipefail
cd "$(dirname "$0")/../.."
# shellcheck source=scripts/ci/lib.sh
source scripts/ci/lib.sh

ci_require REPORTS
shopt -s nullglob
found=("$REPORTS"/*/report.md)
if [ "${#found[@]}" -ne 1 ]; then
    echo "no single report.md under REPORTS (found ${#found[@]}): the run wrote no report"
    exit 0
fi
cat "${found[0]}" >> "${GITHUB_STEP_SUMMARY:-/dev/stdout}"
