"""Names the command line needs before the planner loads (its help stays light)."""

STRATEGIES = ("blocking", "async", "memory", "multitier")  # the checkpoint strategies (strategy.py)
