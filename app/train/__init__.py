"""Training: `loop` (generic, DDP-aware epochs / evaluation / fit), `single` (one-process job),
`checkpoint` (atomic last.pt), `metrics` (summed counts, AUC, MRR). `distributed` is the
trainer process of a multi-process job."""
