"""Conditional refresh, for both faces: what a loader that asked for the
previous value (previous=True) is given, and its answers UNCHANGED and
Validated(value, validator), handed to the C sink (xf_sink_previous,
xf_sink_unchanged, xf_sink_validator): C extends an unchanged entry's life
without rewriting its value."""
from __future__ import annotations

from typing import Any, NamedTuple, Optional

from ._native import ffi, lib


class _Unchanged:
    __slots__ = ()

    def __repr__(self):
        return "xfetch.UNCHANGED"

    def __reduce__(self):
        return "UNCHANGED"


UNCHANGED = _Unchanged()
"""A loader's answer "the source still has the previous value": the entry
keeps its value (not rewritten) and its life is extended as a write's
would be; the caller gets the previous value."""


class Validated:
    """A loader's value with its validator (bytes or str, 1 to 255 bytes;
    e.g. the source's ETag or version), stored with the value and given back
    to the next refresh's loader in Previous.validator."""

    __slots__ = ("value", "validator")

    def __init__(self, value: Any, validator: bytes | str):
        if isinstance(validator, str):
            validator = validator.encode()
        if not isinstance(validator, (bytes, bytearray, memoryview)):
            raise TypeError(f"a validator must be bytes or str, not {type(validator).__name__}")
        if not 1 <= len(validator) <= lib.XF_MAX_VALIDATOR:
            raise ValueError(f"a validator must be 1 to {lib.XF_MAX_VALIDATOR} bytes, "
                             f"not {len(validator)}")
        self.value, self.validator = value, bytes(validator)

    def __repr__(self):
        return f"xfetch.Validated({self.value!r}, {self.validator!r})"


class Previous(NamedTuple):
    """What a loader with previous=True is given when the cache holds a
    value for the key (else None): the value (deserialized), its validator
    (bytes, or None when it was stored without one) and its age in seconds
    (since the load that wrote it, or its last revalidation, started; None
    when unknown)."""

    value: Any
    validator: Optional[bytes]
    age: Optional[float]


def previous_of(sink):
    """The sink's previous value as (bytes, validator or None, age in s or
    None), or None when there is none."""
    data, n, age = ffi.new("void **"), ffi.new("size_t *"), ffi.new("int64_t *")
    if not lib.xf_sink_previous(sink, ffi.cast("const void **", data), n, age):
        return None
    value = ffi.unpack(ffi.cast("const char *", data[0]), n[0])
    validator = None
    if lib.xf_sink_previous_validator(sink, ffi.cast("const void **", data), n):
        validator = ffi.unpack(ffi.cast("const char *", data[0]), n[0])
    return value, validator, (age[0] / 1000 if age[0] >= 0 else None)


def call_loader(loader, sink):
    """Calls a loader (wrapped by a Codec) with the sink's previous value
    when it asked for it."""
    if getattr(loader, "wants_previous", False):
        return loader(previous_of(sink) if sink is not None else None)
    return loader()


def sink_answer(value, sink):
    """Hands UNCHANGED or a Validated's validator to the sink; returns the
    value left for the sink (None once UNCHANGED is answered)."""
    if value is UNCHANGED:
        if lib.xf_sink_unchanged(sink) != 0:
            raise ValueError("the loader returned xfetch.UNCHANGED but the cache holds no "
                             "previous value for the key (Previous was None)")
        return UNCHANGED
    if type(value) is Validated:
        v = value.validator
        lib.xf_sink_validator(sink, v, len(v))
        return value.value
    return value
