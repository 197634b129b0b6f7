"""memplan's exceptions: one base class, :class:`Error`, and one class per kind of failure.

The compiled module raises these (it looks them up here), so that they can inherit from
Python's own exceptions: an :class:`InputError` is a :class:`ValueError`, an
:class:`OptionError` is a :class:`TypeError` too, as Python's own unexpected keyword
arguments are.
"""

from __future__ import annotations

from typing import Any


class Error(Exception):
    """Base class of every error memplan raises."""


class InputError(Error, ValueError):
    """Bad input: a malformed graph or config, a value out of range, a negative size.

    The message is the one the ``memplan`` command prints, each cause once.
    """


class OptionError(InputError, TypeError):
    """An option that does not exist, or a value of the wrong type for one."""


class UnsafePlanError(Error):
    """A plan that the independent verifier rejects, or whose bytes the check finds
    clobbered. ``report`` holds the :class:`memplan.CheckReport` when ``memplan.check``
    raised it."""

    report: Any = None


class DoesNotFitError(Error):
    """Nothing fits the budget or capacity. ``result`` holds what was found (a
    :class:`memplan.FitResult` or :class:`memplan.ServingCapacity`) where there is one."""

    result: Any = None


__all__ = ["Error", "InputError", "OptionError", "UnsafePlanError", "DoesNotFitError"]
