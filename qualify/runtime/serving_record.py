"""The report's record of what served the serving levels when they talk to the run's own containers.

The same shape as :meth:`qualify.serving.local_servers.LocalServing.summary`, so the report and the card
say what was served whichever kind of server served it; read off a finished :class:`RuntimeSession`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from qualify.runtime import companions as comp
from qualify.runtime.log_evidence import read_log

if TYPE_CHECKING:
    from qualify.runtime.session import RuntimeSession


def serving_summary(session: RuntimeSession) -> dict[str, Any]:
    """The report's serving-runtime record when the serving levels talk to the session's containers.

    The same shape as :meth:`qualify.serving.local_servers.LocalServing.summary`, so the report and
    the card say what was served whichever kind of server served it.
    """
    from qualify.runtime import vllm_cpu_plugin as plugin

    spec = session.profile.local_server
    cpu = session.profile.image_build == "vllm-cpu"
    servers: dict[str, Any] = {}
    containers = {"speculative": session.runtime, **session.companions}
    for name, rt in containers.items():
        if rt is None:
            continue
        log = read_log(rt.log_path)
        servers[name] = {"plan": {"endpoint": rt.plan.endpoint, "env": rt.plan.to_dict()["env"]},
                         "container": rt.plan.name,
                         "container_id": rt.container.id if rt.container is not None else None,
                         "image_id": rt.identity.id if rt.identity is not None else None,
                         "ready_s": rt.readiness.ready_s if rt.readiness is not None else None,
                         "log": str(rt.log_path),
                         "plugin_active": plugin.active_in_worker(log) if cpu and log else None,
                         "error": session.companion_errors.get(name)}
    source = session.companion_roles.get(comp.SOURCE)
    served = session.served_by()["checkpoint"]
    return {
        "error": None if session.runtime is not None else "the load level's container was never started",
        "kind": "runtime",
        "note": (f"the serving levels talked to the load level's container {session.plan.name} (the checkpoint under "
                 "test mounted as its speculator); the reference (the target alone) and the source draft's server "
                 "ran in containers of their own from the same image and launch plan"),
        "method": spec.method if spec is not None else None,
        "draft_is_checkpoint": True,
        "exercised": spec.exercised if spec is not None else None,
        "plugin": {"changes": list(plugin.CHANGES), "vllm_version": plugin.PLUGIN_VLLM_VERSION} if cpu else None,
        "target": {"path": str(spec.target) if spec is not None else None, "revision": session.plan.target_revision},
        "draft": {"path": served["mounted_from"], "revision": served["revision"]},
        "source_draft": ({"path": str(source.path) if source.path is not None else None, "repo": source.repo,
                          "revision": source.revision} if source is not None else None),
        "servers": servers,
    }
