"""Qualification profiles: the conditions under which a checkpoint is qualified.

A profile is a versioned TOML file (``qualify/profiles/<name>.toml``), loaded and validated by
:mod:`~qualify.profile.loader`, parsed once into the typed specs of :mod:`~qualify.profile.specs`
by :class:`~qualify.profile.model.Profile`; :mod:`~qualify.profile.levels` says which levels it
runs on a stand-in. The package's public names are importable from ``qualify.profile``.
"""

from qualify.profile.levels import stand_in_levels
from qualify.profile.loader import PROFILE_FORMAT_VERSION, list_profiles, load_profile
from qualify.profile.model import Profile
from qualify.profile.specs import (
    DEFAULT_READY_TIMEOUT_S,
    DEFAULT_REQUEST_TIMEOUT_S,
    DEFAULT_STARTUP_TIMEOUT_S,
    AcceptanceSpec,
    EvidenceSource,
    EvidenceSpec,
    FormatSpec,
    HardwareSpec,
    LocalServerSpec,
    LosslessnessSpec,
    PairedSpec,
    PromptSetSpec,
    RepoPin,
    RuntimeSpec,
    SmokeSpec,
    SpeedupSpec,
    ThroughputSpec,
)

__all__ = [
    "DEFAULT_READY_TIMEOUT_S",
    "DEFAULT_REQUEST_TIMEOUT_S",
    "DEFAULT_STARTUP_TIMEOUT_S",
    "PROFILE_FORMAT_VERSION",
    "AcceptanceSpec",
    "EvidenceSource",
    "EvidenceSpec",
    "FormatSpec",
    "HardwareSpec",
    "LocalServerSpec",
    "LosslessnessSpec",
    "PairedSpec",
    "Profile",
    "PromptSetSpec",
    "RepoPin",
    "RuntimeSpec",
    "SmokeSpec",
    "SpeedupSpec",
    "ThroughputSpec",
    "list_profiles",
    "load_profile",
    "stand_in_levels",
]
