"""`tfmp.distribute`: tfmp 0.1's path of `tfmp.run.distribute`, with a DeprecationWarning."""

from tfmp._deprecated import alias

alias(__name__)
