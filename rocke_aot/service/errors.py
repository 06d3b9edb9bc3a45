"""Errors -> HTTP answers, in one table: one handler per error class.

    rocke_aot.errors                      HTTP   body: ErrorBody(error, message, field?, accepted?)
    FieldError (SpecError: a named field)  422   field + accepted values
    LaneError, SpecError, CodeObjectError,
      AdmissionError, CapabilityError      422
    NotFoundError                          404
    TrustError (signed metadata refused)   422   RollbackError 409
    IntegrityError                         500   counted in metrics, logged; the bytes never leave
    SchemaVersionError                     503
    CacheAccessError (store gone, replaced,
      unreachable, unreadable)             503
    sqlalchemy DBAPIError (store down)     503   StoreUnavailable; the driver's text is only logged
    CacheError (other)                     500
    service: Unauthorized 401, ReadOnly 403, Conflict 409, TooLarge 413
    pydantic RequestValidationError        422   field = the first error's location
    starlette HTTPException (404/405 ...)  its status

The most specific class wins (handlers are looked up along the exception's MRO).
"""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from sqlalchemy.exc import DBAPIError
from starlette.exceptions import HTTPException as StarletteHTTPException

from rocke_aot.errors import (  # noqa: F401  (re-exported)
    AdmissionError,
    CacheAccessError,
    CacheError,
    CapabilityError,
    CodeObjectError,
    Conflict,
    IntegrityError,
    LaneError,
    NotFoundError,
    ReadOnly,
    RockeError,
    RollbackError,
    SchemaVersionError,
    ServiceError,
    SpecError,
    TooLarge,
    TrustError,
    Unauthorized,
)

log = logging.getLogger("rocke_aot.service")


class FieldError(SpecError):
    """A request field is malformed or names something unknown; says which and what is accepted."""

    def __init__(self, field: str, message: str, accepted: list[str] | tuple[str, ...] | None = None):
        super().__init__(message)
        self.field = field
        self.accepted = list(accepted) if accepted is not None else None


STATUS: dict[type[Exception], int] = {
    FieldError: 422,
    LaneError: 422,
    SpecError: 422,
    CodeObjectError: 422,
    AdmissionError: 422,
    CapabilityError: 422,
    RollbackError: 409,
    TrustError: 422,
    NotFoundError: 404,
    IntegrityError: 500,
    SchemaVersionError: 503,
    CacheAccessError: 503,
    CacheError: 500,
    RockeError: 500,
}


def body(error: str, message: str, field: str | None = None, accepted: list[str] | None = None) -> dict:
    out: dict = {"error": error, "message": message}
    if field is not None:
        out["field"] = field
    if accepted is not None:
        out["accepted"] = accepted
    return out


def install(app: FastAPI, on_integrity=None) -> None:
    """Register the handlers; ``on_integrity(exc)`` is called for every IntegrityError."""

    def make(status: int):
        async def handler(request: Request, exc: Exception) -> JSONResponse:
            if isinstance(exc, IntegrityError):
                log.error("refused a corrupt blob on %s %s: %s", request.method, request.url.path, exc)
                if on_integrity:
                    on_integrity(exc)
            elif status >= 500:
                log.error("%s on %s %s: %s", type(exc).__name__, request.method, request.url.path, exc)
            return JSONResponse(body(type(exc).__name__, str(exc), getattr(exc, "field", None),
                                     getattr(exc, "accepted", None)), status_code=status)
        return handler

    for cls, status in STATUS.items():
        app.add_exception_handler(cls, make(status))
    for cls in (Unauthorized, ReadOnly, Conflict, TooLarge):
        app.add_exception_handler(cls, make(cls.status))

    # Starlette types a handler as taking any Exception; it calls each with its own class only
    async def validation(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError), "registered for RequestValidationError only"
        errs = exc.errors()
        first = errs[0] if errs else {}
        loc = ".".join(str(p) for p in first.get("loc", ()))
        if first.get("type") == "json_invalid":  # loc is (body, byte offset): name the body
            ctx = first.get("ctx", {}).get("error", "")
            return JSONResponse(body("RequestValidationError", f"malformed JSON body: {ctx or first.get('msg')} "
                                     f"(at byte {first.get('loc', ('', '?'))[-1]})", "body"), status_code=422)
        msg = "; ".join(f"{'.'.join(str(p) for p in e.get('loc', ()))}: {e.get('msg')}" for e in errs[:5])
        return JSONResponse(body("RequestValidationError", msg or "invalid request", loc or None), status_code=422)

    async def http(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, StarletteHTTPException), "registered for HTTPException only"
        names = {404: "NotFound", 405: "MethodNotAllowed"}
        return JSONResponse(body(names.get(exc.status_code, "HTTPException"), str(exc.detail)),
                            status_code=exc.status_code, headers=getattr(exc, "headers", None))

    async def store_down(request: Request, exc: Exception) -> JSONResponse:
        # The driver's message may carry SQL and parameters: log it, answer without it.
        log.error("store error on %s %s: %s", request.method, request.url.path, exc)
        return JSONResponse(body("StoreUnavailable", f"the store did not answer ({type(exc).__name__})"),
                            status_code=503)

    app.add_exception_handler(DBAPIError, store_down)
    app.add_exception_handler(RequestValidationError, validation)
    app.add_exception_handler(StarletteHTTPException, http)


def responses(*codes: int) -> dict:
    """OpenAPI ``responses=`` entries documenting these error statuses with ErrorBody."""
    from rocke_aot.service.schemas import ErrorBody

    text = {304: "Not modified (If-None-Match matched the ETag)", 401: "Missing or wrong bearer token",
            403: "Read-only server (no publish token configured)", 404: "No such artifact, blob or route",
            409: "The key already holds other bytes", 413: "Request body over the limit",
            422: "Malformed or unknown field (names the field and the accepted values)",
            500: "A stored blob failed verification (IntegrityError) or another server error",
            503: "The store is unavailable or at another schema version"}
    out = {}
    for c in codes:
        out[c] = {"description": text[c]} if c == 304 else {"model": ErrorBody, "description": text[c]}
    return out
