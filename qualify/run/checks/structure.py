"""Level "structure": the manifest's claims against the files (schema, checksums, coverage, statistics), and the
checkpoint against its proven source (identity, configuration)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from qualify.checkpoint.manifest import Manifest
from qualify.checkpoint.pinned import PinnedFolder, pin_evidence
from qualify.checkpoint.safetensors_io import Checkpoint
from qualify.checks import source_config as sc
from qualify.checks import structure as m
from qualify.core import Evidence
from qualify.profile import Profile


def pinned(pinned_checkpoint: PinnedFolder) -> Evidence:
    return pin_evidence(pinned_checkpoint)


def safetensors_container(checkpoint: Checkpoint) -> Evidence:
    return m.check_container(checkpoint)


def manifest_schema(checkpoint_dir: Path) -> Evidence:
    return m.check_schema(checkpoint_dir)


def source_pinned(manifest_raw: dict[str, Any], profile: Profile) -> Evidence:
    return m.check_source_pinned(manifest_raw, profile.source_revision, profile.source_repo)


def source_identity(source_identity: Evidence) -> Evidence:
    # Established once per run by the input of the same name, which the checks reading the source need too.
    return source_identity


def paths(manifest_raw: dict[str, Any], checkpoint_folder: Path) -> Evidence:
    return m.check_paths(manifest_raw, checkpoint_folder)


def file_list(manifest: Manifest, checkpoint_dir: Path, profile: Profile) -> Evidence:
    return m.check_file_list(manifest, checkpoint_dir, allow_code=profile.allow_code)


def output_checksums(manifest: Manifest, checkpoint_dir: Path) -> Evidence:
    return m.check_checksums(manifest.output_files, checkpoint_dir, what="output")


def source_checksums(manifest: Manifest, source_dir: Path) -> Evidence:
    return m.check_checksums(manifest.source_files, source_dir, what="source", complete=True)


def source_config(checkpoint_dir: Path, source_dir: Path, profile: Profile) -> Evidence:
    return sc.check_source_config(checkpoint_dir, source_dir, allowed=profile.allowed_config_changes)


def source_files(manifest: Manifest, checkpoint_dir: Path, source_dir: Path) -> Evidence:
    return m.check_source_files(manifest, checkpoint_dir, source_dir)


def output_coverage(manifest: Manifest, checkpoint: Checkpoint) -> Evidence:
    return m.check_output_coverage(manifest, checkpoint)


def source_coverage(manifest: Manifest, source: Checkpoint) -> Evidence:
    return m.check_source_coverage(manifest, source)


def statistics(manifest: Manifest, checkpoint: Checkpoint, source: Checkpoint, profile: Profile) -> Evidence:
    return m.check_statistics(manifest, checkpoint, source, rtol=profile.statistics_rtol, atol=profile.statistics_atol)
