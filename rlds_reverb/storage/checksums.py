"""CRC32C (Castagnoli), vectorized in NumPy: the checksum TFRecord frames records with.

A byte-at-a-time table loop in Python checks about 10 MB/s; this one, a few hundred MB/s
on episode-sized records. CRC32C is linear in its input (over GF(2)), so a block of bytes
is checksummed by one table lookup per byte (the table of its position in the block),
XORed together, and the blocks' registers are combined by the linear maps of the zero
bytes after each one (`storage.codec` frames records with it; tests/storage/test_codec.py
checks it against TensorFlow's).
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

__all__ = ['crc32c']

_POLYNOMIAL = 0x82F63B78  # Castagnoli, reflected.
_UINT32 = 0xFFFFFFFF
# Bytes per block of the vectorized checksum, and blocks combined at a time (below).
_BLOCK_BYTES = 256
_GROUP_BLOCKS = 64
# Below this size a byte-at-a-time loop beats the vectorized checksum's fixed cost.
_SMALL_BYTES = 512


def _make_byte_table() -> np.ndarray:
    table = np.arange(256, dtype=np.uint32)
    for _ in range(8):
        table = np.where(table & 1, (table >> 1) ^ np.uint32(_POLYNOMIAL), table >> 1)
    return table.astype(np.uint32)


_BYTE_TABLE = _make_byte_table()
_BYTE_TABLE_LIST = _BYTE_TABLE.tolist()
# Each of the 4 bytes of a register, in place: the domain of a linear map's tables.
_REGISTER_BYTES = np.arange(256, dtype=np.uint32)[None, :] << (
    np.arange(4, dtype=np.uint32)[:, None] * np.uint32(8)
)


def _advance(tables: np.ndarray, register: Any) -> Any:
    """Applies a linear map of registers, given as 4 x 256 tables (one per register byte)."""
    return (
        tables[0][register & 0xFF]
        ^ tables[1][(register >> 8) & 0xFF]
        ^ tables[2][(register >> 16) & 0xFF]
        ^ tables[3][register >> 24]
    )


@functools.cache
def _zero_bytes_tables(count: int) -> np.ndarray:
    """Returns the 4 x 256 tables of the register after `count` zero bytes (a linear map)."""
    if count == 0:
        return _REGISTER_BYTES
    if count == 1:
        return _BYTE_TABLE[_REGISTER_BYTES & 0xFF] ^ (_REGISTER_BYTES >> 8)
    half = _zero_bytes_tables(count // 2)
    tables = _advance(half, _advance(half, _REGISTER_BYTES))
    return _advance(_zero_bytes_tables(1), tables) if count % 2 else tables


@functools.cache
def _position_tables() -> np.ndarray:
    """Returns the flat tables of a byte at each position of a block: the register (from 0)
    after that byte and the block's bytes after it (zeros)."""
    tables = np.zeros((_BLOCK_BYTES, 256), np.uint32)
    value = _BYTE_TABLE.copy()
    for position in range(_BLOCK_BYTES - 1, -1, -1):
        tables[position] = value
        value = _BYTE_TABLE[value & 0xFF] ^ (value >> 8)
    return tables.reshape(-1)


@functools.cache
def _group_tables(block_bytes: int) -> np.ndarray:
    """Returns (G, 4, 256): block j of a group of G shifted past the G - 1 - j blocks after it."""
    return np.stack(
        [_zero_bytes_tables((_GROUP_BLOCKS - 1 - j) * block_bytes) for j in range(_GROUP_BLOCKS)]
    )


def _combine_blocks(registers: np.ndarray, block_bytes: int) -> int:
    """Returns the register of consecutive blocks of `block_bytes`, given each one's."""
    columns = np.arange(_GROUP_BLOCKS)
    while len(registers) > 1:
        padding = -len(registers) % _GROUP_BLOCKS  # Zero blocks in front change nothing.
        groups = np.concatenate([np.zeros(padding, np.uint32), registers]).reshape(
            -1, _GROUP_BLOCKS
        )
        tables = _group_tables(block_bytes)
        shifted = (
            tables[columns, 0, groups & 0xFF]
            ^ tables[columns, 1, (groups >> 8) & 0xFF]
            ^ tables[columns, 2, (groups >> 16) & 0xFF]
            ^ tables[columns, 3, groups >> 24]
        )
        registers = np.bitwise_xor.reduce(shifted, axis=1)
        block_bytes *= _GROUP_BLOCKS
    return int(registers[0])


def crc32c(data: bytes) -> int:
    """Returns the CRC32C (Castagnoli) of `data`.

    CRC32C is linear in its input: each block of bytes is checksummed at once by table
    lookups (one per byte and position, vectorized), and the blocks' registers combined by
    the linear maps of the zero bytes after them.

    Example:
      >>> hex(crc32c(b'123456789'))
      '0xe3069283'
    """
    size = len(data)
    if size < _SMALL_BYTES:
        register = _UINT32
        for byte in data:
            register = _BYTE_TABLE_LIST[(register ^ byte) & 0xFF] ^ (register >> 8)
        return register ^ _UINT32
    padding = -size % _BLOCK_BYTES  # Zero bytes in front leave a register of 0 at 0.
    blocks = np.frombuffer(bytes(padding) + bytes(data), np.uint8).reshape(-1, _BLOCK_BYTES)
    offsets = np.arange(_BLOCK_BYTES, dtype=np.intp) * 256
    registers = np.bitwise_xor.reduce(_position_tables()[blocks + offsets], axis=1)
    # The initial register (all ones) carried over the data's bytes.
    start = int(_advance(_zero_bytes_tables(size), np.uint32(_UINT32)))
    return _combine_blocks(registers, _BLOCK_BYTES) ^ start ^ _UINT32
