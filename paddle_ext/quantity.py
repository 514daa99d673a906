"""Kubernetes resource quantities ("500m", "4Gi", "2") as Decimals, and back (pure)."""

from __future__ import annotations

import functools
from decimal import Decimal, InvalidOperation, localcontext

from .grammars import MAX_EXPONENT_DIGITS, QUANTITY_PATTERN  # noqa: F401 (QUANTITY_PATTERN: re-exported)

_SUFFIX_FACTORS = {
    None: Decimal(1), "n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"),
    "k": Decimal("1e3"), "M": Decimal("1e6"), "G": Decimal("1e9"), "T": Decimal("1e12"),
    "P": Decimal("1e15"), "E": Decimal("1e18"),
    "Ki": Decimal(2**10), "Mi": Decimal(2**20), "Gi": Decimal(2**30),
    "Ti": Decimal(2**40), "Pi": Decimal(2**50), "Ei": Decimal(2**60),
}
_BINARY_UNITS = (("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10))
# What the API server keeps unchanged: it rounds finer amounts up to a thousandth
# ("1u" becomes "1m"), and counts thousandths in a signed 64-bit number.
SMALLEST_QUANTITY = Decimal("0.001")
LARGEST_QUANTITY = Decimal(2**63 - 1) * SMALLEST_QUANTITY
LARGEST_COUNT = int(LARGEST_QUANTITY)  # the most of anything counted in whole numbers (GPUs, pods)


def parse_quantity(text: str) -> Decimal:
    """Parse a Kubernetes quantity into an exact Decimal; ValueError if it is not one."""
    return _parse_quantity(str(text))


@functools.lru_cache(maxsize=1024)  # a listing parses the same few quantities of every job and Workload
def _parse_quantity(text: str) -> Decimal:
    match = QUANTITY_PATTERN.fullmatch(text.strip())
    if not match:
        raise ValueError(f"'{text}' is not a Kubernetes quantity (examples: 2, 500m, 4Gi)")
    digits, suffix = match.groups()
    try:
        number = Decimal(digits)
    except InvalidOperation as exc:
        raise ValueError(f"'{text}' is not a Kubernetes quantity") from exc
    with localcontext() as exact:
        exact.prec = len(digits) + 40  # room for every digit times the largest factor: no rounding
        if suffix in _SUFFIX_FACTORS:
            return number * _SUFFIX_FACTORS[suffix]
        exponent = suffix[1:].lstrip("+-")
        if len(exponent.lstrip("0")) > MAX_EXPONENT_DIGITS:
            raise ValueError(f"'{text}' is out of the range of Kubernetes quantities")
        return number.scaleb(int(suffix[1:]))


def check_quantity(text: str) -> Decimal:
    """A quantity to hand to Kubernetes, exactly as written: its amount, or ValueError with
    one sentence when the API server would refuse it or keep a different amount."""
    if not isinstance(text, str) or text != text.strip():
        raise ValueError(f"'{text}' is not a Kubernetes quantity (examples: 2, 500m, 4Gi)")
    amount = parse_quantity(text)
    if amount > LARGEST_QUANTITY:
        raise ValueError(f"'{text}' is more than Kubernetes can count (at most {LARGEST_COUNT})")
    if amount % SMALLEST_QUANTITY:
        raise ValueError(f"'{text}' is finer than Kubernetes keeps (the smallest step is a thousandth, 1m)")
    return amount


def format_quantity(amount: Decimal, binary: bool = False) -> str:
    """A Decimal as people read it: memory (`binary`) in Ki/Mi/Gi/Ti, the rest as a plain number."""
    if binary:
        for unit, size in _BINARY_UNITS:
            if amount >= size:
                value = (amount / size).quantize(Decimal("0.01")).normalize()
                return f"{format(value, 'f')}{unit}"
    return format(amount.normalize(), "f")


def human_bytes(count: int, binary: bool = True) -> str:
    """A byte count as people read it: 1.2 MiB (binary), or 1.2 MB (decimal, as registries show sizes)."""
    base, units = (1024, ("B", "KiB", "MiB", "GiB", "TiB")) if binary else (1000, ("B", "kB", "MB", "GB", "TB"))
    size = float(count)
    for unit in units:
        if size < base or unit == units[-1]:
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= base
    raise AssertionError("unreachable")
