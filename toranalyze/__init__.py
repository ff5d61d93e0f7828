"""toranalyze: the Training Overhead Ratio and the failures behind it, from a run's logs."""

__version__ = "0.2.0"

__all__ = ["__version__"]
