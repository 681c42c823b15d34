"""``python -m fp4patch``."""

from .cli.entry import main

main()
