"""`tfmp.data`: tfmp 0.1's path of `tfmp.run.data`, with a DeprecationWarning."""

from tfmp._moved import alias

alias(__name__)
