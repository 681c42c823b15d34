"""``python -m fp4patch``."""

from .entry import main

main()
