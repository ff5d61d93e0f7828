"""Kubernetes flavour (placeholder until written)."""
from __future__ import annotations


def write_kubernetes(w, out):  # noqa: ANN001
    raise ValueError("the kubernetes flavour is not written yet")
