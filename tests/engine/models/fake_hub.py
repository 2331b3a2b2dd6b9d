"""An HTTP server on 127.0.0.1 that answers as the Hugging Face hub's API does for the few
calls a GGUF pull makes (no network reaches the hub here): the repo's file list with LFS
sha256s, HEAD and ranged GET of /ORG/REPO/resolve/REV/FILE (416 past the end, as the hub), and
the hub's error codes. It can drop a connection after some bytes, state a wrong checksum, name
another file by its ETag, send a body that never ends or stalls, redirect to itself, or list
whatever a test writes, to test those paths; it can hold the first download until a second
one of the same file arrives, so two pulls at once are sure to overlap."""

from __future__ import annotations

import hashlib
import json
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

COMMIT = "fedcba9876543210fedcba9876543210fedcba98"
CHUNK = 1 << 16


@dataclass
class HubRepo:
    files: dict[str, Path]
    gated: bool = False
    wrong_sha: bool = False
    sha256: dict[str, str] = field(default_factory=dict)
    in_git: set[str] = field(default_factory=set)
    """Files listed without LFS facts (only git's blob id), as the hub lists small files."""
    etag: dict[str, str] = field(default_factory=dict)
    """An ETag the hub states for a file instead of its digest."""
    listing: Callable[[dict], object] | None = None
    """Rewrites the listing (the JSON object) before it is sent; bytes returned are sent as they are."""

    def git_sha1(self, name: str) -> str:
        data = self.files[name].read_bytes()
        return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()

    def digest(self, name: str) -> str:
        if name not in self.sha256:
            data = hashlib.sha256()
            with open(self.files[name], "rb") as file:
                for block in iter(lambda: file.read(1 << 20), b""):
                    data.update(block)
            self.sha256[name] = data.hexdigest()
        return "0" * 64 if self.wrong_sha else self.sha256[name]


class FakeHub:
    def __init__(self) -> None:
        self.repos: dict[str, HubRepo] = {}
        self.drop_after: int | None = None
        """Close the next file download after this many bytes (once)."""
        self.ranges: list[str] = []
        """Every Range header a download asked with."""
        self.delay = 0.0
        """Seconds to wait after each 64 KiB sent: a slow link, to interrupt a pull halfway."""
        self.downloads: list[str] = []
        """The path of every file download (GET) asked for."""
        self.endless = 0
        """Bytes of garbage sent after each file, with no Content-Length: a body that runs on."""
        self.stall = 0.0
        """Seconds to wait after the headers before the body: a hub that stops sending."""
        self.redirect_to_self = False
        """Answer every file request with a 302 to itself."""
        self.range_off_by = 0
        """Serve a ranged download from this many bytes before the start asked for (and say so)."""
        self.overlap_wait = 0.0
        """Seconds the first download waits (headers sent) for a second download to begin."""
        self.trickle: dict[str, float] = {}
        """"listing" or "file": send those answers, headers included, one byte every this many
        seconds (a slow-loris hub: no read ever waits long)."""
        self._second_download = threading.Event()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> FakeHub:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()

    def _handler(self):
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def _error(self, status: int, code: str) -> None:
                self.send_response(status)
                self.send_header("X-Error-Code", code)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def _repo(self, repo_id: str) -> HubRepo | None:
                repo = hub.repos.get(repo_id)
                if repo is None:
                    self._error(404, "RepoNotFound")
                elif repo.gated and "authorization" not in {k.lower() for k in self.headers}:
                    self._error(401, "GatedRepo")
                    return None
                return repo

            def do_GET(self) -> None:
                self._serve(body=True)

            def do_HEAD(self) -> None:
                self._serve(body=False)

            def _serve(self, body: bool) -> None:
                path = self.path.split("?", 1)[0]
                api = re.match(r"^/api/models/([^/]+/[^/]+)(?:/revision/[^/]+)?$", path)
                delay = hub.trickle.get("listing" if api else "file")
                if delay:
                    self.wfile = Trickle(self.wfile, delay)
                if api:
                    repo = self._repo(api[1])
                    if repo is None:
                        return
                    siblings = [{"rfilename": name, "size": file.stat().st_size, "blobId": repo.git_sha1(name)}
                                | ({} if name in repo.in_git else
                                   {"lfs": {"size": file.stat().st_size, "sha256": repo.digest(name),
                                            "pointerSize": 134}})
                                for name, file in repo.files.items()] + [{"rfilename": "README.md", "size": 5}]
                    listing = {"id": api[1], "sha": COMMIT, "siblings": siblings}
                    if repo.listing is not None:
                        listing = repo.listing(listing)
                    data = listing if isinstance(listing, bytes) else json.dumps(listing).encode()
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    if body:
                        self.wfile.write(data)
                    return
                resolve = re.match(r"^/([^/]+/[^/]+)/resolve/([^/]+)/(.+)$", path)
                if not resolve:
                    self._error(404, "RepoNotFound")
                    return
                repo = self._repo(resolve[1])
                if repo is None:
                    return
                name = resolve[3]
                if name not in repo.files:
                    self._error(404, "EntryNotFound")
                    return
                if hub.redirect_to_self:
                    self.send_response(302)
                    self.send_header("Location", self.path)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                self._file(repo, name, body)

            def _file(self, repo: HubRepo, name: str, body: bool) -> None:
                file = repo.files[name]
                digest = repo.etag.get(name) or (repo.git_sha1(name) if name in repo.in_git else repo.digest(name))
                size = file.stat().st_size
                start = 0
                asked = self.headers.get("Range")
                if body:
                    hub.downloads.append(self.path)
                if asked and body:
                    hub.ranges.append(asked)
                    start = int(re.match(r"bytes=(\d+)-", asked)[1])
                    if start >= size:  # as the hub answers a range past the end
                        self._error(416, "RangeNotSatisfiable")
                        return
                    start = max(start - hub.range_off_by, 0)
                self.send_response(206 if start else 200)
                self.send_header("X-Repo-Commit", COMMIT)
                self.send_header("X-Linked-Etag", f'"{digest}"')
                self.send_header("X-Linked-Size", str(size))
                self.send_header("ETag", f'"{digest}"')
                if hub.endless:
                    self.send_header("Connection", "close")
                else:
                    self.send_header("Content-Length", str(size - start))
                if start:
                    self.send_header("Content-Range", f"bytes {start}-{size - 1}/{size}")
                self.end_headers()
                if not body:
                    return
                self.wfile.flush()
                if hub.overlap_wait:
                    if len(hub.downloads) > 1:
                        hub._second_download.set()
                    else:
                        hub._second_download.wait(hub.overlap_wait)
                if hub.stall:
                    time.sleep(hub.stall)
                drop, hub.drop_after = hub.drop_after, None
                sent = 0
                with open(file, "rb") as source:
                    source.seek(start)
                    for block in iter(lambda: source.read(CHUNK), b""):
                        if drop is not None and sent + len(block) > drop:
                            self.wfile.write(block[: max(drop - sent, 0)])
                            self.wfile.flush()
                            self.connection.shutdown(2)  # the connection drops mid-download
                            return
                        try:
                            self.wfile.write(block)
                        except OSError:  # the client went away (an interrupted pull)
                            return
                        sent += len(block)
                        if hub.delay:
                            time.sleep(hub.delay)
                try:
                    for _ in range(hub.endless // CHUNK):
                        self.wfile.write(b"\xff" * CHUNK)
                except OSError:  # the client stopped reading
                    pass
                self.close_connection = True

        return Handler


class Trickle:
    """A handler's output sent one byte at a time, `delay` seconds apart, until the client goes."""

    def __init__(self, out, delay: float) -> None:
        self.out, self.delay, self.gone = out, delay, False

    def write(self, data: bytes) -> int:
        for byte in bytes(data):
            if self.gone:
                break
            try:
                self.out.write(bytes([byte]))
                self.out.flush()
            except OSError:  # the client shut the connection: nothing more to send
                self.gone = True
            time.sleep(self.delay)
        return len(data)

    def __getattr__(self, name: str):  # flush, close, closed: the handler's own file's
        return getattr(self.out, name)
