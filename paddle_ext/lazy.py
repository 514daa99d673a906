"""Package attributes that load their module on first use (PEP 562), so importing a
package costs nothing until one of its names is used."""

from __future__ import annotations

import importlib


def lazy_attributes(package: str, homes: dict[str, str], namespace: dict):
    """`__getattr__` and `__dir__` for `package`, whose names in `homes` live in the
    (relative) modules given; a loaded name is kept in the package's `namespace`."""

    def __getattr__(name: str) -> object:
        if name in homes:
            value = getattr(importlib.import_module(homes[name], package), name)
            namespace[name] = value
            return value
        raise AttributeError(f"module '{package}' has no attribute '{name}'")

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(homes))

    return __getattr__, __dir__
