"""``transformer serve``: check the address and the key, load the model, run uvicorn.

Everything that can be refused is refused before the model is loaded: an address other than
loopback without an API key, and an address or port that cannot be listened on (in use, not
this machine's). The socket is bound here and handed to uvicorn, so ``--port 0`` works: the
port the system chose is in the line printed on stderr.

A connection that holds no complete request ``serve.idle_timeout`` seconds after it opened or
after its last answer is closed (``_closing_idle``): uvicorn's own keep-alive timer starts only
after a first answer and starts again at every byte, so a client that connected and sent
nothing, or sent its headers a byte at a time, was held for as long as it liked. The body has
its own limit, ``serve.body_timeout`` (middleware.py).

SIGTERM or Ctrl-C stops the server gracefully: uvicorn stops accepting connections, waits for
the requests in flight to be answered, then the app's shutdown finishes what the worker still
has queued; the process exits 0.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

import uvicorn

from ..config import RuntimeConfig
from ..errors import UserError
from ..inference.compiled import warm_up
from ..inference.engine import TorchEngine, load_engine
from .config import API_KEY_ENV, ServeConfig, api_key_problem
from .middleware import access_log


def serve(
    model_dir: str | Path,
    checkpoint: str | None = None,
    config: ServeConfig = ServeConfig(),  # noqa: B008 (frozen, so sharing it is safe)
    runtime: RuntimeConfig = RuntimeConfig(),  # noqa: B008
    decode: dict | None = None,
    engine: str = "torch",
) -> None:
    """Serves a model directory (or a CTranslate2 export) over HTTP until SIGTERM or Ctrl-C.

    Args:
        config: address, API key (default: ``$TRANSFORMER_API_KEY``) and limits.
        runtime: the device and precision to translate with.
        decode: DecodeConfig fields on top of the model's own: the default search.
        engine: ``torch`` (ours) or ``ctranslate2`` (inference/engine.py).
    """
    from .app import create_app

    config = with_api_key(config, os.environ)
    listener = listen(config.host, config.port)
    try:
        served = load_engine(model_dir, engine, checkpoint, runtime, **(decode or {}))
        if isinstance(served, TorchEngine):  # compiled now, not at the first request
            warm_up(served.translate, served.model)
        app = create_app(served, config)
    except BaseException:
        listener.close()
        raise
    server = uvicorn.Server(uvicorn_config(app, config))
    host, port = listener.getsockname()[:2]
    url = f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"
    key = "an API key required" if config.api_key else "no API key"
    print(f"transformer serve: {served.path} ({served.name}) on {served.device}, {key}; "
          f"listening on {url}",
          file=sys.stderr, flush=True)  # fmt: skip
    with _access_lines_on_stderr(), _signals_stop_quietly():
        server.run(sockets=[listener])


def with_api_key(config: ServeConfig, environ: os._Environ | dict) -> ServeConfig:
    """``config`` with its API key from the environment when none was given; refused (one
    line, before anything is loaded) when the address is not loopback and there is no key."""
    if config.api_key is None and environ.get(API_KEY_ENV):
        if problem := api_key_problem(environ[API_KEY_ENV]):
            raise UserError(f"the environment variable {API_KEY_ENV} {problem}")
        config = replace(config, api_key=environ[API_KEY_ENV])
    if config.api_key is None and not config.on_loopback:
        raise UserError(
            f"--host {config.host} is reachable from other machines: give an API key with "
            f"--api-key KEY or the environment variable {API_KEY_ENV} (clients send it as "
            "'Authorization: Bearer KEY'), or serve on 127.0.0.1"
        )
    return config


def listen(host: str, port: int) -> socket.socket:
    """A socket listening on ``host:port``, or a one-line error that names them."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
        sock = socket.socket(family, kind, proto)
    except OSError as error:
        raise UserError(f"cannot listen on --host {host!r}: {error.strerror or error}") from None
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(2048)
    except OSError as error:
        sock.close()
        raise UserError(f"cannot listen on {host} port {port}: {error.strerror or error}") from None
    sock.set_inheritable(True)
    return sock


def uvicorn_config(app: object, config: ServeConfig) -> uvicorn.Config:
    """How uvicorn runs ``app``: our access log instead of its own, a graceful shutdown that
    lets the requests in flight finish, and connections closed when idle (``_closing_idle``)."""
    from uvicorn.protocols.http.auto import AutoHTTPProtocol

    return uvicorn.Config(app, log_config=None, log_level="warning", access_log=False,
                          timeout_graceful_shutdown=int(config.timeout) + 5,
                          http=_closing_idle(AutoHTTPProtocol),
                          timeout_keep_alive=config.idle_timeout)  # fmt: skip


def _closing_idle(protocol: type) -> type:
    """uvicorn's HTTP ``protocol`` closing a connection that has no complete request within its
    keep-alive timeout (``serve.idle_timeout``) of opening or of its last answer."""

    class ClosingIdle(protocol):  # type: ignore[misc, valid-type]
        def connection_made(self, transport: asyncio.Transport) -> None:
            super().connection_made(transport)
            self._idle = self.loop.call_later(self.timeout_keep_alive, self._close_if_idle)

        def on_response_complete(self) -> None:
            super().on_response_complete()
            self._idle.cancel()
            self._idle = self.loop.call_later(self.timeout_keep_alive, self._close_if_idle)

        def connection_lost(self, exc: Exception | None) -> None:
            self._idle.cancel()
            super().connection_lost(exc)

        def _close_if_idle(self) -> None:
            waiting = self.cycle is None or self.cycle.response_complete  # no request under way
            if waiting and not self.transport.is_closing():
                self.transport.close()

    return ClosingIdle


@contextmanager
def _access_lines_on_stderr() -> Iterator[None]:
    """The access log's JSON lines on stderr, as they are."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(message)s"))
    access_log.addHandler(handler)
    access_log.setLevel(logging.INFO)
    access_log.propagate = False
    try:
        yield
    finally:
        access_log.removeHandler(handler)
        access_log.propagate = True


@contextmanager
def _signals_stop_quietly() -> Iterator[None]:
    """uvicorn catches SIGINT and SIGTERM itself, shuts down gracefully, and then raises the
    signal again for the handler that was there before it (the command line's, which would
    end with exit code 130 / 143). A server stopped on purpose has done its job: that second
    signal is ignored here, so the exit code is 0."""
    handled = (signal.SIGINT, signal.SIGTERM)
    previous = {sig: signal.signal(sig, signal.SIG_IGN) for sig in handled}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
