"""The Docker engine: a client that says how to get one when none answers, and the containers of
earlier runs whose owner died (removed before a new launch).
"""

from __future__ import annotations

import contextlib
import os
from typing import Any

from qualify.errors import DockerUnavailable
from qualify.runtime.labels import HARNESS, LABEL_HARNESS, LABEL_OWNER, LABEL_RUN, owner_alive

INSTALL_HINT = "run scripts/install-docker.sh (as root) to install and start a Docker engine"


def docker_client(timeout: float = 120) -> Any:
    """A Docker SDK client whose engine answers, or :class:`DockerUnavailable` naming the fix."""
    import docker

    where = os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"
    try:
        client = docker.from_env(timeout=int(timeout))
        client.ping()
    except docker.errors.DockerException as exc:
        raise DockerUnavailable(f"no Docker engine answers at {where}: {exc}", hint=INSTALL_HINT) from None
    return client


def _containers(client: Any, label: str) -> list[Any]:
    # Another run on this engine creates and removes its containers while the list is read: one listed and
    # gone (or not yet inspectable) a moment later is not in the list, never a NotFound that ends this run.
    return client.containers.list(all=True, filters={"label": label}, ignore_removed=True)


def run_containers(client: Any, run_id: str) -> list[Any]:
    return _containers(client, f"{LABEL_RUN}={run_id}")


def cleanup_leftovers(client: Any) -> list[str]:
    """Remove harness containers whose owning process is dead (a run killed with SIGKILL); their names."""
    removed = []
    for c in _containers(client, f"{LABEL_HARNESS}={HARNESS}"):
        owner = (c.labels or {}).get(LABEL_OWNER, "")
        if owner_alive(owner) is False:
            with contextlib.suppress(Exception):  # removed meanwhile by its own run's teardown
                c.remove(force=True)
                removed.append(c.name)
    return removed
