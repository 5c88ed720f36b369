"""Level "structure": the manifest's claims against the files (schema, checksums, coverage, statistics), and the
checkpoint against its proven source (identity, configuration)."""

from __future__ import annotations

import pytest

from qualify.checkpoint.pinned import pin_evidence
from qualify.checks import source_config as sc
from qualify.checks import structure as m

pytestmark = pytest.mark.structure


def test_pinned(pinned_checkpoint, record):
    """Every file of the folder was pinned at the start as a regular file: the checks read exactly those bytes."""
    record(pin_evidence(pinned_checkpoint))


def test_safetensors_container(checkpoint, record):
    """Every safetensors file parses under the strict reader (header, offsets, dtypes, sizes, BOOL bytes)."""
    record(m.check_container(checkpoint))


def test_manifest_schema(checkpoint_dir, record):
    """conversion_manifest.json exists, is strict JSON and validates against its schema."""
    record(m.check_schema(checkpoint_dir))


def test_source_pinned(manifest_raw, profile, record):
    """The source is named at an immutable commit, in the repository and at the revision the profile qualifies."""
    record(m.check_source_pinned(manifest_raw, profile.source_revision, profile.source_repo))


def test_source_identity(source_identity, record):
    """The local source folder is proven to be the pinned repository and revision (profile digests, hub cache, hub)."""
    record(source_identity)


def test_paths(manifest_raw, checkpoint_folder, record):
    """Manifest paths are relative, unique and stay inside the checkpoint."""
    record(m.check_paths(manifest_raw, checkpoint_folder))


def test_file_list(manifest, checkpoint_dir, profile, record):
    """Every file that ships is listed with its checksum (or is never loaded), none is code, every listed one exists."""
    record(m.check_file_list(manifest, checkpoint_dir, allow_code=profile.allow_code))


def test_output_checksums(manifest, checkpoint_dir, record):
    """Every output file's sha256 and size equal the manifest's."""
    record(m.check_checksums(manifest.output_files, checkpoint_dir, what="output"))


def test_source_checksums(manifest, source_dir, record):
    """Every source file's sha256 and size equal the manifest's (the source is the pinned one)."""
    record(m.check_checksums(manifest.source_files, source_dir, what="source", complete=True))


def test_source_config(checkpoint_dir, source_dir, profile, record):
    """config.json (and the generation/tokenizer files) are the source's, but for the quantization config."""
    record(sc.check_source_config(checkpoint_dir, source_dir, allowed=profile.allowed_config_changes))


def test_source_files(manifest, checkpoint_dir, source_dir, record):
    """Every file a runtime may read is the source's, but the weights and the conversion's hf_quant_config.json."""
    record(m.check_source_files(manifest, checkpoint_dir, source_dir))


def test_output_coverage(manifest, checkpoint, record):
    """The checkpoint holds exactly the tensors the manifest names, as it names them."""
    record(m.check_output_coverage(manifest, checkpoint))


def test_source_coverage(manifest, source, record):
    """Every source tensor is quantized, kept or excluded exactly once."""
    record(m.check_source_coverage(manifest, source))


def test_statistics(manifest, checkpoint, source, profile, record):
    """Per-weight and aggregate quantization statistics recomputed from the tensors match the manifest."""
    record(m.check_statistics(manifest, checkpoint, source, rtol=profile.statistics_rtol, atol=profile.statistics_atol))
