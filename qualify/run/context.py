"""The run context: everything a qualification run was asked to do, typed and frozen, handed to the suites.

``qualify run`` builds it from its arguments (:mod:`qualify.run.pipeline`) and gives it to the
suite plugin in-process; no option crosses pytest's argument list as a string, and no suite
fixture reads one back. The one other way in, ``pytest suites --checkpoint DIR ...`` by hand,
turns pytest's options into the same object once (:func:`context_from_pytest`), in the root
conftest, before any fixture runs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from qualify.profile import Profile


@dataclass(frozen=True)
class GivenServers:
    """Servers the caller runs and names, instead of servers this run starts, and their logs.

    Attributes:
        endpoint: the speculative server under test (``--endpoint``).
        reference_endpoint: the target served without a speculator (losslessness, speedup).
        source_endpoint: the target served with the source draft (paired).
        server_log: the log file of ``endpoint``'s server (the caller's word, and recorded so).
        source_server_log: the log file of ``source_endpoint``'s server.
    """

    endpoint: str | None = None
    reference_endpoint: str | None = None
    source_endpoint: str | None = None
    server_log: Path | None = None
    source_server_log: Path | None = None

    @property
    def logs_given(self) -> tuple[str, ...]:
        """The flags of the logs the caller handed in (their content is the caller's word)."""
        return tuple(flag for flag, log in (("--server-log", self.server_log),
                                            ("--source-server-log", self.source_server_log)) if log is not None)


@dataclass(frozen=True)
class LaunchOptions:
    """How the load level launches the profile's runtime.

    Attributes:
        draft_revision: the draft's immutable commit (``DFLASH_MODEL_REVISION``).
        image_digest: the image's sha256 digest, where the profile pins none.
        build_image: build the profile's image when the load level starts and pin the launch to it.
        allow_unpinned: launch from a moving tag or revision (the report then says not reproducible).
        hf_cache: a hub cache mounted read-only into the runtime (else the checkpoint is mounted).
        pass_hf_token: pass HF_TOKEN into the runtime by name.
        startup_timeout_s: how long the runtime may take to serve (None: the profile's).
        log_dir: where the runtime's server log goes (None: a fresh temporary folder).
        target_snapshot: the target's hub-cache snapshot at its pinned revision, mounted with the hub offline.
    """

    draft_revision: str | None = None
    image_digest: str | None = None
    build_image: bool = False
    allow_unpinned: bool = False
    hf_cache: Path | None = None
    pass_hf_token: bool = False
    startup_timeout_s: float | None = None
    log_dir: Path | None = None
    target_snapshot: Path | None = None


@dataclass(frozen=True)
class RunContext:
    """One run's inputs, as the suites read them.

    Attributes:
        profile: the profile, parsed once (and hashed into the report).
        checkpoint: the draft folder as named (its bytes are read through the run's pinned copy).
        source: the source folder, or None (the checks that need it are skipped).
        trust_local_source: go on with a source no proof identifies (recorded; the gate refuses it).
        servers: servers given by the caller.
        launch: how the runtime is launched.
    """

    profile: Profile
    checkpoint: Path | None = None
    source: Path | None = None
    trust_local_source: bool = False
    servers: GivenServers = field(default_factory=GivenServers)
    launch: LaunchOptions = field(default_factory=LaunchOptions)


def context_from_pytest(config: Any, profile: Profile, log_dir: Path | None) -> RunContext:
    """The context of a run started as ``pytest suites --checkpoint DIR ...``: pytest's options, read once.

    Args:
        config: pytest's config, whose options :func:`qualify.run.suite_plugin.add_options` declared.
        profile: the profile ``--profile`` names, parsed.
        log_dir: the run's report folder, where the runtime's log goes too (None: none was asked for).
    """

    def path(name: str) -> Path | None:
        value = config.getoption(name)
        return Path(value) if value is not None else None

    return RunContext(
        profile=profile, checkpoint=path("--checkpoint"), source=path("--source"),
        trust_local_source=bool(config.getoption("--trust-local-source")),
        servers=GivenServers(endpoint=config.getoption("--endpoint"),
                             reference_endpoint=config.getoption("--reference-endpoint"),
                             source_endpoint=config.getoption("--source-endpoint"),
                             server_log=path("--server-log"), source_server_log=path("--source-server-log")),
        launch=LaunchOptions(draft_revision=config.getoption("--draft-revision"),
                             image_digest=config.getoption("--image-digest"),
                             build_image=bool(config.getoption("--build-image")),
                             allow_unpinned=bool(config.getoption("--allow-unpinned")),
                             hf_cache=path("--hf-cache"), pass_hf_token=bool(config.getoption("--pass-hf-token")),
                             startup_timeout_s=config.getoption("--startup-timeout"),
                             log_dir=path("--runtime-log-dir") or log_dir),
    )
