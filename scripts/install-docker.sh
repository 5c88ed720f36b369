#!/usr/bin/env bash
# Make a Docker engine answer on this machine, idempotently, for the runtime tests.
#
#   scripts/install-docker.sh
#
# - installs docker.io and debootstrap from the Debian archive if either is missing
#   (debootstrap builds the stand-in runtime's base image: nothing is ever pulled);
# - starts dockerd in the background when `docker info` does not answer, and waits for it.
# Running it again when the engine answers does nothing. Installing and starting the engine need
# root; a user who is not root gets a message saying what to ask for (an engine that already
# answers, e.g. through the docker group, is all the harness needs).
set -euo pipefail

LOG=${DOCKERD_LOG:-/var/log/qualify-dockerd.log}
WAIT_S=${DOCKERD_WAIT_S:-60}

log() { echo "install-docker: $*" >&2; }

need=()
command -v dockerd >/dev/null 2>&1 || need+=(docker.io)
command -v debootstrap >/dev/null 2>&1 || need+=(debootstrap)
if ((${#need[@]})); then
    if [[ $(id -u) -ne 0 ]]; then
        log "cannot install ${need[*]}: this user ($(id -un)) is not root. Ask an administrator to install" \
            "them and to start dockerd (and add this user to the docker group), or run this script as root."
        exit 1
    fi
    log "installing ${need[*]}"
    export DEBIAN_FRONTEND=noninteractive
    # Update the lists only when the package is unknown to apt, so a warm machine stays offline.
    if ! apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null 2>&1; then
        apt-get update -qq
        apt-get install -y -qq --no-install-recommends "${need[@]}"
    fi
fi

answers() { docker info >/dev/null 2>&1; }

if answers; then
    log "docker engine answers ($(docker version --format '{{.Server.Version}}' 2>/dev/null || echo '?'))"
    exit 0
fi
if [[ $(id -u) -ne 0 ]]; then
    log "no docker engine answers for this user ($(id -un)), and starting dockerd needs root: ask an" \
        "administrator to start it and to add this user to the docker group, or run this script as root."
    exit 1
fi

start() {
    log "starting dockerd $* (log: $LOG)"
    # setsid: the engine must outlive this script and the shell that ran it.
    setsid nohup dockerd "$@" >>"$LOG" 2>&1 </dev/null &
    for _ in $(seq "$WAIT_S"); do
        answers && return 0
        # dockerd exited already: no point waiting out the deadline.
        pgrep -x dockerd >/dev/null 2>&1 || return 1
        sleep 1
    done
    return 1
}

if ! start; then
    # Machines without iptables/NAT support (some VMs, nested containers) refuse the default
    # bridge network; the harness only uses host networking, so run without it.
    log "dockerd did not come up with defaults; retrying without iptables and the default bridge"
    pid=$(pgrep -x dockerd || true)
    [[ -n $pid ]] && kill "$pid" && sleep 2
    if ! start --iptables=false --ip6tables=false --bridge=none; then
        log "dockerd did not answer within ${WAIT_S}s; last log lines:"
        tail -n 20 "$LOG" >&2 || true
        exit 1
    fi
fi
log "docker engine answers ($(docker version --format '{{.Server.Version}}'))"
