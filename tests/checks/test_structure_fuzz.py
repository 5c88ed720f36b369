"""Property tests: a mutated manifest never crashes the structure checks, never hangs, never passes by accident."""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from qualify.checkpoint import manifest as m
from qualify.checkpoint.safetensors_io import Checkpoint
from qualify.checks import format as format_checks
from qualify.checks import reproduction as r
from qualify.checks import structure
from qualify.errors import CheckpointError
from qualify.profile import load_profile
from tests.helpers import FIXTURE

PROFILE = load_profile("fixture")
GOOD = json.loads((FIXTURE / "mxfp8" / m.MANIFEST_NAME).read_text())

# JSON values a mutation may put anywhere: wrong types, absurd numbers, hostile strings.
junk = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=20),
    st.sampled_from(["..", "/etc/passwd", "main", "", "a" * 64, "../../x", "model.safetensors"]),
    st.lists(st.integers(), max_size=3), st.dictionaries(st.text(max_size=5), st.integers(), max_size=2),
)


def paths_of(doc: Any, prefix: tuple = ()) -> list[tuple]:
    out = [prefix]
    if isinstance(doc, dict):
        for k, v in doc.items():
            out += paths_of(v, (*prefix, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc[:3]):  # the first few items are enough to reach every shape of entry
            out += paths_of(v, (*prefix, i))
    return out


ALL_PATHS = [p for p in paths_of(GOOD) if p]
#: Descriptive fields that make no claim about the files; changing them may pass.
NEUTRAL_KEYS = ("role", "reason", "command")


def mutate(doc: dict, path: tuple, value: Any, action: str) -> dict:
    doc = copy.deepcopy(doc)
    parent = doc
    for key in path[:-1]:
        parent = parent[key]
    last = path[-1]
    if action == "delete":
        del parent[last]
    elif action == "duplicate" and isinstance(parent, list):
        parent.append(copy.deepcopy(parent[last]))
    else:
        parent[last] = value
    return doc


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("fuzz")
    shutil.copytree(FIXTURE, d / "fx")
    return d / "fx"


# No per-example deadline: the machine may be loaded; the example count bounds the test instead.
@pytest.mark.slow
# derandomize: the same examples on every run, so CI's verdict on the harness never flickers.
@settings(max_examples=120, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(path=st.sampled_from(ALL_PATHS), value=junk, action=st.sampled_from(["set", "delete", "duplicate"]))
def test_mutated_manifests_fail_cleanly(workdir: Path, path: tuple, value: Any, action: str) -> None:
    ckpt, src = workdir / "mxfp8", workdir / "source"
    doc = mutate(GOOD, path, value, action)
    (ckpt / m.MANIFEST_NAME).write_text(json.dumps(doc))
    schema = structure.check_schema(ckpt)
    results = [structure.check_source_pinned(doc, PROFILE.source_revision), structure.check_paths(doc, ckpt)]
    try:
        man = m.load_manifest(ckpt)
    except CheckpointError as exc:
        assert not schema.ok and "fails its schema" in str(exc)
        return
    assert schema.ok
    with Checkpoint.open(ckpt) as c, Checkpoint.open(src) as s:
        results += [
            structure.check_file_list(man, ckpt),
            structure.check_checksums(man.output_files, ckpt, what="output"),
            structure.check_checksums(man.source_files, src, what="source", complete=True),
            structure.check_output_coverage(man, c),
            structure.check_source_coverage(man, s),
        ]
        results.append(format_checks.check_declared_format(man.quantization, PROFILE.format))
        if path[0] in ("tensors", "aggregate", "quantization"):  # the only parts these depend on
            results.append(structure.check_statistics(man, c, s, rtol=1e-6, atol=1e-12))
            plan = [r.PlanItem(t.source_name, t.action) for t in man.tensors]
            results.append(r.check_quantized(plan, c, s, declared_recipe=man.scale_recipe, source_revision=None))
            results.append(r.check_unquantized(plan, c, s))
    if doc != GOOD and all(ev.ok for ev in results):
        # A schema-valid change every structure check accepts must be one that changes no claim about
        # these files: a renamed producer, a reordered list. Anything else slipped through.
        # A null recipe is a claim withdrawn, not changed: reproduction then detects the recipe and says so.
        withdrawn = path == ("quantization", "scale_recipe") and action == "set" and value is None
        neutral = path[0] == "producer" or path[-1] in NEUTRAL_KEYS or withdrawn
        assert neutral or (action == "set" and value == _get(GOOD, path)), (path, value, action)


def _get(doc: Any, path: tuple) -> Any:
    for key in path:
        doc = doc[key]
    return doc
