"""Small dataset files in the standard formats, written by the tests of tfmp/run/data/ (nothing is downloaded)."""

import numpy as np


def write_mnist(directory, num_train=50, num_test=20):
    """Writes a small mnist.npz in Keras's format; returns its arrays."""
    rng = np.random.default_rng(0)
    arrays = dict(
        x_train=rng.integers(0, 256, (num_train, 28, 28), dtype=np.uint8),
        y_train=rng.integers(0, 10, num_train, dtype=np.uint8),
        x_test=rng.integers(0, 256, (num_test, 28, 28), dtype=np.uint8),
        y_test=rng.integers(0, 10, num_test, dtype=np.uint8),
    )
    arrays["x_train"][0, 0, :3] = [0, 128, 255]
    np.savez_compressed(directory / "mnist.npz", **arrays)
    return arrays


def cifar_batch(rng, n, name):
    """A CIFAR-10 python batch: bytes keys, uint8 rows of 3,072 channel-major values."""
    return {
        b"batch_label": name.encode(),
        b"labels": rng.integers(0, 10, n).tolist(),
        b"data": rng.integers(0, 256, (n, 3072), dtype=np.uint8),
        b"filenames": [f"img_{i}.png".encode() for i in range(n)],
    }


def write_cifar_folder(directory, sizes=(4, 3, 4, 2, 4), num_test=3):
    """Writes cifar-10-batches-py/ with five data batches and a test batch; returns the dicts."""
    import pickle

    rng = np.random.default_rng(1)
    folder = directory / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    batches = {f"data_batch_{i}": cifar_batch(rng, n, f"training batch {i}") for i, n in enumerate(sizes, 1)}
    batches["test_batch"] = cifar_batch(rng, num_test, "testing batch")
    # First image: red, green and blue of pixel (0, 0), then red of (0, 1) and of (1, 0).
    first = batches["data_batch_1"][b"data"][0]
    first[[0, 1024, 2048, 1, 32]] = [11, 22, 33, 44, 55]
    for name, batch in batches.items():
        payload = pickle.dumps(batch, protocol=3)
        if name == "data_batch_2":
            # The real files were written by numpy 1.x, which names numpy.core.
            assert payload.count(b"cnumpy._core.multiarray\n") == 1
            payload = payload.replace(b"cnumpy._core.multiarray\n", b"cnumpy.core.multiarray\n")
        (folder / name).write_bytes(payload)
    return batches


def expected_cifar(batches):
    def images(names):
        rows = np.concatenate([batches[name][b"data"] for name in names])
        return rows.reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1)

    def labels(names):
        return np.concatenate([batches[name][b"labels"] for name in names]).astype(np.int32)

    train = [f"data_batch_{i}" for i in range(1, 6)]
    return images(train), labels(train), images(["test_batch"]), labels(["test_batch"])


def assert_split_equal(split, expected):
    for got, want in zip(split, expected):
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)
