"""`tfmp.memory`: tfmp 0.1's path of `tfmp.run.memory_meters`, with a DeprecationWarning."""

from tfmp._deprecated import alias

alias(__name__)
