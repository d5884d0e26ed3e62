"""Just enough of the protobuf wire format to walk ONNX files without parsing tensor data."""

from __future__ import annotations

from collections.abc import Iterator

VARINT, I64, LEN, I32 = 0, 1, 2, 5


MAX_VARINT_BYTES = 10  # a 64-bit value; protobuf refuses longer ones


def read_varint(buf, pos: int) -> tuple[int, int]:
    """Decode a varint at ``pos``; return (value, next position). ValueError past 10 bytes
    (a hostile run of continuation bytes would otherwise build an ever larger integer)."""
    result = shift = 0
    for _ in range(MAX_VARINT_BYTES):
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7
    raise ValueError(f"varint longer than {MAX_VARINT_BYTES} bytes at byte {pos}")


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
        elif wire in (I64, I32):
            size = 8 if wire == I64 else 4
            if pos + size > end:
                raise ValueError(f"field at byte {fstart} runs past the end of its message")
            yield field, wire, fstart, pos, pos + size
            pos += size
        elif wire == LEN:
            length, pos = read_varint(buf, pos)
            if pos + length > end:  # never a field that runs past its message
                raise ValueError(f"field at byte {fstart} runs past the end of its message")
            yield field, wire, fstart, pos, pos + length
            pos += length
        else:
            raise ValueError(f"unsupported protobuf wire type {wire} at byte {fstart}")
    if pos != end:
        raise ValueError("truncated protobuf message")
