"""What ``tools/analysis_tools/get_flops.py`` and ``print_dispatch.py`` do: the parameters and FLOPs of a
config's model at its test input size (:mod:`.flops`), and the implementation every attention layer
dispatches to on a device and dtype (:mod:`.print_dispatch`); :mod:`.input_size` reads that size from a
config's test pipeline."""
