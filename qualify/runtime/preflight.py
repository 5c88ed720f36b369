"""The launcher preflight: each arm's exact launch, stopped where vLLM reads its arguments, compared with the arm.

A run's arms (:data:`qualify.runtime.companions.ARMS`) are launched from one plan each
(:meth:`qualify.runtime.session.RuntimeSession.arm_plan`); the image's launcher turns that plan's
environment into a vLLM command line. Whether it turns it into the command the arm means is what this
module checks, before any GPU is held: each arm's container is started from the pinned image with the
arm's environment, mounts and the image's own entrypoint, with one difference: a recording stand-in
(``runtimes/preflight/vllm_standin.py``) is mounted over every ``vllm/__init__.py`` of the image, so the
first of vLLM that runs prints what vLLM was asked to do and ends the process before vLLM imports torch
or touches a device. The container runs without a network and without device requests, so nothing can be
fetched and no GPU is needed.

The record is then read with vLLM's own argument forms (:mod:`qualify.runtime.vllm_args`) and compared
with the arm's intent (:func:`compare`): the target is the mounted local folder with the hub offline; a
speculating arm's speculative config names the method, the draft's folder at the pinned revision and the
proposal length; a reference arm has none at all; TP, DCP, the CUDA graph mode, the KV cache dtypes and
the backends are those the profile sets; the port and the served name are the plan's. A difference is a
:class:`~qualify.errors.LaunchMismatch` (exit 3) naming the arm, the variable and both values: the launch
configuration or the image's launcher is wrong, not the checkpoint.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from qualify.errors import LaunchMismatch, RuntimeFailure
from qualify.runtime import vllm_args
from qualify.runtime.companions import NO_SPECULATOR, hub_snapshot
from qualify.runtime.container import RuntimeContainer, tail_with_cause
from qualify.runtime.plan import LaunchPlan, Mount, create_kwargs
from qualify.util.redact import redact

REPO_ROOT = Path(__file__).resolve().parents[2]
STANDIN = REPO_ROOT / "runtimes" / "preflight" / "vllm_standin.py"
ARGS_READER = Path(vllm_args.__file__).resolve()
#: Where the argument reader is mounted for the stand-in (its ``HERE``).
STANDIN_DIR = "/opt/qualify-preflight"
MARKER = "qualify-preflight-record: "
#: How long one arm's launcher may take to reach vLLM (no model is loaded: seconds on a CPU).
DEFAULT_TIMEOUT_S = 180.0
#: Lines of the container's log a finding quotes when the launcher never reached vLLM.
LOG_LINES = 20
#: Found vLLM packages are printed with this prefix by the locating container.
_FOUND = "qualify-vllm-package: "
#: A shell walk of the image (and the arm's mounts) for vLLM's package; model folders are skipped.
LOCATE = ("find / \\( -path /proc -o -path /sys -o -path /dev -o -path /root/.cache/huggingface "
          "-o -path /opt/qualify/target \\) -prune -o \\( -type f -o -type l \\) -path '*/vllm/__init__.py' "
          "-print 2>/dev/null | while read -r f; do d=${f%/__init__.py}; "
          f"[ -d \"$d/entrypoints\" ] && echo \"{_FOUND}$f\"; done; exit 0")
#: The launcher variables that map to one engine setting, and the setting (``vllm_args.resolve``'s key).
TARGET_SETTINGS = (("TP", "tensor_parallel_size"), ("DCP", "decode_context_parallel_size"),
                   ("CUDAGRAPH_MODE", "cudagraph_mode"), ("KV_CACHE_DTYPE", "kv_cache_dtype"),
                   ("ATTENTION_BACKEND", "attention_backend"), ("MOE_BACKEND", "moe_backend"),
                   ("LINEAR_BACKEND", "linear_backend"))
#: The same for the draft's settings, read from the speculative config (vLLM's ``SpeculativeConfig`` fields).
DRAFT_SETTINGS = (("DFLASH_KV_CACHE_DTYPE", "kv_cache_dtype"), ("DFLASH_ATTENTION_BACKEND", "attention_backend"))
#: huggingface_hub's truthy spellings of HF_HUB_OFFLINE.
_TRUE = ("1", "ON", "YES", "TRUE")
NO_SPEC = "no speculative config"


@dataclass(frozen=True)
class Setting:
    """One compared setting of an arm: the launcher variable, what the arm means and what vLLM was given."""

    variable: str
    expected: str
    resolved: str
    ok: bool
    note: str = ""

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class ArmPreflight:
    """One arm's preflight: its container, what vLLM was asked to do, and each setting compared."""

    arm: str
    container: str
    settings: tuple[Setting, ...] = ()
    entry: str | None = None
    args: tuple[str, ...] = ()
    vllm_version: str | None = None
    draft_path: str | None = None  # where the stand-in found the draft, as vLLM looks it up (None: no draft)
    target_path: str | None = None
    error: str | None = None  # the launch never reached vLLM (or could not be started): why
    log_tail: tuple[str, ...] = ()
    seconds: float = 0.0

    @property
    def mismatches(self) -> list[Setting]:
        return [s for s in self.settings if not s.ok]

    @property
    def ok(self) -> bool:
        return self.error is None and not self.mismatches

    def to_dict(self) -> dict[str, Any]:
        return {"arm": self.arm, "container": self.container, "ok": self.ok, "error": self.error,
                "entry": self.entry, "args": list(self.args), "vllm_version": self.vllm_version,
                "draft_path": self.draft_path, "target_path": self.target_path,
                "settings": [s.to_dict() for s in self.settings], "log_tail": list(self.log_tail),
                "seconds": round(self.seconds, 3)}


@dataclass(frozen=True)
class PreflightReport:
    image: str
    image_id: str | None
    vllm_packages: tuple[str, ...]
    arms: tuple[ArmPreflight, ...] = field(default_factory=tuple)

    @property
    def ok(self) -> bool:
        return bool(self.arms) and all(a.ok for a in self.arms)

    def findings(self) -> list[str]:
        """One line per mismatch or failed launch, each naming the arm (and the variable, with both values)."""
        out = []
        for arm in self.arms:
            if arm.error is not None:
                out.append(f"arm {arm.arm}: {arm.error}")
            for s in arm.mismatches:
                out.append(f"arm {arm.arm}: {s.variable}: the arm means {s.expected}, vLLM was given {s.resolved}"
                           + (f" ({s.note})" if s.note else ""))
        return out

    def to_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "image": self.image, "image_id": self.image_id,
                "vllm_packages": list(self.vllm_packages), "arms": [a.to_dict() for a in self.arms],
                "findings": self.findings()}


# ---- intent and comparison (pure)

def target_folder(plan: LaunchPlan) -> str | None:
    """The local folder in the container the arm's target is, or None when no target folder is mounted."""
    if plan.target_pin.snapshot is not None:
        return plan.target_pin.snapshot.model_path
    env = plan.env_dict
    model = env.get("MODEL", "")
    if model.startswith("/"):
        return model
    revision = env.get("MODEL_REVISION") or plan.target_revision
    if model and revision:
        want = hub_snapshot(model, revision)
        if any(m.target == want for m in plan.mounts):
            return want
    return None


def unmounted(plan: LaunchPlan) -> str | None:
    """Why the arm of ``plan`` fetches a model instead of loading a mounted folder, or None when it fetches nothing.

    A run may launch so (the draft from the hub at its pinned revision, the target unpinned); the run's own
    check then leaves that arm out, while ``qualify preflight`` reports it as a finding.
    """
    if target_folder(plan) is None:
        return f"the target {plan.env_dict.get('MODEL')} is not mounted (no --target-snapshot)"
    env = plan.env_dict
    if env.get("SPECULATOR", NO_SPECULATOR) == NO_SPECULATOR:
        return None
    repo, revision = env.get("DFLASH_MODEL", ""), plan.draft_revision
    want = hub_snapshot(repo, revision) if repo and revision else None
    if want is None or not any(want == m.target or want.startswith(m.target.rstrip("/") + "/") for m in plan.mounts):
        return f"the draft {repo} at {revision} is not mounted (the launcher fetches it)"
    return None


def _text(value: Any) -> str:
    if value is None:
        return "(not given: vLLM's default)"
    return json.dumps(value, sort_keys=True) if isinstance(value, (dict, list)) else str(value)


def _same(expected: str, resolved: Any) -> bool:
    if resolved is None:
        return False
    a, b = str(expected).strip(), str(resolved).strip()
    return a == b or a.lower().replace("-", "_") == b.lower().replace("-", "_")


def _draft_revision_of(model: Any, revision: Any) -> str:
    """The revision a speculative config's draft is at: a hub snapshot folder's name, or the revision it names."""
    if isinstance(model, str) and model.startswith("/"):
        parent, _, name = model.rstrip("/").rpartition("/")
        return name if parent.endswith("/snapshots") else f"(a folder of no revision: {model})"
    return str(revision) if revision else "(none: vLLM resolves the hub's main branch)"


def compare(plan: LaunchPlan, record: Mapping[str, Any], *, not_applied: Sequence[str] = ()) -> list[Setting]:
    """Each setting the arm of ``plan`` means, against what the stand-in's ``record`` says vLLM was given.

    Args:
        plan: the arm's launch plan (its environment is the intent; the profile set it).
        record: the stand-in's record (``runtimes/preflight/vllm_standin.py``).
        not_applied: launcher variables the image declares it does not apply (the CPU image's GPU
            settings): reported, not compared.
    """
    env = plan.env_dict
    out: list[Setting] = []
    entry = str(record.get("entry") or "")
    if not (entry.startswith("vllm.entrypoints") or entry == "vllm"):
        out.append(Setting("(vLLM entry)", "vLLM's own command line (vllm serve, python -m vllm.entrypoints...)",
                           entry or "(unknown)", False, "vLLM was imported by another program; its arguments were "
                           "not vLLM's command line"))
    resolved = vllm_args.resolve([str(a) for a in record.get("args") or []])
    for problem in resolved["problems"]:
        out.append(Setting("(vLLM command line)", "arguments vLLM reads", problem, False))
    # The target: the mounted folder, with the hub offline (nothing fetched in its place).
    want = target_folder(plan)
    target = record.get("target") or {}
    found = target.get("path")
    unmounted = f"a mounted local folder (none is mounted: vLLM would fetch {env.get('MODEL')})"
    out.append(Setting("MODEL", want or unmounted,
                       _text(resolved["model"]) if found is None or found == resolved["model"] else
                       f"{resolved['model']} (found at {found})",
                       want is not None and resolved["model"] == want and found == want,
                       "" if found is not None else f"not found in the container: {target.get('error', '')}"[:300]))
    offline = (record.get("env") or {}).get("HF_HUB_OFFLINE")
    out.append(Setting("HF_HUB_OFFLINE", "1 (nothing is fetched)", _text(offline),
                       str(offline or "").upper() in _TRUE, "in vLLM's environment"))
    served = resolved["served_model_name"]
    out.append(Setting("SERVED_MODEL_NAME", plan.served_model_name,
                       ", ".join(served) if served else f"(not given: vLLM serves it as {resolved['model']})",
                       plan.served_model_name in served))
    out.append(Setting("PORT", str(plan.port), _text(resolved["port"]), str(resolved["port"]) == str(plan.port)))
    for variable, key in TARGET_SETTINGS:
        if variable in env:
            out.append(_setting(variable, env[variable], resolved[key], not_applied))
    spec = resolved["speculative_config"]
    if env.get("SPECULATOR") == NO_SPECULATOR or not env.get("SPECULATOR"):
        out.append(Setting("SPECULATOR", f"{env.get('SPECULATOR') or '(unset)'}: {NO_SPEC}",
                           NO_SPEC if spec is None else _text(spec), spec is None))
        return out
    spec = spec or {}
    out.append(Setting("SPECULATOR", env["SPECULATOR"], _text(spec.get("method")) if spec else NO_SPEC,
                       _same(env["SPECULATOR"], spec.get("method"))))
    if "NUM_SPECULATIVE_TOKENS" in env:
        out.append(Setting("NUM_SPECULATIVE_TOKENS", env["NUM_SPECULATIVE_TOKENS"],
                           _text(spec.get("num_speculative_tokens")),
                           _same(env["NUM_SPECULATIVE_TOKENS"], spec.get("num_speculative_tokens"))))
    repo, revision = env.get("DFLASH_MODEL", ""), plan.draft_revision
    expected = hub_snapshot(repo, revision) if repo and revision else None
    draft = record.get("draft") or {}
    got = draft.get("path")
    out.append(Setting("DFLASH_MODEL", expected or f"{repo} at a pinned revision (none is pinned)",
                       got if got is not None else f"not found offline: {draft.get('error') or spec.get('model')}",
                       expected is not None and got == expected,
                       "" if expected is not None and got == expected else
                       f"vLLM's speculative config names {spec.get('model')!r} at {spec.get('revision')!r}"))
    at = _draft_revision_of(spec.get("model"), spec.get("revision"))
    out.append(Setting("DFLASH_MODEL_REVISION", revision or "(none pinned)", at, bool(revision) and at == revision))
    for variable, key in DRAFT_SETTINGS:
        if variable in env:
            value = spec.get(key)
            if value is None and key == "kv_cache_dtype":
                value = resolved["kv_cache_dtype"]  # vLLM's draft inherits the target's cache dtype
            out.append(_setting(variable, env[variable], value, not_applied))
    return out


def _setting(variable: str, expected: str, resolved: Any, not_applied: Sequence[str]) -> Setting:
    if variable in not_applied:
        return Setting(variable, expected, _text(resolved), True, "not applied by this image's launcher (declared)")
    return Setting(variable, expected, _text(resolved), _same(expected, resolved))


def parse_record(log: str) -> dict[str, Any] | None:
    """The stand-in's record in a container's log (the last one), or None."""
    for line in reversed(log.splitlines()):
        _, marker, payload = line.partition(MARKER)
        if marker:
            try:
                record = json.loads(payload)
            except ValueError:
                return {"error": f"the stand-in's record is not JSON: {payload[:200]!r}"}
            return record if isinstance(record, dict) else {"error": "the stand-in's record is not an object"}
    return None


def assess(arm: str, plan: LaunchPlan, record: Mapping[str, Any], *, not_applied: Sequence[str] = (),
           seconds: float = 0.0) -> ArmPreflight:
    """One arm's result from its stand-in record."""
    if record.get("error") and not record.get("args"):
        return ArmPreflight(arm, plan.name, error=f"the stand-in could not read vLLM's command: {record['error']}",
                            seconds=seconds)
    draft = record.get("draft") or {}
    target = record.get("target") or {}
    return ArmPreflight(arm, plan.name, tuple(compare(plan, record, not_applied=not_applied)),
                        entry=record.get("entry"), args=tuple(redact(str(a)) for a in record.get("args") or []),
                        vllm_version=record.get("vllm_version"), draft_path=draft.get("path"),
                        target_path=target.get("path"), seconds=seconds)


# ---- the containers

def preflight_plan(plan: LaunchPlan, packages: Sequence[str]) -> LaunchPlan:
    """``plan`` with the stand-in over each of vLLM's ``__init__.py`` and without a network (nothing fetched)."""
    standins = tuple(Mount(str(STANDIN), p) for p in packages)
    reader = Mount(str(ARGS_READER), f"{STANDIN_DIR}/vllm_args.py")
    return dataclasses.replace(plan, mounts=(*plan.mounts, *standins, reader), network="none")


def locate_vllm(client: Any, plan: LaunchPlan, image_id: str, *, timeout_s: float = DEFAULT_TIMEOUT_S) -> list[str]:
    """Every ``vllm/__init__.py`` in the image with ``plan``'s mounts (one shell walk, the network off).

    Raises:
        LaunchMismatch: the walk could not run, or found no vLLM package.
    """
    kwargs = create_kwargs(dataclasses.replace(plan, name=f"{plan.name}-locate"[:128], network="none"),
                           image_ref=image_id, with_gpus=False)
    kwargs.update(entrypoint=["/bin/sh", "-c", LOCATE], command=None, environment=[])
    container = None
    try:
        container = client.containers.create(**kwargs)
        container.start()
        container.wait(timeout=timeout_s)
        out = container.logs(stdout=True, stderr=False).decode("utf-8", "replace")
    except Exception as exc:  # the engine's words name the cause (no /bin/sh, a mount gone, a timeout)
        raise LaunchMismatch(f"locating vLLM in {plan.image} ({image_id}) failed: {exc}") from None
    finally:
        if container is not None:
            with contextlib.suppress(Exception):  # the run label's teardown finds it
                container.remove(force=True)
    found = sorted({line[len(_FOUND):].strip() for line in out.splitlines() if line.startswith(_FOUND)})
    if not found:
        raise LaunchMismatch(f"no vLLM package (a vllm/__init__.py beside vllm/entrypoints) in {plan.image} "
                             f"({image_id}) or its mounts: the stand-in has nowhere to stand in")
    return found


def record_launch(client: Any, arm: str, plan: LaunchPlan, *, timeout_s: float = DEFAULT_TIMEOUT_S,
                  with_gpus: bool = False, not_applied: Sequence[str] = ()) -> ArmPreflight:
    """Start ``plan`` (a :func:`preflight_plan`) with the image's own entrypoint, read the stand-in's record as soon
    as it is printed, and remove the container."""
    t0 = time.monotonic()
    runtime = RuntimeContainer(client, plan, with_gpus=with_gpus)
    try:
        try:
            runtime.start()
        except RuntimeFailure as exc:
            return ArmPreflight(arm, plan.name, error=f"the container could not be started: {exc}",
                                seconds=time.monotonic() - t0)
        deadline = time.monotonic() + timeout_s
        while True:
            running = runtime.state().get("Status") == "running"
            log = runtime.logs_or_empty()
            record = parse_record(log)
            if record is not None:
                return assess(arm, plan, record, not_applied=not_applied, seconds=time.monotonic() - t0)
            if not running:
                code = runtime.state().get("ExitCode")
                return ArmPreflight(arm, plan.name, seconds=time.monotonic() - t0,
                                    error=f"the launcher exited with code {code} before it started vLLM",
                                    log_tail=tuple(tail_with_cause(log.splitlines(), LOG_LINES)))
            if time.monotonic() > deadline:
                return ArmPreflight(arm, plan.name, seconds=time.monotonic() - t0,
                                    error=f"the launcher did not start vLLM within {timeout_s:.0f} s",
                                    log_tail=tuple(tail_with_cause(log.splitlines(), LOG_LINES)))
            time.sleep(0.2)
    finally:
        runtime.stop()


def run_preflight(client: Any, arms: Mapping[str, LaunchPlan], image_id: str, *,
                  timeout_s: float = DEFAULT_TIMEOUT_S, with_gpus: bool = False,
                  not_applied: Sequence[str] = ()) -> PreflightReport:
    """Each arm's launch recorded and compared, one after another (the image's vLLM located once)."""
    first = next(iter(arms.values()))
    packages = locate_vllm(client, first, image_id, timeout_s=timeout_s)
    results = [record_launch(client, arm, preflight_plan(plan, packages), timeout_s=timeout_s, with_gpus=with_gpus,
                             not_applied=not_applied)
               for arm, plan in arms.items()]
    return PreflightReport(first.image, image_id, tuple(packages), tuple(results))


def not_applied(build: str | None) -> tuple[str, ...]:
    """The launcher variables the image a profile builds (``$.runtime.build``) declares it does not apply."""
    if build == "vllm-cpu":
        from qualify.runtime.vllm_cpu_image import NOT_APPLIED

        return NOT_APPLIED
    return ()


def raise_on_findings(report: PreflightReport) -> None:
    """Raise :class:`LaunchMismatch` naming every finding, if there is one."""
    findings = report.findings()
    if findings:
        raise LaunchMismatch(redact("the launch does not ask vLLM for what the arms mean: " + "; ".join(findings)),
                             hint="the profile's launch or the image's launcher is wrong, not the checkpoint")


def render(report: PreflightReport) -> list[str]:
    """The report as lines for a terminal (escape them: names come from the profile and the image)."""
    lines = [f"image {report.image} ({report.image_id}); vLLM at {', '.join(report.vllm_packages)}"]
    for arm in report.arms:
        state = "ok" if arm.ok else "MISMATCH"
        lines.append(f"arm {arm.arm}: {state} ({arm.container}, {arm.seconds:.1f} s, vLLM {arm.vllm_version}, "
                     f"entered as {arm.entry})")
        if arm.error is not None:
            lines.append(f"  {arm.error}")
            lines += [f"  | {line}" for line in arm.log_tail]
            continue
        lines.append(f"  vLLM was asked: {' '.join(arm.args)}")
        if arm.draft_path is not None:
            lines.append(f"  draft found offline at {arm.draft_path}")
        for s in arm.settings:
            mark = "ok " if s.ok else "BAD"
            lines.append(f"  {mark} {s.variable}: means {s.expected}; vLLM was given {s.resolved}"
                         + (f" ({s.note})" if s.note else ""))
    return [redact(line) for line in lines]


__all__ = [
    "ARGS_READER",
    "MARKER",
    "STANDIN",
    "ArmPreflight",
    "PreflightReport",
    "Setting",
    "assess",
    "compare",
    "locate_vllm",
    "not_applied",
    "parse_record",
    "preflight_plan",
    "raise_on_findings",
    "record_launch",
    "render",
    "run_preflight",
    "target_folder",
    "unmounted",
]
