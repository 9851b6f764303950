"""The serializers: "pickle" (the default), "json" (tagged: Decimal,
datetime, date, time, timedelta, UUID and bytes round-trip), "bytes" (the
values are bytes, cached as they are) or an object with dumps/loads."""
import base64
import datetime
import decimal
import json
import pickle
import uuid

_TAG = "__xfetch__"  # {"__xfetch__": type, "v": text}: a value JSON has no type for


def _tagged(v):
    """json's default=: a tagged object for the types JSON lacks."""
    if isinstance(v, decimal.Decimal):
        return {_TAG: "decimal", "v": str(v)}
    if isinstance(v, datetime.datetime):  # before date: a datetime is a date
        return {_TAG: "datetime", "v": v.isoformat()}
    if isinstance(v, datetime.date):
        return {_TAG: "date", "v": v.isoformat()}
    if isinstance(v, datetime.time):
        return {_TAG: "time", "v": v.isoformat()}
    if isinstance(v, datetime.timedelta):
        return {_TAG: "timedelta", "v": [v.days, v.seconds, v.microseconds]}
    if isinstance(v, uuid.UUID):
        return {_TAG: "uuid", "v": str(v)}
    if isinstance(v, (bytes, bytearray, memoryview)):
        return {_TAG: "bytes", "v": base64.b64encode(bytes(v)).decode("ascii")}
    raise TypeError(f"Object of type {type(v).__name__} is not JSON serializable (the "
                    f"json serializer also takes Decimal, datetime, date, time, timedelta, "
                    f"UUID and bytes)")


_FROM_TAG = {
    "decimal": decimal.Decimal,
    "datetime": datetime.datetime.fromisoformat,
    "date": datetime.date.fromisoformat,
    "time": datetime.time.fromisoformat,
    "timedelta": lambda v: datetime.timedelta(days=v[0], seconds=v[1], microseconds=v[2]),
    "uuid": uuid.UUID,
    "bytes": lambda v: base64.b64decode(v.encode("ascii"), validate=True),
}


def _untagged(d):
    """json's object_hook: a tagged object back to its type."""
    if len(d) == 2 and _TAG in d and "v" in d:
        make = _FROM_TAG.get(d[_TAG])
        if make is not None:
            return make(d["v"])
    return d


def _json_dumps(v):
    """JSON, keys sorted (the same bytes for equal dicts) when they can be:
    a dict whose keys do not compare ({1: "a", "total": 2}) is written in its
    own order instead of raising TypeError (which would leave it uncached)."""
    try:
        return json.dumps(v, separators=(",", ":"), sort_keys=True, default=_tagged).encode()
    except TypeError as e:
        if "not supported between" not in str(e):
            raise
        return json.dumps(v, separators=(",", ":"), default=_tagged).encode()


def _json_loads(data):
    return json.loads(data, object_hook=_untagged)


SERIALIZERS = {
    "pickle": (lambda v: pickle.dumps(v, protocol=pickle.HIGHEST_PROTOCOL), pickle.loads),
    "json": (_json_dumps, _json_loads),
    "bytes": (None, None),
}


def _serializer(serializer):
    """(dumps, loads) for the serializer argument; (None, None) for "bytes"."""
    if isinstance(serializer, str):
        try:
            return SERIALIZERS[serializer]
        except KeyError:
            raise ValueError(f"serializer must be 'pickle', 'json', 'bytes' or an object "
                             f"with dumps/loads, not {serializer!r}") from None
    if callable(getattr(serializer, "dumps", None)) and callable(
            getattr(serializer, "loads", None)):
        return serializer.dumps, serializer.loads
    raise TypeError(f"serializer must be 'pickle', 'json', 'bytes' or an object with "
                    f"dumps/loads, not {serializer!r}")
