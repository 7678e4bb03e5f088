"""WSGI apps for measure.py: `make` is the very app `registry-gen serve` runs (AccessLog around\ncreate_server_app); the others bound it (hello-world, a bare file read, an in-memory cache, a lean\nprototype of the package-document path). `echo` is for the framing probes (probe_framing.py)."""
import os
from pathlib import Path
from registry_gen.settings import load_settings
from user_api.access_log import AccessLog, configure_server_logging
from user_api.server import create_server_app
from user_api.store import open_user_store

def make():
    configure_server_logging()
    settings = load_settings(Path(os.environ["SF_CONFIG"]))
    store = open_user_store(settings)
    return AccessLog(create_server_app(settings, store, static=True, refresher=None))

def hello():
    def app(environ, start_response):
        body = b"hello"
        start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", "5")])
        return [body]
    return app

def minimal():
    """Floor of any Python app: open, fstat, read, three headers."""
    root = os.environ["SF_OUT"]
    def app(environ, start_response):
        target = os.path.join(root, environ["PATH_INFO"].lstrip("/"), "index.html")
        with open(target, "rb") as handle:
            stat = os.fstat(handle.fileno())
            body = handle.read()
        start_response("200 OK", [("Content-Type", "application/json"), ("Content-Length", str(len(body))),
                                  ("ETag", f'"{stat.st_size:x}-{stat.st_mtime_ns:x}"')])
        return [body]
    return app

def cached():
    """Floor with an in-memory cache: one stat, a dict lookup."""
    root = os.environ["SF_OUT"]
    memory = {}
    def app(environ, start_response):
        target = os.path.join(root, environ["PATH_INFO"].lstrip("/"), "index.html")
        stat = os.stat(target)
        key = (target, stat.st_mtime_ns, stat.st_size)
        hit = memory.get(key)
        if hit is None:
            with open(target, "rb") as handle:
                body = handle.read()
            hit = memory[key] = ([("Content-Type", "application/json"), ("Content-Length", str(len(body))),
                                  ("ETag", f'"{stat.st_size:x}-{stat.st_mtime_ns:x}"')], body)
        start_response("200 OK", list(hit[0]))
        return [hit[1]]
    return app

def full_cached_log():
    """The full app, for comparison (same as make)."""
    return make()

def raw():
    """The app without the access log."""
    settings = load_settings(Path(os.environ["SF_CONFIG"]))
    return create_server_app(settings, open_user_store(settings), static=True, refresher=None)

def lean():
    """A lean static path with the same answers for a package document GET (prototype, strings not
    pathlib, two stats), access log line included; falls back to the full app otherwise."""
    import time
    from email.utils import formatdate
    from user_api.access_log import access_line
    import user_api.access_log as al
    full = raw()
    configure_server_logging()
    root = os.environ["SF_OUT"]
    dates = {}
    def app(environ, start_response):
        started = time.perf_counter()
        path = environ.get("PATH_INFO") or "/"
        if environ.get("REQUEST_METHOD") != "GET" or path.startswith("/-/") or "/." in path or path == "/":
            return full(environ, start_response)
        folder = root + path
        accept = environ.get("HTTP_ACCEPT") or ""
        name = "/abbreviated.json" if "application/vnd.npm.install-v1+json" in accept else "/index.html"
        target = folder + name
        gz = "gzip" in (environ.get("HTTP_ACCEPT_ENCODING") or "")
        try:
            handle = open(target + ".gz" if gz else target, "rb")
        except OSError:
            return full(environ, start_response)
        with handle:
            stat = os.fstat(handle.fileno())
            body = handle.read()
        etag = f'"{stat.st_size:x}-{stat.st_mtime_ns:x}"'
        modified = dates.get(stat.st_mtime)
        if modified is None:
            modified = dates[stat.st_mtime] = formatdate(stat.st_mtime, usegmt=True)
        start_response("200 OK", [("ETag", etag), ("Last-Modified", modified), ("Cache-Control", "no-cache"),
            ("X-Content-Type-Options", "nosniff"), ("Vary", "Accept, Accept-Encoding"),
            ("Content-Type", "application/json"), ("Content-Length", str(len(body)))])
        al._sink(access_line(environ, "200", len(body), time.time(), time.perf_counter() - started))
        return [body]
    return app

def echo():
    """Reports what the app saw of a request body (for framing probes)."""
    def app(environ, start_response):
        seen = {k: environ.get(k) for k in ("CONTENT_LENGTH", "HTTP_TRANSFER_ENCODING", "HTTP_CONTENT_LENGTH")}
        head = environ["wsgi.input"].read(5)
        body = repr((seen, head)).encode()
        start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
        return [body]
    return app
