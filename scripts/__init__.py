"""Command-line front ends (absl), installed as the `tfmp_scripts` package.

Each script is thin: it defines flags, builds a config from them and calls one
`tfmp.run.training` function. Run them as `python3 scripts/<name>.py` or through
the console commands `setup.cfg` declares (`tfmp-train-gan`, ...).
"""
