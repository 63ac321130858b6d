"""What can go wrong with a request, and how every failure becomes a JSON answer `{"error": "..."}`.

The exceptions are plain Python (the batcher raises two of them without the web stack); the handlers
import the web stack when they are installed or called.

A message is the answer's text as the client reads it. One that names a setting of the server (`max_lines`,
written by nmt.core.errors.ref) is rendered when raised with nmt.config.flags.as_flags, as the options the
server was started with (--max-lines); one about a request's own fields (beam, nbest) with `as_fields`, as
the request names them. Text a client sent is never rendered, and is quoted only through `shown` (short, and
escaped where it is not printable: a lone surrogate such as JSON's "\\ud800" cannot be encoded in an answer).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional

if TYPE_CHECKING:
    from starlette.responses import JSONResponse

# FastAPI's message when a body cannot be read as JSON at all (e.g. invalid UTF-8).
UNPARSED_BODY = "There was an error parsing the body"
NOT_JSON = "the body is not valid JSON (in UTF-8)"
SHOWN_CHARS = 40  # characters of a client's value that a message quotes at most


class RequestError(Exception):
    """A request answered with an error: its HTTP status, a one-line message and extra headers."""

    status = 500
    headers: dict[str, str] = {}

    def __init__(self, message: str, status: Optional[int] = None, headers: Optional[dict[str, str]] = None):
        super().__init__(message)
        self.message = message
        self.status = self.status if status is None else status
        self.headers = dict(self.headers if headers is None else headers)


class TooLarge(RequestError):
    """More than a limit allows (lines, characters, body bytes, the whole queue): retrying cannot help."""

    status = 413


class Overloaded(RequestError):
    """The queue is full (or the server is stopping): the client should retry later."""

    status = 503
    headers = {"Retry-After": "1"}


class ClientGone(RequestError):
    """The client closed the connection before its answer (nginx's 499); nobody reads this answer."""

    status = 499


def shown(value: str) -> str:
    """A value a client sent, as a message may quote it: its first SHOWN_CHARS characters (a 1 MB field is not
    sent back), each one that is not printable (a control character, a lone surrogate) escaped as Python writes it."""
    head = "".join(c if c.isprintable() else ascii(c)[1:-1] for c in value[:SHOWN_CHARS])
    return head + ("..." if len(value) > SHOWN_CHARS else "")


def error_response(status: int, message: str, headers: Optional[dict[str, str]] = None) -> JSONResponse:
    """The JSON answer of every error: `{"error": message}` with `status`. A lone surrogate that reached the
    message (in an exception's text) is written escaped, not as the UTF-8 it cannot be encoded in."""
    from starlette.responses import JSONResponse

    message = message.encode("utf-8", "backslashreplace").decode("utf-8")
    return JSONResponse({"error": message}, status_code=status, headers=headers)


async def on_request_error(request: Any, e: Exception) -> Any:
    assert isinstance(e, RequestError)
    return error_response(e.status, e.message, e.headers)


async def on_http_exception(request: Any, e: Exception) -> Any:
    """Starlette's own errors (404, 405, a body that cannot be parsed) in our format."""
    status = getattr(e, "status_code", 500)
    detail = str(getattr(e, "detail", "") or e)
    if detail == UNPARSED_BODY:
        cause = e.__cause__  # (FastAPI raises it from the parser's error)
        detail = NOT_JSON
        if isinstance(cause, ValueError) and "digits" in str(cause):  # JSON, but Python reads no integer that long
            detail = "the body holds an integer of more than 4,300 digits, more than Python reads; send a smaller one"
        elif isinstance(cause, RecursionError):  # JSON too, nested deeper than Python's parser goes
            detail = "the body nests its arrays or objects too deeply to be read; send a flatter one"
    return error_response(status, detail, getattr(e, "headers", None))


async def on_invalid(request: Any, e: Exception) -> Any:
    """A body that is not JSON (400), or JSON that does not fit the request model (422), with its fields."""
    errors = e.errors()  # type: ignore[attr-defined]
    if any(err.get("type") == "json_invalid" for err in errors):
        return error_response(400, NOT_JSON)
    where = "; ".join(f"{shown('.'.join(str(p) for p in err.get('loc', ())[1:])) or 'body'}: {err.get('msg')}"
                      for err in errors[:5])  # a location may be a field name the client made up
    kind = request.headers.get("content-type") if hasattr(request, "headers") else None
    if kind is None or "json" not in kind.lower():  # FastAPI did not read the body as JSON: say what it needs
        where += f" (the body was sent as {shown(kind) if kind else 'no Content-Type'}: send JSON with " \
                 "Content-Type: application/json)"
    return error_response(422, f"invalid request: {where}")


async def on_unexpected(request: Any, e: Exception) -> Any:
    """A bug or a device error: still JSON, one line, no traceback for the client."""
    first = str(e).splitlines()[0] if str(e) else ""
    return error_response(500, f"internal error: {type(e).__name__}" + (f": {first}" if first else ""))


def install_handlers(app: Any) -> None:
    """Route every exception an endpoint (or FastAPI itself) raises to a JSON answer."""
    from fastapi.exceptions import RequestValidationError
    from starlette.exceptions import HTTPException

    app.add_exception_handler(RequestError, on_request_error)
    app.add_exception_handler(HTTPException, on_http_exception)
    app.add_exception_handler(RequestValidationError, on_invalid)
    app.add_exception_handler(Exception, on_unexpected)
