"""The app on a real waitress server, on 127.0.0.1 and an ephemeral port, in a background thread."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from waitress.server import create_server


@contextmanager
def serve(app: Callable[..., Any], **adjustments: Any) -> Iterator[str]:
    """Yields the base URL. The socket listens before the thread starts, so no waiting is needed."""
    server = create_server(app, host="127.0.0.1", port=0, threads=4, **adjustments)
    thread = threading.Thread(target=server.run, name="waitress-test", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.effective_port}"
    finally:
        done = threading.Event()

        def close_everything() -> None:
            # Runs on the server's own loop thread: closing every dispatcher empties the map,
            # which ends asyncore.loop.
            for dispatcher in list(server._map.values()):
                dispatcher.close()
            done.set()

        server.trigger.pull_trigger(close_everything)
        thread.join(timeout=30)
        server.task_dispatcher.shutdown()
        assert done.is_set() and not thread.is_alive(), "waitress did not stop"
