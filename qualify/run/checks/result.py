"""What a check's function returns: evidence, a measurement the profile does not qualify, or why it cannot run."""

from __future__ import annotations

from dataclasses import dataclass

from qualify.core import Evidence


@dataclass(frozen=True)
class Measured:
    """A figure recorded as evidence but not qualified (the check is then skipped, never passed).

    ``not_qualified_because`` says why no bound applies, e.g. "the profile states no bound".
    """

    evidence: Evidence
    not_qualified_because: str

    def skip_reason(self, what: str) -> str:
        """The skip's message: ``<what> measured (<summary>) but not qualified: <why>``."""
        return f"{what} measured ({self.evidence.summary}) but not qualified: {self.not_qualified_because}"


@dataclass(frozen=True)
class Skipped:
    """The check cannot be run, and why (a profile table it needs is missing, say); a skip is never a pass."""

    reason: str


#: What a check's function returns.
CheckResult = Evidence | Measured | Skipped
