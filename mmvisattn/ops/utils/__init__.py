"""What the op packages share: backend choice (:mod:`.dispatch`, :mod:`.machine`), one-line argument
errors (:mod:`.arguments`), autocast rules (:mod:`.amp`), the C++ kernels' build
(:mod:`.cpu_extension`), Triton launch rules (:mod:`.triton_launch`) and flash blocks
(:mod:`.flash`), recomputation (:mod:`.recompute`), Functions under tracing (:mod:`.tracing`) and
token-map geometry (:mod:`.token_grid`)."""
