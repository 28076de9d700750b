"""`tfmp.tasks`: tfmp 0.1's path of `tfmp.run.tasks`, with a DeprecationWarning."""

from tfmp._deprecated import alias

alias(__name__)
