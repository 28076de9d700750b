"""The tiny parity experiment of the tests of tfmp/run/parity/: the embedded digits, the narrowest MobileNetV2."""

import dataclasses

from tfmp.run import parity

# Tiny but real: the embedded digits, a few steps of the narrowest MobileNetV2.
TINY = dataclasses.replace(parity.DEFAULT_CLASSIFIER, batch_size=8, epochs=2, steps_per_epoch=3)


def tiny_config(tmp_path, **changes):
    return parity.ParityConfig(classifier=dataclasses.replace(TINY, logdir=str(tmp_path)), **changes)
