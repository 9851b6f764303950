"""Parses redis:// and unix:// URLs into xf_options fields."""
from urllib.parse import parse_qs, unquote, urlsplit


def parse_url(url):
    """Returns a dict with host, port, unix_path, username, password, db,
    cluster (0 auto, 1 on, 2 off) and read_from_replicas.

    redis://[[user]:password@]host[:port][,host[:port]...][/db][?cluster=auto|on|off]
    unix://[[user]:password@]/path/to/socket[?db=N]
    Several hosts are seeds: the first that answers is used; a Redis Cluster
    (detected, or cluster=on) is mapped from it. ?replica_reads=yes sends a
    cluster's reads to replicas.
    Raises TypeError for a non-str url, ValueError for a malformed one.
    """
    if not isinstance(url, str):
        raise TypeError(f"url must be a str, not {type(url).__name__}")
    seeds = None
    head, sep, rest = url.partition("://")
    netloc = rest.split("/", 1)[0].split("?", 1)[0].split("#", 1)[0]
    if head == "redis" and sep and "," in netloc:  # a seed list: urlsplit refuses it
        user, at, hosts = netloc.rpartition("@")
        seeds = _seeds(hosts, url)
        url = f"redis://{user}{at}seeds{rest[len(netloc):]}"
    parts = urlsplit(url)
    query = {k: v[-1] for k, v in parse_qs(parts.query, strict_parsing=False).items()}
    unknown = set(query) - {"db", "password", "username", "cluster", "replica_reads"}
    if unknown:
        raise ValueError(f"unknown URL parameter(s): {', '.join(sorted(unknown))}")
    out = {"host": None, "port": 0, "unix_path": None,
           "username": unquote(parts.username) if parts.username else None,
           "password": unquote(parts.password) if parts.password is not None else None,
           "db": 0, "cluster": _choice(query, "cluster", {"auto": 0, "on": 1, "off": 2}),
           "read_from_replicas": _choice(query, "replica_reads", {"no": 0, "yes": 1})}
    if "username" in query:
        out["username"] = query["username"]
    if "password" in query:
        out["password"] = query["password"]
    db = query.get("db")
    if parts.scheme == "redis":
        if seeds:
            out["host"], out["port"] = seeds, 6379
        else:
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


def _choice(query, name, choices):
    v = query.get(name)
    if v is None:
        return 0
    if v not in choices:
        raise ValueError(f"{name} must be one of {', '.join(choices)}, not {v!r}")
    return choices[v]


def _seeds(hosts, url):
    """Checks a comma-separated host[:port] list and returns it for xf_options.host."""
    seeds = []
    for seed in hosts.split(","):
        parts = urlsplit("redis://" + seed)
        try:
            port = parts.port or 6379
        except ValueError as e:
            raise ValueError(f"bad port in {url!r}") from e
        if not parts.hostname:
            raise ValueError(f"empty host in {url!r}")
        host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
        seeds.append(f"{host}:{port}")
    return ",".join(seeds)
