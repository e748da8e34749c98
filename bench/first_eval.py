"""Where a one-trainer job's FIRST layer-wise evaluation goes, phase by phase, against a later one.

    python -m bench.first_eval [NUM_NODES] [--device=cpu|cuda] [--sampler=cpu|cuda|none]
                               [--layers=2] [--hidden=128] [--threads=1] [--root=DIR] [--tag=NAME]

The `products_homo` graph (synthetic_products, NUM_NODES nodes, default products scale) and an
untrained GraphSAGE (`--layers` x `--hidden`; weights do not change the work) on `--device`, then
as a one-trainer job evaluates val + test (`LocalSource.inference_view()`, `evaluate_layerwise`
with `train.eval_chunk_size` and kept buffers), twice. First, not timed, the job's train loader
is made as a job has it before its first evaluation (`sampler.device=--sampler`: `cuda`, with
`--device=cuda`, puts the CSC and the features on the GPU; `none` makes no loader, so the view
builds its own CSR, as a link job's does; the fan-out, which evaluation never reads, is 10 a
layer). Phases, each the time inside one function of
`app.inference` (on a GPU the device is synchronised before each clock read):

* `view`: building the `GraphView` (`inference_view`: the in-edge CSR, labels, splits), of
  which `view_csr` is the CSR (`_csr`; none when the view reuses a sampler's CSC);
* `plan`: the `_ReadPlan` (`_plan`: marks, argsort, `pos_of`);
* `device_edges`: the CSR moved to the device and mapped to row positions (`_device_edges`);
* `buffers`: the pass's float buffers (`_Buffers.empty`: kept ones, page-locked where the pass
  keeps them in host memory for a GPU);
* `to_device`: each layer's rows moved to where the chunks compute (`_to`);
* `sink_put`: each chunk's result stored (`_Table.put` / `_Projections.put`: on the CPU the
  projection GEMMs, on a GPU with host tables also the copy back);
* `rest`: the evaluation's wall minus the phases above (the chunks' own work, the argmax).

`first_*` is the first evaluation (view included, as a job's epoch 0), `later_*` the second.
`kept_buffer_bytes` is what the view keeps after a pass, by where it lives (`host` / `device`).
Without `--tag` the records are `first_eval/<metric>`; a tag (e.g. `base` when another checkout
runs this file) prefixes the metric, so two code versions can be compared in one results file.
"""

from __future__ import annotations

import functools
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from bench.common import record

BENCH = "first_eval"
PHASES = ("view", "view_csr", "plan", "device_edges", "buffers", "to_device", "sink_put")


class Clock:
    """Seconds spent inside wrapped functions, per phase (outermost call only)."""

    def __init__(self, device: torch.device) -> None:
        self.sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
        self.spent: dict[str, float] = defaultdict(float)

    def wrap(self, phase: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def timed(*args: Any, **kwargs: Any) -> Any:
            self.sync()
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.sync()
                self.spent[phase] += time.perf_counter() - start

        return timed

    def take(self) -> dict[str, float]:
        out, self.spent = dict(self.spent), defaultdict(float)
        return out


def instrument(clock: Clock) -> None:
    """Wrap the phases' functions where they are looked up (module globals, class methods)."""
    from app.inference import layerwise, view

    view._csr = clock.wrap("view_csr", view._csr)
    layerwise._plan = clock.wrap("plan", layerwise._plan)
    layerwise._to = clock.wrap("to_device", layerwise._to)
    layerwise._Run._device_edges = clock.wrap("device_edges", layerwise._Run._device_edges)
    layerwise._Buffers.empty = clock.wrap("buffers", layerwise._Buffers.empty)
    layerwise._Table.put = clock.wrap("sink_put", layerwise._Table.put)
    layerwise._Projections.put = clock.wrap("sink_put", layerwise._Projections.put)


def _args(argv: list[str]) -> dict[str, Any]:
    opts: dict[str, Any] = dict(nodes=2_449_029, device="cpu", sampler="cpu", layers=2,
                                hidden=128, threads=1, root="/tmp/distgnn-first-eval",
                                tag="")  # fmt: skip
    for arg in argv:
        key, _, value = arg.removeprefix("--").partition("=")
        if not value:
            opts["nodes"] = int(arg)
        elif key in opts:
            opts[key] = type(opts[key])(value)
        else:
            raise SystemExit(f"bench.first_eval: unknown option {arg!r} (see the docstring)")
    return opts


def _kept_bytes(view: Any) -> dict[str, int]:
    by_place: dict[str, int] = defaultdict(int)
    kept = [v for k, v in view.cache.items() if k.startswith("buffers")]
    for bufs in (b for k in kept for b in k.free.values()):
        for buf in bufs:
            place = "host" if buf.device.type == "cpu" else "device"
            by_place[place] += buf.numel() * buf.element_size()
    return dict(by_place)


def _model(cfg: Any, data: Any, device: torch.device) -> torch.nn.Module:
    from app.model.registry import build_model

    torch.manual_seed(0)
    return build_model(cfg.model, data.x.size(1), int(data.num_classes)).to(device).eval()


def main(argv: list[str] | None = None) -> None:
    from app.config import compose_config
    from app.dataset import load_dataset
    from app.inference import evaluate_layerwise
    from app.task.local import LocalSource

    o = _args(sys.argv[1:] if argv is None else argv)
    device = torch.device(o["device"])
    if device.type == "cuda" and not torch.cuda.is_available():
        print("bench-first-eval: skipped: --device=cuda needs CUDA", flush=True)
        return
    torch.set_num_threads(o["threads"])
    cfg = compose_config(["+experiment=products_homo", f"dataset.num_nodes={o['nodes']}",
                          f"dataset.root={Path(o['root']) / 'data'}",
                          f"model.num_layers={o['layers']}",
                          f"model.hidden_channels={o['hidden']}", f"train.device={device}",
                          f"sampler.num_neighbors=[{','.join(['10'] * o['layers'])}]",
                          f"sampler.device={o['sampler'].replace('none', 'cpu')}",
                          "loader.num_workers=0", "cluster.num_nodes=1"])  # fmt: skip
    data = load_dataset(cfg.dataset, cfg.seed)
    source = LocalSource(cfg, data)
    model = _model(cfg, data, device)
    loaders = []  # held to the end, as a job holds its loaders (and their CSC) while it runs
    if o["sampler"] != "none":  # the sampler's CSC and the features, where the job has them
        loaders.append(source.node_loader("train", data.train_mask.nonzero().view(-1), None))
    clock = Clock(device)
    instrument(clock)
    chunk, keep = cfg.train.eval_chunk_size, cfg.train.eval_keep_buffers
    prefix = f"{o['tag']}_" if o["tag"] else ""
    scale = f"{o['nodes']}n_{o['layers']}x{o['hidden']}_{device.type}"
    view = None
    for which in ("first", "later"):
        clock.sync()
        start = time.perf_counter()
        if view is None:
            view = clock.wrap("view", source.inference_view)()
        acc = evaluate_layerwise(model, view, chunk, ("val", "test"), keep)
        clock.sync()
        wall = time.perf_counter() - start
        spent = clock.take()
        rest = wall - sum(v for k, v in spent.items() if k != "view_csr")
        record(BENCH, f"{prefix}{scale}_{which}_s", wall, "s")
        for phase in (*PHASES, "rest"):
            value = rest if phase == "rest" else spent.get(phase, 0.0)
            if value or phase == "rest":
                record(BENCH, f"{prefix}{scale}_{which}_{phase}_s", value, "s")
        print(f"{BENCH:<22} {which}: val_acc {acc['val_acc']:.4f}", flush=True)
    for place, nbytes in _kept_bytes(view).items():
        record(BENCH, f"{prefix}{scale}_kept_buffer_bytes_{place}", nbytes, "B")
    print(f"{BENCH:<22} {data.num_nodes:,} nodes, {data.num_edges:,} edges", flush=True)
    del loaders


if __name__ == "__main__":
    main()
