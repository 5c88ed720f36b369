"""The release policy: which shipped profile and levels a release must pass, and where it is published.

It is a committed file (:data:`POLICY_FILE`), not a workflow input: whoever can dispatch the
release workflow can choose which checkpoint folder to qualify, never the rules it is judged by
or the repository it lands in. The gate (``qualify gate --release-policy``) and the publisher
read it through :func:`load_policy`, which refuses anything it cannot use.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from pathlib import Path

from qualify.checkpoint.hub import DEFAULT_ENDPOINT, normalize_endpoint
from qualify.errors import UsageError
from qualify.util.identifiers import is_repo_id

#: The policy the release workflow applies.
POLICY_FILE = Path(__file__).with_name("policy.toml")
_KEYS = {"profile", "require", "repository", "runtime_images", "hub_endpoints"}
#: A runtime image as the policy pins it: the image ID (the sha256 of its configuration), as the run records it.
_IMAGE_ID = re.compile(r"sha256:[0-9a-f]{64}")


@dataclass(frozen=True)
class ReleasePolicy:
    """What a release must show, read from the policy file.

    Attributes:
        profile: the shipped profile the run must have been made under.
        required_levels: the profile's required levels, then the policy's additions.
        repository: the hub repository (``owner/name``) the release is published to.
        path: the file it was read from.
        runtime_images: the image IDs (``sha256:<64 hex>``) a release run may have run on; empty until a
            release engineer pins one, and then the gate refuses every release.
        hub_endpoints: the hub endpoints (normalized, :func:`qualify.checkpoint.hub.normalize_endpoint`) whose
            metadata may prove a revision for a release; an answer from any other (a mirror, a local server)
            leaves it only claimed. Default: the public hub.
    """

    profile: str
    required_levels: tuple[str, ...]
    repository: str
    path: Path
    runtime_images: tuple[str, ...] = ()
    hub_endpoints: tuple[str, ...] = (DEFAULT_ENDPOINT,)


def check_repo_id(repo: str, what: str = "repository") -> str:
    """``repo`` if it is a plain ``owner/name`` hub id.

    Raises:
        UsageError: anything else (a URL, a path, '..', a shell character), naming ``what``.
    """
    if not is_repo_id(repo):
        raise UsageError(f"{what} {repo!r} is not a hub repository id (owner/name: letters, digits, '.', '_', '-')")
    return repo


def load_policy(path: Path = POLICY_FILE) -> ReleasePolicy:
    """The release policy in ``path``.

    Raises:
        UsageError: the file is missing or not TOML, holds an unknown key, names a profile this
            harness does not ship, an unknown level, or a repository that is not ``owner/name``.
    """
    from qualify.core import LEVELS
    from qualify.profile import list_profiles, load_profile

    try:
        data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise UsageError(f"{path}: cannot read the release policy: {exc.strerror or exc}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise UsageError(f"{path}: the release policy is not valid TOML: {exc}") from None
    unknown = sorted(set(data) - _KEYS)
    if unknown:
        raise UsageError(f"{path}: unknown key(s) {', '.join(unknown)} in the release policy "
                         f"(it takes {', '.join(sorted(_KEYS))})")
    missing = sorted(k for k in ("profile", "repository") if k not in data)
    if missing:
        raise UsageError(f"{path}: the release policy names no {' and no '.join(missing)}")
    name = data["profile"]
    if not isinstance(name, str) or name not in list_profiles():
        raise UsageError(f"{path}: profile {name!r} is not a profile this harness ships "
                         f"({', '.join(list_profiles())}); a release is judged under a shipped profile only")
    extra = data.get("require", [])
    if not isinstance(extra, list) or not all(isinstance(lv, str) for lv in extra):
        raise UsageError(f"{path}: require must be a list of level names")
    unknown_levels = [lv for lv in extra if lv not in LEVELS]
    if unknown_levels:
        raise UsageError(f"{path}: require names unknown level(s) {', '.join(unknown_levels)}; known levels: "
                         f"{', '.join(LEVELS)}")
    profile = load_profile(name)
    levels = tuple(dict.fromkeys((*profile.required_levels, *extra)))
    repo = check_repo_id(data["repository"], f"{path}: repository")
    images = data.get("runtime_images", [])
    if not isinstance(images, list) or not all(isinstance(i, str) and _IMAGE_ID.fullmatch(i) for i in images):
        raise UsageError(f"{path}: runtime_images must be a list of image IDs (sha256:<64 lowercase hex>, as "
                         "`docker image inspect --format '{{.Id}}' IMAGE` prints them)")
    hubs = data.get("hub_endpoints", [DEFAULT_ENDPOINT])
    if not isinstance(hubs, list) or not hubs or not all(isinstance(h, str) for h in hubs):
        raise UsageError(f"{path}: hub_endpoints must be a non-empty list of https URLs (the hubs whose metadata "
                         "may prove a revision)")
    named = tuple(dict.fromkeys(normalize_endpoint(h, f"{path}: hub_endpoints entry") for h in hubs))
    plain = [h for h in named if not h.startswith("https://")]
    if plain:
        raise UsageError(f"{path}: hub_endpoints {', '.join(plain)}: not https; an answer anyone on the way can "
                         "rewrite proves nothing")
    return ReleasePolicy(profile=name, required_levels=levels, repository=repo, path=Path(path),
                         runtime_images=tuple(images), hub_endpoints=named)


def main(argv: list[str] | None = None) -> int:
    """``python -m qualify.release.policy FIELD``: print one field of the policy, for the release scripts."""
    import sys

    args = sys.argv[1:] if argv is None else argv
    fields = {"profile": lambda p: p.profile, "repository": lambda p: p.repository,
              "required-levels": lambda p: ",".join(p.required_levels)}
    if len(args) != 1 or args[0] not in fields:
        print(f"usage: python -m qualify.release.policy {{{','.join(fields)}}}", file=sys.stderr)
        return 2
    try:
        print(fields[args[0]](load_policy()))
    except UsageError as exc:
        print(f"qualify: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
