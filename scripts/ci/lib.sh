# Shared by the release workflow's scripts: every workflow input arrives as an environment
# variable, is checked here against what it must be, and is only ever used quoted. A value that
# does not fit is refused with the input's name and the rule it broke; it is never echoed raw
# (printf %q), so a newline or an escape sequence in it cannot forge a log line.
# shellcheck shell=bash

ci_fail() {
    # ::error:: is GitHub's annotation; elsewhere it is one plain line on stderr.
    printf '::error::%s\n' "$*" >&2
    exit 2
}

ci_shown() {
    printf '%q' "$1"
}

# ci_require NAME: the variable NAME is set and not empty.
ci_require() {
    local name=$1
    [ -n "${!name-}" ] || ci_fail "$name is not set: the workflow must pass it"
}

# ci_require_commit NAME: an immutable 40-hex commit (a branch or tag can move after the gate).
ci_require_commit() {
    local name=$1
    ci_require "$name"
    [[ ${!name} =~ ^[0-9a-f]{40}$ ]] || ci_fail "$name $(ci_shown "${!name}") is not a 40-hex lowercase commit"
}

# ci_require_digest NAME: sha256:<64 hex>.
ci_require_digest() {
    local name=$1
    ci_require "$name"
    [[ ${!name} =~ ^sha256:[0-9a-f]{64}$ ]] || ci_fail "$name $(ci_shown "${!name}") is not a sha256:<64 hex> digest"
}

# ci_require_repo NAME: owner/name, letters, digits, '.', '_' and '-' only.
ci_require_repo() {
    local name=$1
    ci_require "$name"
    [[ ${!name} =~ ^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$ && ${!name} != *..* ]] \
        || ci_fail "$name $(ci_shown "${!name}") is not a hub repository id (owner/name)"
}

# ci_require_dir NAME: an absolute path to an existing folder, in printable characters with no
# newline, that no program could take for an option.
ci_require_dir() {
    local name=$1 value
    ci_require "$name"
    value=${!name}
    [[ $value == /* ]] || ci_fail "$name $(ci_shown "$value") is not an absolute path"
    [[ $value =~ ^[[:print:]]+$ ]] || ci_fail "$name $(ci_shown "$value") holds a control character (a newline?)"
    [[ $value != *'$('* && $value != *'`'* && $value != *';'* ]] \
        || ci_fail "$name $(ci_shown "$value") holds a shell metacharacter (\$( \` ;); name the folder plainly"
    [ -d "$value" ] || ci_fail "$name $(ci_shown "$value") is not an existing folder on this runner"
}

# The harness's CLI (the tests point this at a recorder).
QUALIFY_BIN=${QUALIFY_BIN:-.venv/bin/qualify}
QUALIFY_PYTHON=${QUALIFY_PYTHON:-.venv/bin/python}

# ci_policy FIELD: one field of the committed release policy (qualify/release/policy.toml).
ci_policy() {
    "$QUALIFY_PYTHON" -m qualify.release.policy "$1" || ci_fail "the release policy cannot be read"
}
