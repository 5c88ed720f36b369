"""Where the code and the rules a release is judged by come from: the harness commit, profiles, policy, image.

A statement is read by the checks of the code that wrote it only where that code is the gate's own
commit (:func:`own_commit`: a checkout's HEAD, or ``--harness-commit`` confirmed by the package's
build record); for a release, the code that ran must have been exactly that commit's, the files that
were not named (:func:`harness_refusals`). A shipped profile or the release policy counts as the
commit holds it, not as the folder does (:func:`origin_refusals`), and a release run must have run on
an image the release policy pins (:func:`image_refusals`). All pure: facts in, reasons out.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from qualify.report.target import RUNTIME_LEVELS

if TYPE_CHECKING:
    from qualify.release.gate import Expected


def harness_refusals(commit: str | None, clean: object, expected: Expected, problems: object = None) -> list[str]:
    """The harness code that ran against this gate's: the statement must name its commit and it must be the
    gate's own (whose checks the gate knows); for a release, the code that ran must be exactly that commit's
    (anyone can read what judged the checkpoint there), with the files that were not named."""
    out = []
    if commit is None:
        out.append("the attestation names no harness commit, so nothing says which code judged the checkpoint: run "
                   "the release from a git checkout of the harness at a commit")
    elif expected.harness_commit is None:
        out.append(f"the attestation was made by the harness at commit {commit}, but {expected.own_commit_unknown}: "
                   "run the gate from a checkout of that commit, or pass --harness-commit COMMIT to a gate built "
                   "from it")
    elif commit != expected.harness_commit:
        out.append(f"the attestation was made by the harness at commit {commit}; this gate runs commit "
                   f"{expected.harness_commit} and knows the checks of its own code only (gate with the harness at "
                   f"{commit})")
    if expected.committed_harness and clean is not True and commit is not None:
        named = "; ".join(str(p) for p in problems) if isinstance(problems, list) and problems else ""
        said = f"was not the code of commit {commit}" + (f" ({named})" if named else "") if clean is False else \
            "was not said to be as committed"
        out.append(f"the harness code that ran {said}: a release is qualified only by committed code; commit or "
                   "remove those files (and stale bytecode) and run again")
    return out


def own_commit(given: str | None, checkout: str | None, built: object) -> tuple[str | None, str]:
    """(the commit of the gate's own code, or None and why it is not known). From a checkout (``checkout``: its
    HEAD), that commit, which --harness-commit (``given``) must repeat; installed without .git, ``given`` where
    the package's build record names that very commit (``built``). A gate that cannot tell which code it is
    knows no other code's checks."""
    if checkout is not None:
        if given is not None and given != checkout:
            return None, f"--harness-commit {given} is not the commit this gate's checkout is at ({checkout})"
        return checkout, ""
    if given is None:
        return None, ("this gate runs from no git checkout, so it does not know the commit of its own code"
                      + (f" (its package records commit {built}; confirm it with --harness-commit)"
                         if isinstance(built, str) else ""))
    if not isinstance(built, str):
        return None, (f"this gate runs from no git checkout and its package records no build commit, so "
                      f"--harness-commit {given} cannot be confirmed")
    if given != built:
        return None, f"--harness-commit {given} is not the commit this gate's package was built from ({built})"
    return given, ""


def origin_refusals(what: str, path: str | None, here: str, committed: str | None, commit: str | None) -> list[str]:
    """A file that says what a release must show (a shipped profile, the release policy) against its bytes at
    the gate's harness commit: a file the commit does not hold, or holds with other bytes, is the folder's
    word, not the harness's, and licenses nothing."""
    if commit is None:
        return [f"the {what} cannot be checked against the harness's commit, which this gate does not know"]
    if path is None:
        return [f"the {what} lies outside the harness ({here[:12]}...): only the files of commit {commit} count"]
    if committed is None:
        return [f"the {what} {path} is not in the harness's commit {commit} (an untracked or added file): only a "
                "committed one counts; commit it through review, or remove it"]
    if committed != here:
        return [f"the {what} {path} differs from its bytes at the harness's commit {commit} (sha256 {here[:12]}... "
                f"here, {committed[:12]}... committed): an edited copy counts for nothing; restore it (git checkout "
                f"{commit} -- {path}) or commit the change through review"]
    return []


def image_refusals(image: str | None, expected: Expected) -> list[str]:
    """The runtime image ID the run ran on against the ones the release policy allows, where a required level
    rests on a runtime (a release of the checkpoint levels alone ran on none)."""
    allowed = expected.runtime_images
    if allowed is None or not set(expected.required_levels) & set(RUNTIME_LEVELS):
        return []
    if not allowed:
        return [f"the release policy pins no runtime image (its runtime_images is empty): a release engineer must "
                f"pin the image ID releases run on; this run ran on {image or 'no recorded image'}"]
    if image is None:
        return [f"the run records no runtime image, so nothing shows it ran on one the release policy allows "
                f"({', '.join(allowed)})"]
    if image not in allowed:
        return [f"the run ran on runtime image {image}, not on one the release policy allows ({', '.join(allowed)})"]
    return []
