"""Shared test set-up.

Two logical CPU devices are configured before TensorFlow initialises, so that
MirroredStrategy tests run on a CPU-only machine. Every test is checked for
leaking global state: the Keras dtype policy and the TF32 switch must be the
same after the test as before it.

TensorFlow is imported lazily: under pytest-xdist the controller process runs
no test and should not pay for (or print the start-up logs of) TensorFlow.
"""

import os

import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def _is_xdist_controller(config) -> bool:
    return bool(config.getoption("numprocesses", default=None)) and "PYTEST_XDIST_WORKER" not in os.environ


def pytest_configure(config):
    # `--precision=auto` caches its CPU measurements; tests must not touch the user's cache.
    if "TFMP_CACHE_DIR" not in os.environ:
        import tempfile

        os.environ["TFMP_CACHE_DIR"] = tempfile.mkdtemp(prefix="tfmp-test-cache-")
    if _is_xdist_controller(config):
        return
    import tensorflow as tf

    cpus = tf.config.list_physical_devices("CPU")
    tf.config.set_logical_device_configuration(cpus[0], [tf.config.LogicalDeviceConfiguration()] * 2)


def _timeout(item) -> float:
    marker = item.get_closest_marker("timeout")
    return float(marker.args[0]) if marker is not None and marker.args else 0.0


def pytest_collection_modifyitems(items):
    """Longest first: a test given a longer timeout (`@pytest.mark.timeout`) is collected before the rest.

    Under `-n 2 --dist worksteal` such a test then starts at once on one
    worker while the other takes the rest, instead of starting behind a
    queue of shorter tests. The sort is stable: otherwise collection order.
    """
    items.sort(key=lambda item: -_timeout(item))


@pytest.fixture(autouse=True)
def global_state_is_restored():
    """Fails a test that leaves a different dtype policy or TF32 setting behind."""
    import keras
    import tensorflow as tf

    policy = keras.config.dtype_policy()
    tf32 = tf.config.experimental.tensor_float_32_execution_enabled()
    yield
    leaked_policy = keras.config.dtype_policy().name
    leaked_tf32 = tf.config.experimental.tensor_float_32_execution_enabled()
    keras.config.set_dtype_policy(policy)
    tf.config.experimental.enable_tensor_float_32_execution(tf32)
    assert leaked_policy == policy.name, f"dtype policy leaked: {leaked_policy}"
    assert leaked_tf32 == tf32, f"TF32 setting leaked: {leaked_tf32}"


@pytest.fixture(scope="session")
def digits():
    """The embedded digits at 28x28x1, split with seed 0."""
    from tfmp.run import data

    return data.load_digits(image_size=(28, 28), channels=1, seed=0)
