#!/usr/bin/env bash
# The release job: gate the signed run again (trusting nothing the qualify job said), then
# publish the checkpoint with its evidence to the policy's repository, in one commit. qualify
# publish gates once more itself, under the same policy, on the folders as it uploads them and
# on the commit as downloaded.
#
# Inputs (environment): RUNS, CHECKPOINT, DRAFT_REVISION, VERIFY_KEY_PEM (as gate.sh), HF_TOKEN
# (read by the hub client from the environment; never on a command line or in a log).
set -euo pipefail
cd "$(dirname "$0")/../.."
# shellcheck source=scripts/ci/lib.sh
source scripts/ci/lib.sh

ci_require HF_TOKEN
run_dir=$(bash scripts/ci/gate.sh | tail -n 1)
repo=$(ci_policy repository)
key=$(mktemp "${RUNNER_TEMP:-${TMPDIR:-/tmp}}/qualify-verify-key.XXXXXX")
trap 'rm -f "$key"' EXIT
printf '%s\n' "$VERIFY_KEY_PEM" > "$key"
"$QUALIFY_BIN" publish --checkpoint "$CHECKPOINT" --run-dir "$run_dir" --repo "$repo" \
    --verify-key "$key" --release-policy --draft-revision "$DRAFT_REVISION" \
    --commit-message "Release $DRAFT_REVISION (qualified, attestation verified)"
