"""The exception hierarchy.

Every error the harness raises on purpose is a :class:`QualifyError`. The CLI turns
them into one readable line and an exit code; nothing reaches the user as a bare
traceback. The split that matters is *whose fault it is*:

- :class:`NotQualifiedError` and its children: what is under test is wrong. A
  :class:`CheckpointError` (the checkpoint, its manifest, its configuration, its source)
  is a *failed* check with the file and the tensor named; a :class:`RuntimeFailure` (the
  runtime did not load or serve it) and a :class:`CounterError` (the speculative-decoding
  counters cannot be read or trusted) are failed checks too. Exit code 1.
- :class:`UsageError`: the user asked for something that cannot be done (a missing
  path, an unknown profile). Exit code 2.
- :class:`HarnessError`: the harness or its environment broke (no Docker engine, a port
  already taken, a full disk, an I/O error on the report folder). Exit code 3; a check
  that hits it is an *error*, never a pass and never a fail, and no verdict is reached.

:data:`EXIT_CODES` is the one table from exception to exit code (the README quotes it), and
:class:`ExitCode` names the codes; :func:`exit_code_for` reads the table.

Every exception the harness defines lives here, so that ``except`` clauses and the exit
codes can be read off one tree. The pytest outcomes the suite plugin raises to steer a
check (``CheckFailed``, ``LevelNotRun`` in :mod:`qualify.run.suite_plugin`) are not errors
and stay with the plugin.
"""

from __future__ import annotations

import enum
import errno
from collections.abc import Sequence


class ExitCode(enum.IntEnum):
    """What a ``qualify`` command's exit status means."""

    #: Qualified (``run``, ``check``, ``gate``: the release may ship) or done.
    QUALIFIED = 0
    #: Not qualified: a check failed, or a required level did not pass; the report says which.
    NOT_QUALIFIED = 1
    #: The command line or a file the user named cannot be used as asked; nothing was judged.
    USAGE = 2
    #: The harness or the machine failed (no Docker, a port taken, a full disk): no verdict.
    HARNESS = 3


class QualifyError(Exception):
    """Base class of every error the harness raises on purpose."""

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        if self.hint:
            return f"{self.message} ({self.hint})"
        return self.message


class UsageError(QualifyError):
    """The command line or a file the user named cannot be used as asked."""


class ProfileError(UsageError):
    """A qualification profile is missing, malformed or fails its schema."""


class HarnessError(QualifyError):
    """The harness itself, or the machine it runs on, failed."""


class NotQualifiedError(QualifyError):
    """What is under test (checkpoint, runtime, served counters) is wrong: a failed check."""


class CheckpointError(NotQualifiedError):
    """Something in the checkpoint under test is wrong.

    ``file`` and ``tensor`` locate the problem; both end up in the message so that a
    log line alone is enough to find it.
    """

    def __init__(
        self,
        message: str,
        *,
        file: str | None = None,
        tensor: str | None = None,
        hint: str | None = None,
    ) -> None:
        self.file = file
        self.tensor = tensor
        self.detail = message
        super().__init__(_locate(message, file, tensor), hint=hint)


class SafetensorsError(CheckpointError):
    """A safetensors file breaks the format's rules."""


class ManifestError(CheckpointError):
    """``conversion_manifest.json`` is missing, malformed or contradicts the files."""


class QuantConfigError(CheckpointError):
    """The checkpoint's quantization or model configuration is missing or wrong."""


class SourceIdentityError(CheckpointError):
    """The source folder is not proven to be the repository and revision the profile pins."""


class QuantizationError(CheckpointError):
    """A tensor cannot be quantized (non-finite values, a shape MXFP8 cannot block)."""


# -- inputs the harness reads ------------------------------------------------------------


class JsonProblem(HarnessError):
    """A JSON document breaks a rule; ``path`` locates it (keys and list indices).

    The strict reader raises it; every caller turns it into the error of whoever wrote the
    document (a :class:`ManifestError`, a :class:`UsageError` for a profile...). Left
    uncaught, it is a harness bug.
    """

    def __init__(self, message: str, path: tuple[str | int, ...] = (), duplicate: str | None = None) -> None:
        super().__init__(message)
        self.path = path
        self.duplicate = duplicate


class HubError(HarnessError):
    """The hub (or the cache standing in for it) cannot give what was asked, at the revision asked.

    ``unreachable`` is True when the hub gave no answer at all (network, offline mode), as
    opposed to an answer that refuses (no such repository, revision or file).
    """

    unreachable: bool = False


class RunFolderExists(HarnessError):
    """The run folder exists already: another run drew the same id."""


class GpuQueryError(HarnessError):
    """``nvidia-smi`` answered with something that is not its query format."""


# -- the runtime -------------------------------------------------------------------------


class DockerUnavailable(HarnessError):
    """No Docker engine answers."""


class ResourceExhausted(HarnessError):
    """The machine ran out of something the harness needs (file descriptors, disk, memory) while it worked.

    Never the checkpoint's fault: a file that cannot be opened because the process has no descriptor
    left says nothing about the file. :func:`exhausted` makes one from the ``OSError`` that said so.
    """


#: The errno values that mean the machine ran out of something, and what each ran out of.
EXHAUSTED_RESOURCES: dict[int, str] = {
    errno.EMFILE: "file descriptors (this process's limit, ulimit -n)",
    errno.ENFILE: "file descriptors (the system's limit)",
    errno.ENOSPC: "disk space",
    errno.EDQUOT: "disk quota",
    errno.EFBIG: "file size (this process's limit, ulimit -f)",
    errno.ENOMEM: "memory",
}


def exhausted(exc: BaseException, doing: str) -> ResourceExhausted | None:
    """The harness fault an ``OSError`` stands for when it says a resource ran out (None for any other error).

    ``doing`` says what the harness was doing ("reading the pinned copy's config.json"), so the one
    line the user sees names both the cause and where it struck.
    """
    if not isinstance(exc, OSError) or exc.errno not in EXHAUSTED_RESOURCES:
        return None
    return ResourceExhausted(f"the machine ran out of {EXHAUSTED_RESOURCES[exc.errno]} while {doing}: "
                             f"{exc.strerror or exc}", hint="a fault of the machine, not of the checkpoint: free "
                             "the resource (or raise the limit) and run again")


class ContainerKilled(HarnessError):
    """A runtime container was killed from outside: for memory (Docker's OOMKilled) or by a signal the harness
    did not send. The machine's doing, not the checkpoint's; ``log_tail`` holds its last log lines."""

    def __init__(self, message: str, *, log_tail: Sequence[str] = (), hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.log_tail = list(log_tail)


class RuntimeFailure(NotQualifiedError):
    """The runtime could not be launched or did not become ready; ``log_tail`` holds its last log lines.

    Messages and log lines may quote the runtime's own output: every place that shows them (the
    report writer, the Markdown, the terminal summary, the CLI) redacts secrets first.
    """

    def __init__(self, message: str, *, log_tail: Sequence[str] = (), hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.log_tail = list(log_tail)


class ImageNotPresent(RuntimeFailure):
    """The image is not in the local engine; the harness never pulls."""


class ImageDigestMismatch(RuntimeFailure):
    """The local image is not the one the profile pins."""


class UnpinnedLaunch(RuntimeFailure):
    """A moving reference (empty revision or digest) without ``allow_unpinned``."""


class LaunchMismatch(HarnessError):
    """``qualify preflight``: an arm's launch does not ask vLLM for what the arm means (each finding names the
    arm, the launcher variable and both values), or never reaches vLLM. The launch configuration or the
    image's launcher is wrong, never the checkpoint."""


class PortInUse(HarnessError):
    """Something already answers on the endpoint's port, or took it before the runtime bound it: the machine's
    state, not the checkpoint's fault. ``port`` names it where known."""

    def __init__(self, message: str, *, port: int | None = None, hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.port = port


class ContainerExited(RuntimeFailure):
    """The container stopped before it was ready (or while it was serving)."""

    def __init__(self, message: str, *, exit_code: int | None, log_tail: Sequence[str] = ()) -> None:
        super().__init__(message, log_tail=log_tail)
        self.exit_code = exit_code


class ReadinessTimeout(RuntimeFailure):
    """The container kept running but did not serve the model before the deadline."""


class ServesAnotherModel(RuntimeFailure):
    """The runtime answered /v1/models with models, none of them the one it must serve.

    A served name is fixed when the server starts, so waiting longer cannot change the answer.
    """


class RuntimeNotStarted(RuntimeFailure):
    """The runtime container could not be started; the checks that need it cannot run."""


# -- serving -----------------------------------------------------------------------------


class ServingError(HarnessError):
    """The endpoint did not answer as an OpenAI-compatible vLLM server does (unreachable, timed out, malformed)."""


class ServerUnavailable(ServingError):
    """The server stopped answering: a request timed out, or the connection was refused or cut off.

    Every further request would wait out its own timeout (or fail the same way), so a
    measurement ends at the first one and says how much was left unmeasured.
    """


class CounterError(NotQualifiedError):
    """The speculative-decoding counters are missing, malformed, inconsistent or went backwards.

    Never a pass: the acceptance figures cannot be computed from them. Library checks turn
    it into a finding (a failed check); uncaught, the suite plugin reports an error.
    """


class CountersMissing(CounterError):
    """The endpoint serves no speculative-decoding counters at all: it is not speculating."""


def _locate(message: str, file: str | None, tensor: str | None) -> str:
    where = []
    if file:
        where.append(str(file))
    if tensor:
        where.append(f"tensor '{tensor}'")
    return ": ".join([*where, message]) if where else message


class SigningKeyError(UsageError):
    """A signing or verification key file cannot be used: missing, not PEM, encrypted, not EC P-256."""


class PublishRefused(NotQualifiedError):
    """The release is not complete (evidence missing, a file that cannot be uploaded): nothing was uploaded."""


class AttestationError(CheckpointError):
    """An attestation does not verify (wrong key, altered after signing, malformed): a release is refused."""


#: The one table from exception to exit code, most specific first: the CLI reads it for an error that
#: reaches it, and a run reads it for the checks that ended in one.
EXIT_CODES: tuple[tuple[type[QualifyError], ExitCode], ...] = (
    (UsageError, ExitCode.USAGE),
    (HarnessError, ExitCode.HARNESS),
    (NotQualifiedError, ExitCode.NOT_QUALIFIED),
)


def exit_code_for(exc: BaseException) -> ExitCode:
    """The exit code of an exception that ends a command; anything the table does not name is a harness bug."""
    for kind, code in EXIT_CODES:
        if isinstance(exc, kind):
            return code
    return ExitCode.HARNESS
