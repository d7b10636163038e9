"""``python -m hicache_sim``: the same CLI as the ``hicache-sim`` console script."""

from .cli import main

main()
