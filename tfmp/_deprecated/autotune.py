"""`tfmp.autotune`: tfmp 0.1's path of `tfmp.run.auto_precision`, with a DeprecationWarning."""

from tfmp._deprecated import alias

alias(__name__)
