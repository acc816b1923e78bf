"""Compressed request bodies: every coding undone exactly, and never past the limit."""

from __future__ import annotations

import functools
import gzip
import tracemalloc
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proxai.errors import ProxyError
from proxai.testing.compressed import ENCODERS, MIB, compress, zeros_bomb, zstd_with_window
from proxai.wire.coding import PIECE_BYTES
from proxai.wire.request_coding import (
    ACCEPT_ENCODING,
    MAX_CODINGS,
    SLICE_BYTES,
    decode_body,
    decode_request_body,
)

BODY = b'{"model": "gpt-5", "input": "' + b"What is the weather in Paris? " * 2000 + b'"}'
ONE_CODING = sorted(ENCODERS)


def decode(body: bytes, encoding: bytes, *, limit: int = 10 * MIB) -> bytes:
    return decode_request_body([(b"content-encoding", encoding)], body, limit=limit)


def refusal(body: bytes, encoding: bytes, *, limit: int = 10 * MIB) -> ProxyError:
    with pytest.raises(ProxyError) as caught:
        decode(body, encoding, limit=limit)
    return caught.value


# -- decoded exactly -----------------------------------------------------------------------

bodies = st.one_of(
    st.binary(max_size=3000),
    # Compressible too, so that a piece fills and the decoder is asked again for more.
    st.builds(lambda part, n: part * n, st.binary(min_size=1, max_size=40), st.integers(1, 9000)),
)


@settings(max_examples=150)
@given(
    body=bodies,
    codings=st.lists(st.sampled_from(ONE_CODING), min_size=1, max_size=MAX_CODINGS),
    slice_bytes=st.sampled_from([1, 2, 7, 1000, SLICE_BYTES]),
)
def test_any_stack_of_codings_round_trips(
    body: bytes, codings: list[str], slice_bytes: int
) -> None:
    stages = [body]
    for coding in codings:
        stages.append(compress(stages[-1], coding)[0])
    tokens = [t.strip() for t in compress(b"", *codings)[1].split(b",")]
    # The limit is exactly the largest stage decoded: no stage is refused, none cut.
    limit = max(len(stage) for stage in stages[:-1]) or 1
    assert decode_body(stages[-1], tokens, limit=limit, slice_bytes=slice_bytes) == body


@pytest.mark.parametrize("coding", ONE_CODING)
def test_each_coding_decodes_a_json_body(coding: str) -> None:
    encoded, header = compress(BODY, coding)
    assert decode(encoded, header) == BODY


@pytest.mark.parametrize(
    ("encoded", "header"),
    [
        (gzip.compress(BODY[:1000]) + gzip.compress(BODY[1000:]), b"gzip"),  # two members
        (ENCODERS["zstd"](BODY[:1000]) + ENCODERS["zstd"](BODY[1000:]), b"zstd"),  # two frames
        # A skippable frame (magic 0x184D2A5?, its length, its bytes) before the data.
        (bytes.fromhex("502a4d1803000000") + b"abc" + ENCODERS["zstd"](BODY), b"zstd"),
        (compress(BODY, "gzip", "br")[0], b"GZIP , identity, Br"),  # case, spaces, identity
    ],
)
def test_what_the_formats_allow_is_decoded(encoded: bytes, header: bytes) -> None:
    assert decode(encoded, header) == BODY


def test_stacked_codings_are_undone_last_first() -> None:
    encoded = ENCODERS["br"](ENCODERS["gzip"](BODY))
    assert decode(encoded, b"gzip, br") == BODY
    # Two headers list their codings in order, as one would (RFC 9110 section 5.3).
    headers = [(b"content-encoding", b"gzip"), (b"Content-Encoding", b"br")]
    assert decode_request_body(headers, encoded, limit=MIB) == BODY
    assert refusal(encoded, b"br, gzip").status == 400


def test_a_body_without_codings_is_left_as_it_is() -> None:
    assert decode_request_body([(b"content-type", b"application/json")], BODY, limit=1) is BODY
    assert decode(BODY, b"identity", limit=1) is BODY
    assert decode(b"", b"zstd") == b""  # no content: nothing was coded


# -- refused -------------------------------------------------------------------------------


@pytest.mark.parametrize("header", [b"compress", b"gzip, lzma", b"zstd, \xff\xfe"])
def test_an_unknown_coding_gets_415_naming_what_proxai_accepts(header: bytes) -> None:
    error = refusal(compress(BODY, "gzip")[0], header)
    assert (error.status, error.type, error.code) == (
        415,
        "invalid_request_error",
        "unsupported_content_encoding",
    )
    assert error.headers == ((b"accept-encoding", ACCEPT_ENCODING),)
    assert "gzip, deflate, zstd, br" in error.message
    assert "\\xff" not in error.message and "\xff" not in error.message  # not quoted blindly


def test_more_codings_than_proxai_undoes_get_415() -> None:
    codings = ["gzip"] * (MAX_CODINGS + 1)
    encoded, header = compress(b"{}", *codings)
    error = refusal(encoded, header)
    assert error.status == 415
    assert f"at most {MAX_CODINGS}" in error.message


def _corrupt_bodies() -> list[tuple[str, bytes]]:
    cases = []
    for coding in ("gzip", "deflate", "zstd", "br"):
        whole = ENCODERS[coding](BODY)
        cases += [
            (coding, whole[:-9]),  # cut short
            (coding, whole + b"trailing bytes"),
            (coding, b"not compressed at all, just text"),
        ]
    return cases


@pytest.mark.parametrize(("coding", "body"), _corrupt_bodies())
def test_data_not_valid_in_its_coding_gets_400_naming_the_coding(coding: str, body: bytes) -> None:
    error = refusal(body, coding.encode())
    assert (error.status, error.type, error.code) == (
        400,
        "invalid_request_error",
        "invalid_content_encoding",
    )
    assert error.message.startswith(f"request body is not valid {coding} data")


def test_a_zstd_frame_asking_for_a_window_over_128_mib_is_refused() -> None:
    # zstd's default window_log_max (27): the decoder's own memory stays bounded too.
    assert decode(zstd_with_window(b"{}", 27), b"zstd") == b"{}"
    error = refusal(zstd_with_window(b"{}", 28), b"zstd")
    assert (error.status, error.code) == (400, "invalid_content_encoding")
    assert "too much memory" in error.message


def test_a_stage_that_fails_is_named() -> None:
    encoded = ENCODERS["br"](b"this is not gzip")
    error = refusal(encoded, b"gzip, br")
    assert "not valid gzip data" in error.message


# -- bounded -------------------------------------------------------------------------------


@pytest.mark.parametrize("coding", ONE_CODING)
def test_the_limit_counts_the_decoded_body(coding: str) -> None:
    encoded, header = compress(BODY, coding)
    assert len(encoded) < len(BODY) // 10
    assert decode(encoded, header, limit=len(BODY)) == BODY
    error = refusal(encoded, header, limit=len(BODY) - 1)
    assert (error.status, error.code) == (413, "request_too_large")
    assert error.message == (
        f"request body is larger than the limit of {len(BODY) - 1} bytes once decoded "
        "(server.max_request_body_bytes)"
    )


@functools.cache
def gigabyte_bomb(coding: str) -> bytes:
    return zeros_bomb(coding, 1024)


@pytest.mark.parametrize("coding", ["gzip", "deflate", "zstd", "br"])
def test_the_bomb_builder_makes_valid_streams(coding: str) -> None:
    decoded = {"gzip": gzip.decompress, "deflate": zlib.decompress}
    small = zeros_bomb(coding, 3)
    if coding in decoded:
        assert decoded[coding](small) == bytes(3 * MIB)
    assert decode(small, coding.encode(), limit=3 * MIB) == bytes(3 * MIB)


#: What decoding may hold beyond the limit: the piece that passes it (made in blocks,
#: then joined: twice its size for a moment), the slice of input and the decoder's copy
#: of what it has not read yet (zlib's unconsumed_tail), and small objects.
SLACK = 2 * PIECE_BYTES + 2 * SLICE_BYTES + 64 * 1024


def peak_while(limit: int, body: bytes, header: bytes) -> tuple[ProxyError, int]:
    tracemalloc.start()
    try:
        error = refusal(body, header, limit=limit)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return error, peak


@pytest.mark.parametrize("coding", ["gzip", "deflate", "zstd", "br"])
def test_a_gigabyte_bomb_stops_right_after_the_limit(coding: str) -> None:
    bomb = gigabyte_bomb(coding)
    assert len(bomb) < 2 * MIB  # a thousandfold and more
    error, peak = peak_while(MIB, bomb, coding.encode())
    assert (error.status, error.code) == (413, "request_too_large")
    assert peak < MIB + SLACK, f"{peak - MIB} bytes held past the limit"


def test_a_stacked_bomb_stops_at_the_stage_that_passes_the_limit() -> None:
    # br over gzip over 1 GiB of zeros: the gzip stage never decodes past the limit.
    bomb = ENCODERS["br"](gigabyte_bomb("gzip"))
    assert len(bomb) < 64 * 1024
    error, peak = peak_while(4 * MIB, bomb, b"gzip, br")
    assert error.status == 413
    assert peak < 4 * MIB + len(gigabyte_bomb("gzip")) + SLACK
    # A stage in the middle counts too: its output is the next one's input.
    error, _ = peak_while(MIB // 2, bomb, b"gzip, br")
    assert error.status == 413
