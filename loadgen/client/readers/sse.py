"""An incremental Server-Sent Events parser over raw byte chunks.

Why not ``httpx``'s ``aiter_lines``: it decodes and splits text line by line through several
generator layers, and the client needs the arrival time of each *network read*, which is lost once
reads are re-chunked into lines. This parser is fed each read as it arrives and returns the
events that read completed, so the caller stamps one ``perf_counter_ns`` per read and attributes
it to every event in it.

Follows the WHATWG event-stream grammar for the parts OpenAI-compatible servers use:
    * lines end in LF, CRLF or CR, and a CRLF may be split across two reads;
    * a line starting with ``:`` is a comment (keep-alive pings) and is ignored;
    * ``data:`` lines accumulate (one optional space after the colon is dropped) and are joined
      with LF; a blank line dispatches the event; an event without data lines dispatches nothing;
    * ``event``, ``id`` and ``retry`` are ignored: these servers put everything in ``data``;
    * one UTF-8 byte-order mark at the start of the stream is skipped;
    * an incomplete event at the end of the stream is discarded (it may be truncated).
The OpenAI convention ``data: [DONE]`` ends the stream: the parser sets :attr:`SSEParser.done`
and ignores everything after it.

A server cannot make the parser hold more than ``max_event_bytes`` (an unfinished line, or the
data lines of an unfinished event, loadgen.client.limits.MAX_EVENT_BYTES by default), nor pass
invalid UTF-8 for text: either raises :class:`StreamError` naming what the server sent. The
first line that is no SSE field (an HTML page from a proxy) is kept, cut short, in
:attr:`SSEParser.stray`, so that a stream that ends without events can say what it held.
"""

from __future__ import annotations

from loadgen.client.limits import MAX_EVENT_BYTES

__all__ = ["DONE_SENTINEL", "SSEParser", "StreamError"]

DONE_SENTINEL = "[DONE]"
_BOM = b"\xef\xbb\xbf"
_COLON = 0x3A  # ord(":"), compared against a single byte without slicing
_KNOWN_FIELDS = (b"event", b"id", b"retry")
_STRAY_BYTES = 80


class StreamError(Exception):
    """The stream carried an error event or could not be understood; the message says which."""


class SSEParser:
    """Feed byte chunks with :meth:`feed`; get back the data of each completed event.

    Contract:
        * ``feed(chunk)`` returns the ``data`` strings (UTF-8 decoded, multi-line data joined with
          ``"\\n"``) of the events completed by ``chunk``, in order; ``"[DONE]"`` is never returned.
        * After ``[DONE]``, :attr:`done` is True and ``feed`` returns ``[]``.
        * Invalid UTF-8 inside an event, or a line or event over ``max_event_bytes``, raises
          :class:`StreamError` (a malformed stream).
        * Decoding happens per event, not per read, so a multi-byte character split across two
          reads is decoded correctly.
    """

    __slots__ = (
        "_data", "_max", "_pending", "_skip_lf", "_started", "done", "events", "stray",
    )  # fmt: skip

    def __init__(self, max_event_bytes: int = MAX_EVENT_BYTES) -> None:
        self._max = max_event_bytes
        self._pending = b""  # an incomplete line carried to the next read (never holds a CR)
        self._data: list[bytes] = []  # data lines of the event being built
        self._skip_lf = False  # the last read ended in CR: a leading LF next completes a CRLF
        self._started = False  # the BOM check has been done
        self.done = False
        self.events = 0  # events dispatched so far, [DONE] excluded
        self.stray: bytes | None = None  # the first line that is no SSE field, cut short

    @property
    def has_partial_event(self) -> bool:
        """True when bytes of an unfinished event are buffered (a cut stream leaves this set)."""
        return bool(self._pending or self._data)

    def feed(self, chunk: bytes) -> list[str]:
        """Consume one read; return the data strings of the events it completed."""
        if self.done or not chunk:
            return []
        if self._skip_lf:
            self._skip_lf = False
            if chunk[0] == 0x0A:
                chunk = chunk[1:]
                if not chunk:
                    return []
        buf = self._pending + chunk if self._pending else chunk
        if not self._started:
            if len(buf) < len(_BOM) and _BOM.startswith(buf):
                self._pending = buf  # too short to tell whether a BOM is coming
                return []
            self._started = True
            if buf.startswith(_BOM):
                buf = buf[len(_BOM) :]
        if b"\r" in buf:
            # A CR is a line end on its own; remember it so a LF opening the next read is not
            # taken for a second (blank) line, which would dispatch an event early.
            self._skip_lf = buf[-1] == 0x0D
            buf = buf.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        lines = buf.split(b"\n")
        self._pending = lines.pop()
        out: list[str] = []
        for line in lines:
            if not line:
                if self._data:
                    raw = b"\n".join(self._data)
                    if len(raw) > self._max:
                        raise StreamError(self._oversized("an event"))
                    try:
                        data = raw.decode("utf-8")
                    except UnicodeDecodeError as exc:
                        raise StreamError(_invalid_utf8(raw, exc)) from None
                    self._data = []
                    if data == DONE_SENTINEL:
                        self.done = True
                        self._pending = b""
                        return out
                    self.events += 1
                    out.append(data)
                continue
            if line[0] == _COLON:
                continue
            colon = line.find(b":")
            if colon < 0:
                # A field name with no value; "data" alone adds an empty data line.
                if line == b"data":
                    self._data.append(b"")
                elif self.stray is None:
                    self.stray = line[:_STRAY_BYTES]
                continue
            if line[:colon] == b"data":
                value = line[colon + 1 :]
                if value[:1] == b" ":
                    value = value[1:]
                self._data.append(value)
            elif self.stray is None and line[:colon] not in _KNOWN_FIELDS:
                self.stray = line[:_STRAY_BYTES]
        if len(self._pending) > self._max:
            raise StreamError(self._oversized("a line"))
        # An event left unfinished by this read (rare: reads end at events): its size.
        if self._data and len(self._pending) + sum(map(len, self._data)) > self._max:
            raise StreamError(self._oversized("an event"))
        return out

    def _oversized(self, what: str) -> str:
        return (
            f"the server sent {what} over {self._max:,} bytes without ending it: not an SSE "
            "stream this client will hold in memory"
        )


def _invalid_utf8(data: bytes, exc: UnicodeDecodeError) -> str:
    bad = data[exc.start : exc.start + 4]
    return (
        f"the server sent invalid UTF-8 in an event (bytes {bad!r} at offset {exc.start}): "
        f"{data[:_STRAY_BYTES]!r}"
    )
