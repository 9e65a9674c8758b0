"""Training hybrids from composed specs (this file imports nothing: the command line, ``assocmem.cli``,
reads the bundled configs' names without loading the floor).

    config.py         TrainConfig (pydantic, YAML), load_config(path, overrides), --set parsing
    tasks.py          synthetic datasets: mqar_dataset (Zoology), graph_walk_dataset, selective_copy_dataset
    rl/               RL after SFT: GRPO family losses, gradient-balanced GRPO, self-distillation
    verifiable/       tasks with checkers (chain_sum, graph_path, modular), GSM8K-style '#### answer' files
    prompt_response.py  prompt + response rows with the loss on the response only
    generation.py     batched sampling through generate() with the cache; response log-probs; context limits
    estimators.py     pass@k, maj@k, best-of-N, weighted vote, bootstrap intervals
    graphs.py         make_graph("grid" | "ring" | "hex"), random_walk (Park et al. 2025)
    data.py           build_datasets(cfg.data): synthetic tasks, verifiable tasks, packed text, prompt/response files
    mixture.py        data.kind: mixture: weighted sources in stages, the draw a function of (seed, step)
    packing.py        documents -> fixed-length blocks (position_ids per document)
    text_files.py     local text/jsonl/parquet files, byte tokenizer, local HF tokenizers
    model_factory.py  build_from_config(cfg.model, vocab_size): HybridConfig / preset / transformers config /
                      init_from a saved model (architecture mismatches named)
    loop.py           train(cfg, resume=, overwrite=): AdamW, warm-up + cosine, clipping, accumulation, bf16, DDP
    objective.py      next-token loss on supervised positions (LM head only where labels are set)
    metrics.py        torchmetrics loss / perplexity / accuracy; evaluate()
    checkpoint.py     safetensors weights + weights_only training state, atomic, keep-last-N
    distributed.py    torchrun detection, gloo/nccl process groups, batch split per rank
    sampler.py        batches as a function of the step (exact resume, rank-invariant)
    runlog.py         run folders, log.jsonl, curves.png
    sweep.py          sweep files: labelled axes -> runs, best-over-lr results table
    evaluate.py       evaluate_run(run_dir) behind ``assocmem eval``
    bench/            ``assocmem bench``: forms (mixers), breakdown, scaling, decode, train; timing
    seeds.py          one config over several seeds (``assocmem train CONFIG --seeds ... --result PATH``)
    results.py        result records: the JSON of a reproducible result (write_result, read_result); their
                      registry and ``assocmem reproduce`` live with the experiments (probes/experiments/)
    configs/          example configs (MQAR Zoology Figure 2 sweep, GDN MQAR target, graph walks); recipes/: the
                      papers' runs (thesis 150M pre-training and LR/WD sweep, Table 3.2, Nautile), each with smoke:
    corpus/           a small licence-clean text corpus (prose.txt, math.jsonl), named corpus:NAME in configs
"""
