"""get_into writes the value into the caller's buffer; put reads any
buffer."""

import array

import numpy as np
import pytest

import nessie

VALUE = bytes(range(256)) * 64  # 16 KiB


@pytest.fixture
def client(cluster):
    c = cluster.client(0)
    c.put(b"v", VALUE)
    cluster.client(1).put(b"remote", VALUE)
    return c


def test_into_a_bytearray(client):
    buf = bytearray(len(VALUE) + 100)
    assert client.get_into(b"v", buf) == len(VALUE)
    assert buf[: len(VALUE)] == VALUE
    assert buf[len(VALUE) :] == bytes(100), "the rest is untouched"


def test_into_a_memoryview_slice_writes_through(client):
    backing = bytearray(2 * len(VALUE))
    view = memoryview(backing)[len(VALUE) :]
    # Remote value, twice: the second GET is a cache hit.
    for _ in range(2):
        assert client.get_into(b"remote", view) == len(VALUE)
        assert backing[len(VALUE) :] == VALUE
        assert backing[: len(VALUE)] == bytes(len(VALUE))


def test_into_numpy_arrays_of_any_dtype(client):
    u8 = np.zeros(len(VALUE), dtype=np.uint8)
    assert client.get_into(b"v", u8) == len(VALUE)
    assert u8.tobytes() == VALUE
    f32 = np.zeros(len(VALUE) // 4, dtype=np.float32)
    assert client.get_into(b"v", f32) == len(VALUE)
    assert f32.tobytes() == VALUE
    assert client.get_into(b"v", array.array("Q", bytes(len(VALUE)))) == len(VALUE)


def test_a_buffer_too_small_says_how_much_is_needed(client):
    buf = bytearray(100)
    with pytest.raises(nessie.BufferTooSmallError) as info:
        client.get_into(b"v", buf)
    assert (info.value.needed, info.value.capacity) == (len(VALUE), 100)
    assert buf == bytes(100), "nothing copied"
    buf = bytearray(info.value.needed)
    assert client.get_into(b"v", buf) == len(VALUE)


def test_a_missing_key_is_none_and_leaves_the_buffer(client):
    buf = bytearray(b"x" * 8)
    assert client.get_into(b"absent", buf) is None
    assert buf == b"x" * 8


def test_read_only_and_strided_buffers_are_refused(client):
    with pytest.raises(BufferError):
        client.get_into(b"v", bytes(len(VALUE)))
    strided = np.zeros(2 * len(VALUE), dtype=np.uint8)[::2]
    # NumPy refuses a contiguous export of a strided view with ValueError.
    with pytest.raises((BufferError, ValueError)):
        client.get_into(b"v", strided)
    with pytest.raises(TypeError):
        client.get_into(b"v", "not a buffer")


def test_put_from_numpy_and_array(client):
    a = np.arange(1000, dtype=np.int64)
    client.put(b"np", a)
    assert np.frombuffer(client.get(b"np"), dtype=np.int64).tolist() == a.tolist()
    client.put(b"arr", array.array("d", [1.5, 2.5]))
    assert array.array("d", client.get(b"arr")).tolist() == [1.5, 2.5]


def test_many_into_one_buffer_slot_by_slot(client):
    stride = len(VALUE) + 8
    buf = bytearray(3 * stride)
    assert client.get_many_into([b"v", b"absent", "remote"], buf, stride) == [
        len(VALUE),
        None,
        len(VALUE),
    ]
    assert buf[:len(VALUE)] == VALUE
    assert buf[stride : 2 * stride] == bytes(stride), "an absent key's slot is untouched"
    assert buf[2 * stride : 2 * stride + len(VALUE)] == VALUE


def test_many_into_refuses_a_short_buffer_or_slot(client):
    with pytest.raises(ValueError, match="len\\(keys\\) \\* stride"):
        client.get_many_into([b"v", b"v"], bytearray(len(VALUE)), len(VALUE))
    with pytest.raises(ValueError):
        client.get_many_into([b"v"], bytearray(10), 0)
    with pytest.raises(nessie.BufferTooSmallError) as e:
        client.get_many_into([b"v"], bytearray(100), 100)
    assert e.value.needed == len(VALUE)

