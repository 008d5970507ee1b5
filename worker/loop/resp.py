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
    """A flat [field, value, ...] list (a script's reply, an entry's fields) as a dict.

    Once for every entry read: one iterator zipped with itself takes half the
    time of zipping two slices (which copies the list twice)."""
    if len(flat) & 1:
        raise ValueError(f"a flat list of fields and values has an even length, got {len(flat)} items")
    it = iter(flat)
    return dict(zip(it, it, strict=False))  # the same iterator twice: the length is checked above
