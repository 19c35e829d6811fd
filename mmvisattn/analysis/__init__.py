"""What a user measures of a config or a layer: the backend every attention layer runs and why not
the others (:mod:`.print_dispatch`), the parameters and FLOPs at the test input size (:mod:`.flops`,
the size read by :mod:`.input_size`), one layer's time and memory over growing maps
(:mod:`.benchmark_attention`), attentions compared inside one model (:mod:`.compare_attentions`), a
demo's spread over seeds and thread counts (:mod:`.demo_spread`), the timing loop and peak-memory
reader of every benchmark (:mod:`.timing`), the child processes they run (:mod:`.processes`) and
the stamp of the records such runs write (:mod:`.records`)."""
