"""Hardware: GPU, link, storage and model presets (:mod:`.presets`), the copy-time model
(:mod:`.linkmodel`), and GPU memory as SGLang profiles it (:mod:`.memory`)."""
