"""What a run leaves behind: the output folder and its marker (:mod:`.write`), summary.json
(:mod:`.summary`), figures (:mod:`.plots`), and the digest of what a result was computed from
(:mod:`.identity`)."""
