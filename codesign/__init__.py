"""codesign: provably optimal hardware/schedule co-design for distributed LLM inference.

``load``, ``evaluate``, ``solve``, ``certify``, ``explain`` and ``named`` are the Python API
(:mod:`codesign.api`); they are imported on first use, so ``import codesign`` stays light.
"""

from typing import Any

__version__ = "0.2.0"

__all__ = ["__version__", "certify", "evaluate", "explain", "load", "named", "solve"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from codesign import api

        return getattr(api, name)
    raise AttributeError(f"module 'codesign' has no attribute {name!r}")
