"""tfmp's run framework: whole training runs built on the core.

The core (`tfmp.precision`, `tfmp.loss_scale`, `tfmp.trainers`, `tfmp.layers`,
`tfmp.mixed_precision`) is what `import tfmp` loads; it never imports this package.
Here, each layer imports only the ones below it:

* entry points: `training` (`train_gan`, `train_classifier`, `diagnose_run`, ...),
  `benchmark`, `parity`, `reporting`;
* one run: `runner` (the loop's owner) and `tasks` (what one config builds);
* settings: `config`;
* run services: `callbacks`, `checkpoint`, `rundir`, `preemption`, `distribute`,
  `autotune`, `diagnostics`, `data`, `memory`.

Importing `tfmp.run` itself loads nothing: import the module you need.
"""
