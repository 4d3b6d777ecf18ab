"""The scorers by `data_source`: each scorer module registers itself here as the package imports it."""

from __future__ import annotations

from typing import Any, Callable

from core_v1.utils.registry import Registry

SCORERS: Registry[Callable[..., Any]] = Registry(
    "reward scorer (by data_source)", check=callable, config_key="the data's data_source column"
)


def register_scorer(*data_sources: str):
    def decorate(fn):
        for name in data_sources:
            SCORERS.register(name, fn)
        return fn

    return decorate
