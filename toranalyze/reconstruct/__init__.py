"""Reconstruction: events -> jobs, attempts, progress, incidents, slow periods and the TOR ledger."""
