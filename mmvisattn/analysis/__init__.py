"""What a user measures of a config or a layer: the backend every attention layer runs
(:mod:`.print_dispatch`), parameters and FLOPs (:mod:`.flops`, :mod:`.input_size`), one layer's time
and memory over growing maps (:mod:`.benchmark_attention`), attentions compared inside one model
(:mod:`.compare_attentions`), a demo's spread (:mod:`.demo_spread`), with the shared timing loop
(:mod:`.timing`), child processes (:mod:`.processes`) and record stamp (:mod:`.records`)."""
