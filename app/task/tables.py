"""Embedding tables of featureless node types with their sparse optimizer, in one format.

`LocalTables`: `nn.Embedding(sparse=True)` per type (`app.model.hetero.NodeEmbeddings`) and
`torch.optim.SparseAdam` / `Adagrad`. `DistTables`: one `DistEmbedding` per type, sharded like
the graph, and `app.distributed.optim`'s `SparseAdam` / `SparseAdagrad` (same update rules).

Both give the same checkpoint state, so a checkpoint written at N nodes restores at M:
`rows_state()` → `{type: [N, dim] rows}` and `optimizer_state()` →
`{"step": {type: int}, "state": {type: {"exp_avg"/"exp_avg_sq" or "sum": [N, dim]}}}`, whole
tables. Distributed tables gather each owner's shard on rank 0 (a collective: every rank calls
it; non-zero ranks get None) and each owner takes its rows back on load.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor, nn

from app.model.hetero import NodeEmbeddings

PROBE_ROWS = 256  # rows per type compared before/after training (`emb_change.<type>`)


class Tables:
    """The common surface of `LocalTables` and `DistTables`."""

    sizes: dict[str, int]  # rows per node type

    def fill(self, x_dict: dict[str, Tensor], n_id_dict: dict[str, Tensor]) -> dict[str, Tensor]:
        raise NotImplementedError

    def zero_grad(self) -> None:
        raise NotImplementedError

    def step(self) -> None:
        raise NotImplementedError

    def rows_state(self) -> dict[str, Tensor] | None:
        raise NotImplementedError

    def optimizer_state(self) -> dict[str, Any] | None:
        raise NotImplementedError

    def load(self, rows: dict[str, Tensor], optim: dict[str, Any]) -> None:
        raise NotImplementedError

    def lookup(self, node_type: str, ids: Tensor) -> Tensor:
        raise NotImplementedError

    def probe(self) -> dict[str, Tensor]:
        """Copies of the first `PROBE_ROWS` rows of every table (to see training move them)."""
        with torch.no_grad():
            return {
                t: self.lookup(t, torch.arange(min(PROBE_ROWS, n))).cpu().clone()
                for t, n in self.sizes.items()
            }

    def change(self, before: dict[str, Tensor]) -> dict[str, float]:
        """`emb_change.<type>`: mean absolute change of the probed rows since `before`."""
        after = self.probe()
        return {f"emb_change.{t}": float((after[t] - b).abs().mean()) for t, b in before.items()}


class LocalTables(Tables):
    """`NodeEmbeddings` on `device` and a torch sparse optimizer over them."""

    def __init__(self, sizes: dict[str, int], dim: int, kind: str, lr: float, device: Any) -> None:
        self.sizes = dict(sizes)
        self.rows = NodeEmbeddings(sizes, dim).to(device)
        params = self.rows.parameters()
        opt = torch.optim.Adagrad if kind == "adagrad" else torch.optim.SparseAdam
        self.optimizer = opt(params, lr=lr) if params else None

    @property
    def tables(self) -> dict[str, nn.Embedding]:
        """{node type: its table}, as `DistTables.tables` (layer-wise inference reads them)."""
        return self.rows.tables

    def fill(self, x_dict: dict[str, Tensor], n_id_dict: dict[str, Tensor]) -> dict[str, Tensor]:
        return self.rows.fill(x_dict, n_id_dict)

    def lookup(self, node_type: str, ids: Tensor) -> Tensor:
        table = self.rows.tables[node_type]
        return table(ids.to(table.weight.device))

    def zero_grad(self) -> None:
        if self.optimizer is not None:
            self.optimizer.zero_grad(set_to_none=True)

    def step(self) -> None:
        """One update. torch's Adagrad rebuilds each sparse gradient with `sparse_coo_tensor`,
        which warns ("Sparse invariant checks are implicitly disabled") until a program opts in
        or out; the rows come from autograd, always valid, so this step opts out."""
        if self.optimizer is not None:
            with torch.sparse.check_sparse_tensor_invariants(enable=False):
                self.optimizer.step()

    def rows_state(self) -> dict[str, Tensor]:
        return {t: table.weight.detach().cpu().clone() for t, table in self.rows.tables.items()}

    def optimizer_state(self) -> dict[str, Any]:
        steps, state = {}, {}
        for t, table in self.rows.tables.items():
            st = self.optimizer.state.get(table.weight, {}) if self.optimizer else {}
            steps[t] = int(st.get("step", 0))
            state[t] = {k: v.detach().cpu().clone() for k, v in st.items() if k != "step"}
        return {"step": steps, "state": state}

    def load(self, rows: dict[str, Tensor], optim: dict[str, Any]) -> None:
        with torch.no_grad():
            for t, table in self.rows.tables.items():
                table.weight.copy_(rows[t])
                if self.optimizer is not None and optim["state"].get(t):
                    dev = table.weight.device
                    st = {k: v.to(dev) for k, v in optim["state"][t].items()}
                    st["step"] = torch.tensor(float(optim["step"][t]))
                    self.optimizer.state[table.weight] = st


class DistTables(Tables):
    """`DistEmbedding` per type (rows on their owners, looked up by RPC) + sparse optimizer.

    Rows are looked up on the CPU and copied to `device`; their gradients come back to the
    CPU rows through the copy, so the owners' update is unchanged.
    """

    def __init__(self, tables: dict[str, Any], optimizer: Any, device: Any) -> None:
        self.tables, self.optimizer, self.device = tables, optimizer, torch.device(device)
        self.sizes = {t: int(table.num_embeddings) for t, table in tables.items()}

    def fill(self, x_dict: dict[str, Tensor], n_id_dict: dict[str, Tensor]) -> dict[str, Tensor]:
        out = dict(x_dict)
        for t in self.tables:
            if t in n_id_dict:
                out[t] = self.lookup(t, n_id_dict[t])
        return out

    def lookup(self, node_type: str, ids: Tensor) -> Tensor:
        rows = self.tables[node_type](ids.cpu())
        return rows if self.device.type == "cpu" else rows.to(self.device, non_blocking=True)

    def zero_grad(self) -> None:
        if self.optimizer is not None:
            self.optimizer.zero_grad()

    def step(self) -> None:
        if self.optimizer is not None:
            self.optimizer.step()

    def _gather(self, part: dict[str, dict[str, Tensor]]) -> list[Any] | None:
        """Every owner's `part` on rank 0 (None elsewhere)."""
        rank = dist.get_rank()
        out: list[Any] | None = [None] * dist.get_world_size() if rank == 0 else None
        dist.gather_object(part, out, dst=0)
        return out

    def _assemble(self, shards: list[Any], key: str) -> dict[str, Tensor]:
        full = {}
        for t, size in self.sizes.items():
            rows = [s[t] for s in shards if s is not None and key in s[t]]
            if not rows:
                continue
            dim = rows[0][key].size(1)
            full[t] = torch.zeros(size, dim)
            for r in rows:
                full[t][r["ids"]] = r[key]
        return full

    def _shards(self) -> dict[str, dict[str, Tensor]] | None:
        out = {}
        for t, table in self.tables.items():
            w = table.weight
            if not w.is_owner:
                return None
            with w.lock:
                out[t] = {"ids": w.owned, "rows": w.local.clone()}
                out[t].update({k: v.clone() for k, v in getattr(w, "opt_state", {}).items()})
        return out

    def rows_state(self) -> dict[str, Tensor] | None:
        shards = self._gather(self._shards())
        return None if shards is None else self._assemble(shards, "rows")

    def optimizer_state(self) -> dict[str, Any] | None:
        shards = self._gather(self._shards())
        if shards is None:
            return None
        keys = {k for s in shards if s for d in s.values() for k in d if k not in ("ids", "rows")}
        state: dict[str, dict[str, Tensor]] = {t: {} for t in self.sizes}
        for k in sorted(keys):
            for t, full in self._assemble(shards, k).items():
                state[t][k] = full
        step = int(self.optimizer.step_count) if self.optimizer is not None else 0
        return {"step": {t: step for t in self.sizes}, "state": state}

    def load(self, rows: dict[str, Tensor], optim: dict[str, Any]) -> None:
        """Each owner takes its rows (and their optimizer state) from the whole tables."""
        for t, table in self.tables.items():
            w = table.weight
            if w.is_owner:
                with w.lock:
                    w.local.copy_(rows[t][w.owned])
                    w.opt_state = {k: v[w.owned].clone() for k, v in optim["state"][t].items()}
        if self.optimizer is not None and optim["step"]:
            self.optimizer.step_count = max(optim["step"].values())
        dist.barrier()


def make_dist_tables(
    sizes: dict[str, int],
    dim: int,
    kind: str,
    lr: float,
    device: Any,
    *,
    book_of: Any,
    part_id: int,
    is_owner: bool,
) -> DistTables:
    """One `DistEmbedding` per type (`book_of(type)` places rows); call once RPC is up.

    Ends with a barrier on the trainers' group, so no rank looks rows up before every owner
    has created its shard.
    """
    from app.distributed.embedding import DistEmbedding
    from app.distributed.optim import SparseAdagrad, SparseAdam

    tables = {
        t: DistEmbedding(n, dim, f"emb_{t}", book=book_of(t), part_id=part_id, is_owner=is_owner)
        for t, n in sizes.items()
    }
    dist.barrier()
    kind_cls = SparseAdagrad if kind == "adagrad" else SparseAdam
    opt = kind_cls(list(tables.values()), lr) if tables else None
    return DistTables(tables, opt, device)
