"""Planning a future run from fitted rates: predicted TOR and the best checkpoint interval (pure)."""

from toranalyze.plan.core import PlanOptions, plan

__all__ = ["PlanOptions", "plan"]
