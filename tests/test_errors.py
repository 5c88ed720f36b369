"""The error tree: every exception the harness defines lives in qualify/errors.py, under one of
the three kinds the exit codes distinguish."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest

import qualify
from qualify import errors
from qualify.cli import main
from qualify.errors import (
    CheckpointError,
    HarnessError,
    NotQualifiedError,
    QualifyError,
    RuntimeFailure,
    UsageError,
)

# Pytest outcomes the suite plugin raises to steer a check; not errors a user meets.
PLUGIN_SIGNALS = {"CheckFailed", "LevelNotRun"}
KINDS = (UsageError, HarnessError, NotQualifiedError)


def harness_modules() -> list[str]:
    return [m.name for m in pkgutil.walk_packages(qualify.__path__, "qualify.")]


def test_every_exception_class_is_defined_in_errors() -> None:
    elsewhere = []
    for name in harness_modules():
        module = importlib.import_module(name)
        for cls_name, cls in inspect.getmembers(module, inspect.isclass):
            if (issubclass(cls, BaseException) and cls.__module__ == name and name != "qualify.errors"
                    and cls_name not in PLUGIN_SIGNALS):
                elsewhere.append(f"{name}.{cls_name}")
    assert elsewhere == []


def test_every_error_is_of_exactly_one_kind() -> None:
    classes = [c for _, c in inspect.getmembers(errors, inspect.isclass)
               if issubclass(c, QualifyError) and c is not QualifyError and c not in KINDS]
    assert len(classes) > 15
    for cls in classes:
        kinds = [k for k in KINDS if issubclass(cls, k)]
        assert len(kinds) == 1, f"{cls.__name__} is under {kinds}"


@pytest.mark.parametrize("exc, code, words", [
    (UsageError("no such profile 'x'"), 2, "qualify: error: no such profile 'x'"),
    (HarnessError("disk full"), 3, "qualify: harness error: disk full"),
    (errors.PortInUse("127.0.0.1:8000 is already in use"), 3, "qualify: harness error: 127.0.0.1:8000 is already"),
    (CheckpointError("bad scale", file="model.safetensors", tensor="a.weight_scale"), 1,
     "qualify: not qualified: model.safetensors: tensor 'a.weight_scale': bad scale"),
    (ValueError("a bug"), 3, "qualify: internal error: ValueError: a bug (a harness bug"),
])
def test_the_cli_turns_an_escaped_error_into_one_line(monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str],
                                                      exc: Exception, code: int, words: str) -> None:
    from qualify.commands import diff

    def boom(args: object) -> int:
        raise exc

    monkeypatch.setattr(diff, "run", boom)
    assert main(["diff", "a.json", "b.json"]) == code
    err = capsys.readouterr().err
    assert words in err
    assert "Traceback" not in err


def test_runtime_failures_are_redacted_wherever_they_are_shown(tmp_path, capsys: pytest.CaptureFixture[str],
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """errors.py imports nothing of ours, so a failure is redacted where it is shown: its evidence, the CLI."""
    from qualify.commands import diff
    from qualify.runtime.container import failure_evidence

    token = "hf_" + "A" * 34
    exc = RuntimeFailure(f"HF_TOKEN={token} rejected", log_tail=[f"ValueError: Authorization: Bearer {token}"])
    ev = failure_evidence("started", exc)
    assert token not in ev.failure_text() and token not in str(ev.measured["log_tail"])

    def boom(args: object) -> int:
        raise exc

    monkeypatch.setattr(diff, "run", boom)
    assert main(["diff", "a.json", "b.json"]) == 1
    assert token not in capsys.readouterr().err


def test_one_table_gives_each_kind_its_exit_code() -> None:
    from qualify.errors import EXIT_CODES, ExitCode, PortInUse, exit_code_for

    assert [(kind.__name__, int(code)) for kind, code in EXIT_CODES] == [
        ("UsageError", 2), ("HarnessError", 3), ("NotQualifiedError", 1)]
    assert exit_code_for(errors.ProfileError("x")) is ExitCode.USAGE  # a UsageError
    assert exit_code_for(errors.DockerUnavailable("x")) is ExitCode.HARNESS
    assert exit_code_for(PortInUse("x")) is ExitCode.HARNESS  # the machine's state, never the checkpoint's fault
    assert exit_code_for(errors.ManifestError("x")) is ExitCode.NOT_QUALIFIED
    assert exit_code_for(ValueError("a bug")) is ExitCode.HARNESS
