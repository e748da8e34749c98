"""The task layer: each objective written once against a `GraphSource`.

`source` (the interface, `Schema`), `local` / `partitioned` (the two sources), `tables`
(embedding rows + sparse optimizer in one checkpoint format), `optim` (`Optimizers`: dense +
sparse), `device` (batches to the trainer's device), `base` (`Task`: model, loaders, step,
the `evaluate` seam, state), `node` / `link` (the objectives), `registry` (`build_task`),
`evaluate` (the default sampled evaluation), `metrics` (summed counts, AUC, MRR), `step`
(`StepResult`).
"""
