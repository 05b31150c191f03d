"""The protobuf wire format, read field by field without a schema. PURE: bytes in, fields out.

Who needs it: the response filters rewrite protobuf bodies in place (``filters.protobodies``),
and the converter splits a list message into its items so a 10,000-item list is converted one
item at a time instead of as one decoded tree (``kubeproto.converting``).

Bounds: every length is checked against the data (a truncated or lying length raises
``DecodeError``, never reads past the end); varints are at most 10 bytes.
"""

from __future__ import annotations

from collections.abc import Iterator


class DecodeError(ValueError):
    """Bytes that are not well-formed protobuf."""


def varint(data: bytes, pos: int) -> tuple[int, int]:
    """(value, position after it) of the varint at ``pos``."""
    result = shift = 0
    while True:
        if pos >= len(data):
            raise DecodeError("truncated varint")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7
        if shift >= 70:
            raise DecodeError("varint too long")


def fields(data: bytes) -> Iterator[tuple[int, int, int | bytes, bytes]]:
    """(number, wire type, value, the field's own bytes including its tag), in order."""
    pos = 0
    end = len(data)
    while pos < end:
        start = pos
        key, pos = varint(data, pos)
        number, wire = key >> 3, key & 7
        value: int | bytes
        if wire == 0:
            value, pos = varint(data, pos)
        elif wire == 2:
            length, pos = varint(data, pos)
            if pos + length > end:
                raise DecodeError("truncated length-delimited field")
            value, pos = data[pos : pos + length], pos + length
        elif wire == 1:
            if pos + 8 > end:
                raise DecodeError("truncated fixed64")
            value, pos = int.from_bytes(data[pos : pos + 8], "little"), pos + 8
        elif wire == 5:
            if pos + 4 > end:
                raise DecodeError("truncated fixed32")
            value, pos = int.from_bytes(data[pos : pos + 4], "little"), pos + 4
        else:
            raise DecodeError(f"wire type {wire} of field {number}")
        if number == 0:
            raise DecodeError("field number 0")
        yield number, wire, value, data[start:pos]
