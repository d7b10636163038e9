"""Hardware: GPU, link, storage and model presets (:mod:`.presets`), the copy-time model
(:mod:`.linkmodel`), GPU memory as SGLang profiles it (:mod:`.memory`), and the calibration file that
overrides the link presets and compute knobs for one machine (:mod:`.calibration`)."""
