"""Capture: run a target model (transformers) over prompts and write the hidden-state slots as
speculators v1 samples, as trainers do or exactly as a serving engine would feed a given draft.

- :func:`inspector.capture.run.capture` / :class:`~inspector.capture.run.CaptureSettings`: the
  `eagle-inspect capture` command's engine;
- :func:`inspector.capture.cache.prompts_samples`: ``--prompts`` on open / eval / doctor;
- :mod:`inspector.capture.conventions`: how each trainer and engine maps configured layer ids to
  HF hidden-state indices (pure).

Submodules import torch / transformers; this package file imports nothing, so the CLI stays fast.
"""
