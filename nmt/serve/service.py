"""What every translating endpoint does: check the key, the lines and the search settings, queue the lines,
and wait for their translations (or the client's departure, or the timeout)."""

from __future__ import annotations

import asyncio
import dataclasses
import hmac
from dataclasses import dataclass
from typing import Any, Optional, Union

from nmt.config import SearchConfig, ServeConfig, check_field
from nmt.config.flags import as_fields, as_flags
from nmt.core.errors import ConfigError, ref
from nmt.inference.translator import Translation
from nmt.serve.backend import ModelInfo
from nmt.serve.batcher import Batcher
from nmt.serve.http_errors import ClientGone, RequestError, TooLarge

LINES_KEY = "nmt.lines"  # the ASGI scope entry where an endpoint notes how many lines it translated


@dataclass
class Service:
    """The state the endpoints share (one per application, at `app.state.service`)."""

    batcher: Batcher
    cfg: ServeConfig
    info: ModelInfo
    search: SearchConfig  # the default search of every request
    keys: Optional[frozenset[str]] = None  # the accepted API keys; None: none is asked for
    ready: bool = False  # the model is loaded and warmed up

    def check_key(self, key: Optional[str]) -> None:
        """403 unless `key` is one of --api-keys (when the server has keys)."""
        if self.keys is None:
            return
        if not key:
            raise RequestError("Missing API key: give api_key", 403)
        # Compared in constant time, so that the answer's timing tells nothing about the keys. A key holding a
        # lone surrogate (JSON's "\ud800") is no key of the file (which is UTF-8) yet must still be compared.
        given = key.encode("utf-8", "surrogatepass")
        if not any(hmac.compare_digest(given, k.encode()) for k in self.keys):
            raise RequestError("Invalid API key", 403)

    def lines(self, text: Union[str, list[str]], split_lines: bool = False) -> list[str]:
        """The request's lines, checked against --max-lines and --max-chars. A newline inside a string
        becomes a space (one line in, one line out, as `nmt translate` would see it), or, with
        `split_lines`, separates lines that are translated one by one."""
        texts = [text] if isinstance(text, str) else list(text)
        if split_lines:
            lines = [line for t in texts for line in split(t)]
        else:
            lines = [t.replace("\r", " ").replace("\n", " ") for t in texts]
        if not lines:
            raise RequestError("no text to translate: give a string or a non-empty list of strings", 400)
        if len(lines) > self.cfg.max_lines:
            raise TooLarge(as_flags(f"{len(lines)} lines in one request; at most {self.cfg.max_lines} "
                                    f"({ref('max_lines')})"))
        for i, line in enumerate(lines):
            if len(line) > self.cfg.max_chars:
                raise TooLarge(as_flags(f"line {i} has {len(line)} characters; at most {self.cfg.max_chars} "
                                        f"({ref('max_chars')})"))
            if not line.isascii():
                try:
                    line.encode("utf-8")
                except UnicodeEncodeError as e:  # a lone surrogate: "\ud800" in JSON is no character
                    raise RequestError(f"line {i}: character {e.start} is a lone surrogate ({line[e.start]!a}), "
                                       "not text; send valid Unicode", 400) from None
        return lines

    @property
    def widest(self) -> int:
        """The widest search a request may ask for (beam, nbest): --max-beam, or the server's own default
        search where that is wider."""
        return max(self.cfg.max_beam, self.search.beam, self.search.nbest)

    def search_for(self, settings: dict[str, Any], status: int = 422) -> SearchConfig:
        """The default search with the settings this request gives (beam, nbest, ...; None: the default;
        `status` when out of range or wider than --max-beam). A request's n-best widens the beam to match."""
        given = {name: value for name, value in settings.items() if value is not None}
        for name in ("beam", "nbest"):
            value = given.get(name)
            if isinstance(value, int) and value > self.widest:
                raise RequestError(as_flags(f"{name} {value}: this server searches at most {self.widest} wide per "
                                            f"request ({ref('max_beam')})"), status)
        try:
            for name, value in given.items():
                check_field(SearchConfig, name, value)
            search = dataclasses.replace(self.search, **given)
            if search.nbest > search.beam:
                search = dataclasses.replace(search, beam=search.nbest)  # n-best needs a beam that wide
            return search.validate()
        except ConfigError as e:
            raise RequestError(as_fields(str(e)), status) from None  # the request's own fields, as it names them

    async def translate(self, request: Any, lines: list[str], search: SearchConfig) -> list[Translation]:
        """The translations of `lines`, in order, from the batcher. A request whose client leaves, or that
        waits longer than --timeout, is taken back from the queue (no work is done for it)."""
        pending = self.batcher.submit(lines, search)
        gone = asyncio.ensure_future(disconnected(request.receive))
        try:
            await asyncio.wait((pending.future, gone), timeout=self.cfg.timeout, return_when=asyncio.FIRST_COMPLETED)
        finally:
            gone.cancel()
        if pending.future.done():
            translations = pending.future.result()  # or this request's own failure, raised
            request.scope[LINES_KEY] = len(lines)
            return translations
        self.batcher.withdraw(pending)
        if gone.done() and not gone.cancelled():
            raise ClientGone("client closed the request")
        raise RequestError(as_flags(f"not translated within {self.cfg.timeout:g}s ({ref('timeout')}); retry later"),
                           504)


async def disconnected(receive: Any) -> None:
    """Return when the client has gone (the body was read already, so the next message is the disconnect)."""
    try:
        while (await receive())["type"] != "http.disconnect":
            pass
    except Exception:  # nothing more to read: the same for us as a client gone
        pass


def split(text: str) -> list[str]:
    """A text's lines (\\n, \\r\\n or \\r), the empty ones kept: they come back empty, and the line breaks
    come back where they were."""
    return text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
