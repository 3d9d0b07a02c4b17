"""Serving a model over HTTP: ``transformer serve MODEL_DIR``.

``server.serve`` checks the address and API key, loads the model and runs uvicorn;
``app.create_app`` is the FastAPI app (endpoints, limits, errors, the web page in ``page/``);
``batcher.Batcher`` is the one worker thread that owns the model and decodes concurrent
requests together; ``middleware`` holds the body-size limit and the access log. Needs the
``serve`` extra (fastapi, uvicorn).
"""

from .app import create_app
from .batcher import Batched, Batcher, QueueFull, ShuttingDown
from .server import serve

__all__ = ["Batched", "Batcher", "QueueFull", "ShuttingDown", "create_app", "serve"]
