"""Stands in for ``vllm/__init__.py`` during ``qualify preflight``: records what vLLM was asked to do, and stops.

``qualify preflight`` mounts this file over every ``vllm/__init__.py`` of the runtime image, so that
whichever way the image's launcher starts vLLM (``vllm serve``, ``python -m
vllm.entrypoints.openai.api_server``, ``python -m vllm.entrypoints.cli.main``) the first thing Python runs
of vLLM is this, before vLLM imports torch or looks at a device. It prints one line, ``MARKER`` and a JSON
record, then ends the process:

- the interpreter's command line and the environment vLLM would read (token values left out);
- the draft and the target looked up exactly as vLLM 0.32 looks them up: a local folder as it is,
  else huggingface_hub's ``snapshot_download(repo, revision=..., local_files_only=True)`` in the
  process's own hub cache (what vLLM does with the hub offline); never a download.

Standard library and the image's own huggingface_hub only; the argument reader
(``qualify/runtime/vllm_args.py``) is mounted beside it at ``/opt/qualify-preflight``.
"""

import json
import os
import sys

MARKER = "qualify-preflight-record: "
HERE = "/opt/qualify-preflight"
#: Exit status of a process this stand-in ended: the launcher's own failures keep theirs.
EXIT_RECORDED = 0
_SECRET_WORDS = ("TOKEN", "SECRET", "PASSWORD", "KEY")


def _lookup(repo, revision):
    """Where vLLM finds ``repo`` at ``revision``: ``{"path": ...}`` or ``{"error": ...}``."""
    if not isinstance(repo, str) or not repo:
        return {"error": f"no model named ({repo!r})"}
    if os.path.isdir(repo):
        return {"path": repo, "how": "a local folder, loaded as it is"}
    try:
        from huggingface_hub import snapshot_download

        path = snapshot_download(repo_id=repo, revision=revision, local_files_only=True)
    except Exception as exc:  # the lookup's own words are the finding
        return {"error": f"{type(exc).__name__}: {exc}"[:600],
                "how": f"huggingface_hub snapshot_download({repo!r}, revision={revision!r}, local_files_only=True)"}
    return {"path": str(path),
            "how": f"huggingface_hub snapshot_download({repo!r}, revision={revision!r}, local_files_only=True)"}


def _record():
    record = {"python": sys.executable, "orig_argv": list(getattr(sys, "orig_argv", [])), "argv": list(sys.argv),
              "cwd": os.getcwd(), "pid": os.getpid(),
              "env": {k: ("<set>" if any(w in k.upper() for w in _SECRET_WORDS) else v)
                      for k, v in sorted(os.environ.items())}}
    try:
        from vllm.version import __version__  # the real package's version file: no torch

        record["vllm_version"] = __version__
    except Exception as exc:
        record["vllm_version"] = f"unknown ({type(exc).__name__})"
    try:
        sys.path.insert(0, HERE)
        import vllm_args

        entry, args = vllm_args.command_args(record["orig_argv"], record["argv"])
        record["entry"], record["args"] = entry, args
        resolved = vllm_args.resolve(args)
        spec = resolved["speculative_config"]
        record["target"] = _lookup(resolved["model"], resolved["revision"])
        if spec is not None:
            record["draft"] = _lookup(spec.get("model"), spec.get("revision"))
    except Exception as exc:
        record["error"] = f"{type(exc).__name__}: {exc}"[:600]
    return record


try:
    _line = MARKER + json.dumps(_record(), sort_keys=True)
except Exception as _exc:  # the line must come out whatever failed
    _line = MARKER + json.dumps({"error": f"{type(_exc).__name__}: {_exc}"[:600]})
sys.stdout.write(_line + "\n")
sys.stdout.flush()
os._exit(EXIT_RECORDED)
