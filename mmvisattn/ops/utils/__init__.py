"""What the op packages share: the choice of backend (:mod:`.dispatch`) and what it reads of the
machine (:mod:`.machine`), one-line argument errors (:mod:`.arguments`), autocast rules
(:mod:`.amp`), the C++ CPU kernels' build (:mod:`.cpu_extension`, :file:`cpu_kernels.h`), what the
Triton kernels take (:mod:`.triton_launch`) and their flash-attention blocks (:mod:`.flash`),
recomputation in the backward (:mod:`.recompute`), hand-written Functions under tracing
(:mod:`.tracing`) and the geometry of a token map (:mod:`.token_grid`)."""
