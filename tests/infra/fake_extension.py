"""A stand-in for a program extension (like components/platform/stack.py) that validates its
own setting through the config validator hook. Imported by tests/infra/test_program.py via
components.program.EXTENSIONS; `install()` / `uninstall()` make it repeatable."""

from __future__ import annotations

from components import config

KEY = config.Key("fakeExtensionMode", "str", "test only: 'ok' or anything else (invalid)", "test")
calls: list[config.StackConfig] = []


def validate(cfg: config.StackConfig) -> list[config.Problem]:
    calls.append(cfg)
    mode = cfg.get(KEY.name)
    if mode is not None and mode != "ok":
        return [config.Problem(KEY.name, mode, "'ok' (the fake extension's only valid mode)")]
    return []


def install() -> None:
    config.register_keys(KEY)
    config.register_validator(validate)


def uninstall() -> None:
    config.unregister_validator(validate)
    calls.clear()


install()
