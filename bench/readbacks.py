"""Host read-backs per batch: the points where a GPU batch makes the host wait for the device.

    python -m bench.readbacks [NUM_NODES]

On a GPU every read of a size or value back to the host (`int(t)`, `.item()`, `.tolist()`,
`.cpu()`, `torch.unique`, `nonzero`, `x[mask]`, `repeat_interleave` without `output_size` ...)
blocks the host until the stream has drained, so the host cannot queue the next kernels.
`ReadBacks` counts them, on the CPU too, which is how CPU-only CI proves the GPU path's count.

It is two torch modes. A `TorchDispatchMode` sees every aten op and counts those that wait for
the device when an input is on it (`SYNCING` below; `sort`, `cumsum`, `scatter_reduce`,
`index_select`, `nonzero_static` do not wait); a `TorchFunctionMode` sees the copies to the
host (`.cpu()`, `.tolist()`, `.numpy()`, `.to(<the host>)`), which on CPU tensors are no ops,
and the blocking copies to the device (`.to(device)` without `non_blocking=True`: torch then
synchronizes the stream after the copy, so the host waits as for a read-back).
What is "on the device": a CUDA tensor; on the CPU, a tensor marked with `on_device`, moved
there with `.to(device)` or computed by an op from one (the taint follows every op's outputs,
in-place ones included). On the CPU `.to(device)` of a host tensor and `.cpu()` of a device
tensor return it as it is; the counter returns an alias instead, marked as on the device or
as on the host, so each side's tensor stays where it was. Limits of the CPU stand-in: a
factory's output (`torch.arange(n, device=...)`) is on the device only once an op mixes it
with a device tensor (its own launch is not counted), and `.to("cpu")` of a device tensor
counts only when the device is not the CPU (on the CPU it is the no-op a sampler's
`.to(device)` is).

Run as a module it prints the read-backs per batch of each stage of a GPU-sampled training
step, and the ops each stage runs on the device (about one kernel launch each, paid on the
host; the optimizer fused, as a GPU job's), run on the CPU through the torch path
(`DISTGNN_KERNELS=torch`): sampling, feature gather (`DeviceFeatures`, whole and partial),
batch assembly (`to_data`) and one training step, for fan-outs [10, 5] (SAGE 2x128) and
[15, 10, 5] (SAGE 3x256), batches of 1024.
"""

from __future__ import annotations

import os
import sys
import warnings
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch import Tensor
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves
from torch.utils.weak import WeakIdKeyDictionary

aten = torch.ops.aten
# ops that read a size or a value back whenever their input is on the device
SYNCING = {
    aten._local_scalar_dense.default,  # .item(), int(t), float(t), bool(t)
    aten.nonzero.default,  # also behind argwhere and torch.where(cond)
    aten._unique.default,
    aten._unique2.default,
    aten.unique_dim.default,
    aten.unique_consecutive.default,
    aten.masked_select.default,
    aten.bincount.default,  # CUDA sizes its output from max()
    aten.equal.default,
}
BOOL_INDEXED = {aten.index.Tensor, aten.index_put_.default, aten.index_put.default}
# non-view ops that launch no kernel (allocation, reinterpretation): not counted as launches
NO_KERNEL = {
    aten._unsafe_view, aten.empty, aten.empty_like, aten.empty_strided, aten.new_empty,
    aten.new_empty_strided, aten.sparse_compressed_tensor, aten._sparse_compressed_tensor_unsafe,
    aten.sparse_csr_tensor, aten._sparse_csr_tensor_unsafe,
}  # fmt: skip
HOST_COPIES = {"cpu", "tolist", "numpy"}


class _Ops(TorchDispatchMode):
    def __init__(self, owner: ReadBacks) -> None:
        super().__init__()
        self.owner = owner

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        owner = self.owner
        inputs = [t for t in tree_leaves((args, kwargs)) if isinstance(t, Tensor)]
        if any(owner.held(t) for t in inputs):
            if _waits(func, args, kwargs, owner):
                owner.add(str(func.overloadpacket.__name__))
            if not func.is_view and func.overloadpacket not in NO_KERNEL:
                owner.launches += 1
            owner.on_device(*(t for t in tree_leaves(out) if isinstance(t, Tensor)))
        return out


def _waits(func: Any, args: tuple, kwargs: dict, owner: ReadBacks) -> bool:
    if func in SYNCING:
        return True
    if func in BOOL_INDEXED:
        index = args[1] if len(args) > 1 else kwargs.get("indices", ())
        return any(t is not None and t.dtype in (torch.bool, torch.uint8) for t in index)
    if func is aten.repeat_interleave.Tensor:
        return kwargs.get("output_size") is None and owner.held(args[0])
    return False


class _Copies(TorchFunctionMode):
    def __init__(self, owner: ReadBacks) -> None:
        super().__init__()
        self.owner = owner

    def __torch_function__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        name = getattr(func, "__name__", "")
        if not (args and isinstance(args[0], Tensor)) or name not in (*HOST_COPIES, "to", "cuda"):
            return out
        owner, src = self.owner, args[0]
        if name in HOST_COPIES:
            if owner.held(src):
                owner.add(f"{name}()")
                if out is src:  # the CPU stand-in's copy to the host: an alias, on the host
                    out = src.view_as(src)
                    owner.off_device(out)
        elif isinstance(out, Tensor) and _moves(name, args, kwargs):
            if owner.is_device(out.device):
                if not owner.held(src) and not _non_blocking(args, kwargs):
                    owner.add(f"{name}(device)")  # a blocking copy there drains the stream
                if out is src and not owner.held(src):  # the CPU stand-in's move: an alias
                    out = src.view_as(src)  # moves; its base, the host's tensor, stays there
                    owner.on_device(out, with_base=False)
                else:
                    owner.on_device(out)
            elif owner.held(src) and owner.device.type != "cpu" and out.device.type == "cpu":
                owner.add("to(cpu)")
        return out


def _moves(name: str, args: tuple, kwargs: dict) -> bool:
    """Whether a `Tensor.to(...)` / `.cuda(...)` call names a device (not a dtype alone)."""
    if name == "cuda" or kwargs.get("device") is not None:
        return True
    return len(args) > 1 and isinstance(args[1], (str, torch.device, Tensor))


def _non_blocking(args: tuple, kwargs: dict) -> bool:
    """Whether a `Tensor.to(...)` / `.cuda(...)` call asks for a non-blocking copy."""
    if "non_blocking" in kwargs:
        return bool(kwargs["non_blocking"])
    return any(a is True for a in args[1:])  # to(device, dtype, True) / cuda(device, True)


class ReadBacks:
    """Counts host read-backs on `device` (`counts` by op, `total`) while entered, and the
    ops run on the device (`launches`: each about one kernel launch the host pays for)."""

    def __init__(self, device: torch.device | str = "cpu") -> None:
        self.device = torch.device(device)
        self.counts: Counter[str] = Counter()
        self.launches = 0  # ops with an input on the device, views and allocations aside
        self._held: WeakIdKeyDictionary = WeakIdKeyDictionary()

    def on_device(self, *tensors: Tensor, with_base: bool = True) -> None:
        """Mark `tensors` as held on the device (a CSC, a feature cache, the model's weights);
        a view's base too (an op that writes into a view, `out=ptr[1:]`, fills its base)."""
        for t in tensors:
            self._held[t] = True
            if with_base and t._base is not None:
                self._held[t._base] = True

    def is_device(self, device: torch.device) -> bool:
        """Whether `device` is the counter's (`cuda` matches every `cuda:i`)."""
        mine = self.device
        return device.type == mine.type and mine.index in (None, device.index)

    def off_device(self, t: Tensor) -> None:
        self._held.pop(t, None)

    def held(self, t: Tensor) -> bool:
        return t.device.type == "cuda" or t in self._held

    def add(self, what: str) -> None:
        self.counts[what] += 1

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def __enter__(self) -> ReadBacks:
        self._modes = (_Copies(self), _Ops(self))
        for mode in self._modes:
            mode.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        for mode in reversed(self._modes):
            mode.__exit__(*exc)

    @contextmanager
    def stage(self) -> Iterator[Counter[str]]:
        """Counts of the `with` block alone (the counter keeps adding to its totals)."""
        before = Counter(self.counts)
        found: Counter[str] = Counter()
        yield found
        found.update(self.counts - before)


def host_waits(fn: Callable[[], Any]) -> int:
    """How many times `fn()` makes the host wait for a GPU, by CUDA's own count (each
    synchronizing call warns under `torch.cuda.set_sync_debug_mode("warn")`)."""
    torch.cuda.synchronize()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            fn()
        finally:
            torch.cuda.set_sync_debug_mode("default")
    return sum("synchronizing" in str(w.message) for w in caught)


def per_batch(run: Callable[[int], None], counter: ReadBacks, batches: int) -> Counter[str]:
    """Read-backs of `run(i)` for i < `batches`, summed, and the ops they ran on the device
    (key `LAUNCHES`); `counter` is entered around them."""
    launches = counter.launches
    with counter, counter.stage() as found:
        for i in range(batches):
            run(i)
    found[LAUNCHES] = counter.launches - launches
    return found


LAUNCHES = "launches"


def random_graph(num_nodes: int, mean_degree: int = 25, seed: int = 0) -> Any:
    """A homogeneous graph with power-law in-degrees (products-like), 100 features, 47
    classes, train/val/test masks (host-held attributes, as a job's graph has); nodes 0..9
    isolated."""
    from torch_geometric.data import Data

    gen = torch.Generator().manual_seed(seed)
    weight = torch.rand(num_nodes, generator=gen).pow(-0.7)
    deg = (weight / weight.mean() * mean_degree).long().clamp(max=num_nodes - 1)
    deg[:10] = 0
    dst = torch.repeat_interleave(torch.arange(num_nodes), deg)
    src = torch.randint(0, num_nodes, (dst.numel(),), generator=gen)
    x = torch.randn(num_nodes, 100, generator=gen)
    y = torch.randint(0, 47, (num_nodes,), generator=gen)
    split = torch.rand(num_nodes, generator=gen)
    masks = {"train_mask": split < 0.1, "val_mask": (split >= 0.1) & (split < 0.2)}
    masks["test_mask"] = split >= 0.2
    return Data(edge_index=torch.stack([src, dst]), x=x, y=y, num_nodes=num_nodes, **masks)


WORKLOADS = {"[10,5] SAGE 2x128": ([10, 5], 128), "[15,10,5] SAGE 3x256": ([15, 10, 5], 256)}


def stage_counts(data: Any, fanout: list[int], hidden: int, batches: int = 4) -> dict:
    """Read-backs per batch of each stage of a GPU-sampled step, on the CPU's torch path."""
    from torch_geometric.sampler import NodeSamplerInput

    from app.config import KERNELS_ENV, ModelConfig
    from app.loader.batch import LocalGather, to_data, whole_attrs
    from app.loader.device_features import DeviceFeatures
    from app.model.registry import build_model
    from app.sampler.neighbor import NeighborSampler
    from app.task.metrics import EpochStats
    from app.task.node import node_step

    os.environ[KERNELS_ENV] = "torch"
    cpu = torch.device("cpu")
    sampler = NeighborSampler(data, fanout, seed=0)
    assert sampler.tensors is not None, "the torch sampler did not take this graph"
    gen = torch.Generator().manual_seed(1)
    seeds = [torch.randint(0, data.num_nodes, (1024,), generator=gen) for _ in range(batches)]
    sampler.sample_from_nodes(NodeSamplerInput(None, seeds[0]), seed=0)  # its scratch map
    counter = ReadBacks(cpu)
    csc = sampler.tensors
    counter.on_device(csc.colptr, csc.row, csc.perm, sampler._local.tensor_map)
    outs: list[Any] = []

    def sample(i: int) -> None:
        outs.append(sampler.sample_from_nodes(NodeSamplerInput(None, seeds[i]), seed=i))

    found = {"sampling": per_batch(sample, counter, batches)}
    degree = torch.bincount(data.edge_index[0], minlength=data.num_nodes)
    row_bytes = data.x[:1].numel() * data.x.element_size()
    stores = {
        "features (whole)": DeviceFeatures(data.x, cpu, 1 << 62),
        "features (partial)": DeviceFeatures(data.x, cpu, row_bytes * data.num_nodes // 4, degree),
    }
    # labels and masks held whole, as a job sampling on its device holds them
    held = {key: DeviceFeatures(data[key], cpu, 1 << 62) for key in whole_attrs(data)}
    for rows in (*stores.values(), *held.values()):
        counter.on_device(*(t for t in (rows.cache, rows.slot) if t is not None))
    for what, rows in stores.items():
        gather = LocalGather(data, {"x": rows, **held})
        found[what] = per_batch(lambda i, g=gather: g(outs[i]), counter, batches)
    gather = LocalGather(data, {"x": stores["features (whole)"], **held})
    attrs = [gather(out)[0] for out in outs]
    built: list[Any] = []
    found["assembly"] = per_batch(
        lambda i: built.append(to_data(outs[i], node_attrs=attrs[i])), counter, batches
    )
    torch.manual_seed(0)
    cfg = ModelConfig(hidden_channels=hidden, num_layers=len(fanout), dropout=0.5)
    model = build_model(cfg, data.x.size(1), 47)
    opt = torch.optim.Adam(model.parameters(), lr=0.003, fused=True)  # as a GPU job's
    counter.on_device(*model.parameters())
    stats = EpochStats()

    def step(i: int) -> None:  # train_epoch's step on a GPU (no per-step loss check)
        opt.zero_grad(set_to_none=True)
        res = node_step(model, built[i])
        res.loss.backward()
        opt.step()
        stats.add(res.loss.detach(), res.correct, res.count, res.edges)

    found["training step"] = per_batch(step, counter, batches)
    out = {}
    for stage, c in found.items():
        launches = c.pop(LAUNCHES, 0)
        out[stage] = (sum(c.values()) / batches, c, launches / batches)
    return out


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    nodes = int(args[0]) if args else 100_000
    torch.set_num_threads(1)
    data = random_graph(nodes)
    for name, (fanout, hidden) in WORKLOADS.items():
        for stage, (per, ops, launches) in stage_counts(data, fanout, hidden).items():
            shown = ", ".join(f"{k} {v}" for k, v in sorted(ops.items()))
            print(f"readbacks {name:<22} {stage:<20} {per:6.2f} per batch  ({shown}); "
                  f"{launches:.1f} ops on the device", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
