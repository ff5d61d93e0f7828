"""Planning a future run from fitted rates: predicted TOR, the best checkpoint strategy and interval (pure)."""

from toranalyze.plan.core import PlanOptions
from toranalyze.plan.planner import plan

__all__ = ["PlanOptions", "plan"]
