"""Tests for qualify.serving.local_servers: which draft a local server serves, and why it cannot."""

from __future__ import annotations

from pathlib import Path

import pytest

from qualify.errors import HarnessError
from qualify.profile import load_profile


def test_local_serving_serves_the_checkpoint_under_test(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import dataclasses

    from qualify.serving.local_servers import LocalServing

    profile = load_profile("fixture")
    assert profile.local_server is not None
    spec = dataclasses.replace(profile.local_server, serve_checkpoint=True, draft=None, method="dflash",
                               exercised="DFlash proposer on CPU")
    monkeypatch.setattr(type(profile), "local_server", property(lambda self: spec))
    checkpoint = tmp_path / "ckpt"
    local = LocalServing(profile, tmp_path / "logs", checkpoint=checkpoint)
    assert local.draft == checkpoint.resolve()
    summary = local.summary()
    assert summary["draft_is_checkpoint"] is True and summary["method"] == "dflash"
    assert "the checkpoint under test itself" in summary["note"]
    assert summary["exercised"] == "DFlash proposer on CPU"
    # Without a checkpoint folder there is nothing to serve: every serving check is told why.
    none = LocalServing(profile, tmp_path / "logs")
    with pytest.raises(HarnessError, match="serve_checkpoint is set but the run has no checkpoint"):
        none.endpoint()
    none.stop()

