"""ServerClient's handling of a kept-alive connection that died while idle in the pool.

The real llama-server cannot be made to lose the race on cue (it is the window between a
killed server's process exit and its sockets closing), so these tests talk to a few lines of
raw socket server that answer the first request on a connection and then drop the connection
when the next one arrives: what a pooled connection to a killed or restarted server does. The
killed-server case against a real llama-server is tests/remote/test_server_engine.py's."""

from __future__ import annotations

import socket
import threading

import pytest

from chatapp.engine.server.answers import Health
from chatapp.engine.server.http import ServerClient
from chatapp.errors import ServerError

ANSWER = b'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 15\r\n\r\n{"status":"ok"}'


class OneAnswerPerConnection:
    """Answers the first request on each connection, then closes it on the next one. After
    `connections_left` connections it closes its listening socket, like a server that is gone."""

    def __init__(self, connections_left: int) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        self.connections = 0
        self.connections_left = connections_left
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while self.connections_left:
            conn, _ = self.listener.accept()
            self.connections += 1
            self.connections_left -= 1
            threading.Thread(target=self._answer_once, args=(conn,), daemon=True).start()
        self.listener.close()

    @staticmethod
    def _answer_once(conn: socket.socket) -> None:
        with conn:
            conn.recv(65536)
            conn.sendall(ANSWER)
            conn.recv(65536)  # the next request on this kept-alive connection: dropped unanswered


def test_a_stale_pooled_connection_is_retried_once_on_a_fresh_one():
    server = OneAnswerPerConnection(connections_left=2)
    client = ServerClient(server.url)
    try:
        assert client.get("/health", Health).status == "ok"
        assert client.post("/tokenize", {"content": "hi"}, Health).status == "ok"  # the stub's one answer
        assert server.connections == 2  # the second request went out again on a new connection
    finally:
        client.close()


def test_a_server_gone_after_the_pooled_connection_says_cannot_connect():
    server = OneAnswerPerConnection(connections_left=1)
    client = ServerClient(server.url)
    try:
        client.get("/health", Health)
        server.thread.join(timeout=10)
        with pytest.raises(ServerError, match="cannot connect to llama-server"):
            client.post("/apply-template", {"messages": []}, Health)
    finally:
        client.close()

