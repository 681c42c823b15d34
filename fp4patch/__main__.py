"""``python -m fp4patch``."""

from .cli import run

run()
