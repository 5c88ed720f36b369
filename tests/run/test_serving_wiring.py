"""Which server the serving levels talk to, and which companion servers a run starts (suites/runtime_fixtures.py).

A stand-in pytest config carries the run's plugin and options; nothing is started.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from qualify.checkpoint.checksums import folder_revision
from qualify.profile import Profile, load_profile
from qualify.run.runner import new_run
from qualify.run.suite_plugin import QualifyPlugin
from qualify.runtime import companions as comp
from suites.runtime_fixtures import companion_roles, later_levels_need_runtime, serving_uses_runtime
from tests.helpers import REPO

CPU = REPO / "fixtures" / "dflash-cpu"


class _Config:
    def __init__(self, plugin: QualifyPlugin | None, **options: Any) -> None:
        self.pluginmanager = SimpleNamespace(get_plugins=lambda: [plugin] if plugin is not None else [])
        self._options = {f"--{k.replace('_', '-')}": v for k, v in options.items()}

    def getoption(self, name: str) -> Any:
        return self._options.get(name)


def _config(profile: Profile, levels: list[str] | None = None, *, local_serving: Any = None,
            **options: Any) -> _Config:
    run = new_run(profile, CPU / "mxfp8", CPU / "source", levels or list(profile.run_levels))
    plugin = QualifyPlugin(run, local_serving=local_serving, profile=profile)
    return _Config(plugin, source=CPU / "source", **options)


@pytest.fixture(scope="module")
def cpu() -> Profile:
    return load_profile("fixture-dflash-cpu")


def test_make_qualifys_profile_serves_from_the_runtime_with_both_companions(cpu: Profile) -> None:
    config = _config(cpu)
    assert serving_uses_runtime(config)  # type: ignore[arg-type]
    roles = companion_roles(config, cpu)  # type: ignore[arg-type]
    assert list(roles) == [comp.REFERENCE, comp.SOURCE] and roles[comp.REFERENCE] is None
    source = roles[comp.SOURCE]
    assert source == comp.SourceDraft((CPU / "source").resolve(), "qualify-fixtures/dflash-cpu-tiny",
                                      folder_revision(CPU / "source"))
    # The teardown waits for the last serving check: the load level's container is theirs.
    smoke_check = SimpleNamespace(get_closest_marker=lambda n: n if n == "smoke" else None, fixturenames=())
    session = SimpleNamespace(config=config, items=[smoke_check])
    assert later_levels_need_runtime(session)  # type: ignore[arg-type]


@pytest.mark.parametrize(("levels", "options", "wanted"), [
    (["load", "smoke", "acceptance"], {}, []),
    (["load", "losslessness"], {}, [comp.REFERENCE]),
    (["speedup"], {}, [comp.REFERENCE]),
    (["paired"], {}, [comp.SOURCE]),
    (None, {"reference_endpoint": "http://127.0.0.1:9/v1"}, [comp.SOURCE]),
    (None, {"source_endpoint": "http://127.0.0.1:9/v1"}, [comp.REFERENCE]),
    (None, {"endpoint": "http://127.0.0.1:9/v1"}, []),
])
def test_a_companion_starts_only_where_a_level_of_the_run_needs_it(cpu: Profile, levels: list[str] | None,
                                                                    options: dict[str, str],
                                                                    wanted: list[str]) -> None:
    assert list(companion_roles(_config(cpu, levels, **options), cpu)) == wanted  # type: ignore[arg-type]


def test_without_a_source_folder_no_source_server_is_planned(cpu: Profile, tmp_path: Path) -> None:
    config = _config(cpu, ["paired"])
    config._options["--source"] = tmp_path / "missing"
    assert not (tmp_path / "missing").exists()
    # The profile's [local_server] source_draft is used only when the run gives no --source.
    assert comp.SOURCE not in companion_roles(config, cpu)  # type: ignore[arg-type]


def test_who_serves_the_serving_levels(cpu: Profile) -> None:
    # make qualify's profile: its runtime, with or without the load level in the run.
    assert serving_uses_runtime(_config(cpu, ["smoke"]))  # type: ignore[arg-type]
    assert not serving_uses_runtime(_config(cpu, endpoint="http://127.0.0.1:9/v1"))  # type: ignore[arg-type]
    # The GPU profile: its runtime when the run launches it, else the profile's endpoint (a server of the user's).
    seed = load_profile("glm53-flash-dflash2-mxfp8-tp4")
    assert serving_uses_runtime(_config(seed, ["load", "smoke"]))  # type: ignore[arg-type]
    assert not serving_uses_runtime(_config(seed, ["smoke"]))  # type: ignore[arg-type]
    assert companion_roles(_config(seed, ["load", "smoke", "paired"]), seed) == {}  # type: ignore[arg-type]
    # The DFlash 2 fixture profile: its local vLLM servers.
    fixture = load_profile("fixture")
    assert not serving_uses_runtime(_config(fixture, local_serving=object()))  # type: ignore[arg-type]
    assert companion_roles(_config(fixture, local_serving=object()), fixture) == {}  # type: ignore[arg-type]
