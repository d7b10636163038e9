"""Calibration: fitting the link model to measured copies (:mod:`.fit`) and simulated-vs-measured
validation (:mod:`.validate`). The calibration file they write describes hardware and lives beside the
presets it overrides (:mod:`hicache_sim.hardware.calibration`)."""
