"""Planning a future run from fitted rates: predicted TOR, the best checkpoint strategy and interval (pure).

The package itself stays light (the command line shows its help without numpy or scipy);
``PlanOptions`` and ``plan`` load on first use.
"""

from __future__ import annotations

from typing import Any

from toranalyze.plan.names import STRATEGIES

__all__ = ["STRATEGIES", "PlanOptions", "plan"]


def __getattr__(name: str) -> Any:
    if name == "PlanOptions":
        from toranalyze.plan.core import PlanOptions

        return PlanOptions
    if name == "plan":
        from toranalyze.plan.planner import plan

        return plan
    raise AttributeError(name)
