"""Just enough of the protobuf wire format to walk ONNX files without parsing tensor data."""

from __future__ import annotations

from collections.abc import Iterator

VARINT, I64, LEN, I32 = 0, 1, 2, 5


def read_varint(buf, pos: int) -> tuple[int, int]:
    """Decode a varint at ``pos``; return (value, next position)."""
    result = shift = 0
    while True:
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7


def encode_varint(value: int) -> bytes:
    out = bytearray()
    while True:
        b = value & 0x7F
        value >>= 7
        if value:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def tag(field: int, wire: int) -> bytes:
    return encode_varint((field << 3) | wire)


def len_prefix(field: int, length: int) -> bytes:
    """The tag and length that start a length-delimited field of ``length`` bytes."""
    return tag(field, LEN) + encode_varint(length)


def iter_fields(buf, start: int, end: int) -> Iterator[tuple[int, int, int, int, int]]:
    """Yield (field, wire type, field start, payload start, field end) for each field."""
    pos = start
    while pos < end:
        fstart = pos
        key, pos = read_varint(buf, pos)
        field, wire = key >> 3, key & 7
        if wire == VARINT:
            _, pos = read_varint(buf, pos)
            yield field, wire, fstart, fstart, pos
        elif wire == I64:
            yield field, wire, fstart, pos, pos + 8
            pos += 8
        elif wire == I32:
            yield field, wire, fstart, pos, pos + 4
            pos += 4
        elif wire == LEN:
            length, pos = read_varint(buf, pos)
            yield field, wire, fstart, pos, pos + length
            pos += length
        else:
            raise ValueError(f"unsupported protobuf wire type {wire} at byte {fstart}")
    if pos != end:
        raise ValueError("truncated protobuf message")
