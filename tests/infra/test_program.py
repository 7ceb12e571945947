"""The program's order: every config problem (extensions' validators included) is reported
before the first resource is declared; a cloud without a cluster component is a config error."""

from __future__ import annotations

import importlib
import sys

import pytest

from components import config as config_mod
from components import program
from components.config import ConfigError
from lab.plan.harness import run_program

FAKE = "tests.infra.fake_extension"


@pytest.fixture()
def fake_extension(monkeypatch):
    """The fake extension listed in EXTENSIONS, as the platform lists itself."""
    monkeypatch.setattr(program, "EXTENSIONS", [*program.EXTENSIONS, FAKE])
    module = importlib.import_module(FAKE)
    module.install()
    yield module
    module.uninstall()
    sys.modules.pop(FAKE, None)


def test_validator_error_declares_nothing(fake_extension):
    with pytest.raises(ConfigError) as info:
        run_program("aks-dev", {"fakeExtensionMode": "broken"})
    assert info.value.recorded_resources == []  # not the cluster, not anything
    assert ("elastic-spot-lab:fakeExtensionMode='broken' is invalid: expected 'ok' (the fake extension's only valid mode)"
            in str(info.value))
    [cfg] = fake_extension.calls
    assert cfg.cloud == "aks" and cfg.stack == "aks-dev"


def test_validator_problems_come_with_every_other_config_problem(fake_extension):
    with pytest.raises(ConfigError) as info:
        run_program("aks-dev", {"fakeExtensionMode": "broken", "gpuVmSize": "Standard_D4s_v5"})
    assert {p.field for p in info.value.problems} == {
        "elastic-spot-lab:fakeExtensionMode", "elastic-spot-lab:gpuVmSize",
    }
    assert info.value.recorded_resources == []


def test_valid_config_passes_the_validator_and_is_declared(fake_extension):
    plan = run_program("aks-dev", {"fakeExtensionMode": "ok"})
    assert plan.one("azure-native:containerservice:ManagedCluster")
    assert len(fake_extension.calls) == 1


def test_validator_may_raise_config_error_and_repeats_are_reported_once():
    def validator(cfg):
        raise ConfigError([config_mod.Problem("location", "x", "something"), config_mod.Problem("location", "x", "something")])

    config_mod.register_validator(validator)
    config_mod.register_validator(validator)  # idempotent
    try:
        assert config_mod.validators().count(validator) == 1
        values = {"elastic-spot-lab:cloud": "aks", "elastic-spot-lab:location": "eastus"}
        with pytest.raises(ConfigError) as info:
            config_mod.load(values, stack="t")
        assert [str(p) for p in info.value.problems] == ["elastic-spot-lab:location='x' is invalid: expected something"]
    finally:
        config_mod.unregister_validator(validator)
    assert validator not in config_mod.validators()
    config_mod.load(values, stack="t")


def test_validator_must_return_problems():
    def validator(cfg):
        return ["not a problem"]

    config_mod.register_validator(validator)
    try:
        with pytest.raises(TypeError, match="expected components.config.Problem items"):
            config_mod.load({"elastic-spot-lab:cloud": "aks", "elastic-spot-lab:location": "eastus"}, stack="t")
    finally:
        config_mod.unregister_validator(validator)


def test_cloud_without_a_cluster_component_is_a_config_error():
    with pytest.raises(ConfigError) as info:
        run_program("aks-dev", {"cloud": "eks"})
    [problem] = info.value.problems
    assert (problem.field, problem.value) == ("elastic-spot-lab:cloud", "eks")
    assert problem.expected.startswith("one of aks, byo; 'eks' is reserved but has no cluster component yet")
    assert info.value.recorded_resources == []


def test_build_cluster_guards_direct_callers():
    cfg = config_mod.StackConfig(stack="t", cloud="eks", values={"cloud": "eks"})
    with pytest.raises(program.UnsupportedCloud) as info:
        program.build_cluster(cfg)
    assert isinstance(info.value, ConfigError)
    assert "elastic-spot-lab:cloud='eks' is invalid: expected one of aks" in str(info.value)
