"""A real uvicorn serving the evaluation service on a loopback port, in a thread, for the client and contract tests."""

from __future__ import annotations

import contextlib
import threading
import time

from evaluator.scale.service import create_app

TOKEN = "client-test-token"


@contextlib.contextmanager
def serving(evaluator, token: str = TOKEN, port: int = 0):
    """uvicorn on 127.0.0.1 (a free port unless given), in a thread; yields the base URL and the app."""
    import uvicorn

    app = create_app(evaluator, token)
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="off",
                                           timeout_graceful_shutdown=1))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    end = time.monotonic() + 30
    while not (server.started and server.servers):
        assert time.monotonic() < end and thread.is_alive(), "uvicorn did not start"
        time.sleep(0.02)
    bound_port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{bound_port}", app
    finally:
        server.should_exit = True
        thread.join(10)
