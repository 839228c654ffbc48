"""Sweeps: thousands of proven solves over a product of instances, objectives, budgets and
catalog substitutions, on dask.distributed or in this process.

- :mod:`codesign.sweep.spec` — the SPEC file and the points of its product;
- :mod:`codesign.sweep.job` — one point's solve as plain data, and running it;
- :mod:`codesign.sweep.executor` — independent jobs on a local or remote dask cluster (or in
  this process), their outcomes as they finish: the executor other studies reuse;
- :mod:`codesign.sweep.store` — the output directory: records, journal, results tables;
- :mod:`codesign.sweep.run` — a sweep from its SPEC to its tables (``codesign sweep``).

Importing this package loads neither dask nor pyarrow (``executor``, ``store`` and ``run`` do).
"""
