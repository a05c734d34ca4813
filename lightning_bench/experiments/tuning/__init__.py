"""`lightning_bench tune` (command.py): search spaces from the declared parameters (space.py), the objective
from downstream cells (objective.py), Ray Tune (search.py). The tuned-config cache it writes is
results/tuned_configs.py, below the experiments, so that `test --sparsity.tuned_configs` (the Lightning recipe)
and `downstream --tuned_configs` read it without this command. Nothing is imported here."""
