"""Where the stages of the analysis check their frames against their contracts
(reconstruct/contracts.py), named by the contract's name so that a normal run imports neither
the contracts nor their schema library.

Checking is on when the environment variable ``TORANALYZE_CHECK_CONTRACTS`` is ``1`` (the test
suite sets it); off, a stage pays one lookup.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from typing import Any, TypeVar

import polars as pl

ENV = "TORANALYZE_CHECK_CONTRACTS"
F = TypeVar("F", bound=Callable[..., Any])
# Every function marked as a stage (module.name), and those that ran with checking on (-> times).
STAGES: set[str] = set()
EXERCISED: dict[str, int] = {}


def checking() -> bool:
    return os.environ.get(ENV) == "1"


def check(frame: pl.DataFrame, contract: str, where: str = "") -> pl.DataFrame:
    """``frame``; with checking on, first checked against the contract named ``contract``
    (``contracts.ContractError`` when it does not match)."""
    if checking():
        from toranalyze.reconstruct import contracts

        contracts.check(frame, getattr(contracts, contract), where)
    return frame


def stage(*contracts: str | None) -> Callable[[F], F]:
    """Mark a function as a stage returning a frame (or a tuple of them) of the contracts named
    (None: not a frame, or not checked); with checking on, each returned frame is checked."""

    def mark(fn: F) -> F:
        name = f"{fn.__module__.rsplit('.', 1)[-1]}.{fn.__name__}"
        STAGES.add(name)

        @functools.wraps(fn)
        def run(*args: Any, **kwargs: Any) -> Any:
            out = fn(*args, **kwargs)
            if checking():
                EXERCISED[name] = EXERCISED.get(name, 0) + 1
                frames = out if isinstance(out, tuple) else (out,)
                for frame, contract in zip(frames, contracts, strict=True):
                    if contract is not None and frame is not None:
                        check(frame, contract, name)
            return out

        return run  # type: ignore[return-value]

    return mark
