"""Kubernetes flavour: not written yet; asking for it is a usage error (see docs/simulate.md)."""
from __future__ import annotations


def write_kubernetes(w, out):  # noqa: ANN001
    raise ValueError("the kubernetes flavour is not written yet")
