"""The solver-neutral mixed-integer program and its exact linearizations (no solver imports)."""
