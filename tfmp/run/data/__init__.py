"""Datasets and input pipelines.

`load_digits` is the embedded real dataset: 1,797 handwritten digits shipped
inside the package (see `tfmp/datasets/README.md`), usable with no network.
`load_mnist` and `load_cifar10` read the standard datasets, either from a
directory the caller filled (no download) or through Keras's download cache;
when neither works they raise `DatasetNotFoundError`, which says where to put
the file and points to `digits`; a file that is there but unusable raises
`CorruptDatasetError`, naming it. `synthetic` makes random images for
benchmarks, and `load_images` picks one of them by name (see `DATASETS`).

`make_dataset` is the `tf.data` pipeline the image models feed from;
`batched` makes one from any examples a task holds (arrays, dicts of
arrays, an unbatched `tf.data.Dataset`, or a function returning batches).
MNIST, CIFAR-10 and synthetic images stay uint8 in memory; the pipeline
scales each batch to [0, 1] in float32 on the host, and the model's first
layer casts it to its compute dtype.

One module per concept: `digits`, `mnist` and `cifar10` read one dataset
each, `image_datasets` picks one by name (and makes `synthetic` ones), `pipeline`
builds the `tf.data` pipelines, and `_split` holds the `Split` and the
errors the readers share. Their public names are all importable from here.
"""

from tfmp.run.data._split import CorruptDatasetError, DatasetNotFoundError, Split
from tfmp.run.data.cifar10 import load_cifar10
from tfmp.run.data.digits import load_digits
from tfmp.run.data.image_datasets import DATASETS, load_images, synthetic
from tfmp.run.data.mnist import load_mnist
from tfmp.run.data.pipeline import batched, make_dataset

__all__ = [
    "DATASETS",
    "CorruptDatasetError",
    "DatasetNotFoundError",
    "Split",
    "batched",
    "load_cifar10",
    "load_digits",
    "load_images",
    "load_mnist",
    "make_dataset",
    "synthetic",
]
