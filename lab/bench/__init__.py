"""The benchmarks behind ``tools/analysis_tools/benchmark_*.py`` and ``profile_training.py``: the
side-by-side suite of our layers, the official code, SDPA and mmseg's SRA (:mod:`.suite`, its cases
in :mod:`.cases`, each measurement in a fresh process by :mod:`.measure`); whole models beside their
stock counterparts (:mod:`.models` over the pairs of :mod:`.model_pairs`, the largest input of one
model in :mod:`.largest_input`); inference latency (:mod:`.inference`), single layers
(:mod:`.attention`) and a per-module profile of a training step
(:mod:`.profile`). :mod:`.official_code` imports the official repositories' modules (``--peers``);
each measurement runs in a process of its own (:mod:`.processes`) and each run writes its record
(:mod:`.records`).

Nothing here is imported by ``import mmvisattn``; the tools under ``tools/`` are argument front
doors over these modules.
"""
