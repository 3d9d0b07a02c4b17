"""The typed config of ``transformer serve``: where it listens, who may call it, and its limits.

Not part of a run: it is never saved with a checkpoint, and only the ``serve`` command takes it
(``--serve.port 8080``, or ``--port 8080`` for short). Every limit is answered with a JSON 4xx
error naming it (``serve/app.py``), but ``idle_timeout``, which closes the connection
(``serve/server.py``); docs/serving-limits.md has what each costs a client and what it saves.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

from ..config.checks import check_finite, check_positive, check_types, range_of
from ..config.decode import DecodeConfig
from ..errors import BadValue

API_KEY_ENV = "TRANSFORMER_API_KEY"


def api_key_problem(key: str) -> str | None:
    """Why ``key`` cannot be a bearer token, or None. A client sends it in an HTTP header, which
    carries visible ASCII: a space, a control character or any other character (such as one
    decoded from bytes that are not UTF-8) could never be sent as it is compared."""
    if not key.strip():
        return "must not be empty (leave it out for no key)"
    for i, char in enumerate(key):
        if not "!" <= char <= "~":
            if 0xDC80 <= ord(char) <= 0xDCFF:  # how Python reads a byte that is not UTF-8
                shown = f"the byte 0x{ord(char) - 0xDC00:02X}, which is not UTF-8"
            else:
                shown = ascii(char) if char.isprintable() else f"U+{ord(char):04X}"
            return (f"must be visible ASCII characters (a bearer token), but character {i + 1} "
                    f"is {shown}")  # fmt: skip
    return None


@dataclass(frozen=True)
class ServeConfig:
    """The HTTP service: address, API key, request limits and dynamic batching."""

    host: str = "127.0.0.1"
    """Address to listen on; any address but loopback needs an API key."""
    port: int = 8000
    """TCP port; 0 picks a free one (the address is printed on stderr)."""
    api_key: str | None = None
    """Bearer token every API request must send, visible ASCII without spaces (default:
    $TRANSFORMER_API_KEY)."""
    max_body_bytes: int = 65_536
    """Largest request body in bytes; larger: 413."""
    max_sentences: int = 64
    """Sentences per request; more: 422."""
    max_chars: int = 1000
    """Characters per sentence; more: 422."""
    max_beam: int = 16
    """Largest beam (and n-best) a request may ask for; more: 422."""
    max_queue: int = 1024
    """Sentences waiting to be translated; a request that would exceed it: 429."""
    timeout: float = 30.0
    """Seconds a request may wait for its translations; longer: 504."""
    max_cost: int = 65_536
    """Largest work of one request: the tokens it may make the model process, summed over its
    sentences (source, and the output-length limit + 1, raised to min_len and the prefix, times
    the beam or the samples; inference/cost.py); more: 422."""
    body_timeout: float = 10.0
    """Seconds a request's body may take to arrive once its headers have; longer: 408."""
    idle_timeout: float = 5.0
    """Seconds a connection may stay open without a complete request (after it opens, or after
    its last answer); then it is closed."""
    max_wait_ms: float = 5.0
    """How long the worker waits for more requests to decode together (milliseconds)."""
    batch_tokens: int = 4096
    """Source tokens decoded together at most, padding included."""
    log_text: bool = False
    """Also write the sentences of each request into its access-log line."""

    def __post_init__(self) -> None:
        check_types(self)
        check_finite(self)
        check_positive(self, "max_body_bytes", "max_sentences", "max_chars", "max_beam",
                       "max_queue", "batch_tokens", "max_cost")  # fmt: skip
        # The search settings these limits feed must exist: DecodeConfig's ranges.
        for name, decode_name in (("max_beam", "beam_size"), ("batch_tokens", "max_source_tokens")):
            allowed = range_of(DecodeConfig, decode_name)
            if getattr(self, name) not in allowed:
                raise BadValue(f"ServeConfig.{name} must be in {allowed} (DecodeConfig."
                               f"{decode_name}), got {getattr(self, name)!r}")  # fmt: skip
        if not self.host.strip():
            raise BadValue("ServeConfig.host must be an address, got an empty string")
        if not 0 <= self.port <= 65535:
            raise BadValue(f"ServeConfig.port must be in 0..65535, got {self.port!r}")
        if self.api_key is not None and (problem := api_key_problem(self.api_key)):
            raise BadValue(f"ServeConfig.api_key {problem}")
        if not 0 < self.timeout <= 3600:
            raise BadValue(
                f"ServeConfig.timeout must be in (0, 3600] seconds, got {self.timeout!r}"
            )
        for name in ("body_timeout", "idle_timeout"):
            if not 0 < getattr(self, name) <= 3600:
                raise BadValue(
                    f"ServeConfig.{name} must be in (0, 3600] seconds, got {getattr(self, name)!r}"
                )
        if not 0 <= self.max_wait_ms <= 10_000:
            raise BadValue(
                f"ServeConfig.max_wait_ms must be in [0, 10000], got {self.max_wait_ms!r}"
            )
        if self.max_queue < self.max_sentences:
            raise BadValue(
                f"ServeConfig.max_queue ({self.max_queue}) must be at least max_sentences "
                f"({self.max_sentences}), or a full request could never be queued"
            )

    @property
    def on_loopback(self) -> bool:
        """Whether ``host`` is reachable from this machine only (127.0.0.0/8, ::1, localhost)."""
        if self.host == "localhost":
            return True
        try:
            return ipaddress.ip_address(self.host).is_loopback
        except ValueError:  # a host name: it may resolve to any address
            return False
