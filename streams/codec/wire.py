"""The two framings of an Avro body on the wire.

- **Avro single-object encoding** (the default): ``C3 01``, the writer schema's 8-byte CRC-64-AVRO
  fingerprint (little-endian), then the binary body. Self-describing without any service: the
  reader looks the fingerprint up among the schemas it ships.
- **Confluent wire format** (when a Schema Registry is configured): ``00``, the 4-byte big-endian
  schema id the registry gave the writer schema, then the body.

A decoder tells them apart by the first byte, so it reads both whatever it writes.
"""

from __future__ import annotations

SINGLE_OBJECT = "single-object"
CONFLUENT = "confluent"
WIRE_FORMATS = (SINGLE_OBJECT, CONFLUENT)

SINGLE_OBJECT_MAGIC = b"\xc3\x01"
SINGLE_OBJECT_HEADER_LEN = 10  # magic (2) + fingerprint (8)
CONFLUENT_MAGIC = b"\x00"
CONFLUENT_HEADER_LEN = 5  # magic (1) + schema id (4)


def single_object_header(fingerprint: bytes) -> bytes:
    if len(fingerprint) != 8:
        raise ValueError("a CRC-64-AVRO fingerprint is 8 bytes")
    return SINGLE_OBJECT_MAGIC + fingerprint


def confluent_header(schema_id: int) -> bytes:
    return CONFLUENT_MAGIC + schema_id.to_bytes(4, "big", signed=False)


def wire_format_of(data: bytes) -> str | None:
    """``SINGLE_OBJECT``, ``CONFLUENT`` or ``None`` from the first byte(s) (no validation)."""
    if not data:
        return None
    if data[0] == 0xC3:
        return SINGLE_OBJECT
    if data[0] == 0x00:
        return CONFLUENT
    return None


__all__ = [
    "CONFLUENT",
    "CONFLUENT_HEADER_LEN",
    "CONFLUENT_MAGIC",
    "SINGLE_OBJECT",
    "SINGLE_OBJECT_HEADER_LEN",
    "SINGLE_OBJECT_MAGIC",
    "WIRE_FORMATS",
    "confluent_header",
    "single_object_header",
    "wire_format_of",
]
