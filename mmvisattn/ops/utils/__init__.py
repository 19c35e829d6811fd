"""What the op packages share: implementation dispatch (:mod:`.dispatch`), autocast rules (:mod:`.amp`),
the C++ CPU kernels' build (:mod:`.cpu_extension`, :file:`cpu_kernels.h`), the Triton launch checks
and counts (:mod:`.triton_launch`, :mod:`.launch_count`), the recompute-in-backward wrapper
(:mod:`.recompute`), tracing and host-read guards (:mod:`.tracing`, :mod:`.host_reads`) and the
geometry of a token map (:mod:`.token_grid`)."""
