"""Calibration: fitting the link model to measured copies (:mod:`.fit`), the calibration file
(:mod:`.file`), and simulated-vs-measured validation (:mod:`.validate`)."""
