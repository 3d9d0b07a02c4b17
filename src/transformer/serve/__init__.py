"""Serving a model over HTTP: ``transformer serve MODEL_DIR``.

``server.serve`` checks the address and API key, loads the model and runs uvicorn;
``app.create_app`` is the FastAPI app (endpoints, limits, errors, the web page in ``page/``);
``batcher.Batcher`` is the one worker thread that owns the model and decodes concurrent
requests together; ``middleware`` holds the body-size limit and the access log; ``config``
is ``ServeConfig``, the service's typed config. Needs the ``serve`` extra (fastapi, uvicorn);
the names below are imported on first use, so ``serve.config`` needs neither.
"""

from __future__ import annotations

import importlib

_WHERE = {"create_app": "app", "Batched": "batcher", "Batcher": "batcher",
          "QueueFull": "batcher", "ShuttingDown": "batcher", "serve": "server",
          "ServeConfig": "config"}  # fmt: skip

__all__ = sorted(_WHERE)


def __getattr__(name: str) -> object:
    """``from transformer.serve import X`` imports X's module (and FastAPI) only then."""
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f".{_WHERE[name]}", __name__), name)
