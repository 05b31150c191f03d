"""The protobuf wire format, read field by field without a schema. PURE: bytes in, fields out.

Who needs it: the response filters rewrite protobuf bodies in place (``filters.protobodies``),
and the converter splits a list message into its items so a 10,000-item list is converted one
item at a time instead of as one decoded tree (``kubeproto.converting``). ``fields`` copies
each value out; ``offsets``/``spans`` only give positions, so the items of a 40 MB list are
read as views into it and the cache's list readers (kind, continue token, identities) copy
nothing.

Bounds: every length is checked against the data (a truncated or lying length raises
``DecodeError``, never reads past the end); varints are at most 10 bytes.
"""

from __future__ import annotations

from collections.abc import Iterator


class DecodeError(ValueError):
    """Bytes that are not well-formed protobuf."""


Buffer = bytes | bytearray
"""A whole body: ``bytes``, or the ``bytearray`` the cache's tee collected a response in,
handed on as it is (``bytes`` of a 40 MB list would be a second copy) and never changed
after."""
Bytes = Buffer | memoryview
"""What the offset readers take: a memoryview reads a slice of a big body without a copy."""


def varint(data: Bytes, pos: int) -> tuple[int, int]:
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


def encode_varint(value: int) -> bytes:
    value &= (1 << 64) - 1  # negative int32/int64: ten bytes of two's complement
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def tag(number: int, wire_type: int) -> bytes:
    return encode_varint(number << 3 | wire_type)


def delimited(number: int, payload: bytes) -> bytes:
    """A length-delimited field (a string, bytes or an embedded message)."""
    return tag(number, 2) + encode_varint(len(payload)) + payload


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


def spans(
    data: Bytes,
    start: int,
    end: int,
    wanted: tuple[int, ...],
    *,
    first_only: bool = False,
    in_order: bool = False,
) -> list[tuple[int, int] | None]:
    """Offsets (start, end) of the length-delimited fields ``wanted`` of the message in
    ``data[start:end]`` (None: not there; the last one when repeated), nothing copied;
    ``first_only`` stops after the message's first field, whatever it is; ``in_order``
    stops at the first field numbered past all of ``wanted``, as Go's encoders write fields in
    number order (a message written otherwise reads as lacking the later ones)."""
    found: list[tuple[int, int] | None] = [None] * len(wanted)
    last = max(wanted) if in_order else -1
    for number, wire_type, _, value_start, value_end in offsets(data, start, end):
        if number > last >= 0:
            break
        if wire_type == 2 and number in wanted:
            found[wanted.index(number)] = (value_start, value_end)
        if first_only:
            break
    return found


def offsets(data: Bytes, start: int, end: int) -> Iterator[tuple[int, int, int, int, int]]:
    """(number, wire type, field start, value start, value end) of each field of the message
    in ``data[start:end]``, nothing copied (a varint's "value" is its bytes)."""
    pos = start
    while pos < end:
        field_start = pos
        key, pos = varint(data, pos)
        number, wire_type = key >> 3, key & 7
        value_start = pos
        if wire_type == 0:
            _, pos = varint(data, pos)
        elif wire_type == 2:
            length, value_start = varint(data, pos)
            pos = value_start + length
        elif wire_type == 1:
            pos += 8
        elif wire_type == 5:
            pos += 4
        else:
            raise DecodeError(f"wire type {wire_type} of field {number}")
        if pos > end:
            raise DecodeError("truncated field")
        if number == 0:
            raise DecodeError("field number 0")
        yield number, wire_type, field_start, value_start, pos
