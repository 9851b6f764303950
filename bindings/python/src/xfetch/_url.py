"""Parses redis:// and unix:// URLs into xf_options fields."""
from urllib.parse import parse_qs, unquote, urlsplit


def parse_url(url):
    """Returns a dict with host, port, unix_path, username, password, db.

    redis://[[user]:password@]host[:port][/db]
    unix://[[user]:password@]/path/to/socket[?db=N]
    Raises TypeError for a non-str url, ValueError for a malformed one.
    """
    if not isinstance(url, str):
        raise TypeError(f"url must be a str, not {type(url).__name__}")
    parts = urlsplit(url)
    query = {k: v[-1] for k, v in parse_qs(parts.query, strict_parsing=False).items()}
    unknown = set(query) - {"db", "password", "username"}
    if unknown:
        raise ValueError(f"unknown URL parameter(s): {', '.join(sorted(unknown))}")
    out = {"host": None, "port": 0, "unix_path": None,
           "username": unquote(parts.username) if parts.username else None,
           "password": unquote(parts.password) if parts.password is not None else None,
           "db": 0}
    if "username" in query:
        out["username"] = query["username"]
    if "password" in query:
        out["password"] = query["password"]
    db = query.get("db")
    if parts.scheme == "redis":
        if not parts.hostname:
            raise ValueError(f"no host in {url!r}")
        out["host"] = parts.hostname
        try:
            out["port"] = parts.port or 6379
        except ValueError as e:
            raise ValueError(f"bad port in {url!r}") from e
        path = parts.path.strip("/")
        if path:
            db = path
    elif parts.scheme == "unix":
        if not parts.path:
            raise ValueError(f"no socket path in {url!r}")
        out["unix_path"] = unquote(parts.path)
    else:
        raise ValueError(f"unsupported URL scheme {parts.scheme!r} (use redis:// or unix://)")
    if db is not None:
        if not db.isdigit():
            raise ValueError(f"db must be a non-negative integer, not {db!r}")
        out["db"] = int(db)
    if out["password"] is None and out["username"]:
        raise ValueError("a URL user needs a password (user:password@)")
    return out
