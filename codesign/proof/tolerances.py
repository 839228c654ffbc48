"""Every tolerance the proof of an answer rests on, in one place.

A solve is called *optimal* only when the solver's bound has reached the best design the model
verified (within ``GAP_TOL``) and a last solve, asking for a design better than it by more than
``CONFIRM_RTOL``, found none. The solvers' own gap tolerances are set to zero
(:data:`SOLVER_GAPS`): HiGHS defaults to 1e-4 relative and CP-SAT to 1e-4 absolute, either of
which would let a solver stop on a design that is not the best.
"""

from __future__ import annotations

from typing import Any

#: a result is called optimal when the verified relative gap is at most this
GAP_TOL = 1e-6
#: designs within this relative distance of the best verified one are ties: the confirming solve
#: asks only for designs better than that (a solver meets its rows within ~1e-7 of their scale)
CONFIRM_RTOL = 1e-7
#: the MIP's objective of a design and the model's must agree to this relative difference when the
#: backend solves the MIP as built (no integer rescaling)
OBJECTIVE_RTOL = 1e-6
#: two solvers agree when the model's objectives of their optimal designs differ by at most this
#: (each is within GAP_TOL of its own proof; ties closer than CONFIRM_RTOL may differ)
AGREEMENT_RTOL = 2 * GAP_TOL
#: a re-checked record's objective must equal the model's value to this relative difference
RECHECK_RTOL = 1e-9
#: the least time a round of the driver is given under a time limit (the first always runs)
MIN_ROUND_TIME_S = 0.01
#: at most this many solver rounds in one driver run (each excludes one more design)
MAX_ROUNDS = 200

#: the gap tolerances every backend is given: "optimal" from a solver means a closed gap
SOLVER_GAPS: dict[str, float] = {"mip_rel_gap": 0.0, "mip_abs_gap": 0.0}


def table() -> dict[str, Any]:
    """The tolerances as a record states them."""
    return {
        "verified_gap": GAP_TOL,
        "confirm_rtol": CONFIRM_RTOL,
        "objective_rtol": OBJECTIVE_RTOL,
        "agreement_rtol": AGREEMENT_RTOL,
        **SOLVER_GAPS,
    }
