"""tfmp's run framework: whole training runs built on the core.

The core (`tfmp.precision`, `tfmp.loss_scale`, `tfmp.optimizers`, `tfmp.trainers`,
`tfmp.layers`, `tfmp.mixed_precision`) is what `import tfmp` loads; it never
imports this package. Here, each layer imports only the ones below it (the
table is in docs/guides/architecture.md and tests/test_layering.py):

* paired runs: `parity`;
* entry points: `training` (`train_gan`, `train_classifier`, `diagnose_run`, ...),
  `benchmark`, `reporting`;
* one run: `runner`; what a config settles to: `settled`;
* the shipped tasks: `shipped`; loading `--task=MODULE:NAME`: `task_loader`;
  `auto`'s trial runs of a task: `trials`;
* what a task is: `tasks` (`Task`, `SupervisedTask`);
* a run's side effects: `callbacks`;
* run services: `checkpoint`, `distribute`, `diagnostics`;
* settings: `config` (with the choices it checks, e.g. `STRATEGIES`, `CONSOLE_MODES`);
* leaves: `autotune` (the candidate precisions and the cached choice), `data`,
  `determinism`, `preemption`, `memory_meters`, `options` (a config field),
  `output` (where the run's lines go).

Importing `tfmp.run` itself loads nothing: import the module you need.
"""

__all__: list[str] = []  # the modules are imported by name (`from tfmp.run import config`)
