"""A port whose accept queue is full: a new connection's SYN is dropped and its connect times
out (an apiserver shaking hands with a whole fleet at once, as far as a client can tell)."""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Iterator


@contextlib.contextmanager
def full_accept_queue(port: int) -> Iterator[None]:
    """A listener on ``port`` that accepts nothing, its queue filled (the port's own holder
    must have set ``SO_REUSEPORT`` and stopped listening meanwhile)."""
    with contextlib.ExitStack() as stack:
        listener = stack.enter_context(socket.socket())
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        listener.bind(("127.0.0.1", port))
        listener.listen(0)
        # A backlog of 0 holds one connection: this one, done before anything else tries.
        filler = stack.enter_context(socket.create_connection(("127.0.0.1", port), timeout=5))
        assert filler.fileno() >= 0
        yield
