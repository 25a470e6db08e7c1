"""TCP proxies in front of MariaDB that play a hostile server (or one in the middle
of the connection).

``FileRequestingProxy``: the first query holding a marker is not passed on; the proxy
answers it with a LOCAL INFILE request for a file of its choosing, records whatever
the client sends back, and ends the exchange with an OK packet. Everything else
passes through unchanged.

``PasswordAskingProxy``: the client's answer to the server's greeting is not passed
on; the proxy switches authentication to ``mysql_clear_password`` and records what
the client sends next.
"""

from __future__ import annotations

import socket
import threading

COM_QUERY = 0x03
LOCAL_INFILE = b"\xfb"
OK = b"\x00\x00\x00\x02\x00\x00\x00"  # 0 rows, no insert id, autocommit, 0 warnings
CLEAR_PASSWORD_SWITCH = b"\xfemysql_clear_password\x00"


class FileRequestingProxy:
    def __init__(self, upstream_port: int, marker: bytes, filename: bytes) -> None:
        self.upstream_port = upstream_port
        self.marker = marker
        self.filename = filename
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self._armed = True
        self.received: bytes | None = None
        """What the client sent as the file's content (None: not asked yet)."""
        self.answered = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.upstream_port))
            threading.Thread(
                target=self._to_server, args=(client, upstream), daemon=True
            ).start()
            threading.Thread(target=_pipe, args=(upstream, client), daemon=True).start()

    def _to_server(self, client: socket.socket, upstream: socket.socket) -> None:
        packets = _packets(client)
        for seq, payload in packets:
            if (
                self._armed
                and seq == 0
                and payload[:1] == bytes([COM_QUERY])
                and self.marker in payload
            ):
                self._armed = False
                self._ask_for_file(client, packets)
                continue
            try:
                upstream.sendall(_packet(seq, payload))
            except OSError:
                break
        for end in (client, upstream):
            end.close()

    def _ask_for_file(self, client: socket.socket, packets) -> None:
        client.sendall(_packet(1, LOCAL_INFILE + self.filename))
        content, seq = b"", 1
        for seq, payload in packets:  # file packets, then an empty one
            if not payload:
                break
            content += payload
        self.received = content
        client.sendall(_packet(seq + 1, OK))
        self.answered.set()

    def close(self) -> None:
        self.listener.close()


class PasswordAskingProxy:
    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.received: bytes | None = None
        """What the client answered the switch with (b"": it hung up)."""
        self.answered = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        try:
            client, _ = self.listener.accept()
        except OSError:
            return
        upstream = socket.create_connection(("127.0.0.1", self.upstream_port))
        threading.Thread(target=_pipe, args=(upstream, client), daemon=True).start()
        client.settimeout(30)
        packets = _packets(client)
        seq, _ = next(packets)  # the handshake response, with the user name
        client.sendall(_packet(seq + 1, CLEAR_PASSWORD_SWITCH))
        self.received = next((payload for _, payload in packets), b"")
        self.answered.set()
        for end in (client, upstream):
            end.close()

    def close(self) -> None:
        self.listener.close()


def _packet(seq: int, payload: bytes) -> bytes:
    return len(payload).to_bytes(3, "little") + bytes([seq & 0xFF]) + payload


def _packets(sock: socket.socket):
    """(sequence id, payload) of each packet the client sends."""
    buffer = b""
    while True:
        while len(buffer) >= 4:
            length = int.from_bytes(buffer[:3], "little")
            if len(buffer) < 4 + length:
                break
            yield buffer[3], buffer[4 : 4 + length]
            buffer = buffer[4 + length :]
        try:
            data = sock.recv(65536)
        except OSError:
            return
        if not data:
            return
        buffer += data


def _pipe(source: socket.socket, sink: socket.socket) -> None:
    while True:
        try:
            data = source.recv(65536)
            if not data:
                break
            sink.sendall(data)
        except OSError:
            break
    for end in (source, sink):
        end.close()
