"""Serving a model over HTTP: ``transformer serve MODEL_DIR``.

``server.serve`` checks the address and API key, loads the model and runs uvicorn;
``app.create_app`` is the FastAPI app (endpoints, limits, errors, the web page in ``page/``);
``schema`` its requests and responses; ``batcher.Batcher`` is the one worker thread that owns
the model and decodes concurrent requests together; ``middleware`` holds the body-size limit and
the access log. They need the ``serve`` extra (fastapi, uvicorn), and only the command line
imports them (``tests/test_structure.py``). What this package itself names is ``ServeConfig``,
the service's typed config, which the command line reads and which needs neither.
"""

from .config import ServeConfig

__all__ = ["ServeConfig"]
