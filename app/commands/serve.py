"""CLI command: `krl serve` puts the evaluator (this machine's pool, or a Ray cluster) behind an HTTP API for
trainers and agents that are not ours. Top-level imports stay light: the service is imported inside the command."""

from __future__ import annotations

import os
import stat
from typing import Optional

import typer

SERVICE_KEEP_ALIVE_S = 60  # seconds an idle client connection stays open (clients drop theirs sooner)


def read_token(path: str) -> str:
    """The service token from a file (first line, stripped); a missing, empty or world-readable file is refused."""
    from core.errors import KrlError

    try:
        info = os.stat(path)
        with open(path, encoding="utf-8") as handle:
            token = handle.readline().strip()
    except OSError as exc:
        raise KrlError(f"cannot read the token file {path}: {exc.strerror}. Create it, e.g. "
                       f"`python -c 'import secrets; print(secrets.token_urlsafe(32))' > {path}; chmod 600 {path}`.") from None
    if not token:
        raise KrlError(f"the token file {path} is empty: put one line of random text in it.")
    if info.st_mode & stat.S_IROTH:
        raise KrlError(f"the token file {path} is readable by every user: chmod 600 {path}.")
    return token


def serve(
    port: int = typer.Option(8470, "--port", "-p", help="TCP port to listen on."),
    token_file: str = typer.Option(..., "--token-file", help="File whose first line is the bearer token clients send."),
    ray_address: Optional[str] = typer.Option(
        None, "--ray", metavar="ADDRESS",
        help="Evaluate on Ray: --ray local starts Ray here; --ray auto joins this machine's cluster; "
             "--ray ray://HOST:10001 connects to a remote one."),
    host: str = typer.Option("127.0.0.1", "--host", help="Address to bind (0.0.0.0 exposes it to the network)."),
    devices: str = typer.Option("auto", "--devices", help="Local pool: auto | cpu | comma-separated GPU indices."),
    cpu_workers: int = typer.Option(2, "--cpu-workers", help="Worker processes in CPU mode (per Ray actor with --ray)."),
    max_pending: int = typer.Option(2000, "--max-pending", help="Requests in progress before answering 503."),
    results_db: Optional[str] = typer.Option(
        None, "--results-db", metavar="PATH",
        help="SQLite file that keeps accepted requests and their results across restarts (default "
             "~/.cache/kernelrl/serve/results-PORT.sqlite, created mode 600). Restarted on the same file, the "
             "service answers finished ids from it and evaluates the unfinished ones again, once each."),
    keep_results: int = typer.Option(50_000, "--keep-results", help="Finished results kept in --results-db (the "
                                     "oldest-finished go first; a forgotten id is evaluated again if re-sent)."),
) -> None:
    """Serve the evaluator over HTTP: POST /v1/evaluate, /v1/evaluate/batch; GET /v1/results/{id}, /v1/health,
    /v1/workers, /metrics. Every request needs `Authorization: Bearer <token>`. Accepted requests and results are
    kept in --results-db, so a restart (even after a kill) loses none and evaluates none twice."""
    from core.errors import KrlError

    token = read_token(token_file)
    port_free_or_fail(host, port)
    try:
        import uvicorn

        from evaluator.api import EvaluatorError
        from evaluator.factory import open_evaluator
        from evaluator.scale.result_store import ResultStore
        from evaluator.scale.service import create_app
    except ImportError as exc:
        raise KrlError(f"krl serve needs {exc.name}: pip install 'kernelrl[serve]'.") from None
    store_path = os.path.expanduser(results_db or default_results_db(port))
    try:  # before the evaluator: a store in use or damaged fails in a second, not after the workers started
        store = ResultStore(store_path, keep_results=keep_results)
    except EvaluatorError as exc:
        raise KrlError(str(exc)) from None
    options: dict = {"cpu_workers": cpu_workers}
    if devices not in ("auto", "cpu"):
        options["devices"] = [d.strip() for d in devices.split(",") if d.strip()]
    else:
        options["devices"] = devices
    try:
        if ray_address:
            if ray_address.startswith("-"):
                raise KrlError(f"--ray needs an address (local, auto or ray://HOST:PORT), not {ray_address!r}.")
            target = ray_address if ray_address.startswith("ray://") else f"ray://{ray_address}"
            options.pop("devices")  # each actor owns the GPU Ray gave it
            evaluator = open_evaluator(target, evaluator_options=options)
        else:
            evaluator = open_evaluator("local", **options)
    except EvaluatorError as exc:
        store.close()
        raise KrlError(f"the evaluator could not start: {exc}") from None
    try:  # hands the store's unfinished requests to the evaluator before serving
        app = create_app(evaluator, token, store=store, max_pending=max_pending)
    except EvaluatorError as exc:
        store.close()
        evaluator.close()
        raise KrlError(f"the service could not start: {exc}") from None
    service = app.state.service
    if host not in ("127.0.0.1", "localhost", "::1"):
        typer.echo(f"warning: binding {host} makes the service reachable from the network with the token as its only "
                   "guard and no TLS: put it behind a TLS proxy or keep it on a private network.", err=True)
    typer.echo(f"krl serve: http://{host}:{port} over {ray_address and 'Ray ' + ray_address or 'the local pool'} "
               f"({', '.join(evaluator.devices)}); results in {store_path}"
               + (f"; {service.counters['recovered']} unfinished request(s) from it evaluated again"
                  if service.counters["recovered"] else ""), err=True)
    try:
        # Idle connections outlive the clients' own keep-alive (evaluator/scale/client.py): with both at 5 s, a client
        # now and then reused a connection the service closed that instant and read a reset (test_serve_restart).
        uvicorn.run(app, host=host, port=port, log_level="warning", timeout_graceful_shutdown=5,
                    timeout_keep_alive=SERVICE_KEEP_ALIVE_S)
    finally:
        service.close()  # before the evaluator: what is still in progress is handed over again at the next start
        evaluator.close()


def port_free_or_fail(host: str, port: int) -> None:
    """KrlError (exit 2) when host:port cannot be bound, before the evaluator starts or "serving" is printed."""
    import socket

    from core.errors import KrlError

    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise KrlError(f"--host {host}: {exc.strerror}.") from None
    family, kind, proto, _, address = infos[0]
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds: TIME_WAIT is not busy
        try:
            probe.bind(address)
        except OSError as exc:
            raise KrlError(f"cannot listen on {host}:{port}: {exc.strerror}. Is another `krl serve` running there? "
                           "Pick another --port.") from None


def default_results_db(port: int) -> str:
    """One store per port under the user's kernelrl cache folder: a restart on the same port finds its work."""
    return os.path.join(os.path.expanduser("~"), ".cache", "kernelrl", "serve", f"results-{port}.sqlite")


def register(app: typer.Typer) -> None:
    """Add this module's commands to the `krl` app."""
    app.command("serve")(serve)
