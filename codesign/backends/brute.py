"""``--solver brute``: exact enumeration of a whole design space with the model, the reference
backend for spaces of at most :data:`MAX_POINTS` points.

It takes no MIP. It asks the problem for its own brute force (``Problem.brute_force``: each kind's
vectorised enumeration, the one its exactness tests compare the MIP with) and reports what that
found; the solve driver (:func:`codesign.proof.driver.solve`) writes it into the same record as a
MIP solve. A finished enumeration is a proof by exhaustion: its best design is optimal and its
objective is the bound. A time limit stops the enumeration between chunks: the best design of the
part enumerated is kept, and no bound is claimed (the rest of the space was not looked at).

The size checked is ``Problem.space_size()``, the product of every decision's domain: a larger
space is refused before any work, with an InputError naming both numbers.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from codesign.errors import InputError, ModelError

if TYPE_CHECKING:
    from codesign.kinds.base import Assessment

#: the backend's name (``--solver brute``)
NAME = "brute"
#: the largest design space enumerated, in points (``Problem.space_size()``)
MAX_POINTS = 10**8


@dataclass(frozen=True)
class Enumeration:
    """What one enumeration found.

    Attributes:
        best: the model's assessment of the best feasible design found (None: none found).
        points: the size of the space (``Problem.space_size()``).
        feasible_points: as the kind's brute force counts them (see its ``brute_force``).
        complete: every point was enumerated (False: a time limit stopped it).
        seconds: wall time of the enumeration.
    """

    best: Assessment | None
    points: int
    feasible_points: int | None
    complete: bool
    seconds: float

    @property
    def termination(self) -> str:
        if self.complete:
            found = "the best feasible design" if self.best is not None else "no feasible design"
            return f"enumerated all {self.points:,} points: {found}"
        return (f"time limit reached during the enumeration of {self.points:,} points: the best design of the "
                "part enumerated, no bound")


def check_space(problem: Any, limit: int = MAX_POINTS) -> int:
    """The size of ``problem``'s space; an InputError when it is over ``limit``."""
    size = int(problem.space_size())
    if size > limit:
        raise InputError(
            f"{problem.name}: {size:.3g} design points, more than --solver brute enumerates ({limit:.0e})",
            key="--solver", value=NAME, expected=f"a design space of at most {limit:.0e} points",
            suggestion="--solver highs or --solver cpsat (the exact MIP: no enumeration)")
    return size


def enumerate_space(problem: Any, time_limit: float | None = None) -> Enumeration:
    """Enumerate ``problem``'s space with the model (at most :data:`MAX_POINTS` points, else an
    InputError), stopping at ``time_limit`` seconds. Raises ModelError when the design the
    enumeration calls best is one the model rejects."""
    size = check_space(problem)
    t0 = time.perf_counter()
    deadline = None if time_limit is None else t0 + time_limit
    try:
        bf = problem.brute_force(deadline=deadline)
    except ValueError as exc:  # a kind without brute force, or one that refuses this space
        raise InputError(f"{problem.name}: {exc}", key="--solver", value=NAME,
                         suggestion="--solver highs or --solver cpsat") from exc
    if bf.best is not None and not bf.best.feasible:
        raise ModelError(f"the enumeration of {problem.name} calls {bf.best.design} best, but the model rejects it: "
                         + "; ".join(bf.best.violations))
    return Enumeration(bf.best, size, bf.feasible_points, bf.complete, time.perf_counter() - t0)
