"""Fleet: many runs -> fleet tables, censored failure-rate fits, lemon nodes and rates.json."""
