"""The proofs of a GPU: what a user runs on their own GPU, and what the records hold.

:mod:`.ops` proves every op on CUDA over :mod:`.cases` (twins, races, autocast, host reads, random
states, ``torch.compile``, timings; ``--cpu-smoke`` on a CPU); :mod:`.models` trains, tests and
resumes every family's shapes model through the stock tools (:mod:`.model_data`,
:mod:`.model_probe`, :mod:`.model_report`), each writing its record (:mod:`lab.records`);
:mod:`.compile_kernels` compiles every Triton kernel ahead of time for sm_80 / sm_90. Nothing
imports OpenMMLab at module level: ``gpu_proof.py`` runs with torch and Triton alone.
"""
