"""Job backends: where jobs run (the notebook side). Pick one with `make_backend`
(`registry`: every backend's name and class).

The names below load on first use: a local job's supervisor imports
`paddle_ext.backends.local_supervisor`, which must not pay for asyncio and traitlets
(about 0.2 s before every local worker starts).
"""

from __future__ import annotations

from ..lazy import lazy_attributes

# Each name and the module that defines it.
_HOMES = {"JobBackend": ".base", "make_backend": ".registry", "default_backend_name": ".registry",
          "backend_names": ".registry"}
__all__ = list(_HOMES)
__getattr__, __dir__ = lazy_attributes(__name__, _HOMES, globals())
