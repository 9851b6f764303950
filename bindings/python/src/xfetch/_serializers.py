"""The decorators' serializers: "pickle", "json" or an object with
dumps/loads."""
import json
import pickle


def _json_dumps(v):
    """JSON, keys sorted (the same bytes for equal dicts) when they can be:
    a dict whose keys do not compare ({1: "a", "total": 2}) is written in its
    own order instead of raising TypeError (which would leave it uncached)."""
    try:
        return json.dumps(v, separators=(",", ":"), sort_keys=True).encode()
    except TypeError:
        return json.dumps(v, separators=(",", ":")).encode()  # not JSON-able: raises


SERIALIZERS = {
    "pickle": (lambda v: pickle.dumps(v, protocol=pickle.HIGHEST_PROTOCOL), pickle.loads),
    "json": (_json_dumps, json.loads),
}


def _serializer(serializer):
    """(dumps, loads) for the serializer argument; (None, None) for bytes."""
    if serializer is None:
        return None, None
    if isinstance(serializer, str):
        try:
            return SERIALIZERS[serializer]
        except KeyError:
            raise ValueError(f"serializer must be 'pickle', 'json' or an object with "
                             f"dumps/loads, not {serializer!r}") from None
    if callable(getattr(serializer, "dumps", None)) and callable(
            getattr(serializer, "loads", None)):
        return serializer.dumps, serializer.loads
    raise TypeError("serializer must be 'pickle', 'json' or an object with dumps/loads")
