"""The service's routes, one router per resource (create_app in service/app.py includes them):

    blobs.py     GET|HEAD /v1/blobs/{sha256}        code objects by content
    kernels.py   GET|HEAD /v1/kernels/{key}, GET /v1/kernels/{key}/meta, GET /v1/kernels
    publish.py   PUT /v1/kernels/{key}              a code object under its key (bearer token)
    select.py    POST /v1/select                    ranked candidates for a problem
    ops.py       GET /healthz, GET /metrics

Each reads what the app shares from ``app.state.service`` (service/state.py) and its inputs
through service/fields.py (parsed once, FieldError on a bad one); the signed metadata
(service/trust.py) and the Triton entries (service/triton.py) install their own routes.
"""
