"""A TCP proxy in front of MariaDB that loses the reply to the first COMMIT: the
client waits in vain (and gives up at its read timeout) while the server, whose side
of the connection stays open, goes on committing. That is what a client sees when
the link drops while the server is still committing."""

from __future__ import annotations

import socket
import threading

COMMIT = b"\x03COMMIT"  # a COM_QUERY packet's command byte and text


class LostCommitReply:
    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self._armed = True
        self.reply_lost = threading.Event()
        """Set when the server answered the COMMIT and the answer was dropped."""
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.upstream_port))
            dropping = threading.Event()
            threading.Thread(
                target=self._to_server, args=(client, upstream, dropping), daemon=True
            ).start()
            threading.Thread(
                target=self._to_client, args=(upstream, client, dropping), daemon=True
            ).start()

    def _to_server(self, client, upstream, dropping: threading.Event) -> None:
        while data := _recv(client):
            if self._armed and data[4:11] == COMMIT:
                self._armed = False
                dropping.set()
            upstream.sendall(data)
        if not dropping.is_set():  # the client left: so does the server side
            upstream.close()

    def _to_client(self, upstream, client, dropping: threading.Event) -> None:
        while data := _recv(upstream):
            if dropping.is_set():
                self.reply_lost.set()
                break
            try:
                client.sendall(data)
            except OSError:
                break
        for end in (client, upstream):
            end.close()

    def close(self) -> None:
        self.listener.close()


def _recv(sock: socket.socket) -> bytes:
    try:
        return sock.recv(65536)
    except OSError:
        return b""
