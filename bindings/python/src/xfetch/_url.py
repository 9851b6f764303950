"""Parses redis://, rediss:// and unix:// URLs into xf_options fields."""
import os
from urllib.parse import parse_qs, unquote, urlsplit

# redis-py's TLS names, as URL query parameters and as keywords.
SSL_NAMES = ("ssl_ca_certs", "ssl_ca_path", "ssl_certfile", "ssl_keyfile",
             "ssl_check_hostname", "ssl_cert_reqs")


def parse_url(url):
    """Returns a dict with host, port, unix_path, username, password, db,
    cluster (0 auto, 1 on, 2 off) and read_from_replicas.

    redis://[[user]:password@]host[:port][,host[:port]...][/db][?cluster=auto|on|off]
    rediss://... the same over TLS, with redis-py's ssl_ca_certs, ssl_ca_path,
        ssl_certfile, ssl_keyfile, ssl_check_hostname, ssl_cert_reqs parameters
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
    tls = head == "rediss" and bool(sep)
    if tls:  # the same URL as redis://, over TLS
        head, url = "redis", "redis://" + rest
    netloc = rest.split("/", 1)[0].split("?", 1)[0].split("#", 1)[0]
    if head == "redis" and sep and "," in netloc:  # a seed list: urlsplit refuses it
        user, at, hosts = netloc.rpartition("@")
        seeds = _seeds(hosts, url)
        url = f"redis://{user}{at}seeds{rest[len(netloc):]}"
    parts = urlsplit(url)
    query = {k: v[-1] for k, v in parse_qs(parts.query, strict_parsing=False).items()}
    unknown = set(query) - {"db", "password", "username", "cluster", "replica_reads",
                            *SSL_NAMES}
    if unknown:
        raise ValueError(f"unknown URL parameter(s): {', '.join(sorted(unknown))}")
    out = {"host": None, "port": 0, "unix_path": None,
           "username": unquote(parts.username) if parts.username else None,
           "password": unquote(parts.password) if parts.password is not None else None,
           "db": 0, "cluster": _choice(query, "cluster", {"auto": 0, "on": 1, "off": 2}),
           "read_from_replicas": _choice(query, "replica_reads", {"no": 0, "yes": 1}),
           "tls": tls, "ssl": {k: query[k] for k in SSL_NAMES if k in query}}
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
        raise ValueError(f"unsupported URL scheme {parts.scheme!r} "
                         "(use redis://, rediss:// or unix://)")
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


def tls_options(fields, **keywords):
    """The xf_tls_options fields (str values, for the caller to encode) for a
    parsed URL and redis-py's ssl_* keywords (a keyword not None wins over
    the URL's parameter); None for plain TCP. Verification is on unless
    ssl_cert_reqs is "none"; the name is checked whenever the certificate is.
    Raises ValueError for ssl_* without rediss://, a bad value, or a file
    that cannot be read."""
    given = dict(fields.get("ssl", {}))
    given.update({k: v for k, v in keywords.items() if v is not None})
    if not fields.get("tls"):
        if given:
            raise ValueError(f"{', '.join(sorted(given))} need(s) a rediss:// URL")
        return None
    reqs = given.get("ssl_cert_reqs", "required")
    reqs = {"CERT_REQUIRED": "required", "CERT_NONE": "none"}.get(getattr(reqs, "name", reqs),
                                                                  reqs)
    if reqs not in ("required", "none"):
        raise ValueError(f"ssl_cert_reqs must be 'required' or 'none', not {reqs!r}")
    check = given.get("ssl_check_hostname", True)
    if isinstance(check, str):
        if check.lower() not in ("true", "false", "yes", "no", "1", "0"):
            raise ValueError(f"ssl_check_hostname must be true or false, not {check!r}")
        check = check.lower() in ("true", "yes", "1")
    if reqs == "required" and not check:
        raise ValueError("ssl_check_hostname=False needs ssl_cert_reqs='none': xfetch checks "
                         "the host name whenever it verifies the certificate")
    out = {"ca_file": given.get("ssl_ca_certs"), "ca_dir": given.get("ssl_ca_path"),
           "cert_file": given.get("ssl_certfile"), "key_file": given.get("ssl_keyfile"),
           "no_verify": int(reqs == "none")}
    for name, path in out.items():
        if isinstance(path, str) and not os.access(path, os.R_OK):
            raise ValueError(f"TLS {name.replace('_', ' ')} {path!r} cannot be read")
    return out
