"""What granian 2.8.7's WSGI mode does with the requests waitress + user_api/guard.py handle today
(see bench/SERVE_SERVERS.md): ambiguous framing, body streaming, idle and slow clients.

    pip install granian==2.8.7
    PYTHONPATH=$PWD python bench/serve_probe/probe_framing.py
"""
import os
import selectors
import socket
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))
from bench import servers  # noqa: E402

GRANIAN = str(Path(sys.executable).with_name("granian"))


def start(*extra):
    port = servers.free_port()
    process = subprocess.Popen([GRANIAN, "--interface", "wsgi", "--factory", "--port", str(port), "--no-ws", "--log-level", "error", *extra, "apps:echo"],
                               env=dict(os.environ, PYTHONPATH=str(HERE)), cwd=HERE)
    servers.wait_for_port(port, process)
    return process, port


def send(port, raw, wait=2.0):
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.settimeout(wait)
        s.sendall(raw)
        out = b""
        try:
            while chunk := s.recv(65536):
                out += chunk
            return out + b" <closed>"
        except socket.timeout:
            return out + b" <still open>"


def framing(port):
    print("CL+TE:", send(port, b"POST /x HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: a\r\n\r\n"))
    print("two CL:", send(port, b"POST /x HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello!"))
    print("CL 999999999, 5 bytes sent (app reads 5):", send(port, b"POST /x HTTP/1.1\r\nHost: a\r\nContent-Length: 999999999\r\n\r\nhello", wait=3))


def idle(port, seconds=45):
    conns = {"silent from connect": socket.create_connection(("127.0.0.1", port))}
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(b"GET /x HTTP/1.1\r\nHost: a\r\n\r\n")
    s.recv(65536)
    conns["idle keep-alive after one answer"] = s
    conns["partial headers"] = socket.create_connection(("127.0.0.1", port))
    conns["partial headers"].sendall(b"GET /x HTTP/1.1\r\nHo")
    conns["partial body"] = socket.create_connection(("127.0.0.1", port))
    conns["partial body"].sendall(b"POST /x HTTP/1.1\r\nHost: a\r\nContent-Length: 100\r\n\r\nab")
    started, left = time.monotonic(), set(conns)
    with selectors.DefaultSelector() as selector:
        for label, conn in conns.items():
            selector.register(conn, selectors.EVENT_READ, label)
        while left and time.monotonic() - started < seconds:
            for key, _ in selector.select(timeout=1):
                if not key.fileobj.recv(65536):
                    print(f"{key.data}: closed after {time.monotonic() - started:.1f} s")
                    selector.unregister(key.fileobj)
                    left.discard(key.data)
    for label in sorted(left):
        print(f"{label}: still open after {seconds} s")
    for conn in conns.values():
        conn.close()


def slow_bodies(port, threads):
    slow = [socket.create_connection(("127.0.0.1", port)) for _ in range(threads)]
    for s in slow:
        s.sendall(b"POST /x HTTP/1.1\r\nHost: a\r\nContent-Length: 100\r\n\r\nab")
    time.sleep(1)  # a probe, not a test: lets the slow requests reach the app's threads first
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.settimeout(10)
        s.sendall(b"GET /x HTTP/1.1\r\nHost: a\r\n\r\n")
        try:
            print(f"GET behind {threads} slow bodies ({threads} blocking threads):", s.recv(40))
        except socket.timeout:
            print(f"GET behind {threads} slow bodies ({threads} blocking threads): no answer in 10 s")
    for s in slow:
        s.close()


if __name__ == "__main__":
    process, port = start("--http1-header-read-timeout", "5000", "--blocking-threads", "2")
    try:
        framing(port)
        idle(port)
        slow_bodies(port, 2)
    finally:
        servers.stop(process)
