"""JSON merge patches (RFC 7386) applied as the API server applies the backend's patches."""

from __future__ import annotations


def merge_patch(target: dict, patch: dict) -> dict:
    """`target` with `patch` merged in: objects merge key by key, null removes, the rest replaces."""
    result = dict(target)
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        elif isinstance(value, dict) and isinstance(result.get(key), dict):
            result[key] = merge_patch(result[key], value)
        else:
            result[key] = value
    return result
