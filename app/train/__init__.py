"""Training runners over the task layer (`app.task`): `loop` (epochs, evaluation, checkpoints,
resume, DDP-aware), `single` (one-process job), `distributed` (one trainer process of a
multi-process job), `checkpoint` (atomic last.pt, one format at every node count)."""
