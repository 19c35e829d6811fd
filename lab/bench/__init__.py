"""The benchmarks behind ``tools/analysis_tools/benchmark_*.py`` and ``profile_training.py``: our
layers beside the official code, SDPA and mmseg's SRA (:mod:`.suite` over :mod:`.suite_cases`,
measured by :mod:`.measure`); whole models beside their stock twins (:mod:`.models` over
:mod:`.model_pairs`, :mod:`.largest_input`); inference latency (:mod:`.inference`, :mod:`.demo_fps`)
and a per-module training profile (:mod:`.profile`). :mod:`.official_code` imports the official
modules (``--peers``); each measurement runs in a process of its own (:mod:`.processes`).
"""
