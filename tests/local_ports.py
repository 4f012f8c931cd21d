"""A free TCP port on 127.0.0.1 for the tests that start servers (or need a port nobody listens on)."""

from __future__ import annotations

import socket


def free_port() -> int:
    """A port the kernel just handed out on 127.0.0.1 (free once the probe socket is closed)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]
