"""Property-based fuzzing of every endpoint from the app's own OpenAPI schema (schemathesis):
valid and invalid requests alike never get a 5xx, every status is one the schema documents,
every response matches its schema, and every invalid request is rejected with a 4xx."""

from __future__ import annotations

import os

import pytest

pytest.importorskip("schemathesis")
import schemathesis  # noqa: E402
from hypothesis import HealthCheck, given, settings  # noqa: E402
from schemathesis import GenerationMode  # noqa: E402
from schemathesis.checks import not_a_server_error  # noqa: E402
from schemathesis.specs.openapi.checks import (  # noqa: E402
    content_type_conformance,
    negative_data_rejection,
    response_schema_conformance,
    status_code_conformance,
)

from transformer.serve.app import create_app  # noqa: E402
from transformer.serve.config import ServeConfig  # noqa: E402

pytestmark = pytest.mark.slow  # every test here trains or starts processes

# per operation and generation mode: bounded, so that the suite stays fast; more by hand with
# ``FUZZ_EXAMPLES=1000 pytest tests/test_serve_fuzz.py``
EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "50"))
# An invalid request may also be refused for its size (413): that is a rejection too.
CONFIG = schemathesis.config.SchemathesisConfig.from_dict(
    {"checks": {"negative_data_rejection": {"expected-statuses": [400, 413, 422]}}}
)
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance,
          response_schema_conformance, negative_data_rejection]  # fmt: skip


@pytest.fixture(scope="module")
def app(torch_engine):
    # Small limits, so that generated requests reach them; a short beam keeps examples fast.
    config = ServeConfig(max_sentences=4, max_chars=60, max_beam=4, max_body_bytes=2048)
    app = create_app(torch_engine, config)
    yield app
    app.state.served.batcher.close()


def fuzz(operation, mode: GenerationMode) -> int:
    """Runs up to EXAMPLES generated requests against ``operation``; returns how many ran."""
    ran = []

    @given(case=operation.as_strategy(generation_mode=mode))
    @settings(max_examples=EXAMPLES, deadline=None, database=None, derandomize=True,
              suppress_health_check=list(HealthCheck))  # fmt: skip
    def run(case) -> None:
        ran.append(case)
        case.call_and_validate(checks=CHECKS)

    run()
    return len(ran)


def test_every_endpoint_survives_fuzzing(app):
    schema = schemathesis.openapi.from_asgi("/openapi.json", app, config=CONFIG)
    operations = [result.ok() for result in schema.get_all_operations()]
    assert {op.label for op in operations} == {
        "POST /translate", "POST /score", "POST /attention", "POST /step-through", "GET /info",
        "GET /health",
    }  # fmt: skip
    counts = {
        f"{operation.label} ({mode.value})": fuzz(operation, mode)
        for operation in operations
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE)
        if mode == GenerationMode.POSITIVE or len(operation.body)  # a GET has nothing to spoil
    }
    print("schemathesis examples per operation:", counts, "total:", sum(counts.values()))
    assert len(counts) == 10 and all(n > 0 for n in counts.values()), counts
