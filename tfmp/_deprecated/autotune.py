"""`tfmp.autotune`: tfmp 0.1's path of `tfmp.run.autotune`, with a DeprecationWarning."""

from tfmp._deprecated import alias

alias(__name__)
