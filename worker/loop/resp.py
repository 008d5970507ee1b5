"""RESP on the hot path: the read loop packs its XACK + XREADGROUP itself and reads
script-style flat replies, without redis-py's per-call command objects."""

from __future__ import annotations


def resp_command(head: tuple[str, ...], *args: str) -> bytes:
    """``head + args`` as one RESP command (a small packer for the hot read/ack path)."""
    parts = [f"*{len(head) + len(args)}\r\n".encode()]
    for arg in (*head, *args):
        data = arg.encode()
        parts.append(b"$%d\r\n%b\r\n" % (len(data), data))
    return b"".join(parts)


def pairs(flat: list[bytes]) -> dict[bytes, bytes]:
    """A flat [field, value, ...] list (a script's reply) as a dict."""
    return dict(zip(flat[::2], flat[1::2], strict=True))
