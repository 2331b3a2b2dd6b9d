"""Deadlines for the hub's answers, which a read timeout alone does not give: a hub that sends
a byte every few seconds never leaves a read waiting for the timeout, so a slow-loris hub held
`models pull` for as long as it liked, in the headers or in the body.

A `Watchdog` follows one request (and its redirects) through httpx's trace extension, which
hands it each connection as it is opened. When the request breaks its rule, the watchdog
shuts those connections down from its own thread: a read blocked anywhere (in the headers
too) ends at once, the request fails with a transport error, and `expired` says why.

- `within(seconds)`: the whole answer in that time (the file listing, a small JSON).
- `at_least(count, per=seconds)`: at least `count` bytes in every `seconds` (a file's body,
  which may rightly take hours on a slow link but never stalls for a minute)."""

from __future__ import annotations

import socket
import threading


class Watchdog:
    def __init__(self, window: float, floor: int | None) -> None:
        self.window = window
        self.floor = floor
        """Bytes each window must bring (None: the answer must be done within one window)."""
        self.expired = False
        self._received = 0
        self._streams: list = []
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="hub-watchdog", daemon=True)

    @classmethod
    def within(cls, seconds: float) -> Watchdog:
        return cls(seconds, None)

    @classmethod
    def at_least(cls, count: int, *, per: float) -> Watchdog:
        return cls(per, count)

    def __enter__(self) -> Watchdog:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._done.set()
        self._thread.join()

    @property
    def extensions(self) -> dict:
        """The request's extensions that let the watchdog see its connections."""
        return {"trace": self._trace}

    def received(self, count: int) -> None:
        self._received += count

    def _trace(self, name: str, info: dict) -> None:
        if name.endswith((".connect_tcp.complete", ".start_tls.complete")):
            with self._lock:
                self._streams.append(info.get("return_value"))
                if self.expired:  # a connection opened after the deadline: shut at once
                    self._shut()

    def _watch(self) -> None:
        while not self._done.wait(self.window):
            if self.floor is not None and self._received >= self.floor:
                self._received = 0
                continue
            with self._lock:
                self.expired = True
                self._shut()
            return

    def _shut(self) -> None:
        for stream in self._streams:
            sock = stream.get_extra_info("socket") if stream is not None else None
            if sock is None:
                continue
            try:  # the plain socket's shutdown, also under TLS: the reading thread gets an end of stream
                socket.socket.shutdown(sock, socket.SHUT_RDWR)
            except OSError:  # already closed
                pass
