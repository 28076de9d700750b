"""tfmp's run framework: whole training runs built on the core.

The core (`tfmp.precision`, `tfmp.loss_scale`, `tfmp.trainers`, `tfmp.layers`,
`tfmp.mixed_precision`) is what `import tfmp` loads; it never imports this package.
Here, each layer imports only the ones below it:

* entry points: `training` (`train_gan`, `train_classifier`, `diagnose_run`, ...),
  `benchmark`, `parity`;
* presenting results: `reporting` (takes any records; imports none of the above);
* one run: `runner` (the loop's owner) and `tasks` (what one config builds);
* run services: `callbacks`, `checkpoint` (with `legacy_checkpoint`, the reader
  of tfmp 0.1.0's layout), `determinism`, `rundir`, `preemption`, `distribute`,
  `autotune`, `diagnostics`, `memory`;
* settings: `config` (with the choices it checks, e.g. `STRATEGIES`,
  `CONSOLE_MODES`), over `data` (the datasets).

Importing `tfmp.run` itself loads nothing: import the module you need.
"""

__all__: list[str] = []  # the modules are imported by name (`from tfmp.run import config`)
