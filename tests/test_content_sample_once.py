"""A local file's content sample hashes each sampled byte once (`identity.sample_ranges`, issue 48): the same
bytes as the head, blocks and tail it is made of, none twice, and a change in any of them is seen."""

from __future__ import annotations

import pytest

from sam3tiles.readers.identity import (SAMPLE_BLOCK, SAMPLE_BLOCKS, SAMPLE_HEAD, content_sample, file_stamp,
                                        sample_ranges)


def _documented(size: int) -> set[int]:
    """The bytes the sample is made of, by its definition: the first and last SAMPLE_HEAD bytes and SAMPLE_BLOCKS
    blocks spread evenly between."""
    out = set(range(min(size, SAMPLE_HEAD)))
    if size > 2 * SAMPLE_HEAD:
        step = (size - 2 * SAMPLE_HEAD) // (SAMPLE_BLOCKS + 1)
        for k in range(1, SAMPLE_BLOCKS + 1):
            out |= set(range(SAMPLE_HEAD + k * step, min(size, SAMPLE_HEAD + k * step + SAMPLE_BLOCK)))
    if size > SAMPLE_HEAD:
        out |= set(range(max(SAMPLE_HEAD, size - SAMPLE_HEAD), size))
    return out


@pytest.mark.parametrize("size", [0, 1, 5000, SAMPLE_HEAD, SAMPLE_HEAD + 1, 100_000, 2 * SAMPLE_HEAD + 9,
                                  190_000, 2 * SAMPLE_HEAD + 9 * SAMPLE_BLOCK, 300_000, 1_000_003])
def test_the_ranges_are_the_sample_each_byte_once(size):
    ranges = sample_ranges(size)
    assert all(a < b for a, b in ranges)
    assert all(b0 < a1 for (_, b0), (a1, _) in zip(ranges, ranges[1:]))  # sorted, apart: no byte twice
    assert {i for a, b in ranges for i in range(a, min(b, size))} == _documented(size)


@pytest.mark.parametrize("size", [190_000, 1_000_003])
def test_a_change_in_any_sampled_byte_is_seen(tmp_path, size):
    p = tmp_path / "f.bin"
    p.write_bytes(bytes(range(256)) * (size // 256) + b"\0" * (size % 256))
    before = content_sample(str(p), size)
    for a, b in sample_ranges(size):
        for at in (a, (a + b) // 2, min(b, size) - 1):
            data = bytearray(p.read_bytes())
            data[at] ^= 0xFF
            p.write_bytes(bytes(data))
            assert content_sample(str(p), size) != before, at
            data[at] ^= 0xFF
            p.write_bytes(bytes(data))
    assert content_sample(str(p), size) == before and len(before) == 16
    assert file_stamp(str(p)).endswith(f":{before}")  # a local file's stamp ends with its sample
