"""The exception hierarchy.

Every error the harness raises on purpose is a :class:`QualifyError`. The CLI turns
them into one readable line and an exit code; nothing reaches the user as a bare
traceback. The split that matters is *whose fault it is*:

- :class:`CheckpointError` and its children: the checkpoint (or its manifest, its
  configuration, its source) is wrong. Inside a check this is a *failed* check, with
  the file and the tensor named.
- :class:`UsageError`: the user asked for something that cannot be done (a missing
  path, an unknown profile). Exit code 2.
- :class:`HarnessError`: the harness or its environment broke (a tool missing, an
  I/O error on the report folder). Exit code 2; a check that hits it is an *error*,
  never a pass and never a fail.
"""

from __future__ import annotations


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


class CheckpointError(QualifyError):
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


class QuantizationError(CheckpointError):
    """A tensor cannot be quantized (non-finite values, a shape MXFP8 cannot block)."""


def _locate(message: str, file: str | None, tensor: str | None) -> str:
    where = []
    if file:
        where.append(str(file))
    if tensor:
        where.append(f"tensor '{tensor}'")
    return ": ".join([*where, message]) if where else message
