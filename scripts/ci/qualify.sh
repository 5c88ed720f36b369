#!/usr/bin/env bash
# The release workflow's qualify step: qualify CHECKPOINT under the release policy's profile,
# on this runner's GPUs, and sign the run with the key in SIGN_KEY_PEM.
#
# Inputs (environment): CHECKPOINT, SOURCE (absolute folders), DRAFT_REVISION (40 hex),
# IMAGE_DIGEST (sha256:<64 hex>), TARGET_SNAPSHOT (absolute: the target's hub-cache snapshot folder at
# the profile's [target].revision, mounted with the hub offline: the launcher takes no revision
# variable, so this is what holds the target to its commit), REPORTS (the folder the run folder goes
# in), SIGN_KEY_PEM.
# The profile is the policy's, never an input. Exit: qualify run's own code (0 qualified,
# 1 not qualified, 2 harness/usage), or 2 for an input refused here.
set -euo pipefail
cd "$(dirname "$0")/../.."
# shellcheck source=scripts/ci/lib.sh
source scripts/ci/lib.sh

ci_require_dir CHECKPOINT
ci_require_dir SOURCE
ci_require_commit DRAFT_REVISION
ci_require_digest IMAGE_DIGEST
ci_require_dir TARGET_SNAPSHOT
ci_require REPORTS
ci_require SIGN_KEY_PEM
profile=$(ci_policy profile)

# The key is written to a file only this user can read, and removed however the step ends.
key=$(umask 077 && mktemp "${RUNNER_TEMP:-${TMPDIR:-/tmp}}/qualify-sign-key.XXXXXX")
trap 'rm -f "$key"' EXIT
printf '%s\n' "$SIGN_KEY_PEM" > "$key"
unset SIGN_KEY_PEM

set +e
"$QUALIFY_BIN" run --profile "$profile" --checkpoint "$CHECKPOINT" --source "$SOURCE" \
    --draft-revision "$DRAFT_REVISION" --image-digest "$IMAGE_DIGEST" --target-snapshot "$TARGET_SNAPSHOT" \
    --report-dir "$REPORTS" \
    --sign-key "$key" --sign-model --junit-xml "$REPORTS/junit.xml"
rc=$?
set -e
if [ -n "${GITHUB_OUTPUT-}" ]; then
    echo "rc=$rc" >> "$GITHUB_OUTPUT"
fi
echo "qualify exited $rc"
exit "$rc"
