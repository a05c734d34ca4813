"""`lightning_bench tune` (command.py): search spaces from the declared parameters (space.py), the objective
from downstream cells (objective.py), Ray Tune (search.py), the tuned-config cache (cache.py). Nothing is
imported here: `downstream --tuned_configs` reads cache.py without the command."""
