"""The calibration product: the model against measured serving performance, and the fit of the
calibration the model runs under (``codesign validate``, ``codesign calibrate``; VALIDATION.md).

- :mod:`~codesign.calibration.rows`: reading measurement rows, the benchmarks' request counts
  and engines, the fit/held-out split;
- :mod:`~codesign.calibration.engine`: the benchmark engine's rules (one design per row, its
  batch: memory, maximum batch, decoding-state slots, requests);
- :mod:`~codesign.calibration.terms`: a row's prediction re-composed from calibration-free terms;
- :mod:`~codesign.calibration.fit`: fitting the calibration per chip family;
- :mod:`~codesign.calibration.write`: writing a fitted calibration file;
- :mod:`~codesign.calibration.report`: predictions, errors, groups, targets, the text report;
- :mod:`~codesign.calibration.plot`: the predicted-vs-measured plot.

The calibration itself (its schema and :class:`~codesign.model.calibration.CalibrationSet`) is the
model's: :mod:`codesign.model.calibration`.
"""
