"""schemathesis against the service's own OpenAPI document: no 5xx, and every response
(status, body schema) is one the document declares. Bounded and deterministic: 30 examples
per operation, hypothesis derandomized (a fixed seed)."""

from __future__ import annotations

import pytest
import schemathesis
from _service import filled_store  # noqa: F401
from hypothesis import HealthCheck, given, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    response_schema_conformance,
    status_code_conformance,
)

from rocke_aot.service.app import create_app

OPERATIONS = [("GET", "/v1/blobs/{sha256}"), ("HEAD", "/v1/blobs/{sha256}"), ("GET", "/v1/kernels/{key}"),
              ("HEAD", "/v1/kernels/{key}"), ("GET", "/v1/kernels/{key}/meta"), ("GET", "/v1/kernels"),
              ("POST", "/v1/select"), ("PUT", "/v1/kernels/{key}"), ("GET", "/healthz"), ("GET", "/metrics"),
              ("GET", "/v1/trust/{name}"), ("PUT", "/v1/trust/{name}"), ("GET", "/v1/triton/{key}"),
              ("PUT", "/v1/triton/{key}")]


@pytest.fixture(scope="module")
def api(tmp_path_factory, kernel_bundle):
    store = filled_store(tmp_path_factory.mktemp("schema") / "schema.sqlite", kernel_bundle[1])
    app = create_app(store, token="schemathesis-token")
    yield schemathesis.openapi.from_asgi("/openapi.json", app)
    store.close()


def test_every_operation_is_exercised(api):
    found = {(r.ok().method.upper(), r.ok().path) for r in api.get_all_operations()}
    assert found == set(OPERATIONS)


@pytest.mark.parametrize("method,path", OPERATIONS, ids=[f"{m} {p}" for m, p in OPERATIONS])
def test_operation_conforms_to_the_document(api, method, path):
    op = next(r.ok() for r in api.get_all_operations() if (r.ok().method.upper(), r.ok().path) == (method, path))
    statuses: list[int] = []

    @given(case=op.as_strategy())
    @settings(max_examples=30, derandomize=True, deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
    def run(case):
        r = case.call_and_validate(checks=[not_a_server_error, status_code_conformance, response_schema_conformance])
        statuses.append(r.status_code)

    run()
    assert statuses and all(s < 500 for s in statuses)
