#!/usr/bin/env bash
# The release gate under the committed release policy: the one run folder under REPORTS (or
# EVIDENCE) must hold an attestation that VERIFY_KEY_PEM verifies and that qualifies exactly
# CHECKPOINT at DRAFT_REVISION, under the policy's profile and levels.
#
# Inputs (environment): RUNS (the folder holding exactly one run folder), CHECKPOINT (absolute),
# DRAFT_REVISION (40 hex), VERIFY_KEY_PEM. Prints the run folder on its last line.
set -euo pipefail
cd "$(dirname "$0")/../.."
# shellcheck source=scripts/ci/lib.sh
source scripts/ci/lib.sh

ci_require_dir RUNS
ci_require_dir CHECKPOINT
ci_require_commit DRAFT_REVISION
ci_require VERIFY_KEY_PEM

shopt -s nullglob
found=("$RUNS"/*/attestation.intoto.jsonl)
[ "${#found[@]}" -eq 1 ] \
    || ci_fail "expected exactly one run folder with attestation.intoto.jsonl under RUNS, found ${#found[@]}"
key=$(mktemp "${RUNNER_TEMP:-${TMPDIR:-/tmp}}/qualify-verify-key.XXXXXX")
trap 'rm -f "$key"' EXIT
printf '%s\n' "$VERIFY_KEY_PEM" > "$key"

"$QUALIFY_BIN" gate --attestation "${found[0]}" --verify-key "$key" --checkpoint "$CHECKPOINT" \
    --revision "$DRAFT_REVISION" --release-policy
dirname "${found[0]}"
