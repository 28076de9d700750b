"""Does mixed precision keep float32's accuracy? Paired runs over seeds and folds.

`run_parity(ParityConfig(...))` trains a model once per *unit* (a seed and,
with `folds > 1`, a fold of the data) and *arm* (a precision, or a variant
of one) and returns one `ParityRecord` per run. The model is the MobileNetV2
classifier on the embedded digits by default, or any `tfmp.run.tasks.Task`
(`ParityConfig.for_task(task)`: seeds and precisions, one split per seed). The
design is *paired*: in a unit every arm starts from the same initial weights
(the variables are float32 under every policy, and the seed fixes their
initializers), trains on the same images and sees the same batches in the
same order (the pipeline's shuffle is seeded). The model has no dropout, so
nothing else is random. The difference between an arm's result and
float32's in the same unit is therefore made by the arithmetic alone, and
`paired_gaps` summarises those differences over the units: their mean,
standard error and 95% interval, for the accuracy (when the model logs
`accuracy`) and for the validation loss (for a classifier, the mean negative
log-likelihood, a continuous metric). A task of your own must be paired the
same way: its pipeline's order fixed by the config's seed, and no randomness
but the seeded one.

Levers of the classifier's design (`ParityConfig`):

* `folds`: k-fold rotation over the union of the dataset's training and
  validation images, so that each image is evaluated once per seed.
* `lr_warmup_steps`: a linear learning-rate warm-up before the cosine decay.
* `average_last`: a run's accuracy and loss are the mean of the validation
  evaluations after its last epochs (every epoch's are in the record).
* `control`: also run float32 with Keras's unfused BatchNormalization, a
  rounding-only change of float32's arithmetic; its paired gap to float32 is
  the design's noise floor.
* `fp16_initial_scales`: extra mixed_float16 arms whose dynamic loss scale
  starts elsewhere than the default 2**15.

`parity_task` builds the task of one run and `paired_start` returns what it
starts from (initial weights, batch order) without training, so the pairing
can be checked: `run_parity` checks it for every unit before training and
refuses to compare unpaired runs.

```python
from tfmp.run import parity
records = parity.run_parity(parity.ParityConfig(seeds=(0, 1), control=True))
print(parity.parity_table(records))
parity.paired_gaps(records)["mixed_float16"].accuracy.mean   # points, negative: below float32
```

The measured figures and what they mean are in [Numerics](../../NUMERICS.md).

One module per concept: `design` (the arms, units and levers, and the
k-fold splits), `task` (the classifier task of one run), `runs` (what a run
starts from, the pairing check and `run_parity`), `record` (one run's result), `gaps` (the paired
statistics) and `table` (the Markdown table). Their public names are all
importable from here.
"""

from tfmp.run.parity.design import CONTROL, DEFAULT_CLASSIFIER, Arm, ParityConfig, fold_split
from tfmp.run.parity.gaps import PairedGap, paired_gaps
from tfmp.run.parity.record import ParityRecord
from tfmp.run.parity.runs import PairedStart, PairingError, paired_start, run_parity
from tfmp.run.parity.table import parity_table
from tfmp.run.parity.task import parity_task

__all__ = [
    "CONTROL",
    "DEFAULT_CLASSIFIER",
    "Arm",
    "PairedStart",
    "PairingError",
    "ParityConfig",
    "ParityRecord",
    "PairedGap",
    "fold_split",
    "paired_gaps",
    "paired_start",
    "parity_table",
    "parity_task",
    "run_parity",
]
