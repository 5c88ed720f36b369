"""Which levels a profile runs on a stand-in rather than on a runtime given the checkpoint.

Such a level shows the harness's plumbing, never that a runtime loads or serves the checkpoint:
the loader refuses a profile that requires one, and the report records them as plumbing.
"""

from __future__ import annotations

from typing import Any

#: The levels a local vLLM server answers (smoke on), which serve [local_server]'s draft.
_LOCAL_SERVER_LEVELS = ("smoke", "acceptance", "paired", "losslessness", "throughput", "speedup")


def stand_in_levels(data: dict[str, Any]) -> dict[str, str]:
    """The levels a profile runs on a stand-in rather than on a runtime given the checkpoint, and on what.

    The stand-in image (``$.runtime.build = "standin"``) prints load evidence from a description of
    the mounted folder; a ``[local_server]`` whose draft is another model than the checkpoint serves
    that model. Neither shows anything about the checkpoint, so neither may qualify a level.
    """
    out: dict[str, str] = {}
    if (data.get("runtime") or {}).get("build") == "standin":
        out["load"] = "the stand-in image ($.runtime.build = \"standin\"), whose entrypoint prints load evidence"
    local = data.get("local_server")
    if isinstance(local, dict) and not local.get("serve_checkpoint", False):
        for level in _LOCAL_SERVER_LEVELS:
            out[level] = "[local_server]'s draft, which is not the checkpoint ($.local_server.serve_checkpoint unset)"
    return out
