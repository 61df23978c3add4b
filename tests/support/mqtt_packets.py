"""Splitting a byte stream from an MQTT server into whole packets, for tests
that speak MQTT over raw sockets (with ``gateway.mqtt``'s encode/decode)."""

from __future__ import annotations

from gateway.mqtt._decode import read_fixed_header


def split_packets(buf: bytes) -> tuple[bytes, bytes]:
    """(the whole packets at the start of ``buf``, the partial rest)."""
    pos = 0
    while pos < len(buf):
        header = read_fixed_header(buf, pos, len(buf))
        if header is None or header[2] + header[1] > len(buf):
            break
        pos = header[2] + header[1]
    return buf[:pos], buf[pos:]
