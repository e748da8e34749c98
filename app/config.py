"""Typed configuration: one dataclass per Hydra config group, registered in the ConfigStore.

`conf/config.yaml` composes the groups on top of these schemas, so Hydra rejects unknown keys
and wrongly typed values while composing. `validate` adds the cross-field checks that a schema
cannot express (fan-out length vs. layers, positive sizes, ...). Everything below `app.__main__`
receives the plain `Config` object (via `OmegaConf.to_object`), never a `DictConfig`.
"""

from __future__ import annotations

import os
import secrets
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import II, OmegaConf

from app.model.registry import MODELS, is_builder
from app.task.registry import OBJECTIVES

# A user's own graph: a `torch.save`d PyG Data/HeteroData, or a folder of arrays (app.dataset.user)
USER_DATASETS = ("pyg_file", "arrays")
DATASETS = (
    "synthetic_products",
    "synthetic_papers",
    "synthetic_mag",
    "ogbn_products",
    "ogbn_papers100M",
    "ogbn_mag",
    *USER_DATASETS,
)
# Homogeneous datasets: the ones the streaming partitioner takes.
HOMOGENEOUS_DATASETS = (
    "synthetic_products",
    "synthetic_papers",
    "ogbn_products",
    "ogbn_papers100M",
)
PARTITION_METHODS = ("metis", "random", "stream")
NODE_ORDERS = ("original", "locality")
EVAL_MODES = ("layerwise", "sampled")
SUBGRAPH_TYPES = ("directional", "bidirectional", "induced")
TEMPORAL_STRATEGIES = ("uniform", "last")
FEATURE_DTYPES = ("float32", "float16")
WIRE_DTYPES = ("store", "float16", "bfloat16")
CLUSTER_MODES = ("local", "env", "ssh")
TASKS = ("train", "partition", "eval")
SCHEDULERS = ("none", "cosine", "step", "plateau")
PRECISIONS = ("32-true", "bf16-mixed")
DDP_COMM_HOOKS = ("none", "fp16", "bf16")  # app/task/ddp.py's hooks
TRAIN_DEVICES = ("cpu", "cuda", "auto")


class ConfigError(ValueError):
    """A configuration value is invalid; the message names the key, the value and the fix."""


@dataclass
class DatasetConfig:
    """Which graph to load. Synthetic sizes apply to the synthetic generators only."""

    name: str = "synthetic_products"
    root: str = "data"  # data dir: datasets cached/loaded under it
    num_nodes: int = 100_000  # synthetic: nodes (papers for synthetic_mag)
    avg_degree: float = 25.0  # synthetic: mean in-degree (directed edges per node)
    num_features: int = 100
    num_classes: int = 47
    num_communities: int = 0  # 0: derived from num_nodes
    train_frac: float = 0.1
    val_frac: float = 0.05
    # synthetic: share of test nodes; 0: every node outside train / val (papers100M labels
    # only ~1.4 % of its nodes, so its split leaves most nodes in no mask)
    test_frac: float = 0.0
    # node features on disk and in the stores: float16 halves their bytes (the model widens
    # each batch to float32 on its device); float32 (default) keeps them as generated / read
    feature_dtype: str = "float32"
    temporal: bool = False  # synthetic: add node/edge timestamps (`time` attribute)
    # pyg_file: the `torch.save`d Data/HeteroData; arrays: the folder of edge_index, features,
    # labels (and optional *_mask) `.npy`/`.pt` files. Without masks the split is drawn from
    # train_frac/val_frac and the seed.
    path: str | None = None


@dataclass
class PartitionConfig:
    """How the graph is cut into `num_parts` parts, one per cluster node."""

    method: str = "metis"
    num_parts: int = II("cluster.num_nodes")
    recursive: bool = False  # METIS recursive bisection instead of k-way
    balance_train: bool = True  # balance training nodes across parts (DGL balance_ntypes)
    balance_edges: bool = True  # balance in-edges across parts (node weight = in-degree)
    relabel: bool = False  # renumber nodes so each part owns a contiguous range
    # relabel only: number a part's nodes in their original order, or community by community
    # (locality: neighbours get nearby ids, so kernels reading their rows hit the cache)
    order: str = "original"
    root: str | None = None  # default: <output_dir>/partitions/<dataset fingerprint>
    overwrite: bool = False
    # Peak memory (GiB) partitioning may use; null: no limit. method=stream refuses up front a
    # graph/num_parts it cannot stream within it; method=metis logs advice when METIS's
    # estimated peak exceeds it.
    memory_budget_gb: float | None = None
    refine_passes: int = 2  # stream: restreaming refinement passes after the initial assignment


@dataclass
class SamplerConfig:
    """Neighbour sampling: fan-outs per hop (list) or per edge type (dict of lists)."""

    # Set by conf/sampler/*.yaml: a list there, or a dict per edge type (sampler=mag). The schema
    # default is None because OmegaConf cannot merge a dict onto a list or back.
    num_neighbors: Any = None
    replace: bool = False
    subgraph_type: str = "directional"
    disjoint: bool = False
    time_attr: str | None = None
    temporal_strategy: str = "uniform"
    concurrency: int = 2  # batches in flight per trainer (bounded channel depth)
    # Where a one-process job samples: cpu (numba kernel), cuda (the CSC on the trainer's GPU,
    # torch ops; homogeneous, non-disjoint, non-temporal), auto (cuda when the trainer is on a
    # GPU, the sample is one cuda handles and the CSC fits; else cpu). Jobs with sampler
    # processes sample on the CPU.
    device: str = "cpu"
    rpc_timeout_s: float = 60.0
    # Rows of remote (halo) node features cached per node (0: off): the halo nodes most reached
    # from this partition's in-edges, filled once at start, shared by the node's processes.
    # 100k rows covers the whole halo of a 2-way split of a ~200k-node graph and ~1/4 of an
    # ogbn-products half (about 40 MB at 100 float32 features).
    feature_cache_size: int = 100_000
    # Bytes of a second per-node cache (0: off): the remote nodes of highest degree that the
    # halo cache does not hold, i.e. those the deeper hops reach most (PaGraph / GNNLab's
    # static cache), ranked by their owners once at start and shared by the node's processes.
    hot_cache_bytes: int = 0
    # Remote node features on the wire: store (as stored: float16 stores send float16, never
    # narrower than stored) or an explicit opt-in to round wider (float32) rows to float16 /
    # bfloat16 in transit; the trainer widens them back to the store's dtype.
    feature_wire_dtype: str = "store"


@dataclass
class LoaderConfig:
    batch_size: int = 1024
    eval_batch_size: int = 4096
    # sampler processes per trainer (0: sample in the trainer); a single-process GPU run
    # samples in this many threads instead
    num_workers: int = 1
    shuffle: bool = True
    drop_last: bool = False
    neg_sampling: str = "binary"  # link loaders: binary | triplet
    neg_sampling_ratio: float = 1.0


@dataclass
class ModelConfig:
    name: str = "sage"
    hidden_channels: int = 256
    num_layers: int = 3
    dropout: float = 0.5
    heads: int = 4  # GAT only
    embedding_dim: int = 0  # hetero: learnable embeddings for featureless node types
    decoder: str = "dot"  # link prediction: dot | mlp


@dataclass
class EarlyStoppingConfig:
    """Stop when `train.monitor` has not improved for `patience` evaluations (Lightning's
    `EarlyStopping(patience, min_delta)`); 0: never."""

    patience: int = 0
    min_delta: float = 0.0  # an improvement must exceed this


@dataclass
class TrainConfig:
    objective: str = "node"  # node classification | link prediction
    epochs: int = 10
    lr: float = 0.003
    weight_decay: float = 0.0
    sparse_lr: float = 0.01  # learnable embeddings (SparseAdam / SparseAdagrad)
    sparse_optimizer: str = "adam"  # adam | adagrad
    eval_every: int = 1
    # layerwise: exact full-neighbourhood inference, layer by layer (app.inference); sampled:
    # each seed's sampled neighbourhood with sampler.num_neighbors (models without a per-layer
    # forward always evaluate sampled)
    eval_mode: str = "layerwise"
    eval_chunk_size: int = 65536  # target nodes per layer-wise step (bounds its memory)
    # keep layer-wise evaluation's buffers between evaluations (training holds them too; an
    # evaluation needs them at its peak anyway): from the second on, no fresh memory to fault in
    eval_keep_buffers: bool = True
    max_steps_per_epoch: int = 0  # 0: all batches (>0 caps an epoch, for smoke runs/benches)
    checkpoint: bool = True
    # Also checkpoint inside an epoch every N training steps, with the loader position, so a
    # resume continues mid-epoch exactly (0: only at the end of each epoch).
    checkpoint_every_steps: int = 0
    # true: continue from <job_dir>/checkpoints/last.pt (warn and start at epoch 0 without
    # one); auto: the same without the warning, for runs a supervisor restarts (torchrun
    # --max-restarts): the first start trains from 0, every restart continues.
    resume: bool | str = False
    device: str = "cpu"  # cpu | cuda | auto (cuda when available); samplers: sampler.device
    # Device bytes for node rows: a one-process job's with sampler.device=cuda (all of them
    # when they fit, else the highest-degree rows, the rest from pinned host memory); a
    # distributed GPU trainer's partition and cache rows (its samplers send the rest; 0: off).
    # -1: what the card has free after the model (its weights x4) and a tenth for activations,
    # split between the trainers sharing the card.
    gpu_feature_bytes: int = -1
    eval_negatives: int = 20  # link eval: random destinations ranked against each positive
    # Metric that picks a sweep's best job (summaries, `python -m app report`), the best-k
    # checkpoints, early stopping and the plateau scheduler; "": val_acc, or val_auc for link
    # objectives; any name in result.json (MLflow's `system/<name>` too). Names containing
    # "loss" or "time" are minimised.
    monitor: str = ""
    # Lightning's switches, Lightning's names (app/train/switches.py):
    # learning-rate schedule per epoch: none | cosine (to 0 over train.epochs) | step (x gamma
    # every scheduler_step_size epochs) | plateau (x gamma after scheduler_patience
    # evaluations without a better monitor)
    scheduler: str = "none"
    scheduler_step_size: int = 10
    scheduler_gamma: float = 0.1
    scheduler_patience: int = 2
    early_stopping: EarlyStoppingConfig = field(default_factory=EarlyStoppingConfig)
    # keep the k best checkpoints by the monitor beside last.pt (checkpoints/epoch_E-<monitor>_
    # V.pt); 0: none, -1: every evaluated epoch
    save_top_k: int = 0
    gradient_clip_val: float = 0.0  # clip the gradients' global norm to this (0: off)
    precision: str = "32-true"  # 32-true | bf16-mixed (autocast in training steps, CPU or GPU)
    # The gradient all-reduce, DDP's own options (app/task/ddp.py): a compression hook of
    # PyTorch's (none | fp16 | bf16: buckets all-reduced in 16 bits, half the bytes; bf16 on
    # CUDA trainers only) and the bucket size in MB (DDP's default 25).
    ddp_comm_hook: str = "none"
    ddp_bucket_cap_mb: float = 25.0


@dataclass
class ClusterConfig:
    """Where the processes run. `local` starts every node on 127.0.0.1."""

    mode: str = "local"
    num_nodes: int = 1
    procs_per_node: int = 1  # trainer processes per node
    # torch/numba/OMP threads of each trainer (0: the machine's cores split between the
    # processes on it, which differs between local and env mode; a fixed count gives the
    # same floating-point reductions, hence bit-identical metrics, in every mode)
    threads_per_proc: int = 0
    master_addr: str = "127.0.0.1"  # every DDP/RPC listener binds to this address only
    # Accept a non-loopback master_addr: the DDP and RPC ports have no authentication, so
    # only on a private network every host of which is trusted (README, "Trust model").
    allow_remote: bool = False
    master_port: int = 0  # 0: the local launcher picks free ports
    ip_config: str | None = None  # ssh mode: file with one `host [port]` per line
    ssh_cmd: str = "ssh"
    python: str = "python"  # interpreter used on remote hosts (ssh mode)
    workdir: str | None = None  # ssh mode: where to cd on remote hosts
    init_timeout_s: float = 120.0  # RPC / process-group rendezvous
    shutdown_timeout_s: float = 10.0  # SIGTERM → SIGKILL grace
    # Liveness: every process beats every heartbeat_s; its launcher stops the job, naming it,
    # when one is silent (stopped, frozen, cut off) for heartbeat_timeout_s (0: half of
    # sampler.rpc_timeout_s, so a silent process is named before any RPC to it times out).
    heartbeat_s: float = 1.0
    heartbeat_timeout_s: float = 0.0


@dataclass
class MlflowConfig:
    enabled: bool = True
    tracking_uri: str | None = None  # default: sqlite:///<output_dir>/mlflow.db
    experiment_name: str = "distgnn"
    run_name: str | None = None


@dataclass
class Config:
    task: str = "train"
    seed: int = 0
    output_dir: str = "outputs"
    dataset: DatasetConfig = field(default_factory=DatasetConfig)
    partition: PartitionConfig = field(default_factory=PartitionConfig)
    sampler: SamplerConfig = field(default_factory=SamplerConfig)
    loader: LoaderConfig = field(default_factory=LoaderConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    cluster: ClusterConfig = field(default_factory=ClusterConfig)
    mlflow: MlflowConfig = field(default_factory=MlflowConfig)
    experiment: str | None = None  # name of the experiment file, set by conf/experiment/*
    # task=eval: the checkpoint to score on val and test without training (Lightning's
    # `trainer.validate(ckpt_path=...)`); the job's config must build the same model
    ckpt_path: str | None = None

    @property
    def tracking_uri(self) -> str:
        """The MLflow store: the configured URI, or a SQLite file under the output dir."""
        if self.mlflow.tracking_uri:
            return self.mlflow.tracking_uri
        return f"sqlite:///{Path(self.output_dir).resolve() / 'mlflow.db'}"


GROUPS = {
    "dataset": DatasetConfig,
    "partition": PartitionConfig,
    "sampler": SamplerConfig,
    "loader": LoaderConfig,
    "model": ModelConfig,
    "train": TrainConfig,
    "cluster": ClusterConfig,
    "mlflow": MlflowConfig,
}


_JOB_DIRS: dict[str, str] = {}


def unique_job_dir(parent: str) -> str:
    """`<parent>/<YYYY-mm-dd_HH-MM-SS>-<6 hex>`, created here with `mkdir` (never exist_ok).

    Two jobs started in the same second (same `output_dir`) get different dirs: the suffix is
    random and `mkdir` fails on a clash, so a job never shares its config, logs, checkpoints,
    result.json or MLflow run id. Hydra resolves `hydra.run.dir` / `hydra.sweep.dir` more than
    once per process; each parent gets its dir once per process.
    """
    if parent not in _JOB_DIRS:
        Path(parent).mkdir(parents=True, exist_ok=True)
        stamp = time.strftime("%Y-%m-%d_%H-%M-%S")
        while True:
            path = Path(parent) / f"{stamp}-{secrets.token_hex(3)}"
            try:
                path.mkdir()
                break
            except FileExistsError:
                continue
        _JOB_DIRS[parent] = str(path)
    return _JOB_DIRS[parent]


def register_configs() -> None:
    """Register the root schema, one `<group>/schema` entry per group, and our resolvers.

    Hydra is imported here, not at the top: a job's processes load their config with OmegaConf
    alone (`load_config`), and a sampler process must not pay for Hydra (issue 38)."""
    from hydra.core.config_store import ConfigStore

    OmegaConf.register_new_resolver("distgnn_unique_dir", unique_job_dir, replace=True)
    cs = ConfigStore.instance()
    cs.store(name="schema", node=Config)
    for group, node in GROUPS.items():
        cs.store(group=group, name="schema", node=node)


def _require(ok: bool, key: str, value: Any, fix: str) -> None:
    if not ok:
        raise ConfigError(f"{key}={value!r}: {fix}")


def _choice(key: str, value: Any, allowed: tuple[str, ...]) -> None:
    _require(value in allowed, key, value, f"expected one of {', '.join(allowed)}")


def _check_fanouts(cfg: Config) -> None:
    fan = cfg.sampler.num_neighbors
    _require(
        fan is not None,
        "sampler.num_neighbors",
        fan,
        "not set: e.g. sampler.num_neighbors=[15,10,5]",
    )
    layers = cfg.model.num_layers
    lists = list(fan.values()) if isinstance(fan, dict) else [fan]
    for hops in lists:
        _require(
            isinstance(hops, list) and all(isinstance(k, int) for k in hops),
            "sampler.num_neighbors",
            fan,
            "expected a list of ints per hop, e.g. [15,10,5], or a dict edge_type -> list",
        )
        _require(
            len(hops) == layers,
            "sampler.num_neighbors",
            fan,
            f"has {len(hops)} hops but model.num_layers={layers}; give one fan-out per layer",
        )
        _require(
            all(k == -1 or k > 0 for k in hops),
            "sampler.num_neighbors",
            fan,
            "fan-outs must be positive, or -1 for all neighbours",
        )


KERNELS_ENV = "DISTGNN_KERNELS"  # numba | torch | unset: which kernels run (`app.model.ops`)
KERNEL_CHOICES = ("numba", "torch")


def kernels_forced() -> str:
    """`DISTGNN_KERNELS`, lower-cased ('' when unset), refused in one line when it names no
    kernel set."""
    mode = os.environ.get(KERNELS_ENV, "").strip().lower()
    _require(mode in ("", *KERNEL_CHOICES), KERNELS_ENV, mode, "expected numba, torch or unset")
    return mode


def _check_sampler_device(cfg: Config) -> None:
    """`sampler.device=cuda` feeds a GPU trainer of a one-process job."""
    if cfg.sampler.device != "cuda":
        return
    _require(
        cfg.train.device != "cpu",
        "sampler.device",
        "cuda",
        "samples on the trainer's GPU but train.device=cpu: set train.device=cuda",
    )
    _require(
        cfg.cluster.num_nodes == 1 and cfg.cluster.procs_per_node == 1,
        "sampler.device",
        "cuda",
        f"serves one-process jobs (cluster.num_nodes={cfg.cluster.num_nodes}, "
        f"procs_per_node={cfg.cluster.procs_per_node}): use sampler.device=cpu",
    )
    _require(
        cfg.train.objective == "node",
        "sampler.device",
        "cuda",
        f"samples node batches; train.objective={cfg.train.objective} samples on the CPU: use "
        "sampler.device=cpu",
    )
    if cfg.cluster.mode == "ssh" or cfg.task != "train":
        return
    import torch

    _require(
        torch.cuda.is_available(),
        "sampler.device",
        "cuda",
        "CUDA is not available here; use cpu or auto",
    )


def _check_device(cfg: Config) -> None:
    """`train.device=cuda` needs CUDA here (trainers share GPUs when there are fewer than
    trainers: `app.placement`). Checked where the launcher runs (local and env modes); ssh
    hosts are not inspected."""
    if kernels_forced() == "numba" and cfg.train.device == "cuda":
        raise ConfigError(
            f"{KERNELS_ENV}=numba runs CPU kernels only: unset it to train with train.device=cuda"
        )
    _check_sampler_device(cfg)
    if cfg.train.device != "cuda" or cfg.cluster.mode == "ssh" or cfg.task == "partition":
        return
    import torch

    _require(
        torch.cuda.is_available(),
        "train.device",
        "cuda",
        "CUDA is not available here; use cpu or auto",
    )


def _check_sizes(cfg: Config) -> None:
    """A synthetic graph needs a node per part and a training node per part."""
    if not cfg.dataset.name.startswith("synthetic"):
        return
    n, parts = cfg.dataset.num_nodes, cfg.partition.num_parts
    train = max(1, int(n * cfg.dataset.train_frac))
    _require(
        n >= parts and (cfg.task != "train" or train >= parts),
        "dataset.num_nodes",
        n,
        f"gives {train} training nodes for {parts} parts (cluster.num_nodes="
        f"{cfg.cluster.num_nodes}): raise dataset.num_nodes or lower cluster.num_nodes",
    )


def is_loopback(addr: str) -> bool:
    """Whether `addr` (an IP or a host name) resolves to a loopback address only."""
    import ipaddress
    import socket

    try:
        return ipaddress.ip_address(addr).is_loopback
    except ValueError:
        pass  # a host name: resolve it
    try:
        infos = socket.getaddrinfo(addr, None)
    except OSError:
        return False
    return bool(infos) and all(ipaddress.ip_address(i[4][0]).is_loopback for i in infos)


def check_remote(addr: str, key: str, cluster: ClusterConfig) -> None:
    """Listeners have no authentication: a non-loopback master must be asked for explicitly.

    `key` names where the address came from (a config key, or torchrun's MASTER_ADDR).
    """
    if cluster.allow_remote or is_loopback(addr):
        return
    raise ConfigError(
        f"{key}={addr!r} is not a loopback address: the DDP/RPC ports have no "
        "authentication; on a private network of trusted hosts set cluster.allow_remote=true"
    )


def _check_partition(cfg: Config) -> None:
    """The memory budget, the node order and the streaming partitioner's limits (homogeneous)."""
    p = cfg.partition
    budget = p.memory_budget_gb
    _require(budget is None or budget > 0, "partition.memory_budget_gb", budget, "must be > 0")
    _require(p.refine_passes >= 0, "partition.refine_passes", p.refine_passes, "must be >= 0")
    _choice("partition.order", p.order, NODE_ORDERS)
    _require(
        p.order == "original" or p.relabel,
        "partition.order",
        p.order,
        "a locality order renumbers the nodes: set partition.relabel=true as well, or "
        "partition.order=original",
    )
    if p.method != "stream":
        return
    _require(
        cfg.dataset.name in HOMOGENEOUS_DATASETS,
        "dataset.name",
        cfg.dataset.name,
        "partition.method=stream handles homogeneous graphs only; use partition=metis",
    )


def heartbeat_timeout_s(cfg: Config) -> float:
    """Silence after which a process is declared dead (cluster.heartbeat_timeout_s, 0: auto)."""
    return cfg.cluster.heartbeat_timeout_s or cfg.sampler.rpc_timeout_s / 2


def _check_heartbeat(c: ClusterConfig) -> None:
    _require(c.heartbeat_s > 0, "cluster.heartbeat_s", c.heartbeat_s, "must be > 0 (seconds)")
    _require(
        c.heartbeat_timeout_s == 0 or c.heartbeat_timeout_s >= 2 * c.heartbeat_s,
        "cluster.heartbeat_timeout_s",
        c.heartbeat_timeout_s,
        f"must be 0 (auto) or >= 2 * cluster.heartbeat_s={c.heartbeat_s}",
    )


def _check_switches(cfg: Config) -> None:
    """The scheduler, early stopping, best-k, clipping, precision and `task=eval`'s checkpoint."""
    t = cfg.train
    _choice("train.scheduler", t.scheduler, SCHEDULERS)
    _choice("train.precision", t.precision, PRECISIONS)
    _choice("train.ddp_comm_hook", t.ddp_comm_hook, DDP_COMM_HOOKS)
    _require(
        t.ddp_comm_hook != "bf16" or t.device != "cpu",
        "train.ddp_comm_hook",
        t.ddp_comm_hook,
        "PyTorch's bf16 hook needs NCCL (CUDA trainers); use fp16 with train.device=cpu",
    )
    _require(t.ddp_bucket_cap_mb > 0, "train.ddp_bucket_cap_mb", t.ddp_bucket_cap_mb, "must be > 0")
    for key, value in (
        ("train.scheduler_step_size", t.scheduler_step_size),
        ("train.scheduler_gamma", t.scheduler_gamma),
    ):
        _require(value > 0, key, value, "must be > 0")
    nonneg = {
        "train.scheduler_patience": t.scheduler_patience,
        "train.early_stopping.patience": t.early_stopping.patience,
        "train.early_stopping.min_delta": t.early_stopping.min_delta,
        "train.gradient_clip_val": t.gradient_clip_val,
    }
    for key, value in nonneg.items():
        _require(value >= 0, key, value, "must be >= 0 (0: off)")
    _require(
        "/" not in t.monitor.removeprefix("system/"),
        "train.monitor",
        t.monitor,
        "metric names have no '/' but MLflow's system/ prefix (docs/mlflow.md): "
        f"train.monitor={t.monitor.replace('/', '_')}",
    )
    _require(t.save_top_k >= -1, "train.save_top_k", t.save_top_k, "must be -1 (all), 0 or k > 0")
    _require(
        t.save_top_k == 0 or t.checkpoint,
        "train.save_top_k",
        t.save_top_k,
        "keeps checkpoints: set train.checkpoint=true as well",
    )
    if cfg.task != "eval":
        return
    path = cfg.ckpt_path
    _require(bool(path), "ckpt_path", path, "task=eval scores a checkpoint: ckpt_path=PATH.pt")
    _require(
        cfg.cluster.mode == "ssh" or Path(str(path)).is_file(),
        "ckpt_path",
        path,
        "no such file (a job's checkpoints are in <job dir>/checkpoints/)",
    )


def validate(cfg: Config) -> Config:
    """Cross-field checks run before any data is touched or any process starts."""
    _choice("task", cfg.task, TASKS)
    _choice("dataset.name", cfg.dataset.name, DATASETS)
    if not is_builder(cfg.model.name):
        _choice("model.name", cfg.model.name, (*MODELS, "package.module:builder"))
    _choice("partition.method", cfg.partition.method, PARTITION_METHODS)
    _choice("sampler.subgraph_type", cfg.sampler.subgraph_type, SUBGRAPH_TYPES)
    _choice("sampler.temporal_strategy", cfg.sampler.temporal_strategy, TEMPORAL_STRATEGIES)
    _choice("cluster.mode", cfg.cluster.mode, CLUSTER_MODES)
    _choice("train.objective", cfg.train.objective, tuple(OBJECTIVES))
    _choice("loader.neg_sampling", cfg.loader.neg_sampling, ("binary", "triplet"))
    _choice("model.decoder", cfg.model.decoder, ("dot", "mlp"))
    _choice("train.sparse_optimizer", cfg.train.sparse_optimizer, ("adam", "adagrad"))
    _choice("train.device", cfg.train.device, TRAIN_DEVICES)
    _choice("sampler.device", cfg.sampler.device, TRAIN_DEVICES)
    _choice("train.eval_mode", cfg.train.eval_mode, EVAL_MODES)
    _choice("dataset.feature_dtype", cfg.dataset.feature_dtype, FEATURE_DTYPES)
    _choice("sampler.feature_wire_dtype", cfg.sampler.feature_wire_dtype, WIRE_DTYPES)
    _require(
        not (
            cfg.dataset.feature_dtype == "float16" and cfg.sampler.feature_wire_dtype == "bfloat16"
        ),
        "sampler.feature_wire_dtype",
        cfg.sampler.feature_wire_dtype,
        "would round the float16 store's features again: use store (they travel as float16)",
    )
    _check_switches(cfg)
    _check_fanouts(cfg)
    _check_device(cfg)
    _require(
        cfg.dataset.name not in USER_DATASETS or bool(cfg.dataset.path),
        "dataset.path",
        cfg.dataset.path,
        f"dataset={cfg.dataset.name} reads your graph from it: set dataset.path=FILE_OR_DIR",
    )
    positives = {
        "loader.batch_size": cfg.loader.batch_size,
        "loader.eval_batch_size": cfg.loader.eval_batch_size,
        "train.epochs": cfg.train.epochs,
        "train.lr": cfg.train.lr,
        "train.eval_negatives": cfg.train.eval_negatives,
        "train.eval_chunk_size": cfg.train.eval_chunk_size,
        "model.hidden_channels": cfg.model.hidden_channels,
        "model.num_layers": cfg.model.num_layers,
        "cluster.num_nodes": cfg.cluster.num_nodes,
        "cluster.procs_per_node": cfg.cluster.procs_per_node,
        "partition.num_parts": cfg.partition.num_parts,
        "sampler.concurrency": cfg.sampler.concurrency,
        "sampler.rpc_timeout_s": cfg.sampler.rpc_timeout_s,
        "dataset.num_nodes": cfg.dataset.num_nodes,
        "dataset.num_features": cfg.dataset.num_features,
        "dataset.num_classes": cfg.dataset.num_classes,
    }
    for key, value in positives.items():
        _require(value > 0, key, value, "must be > 0")
    _require(
        cfg.train.resume in (True, False, "auto"),
        "train.resume",
        cfg.train.resume,
        "expected true, false or auto",
    )
    _require(
        cfg.train.checkpoint_every_steps >= 0,
        "train.checkpoint_every_steps",
        cfg.train.checkpoint_every_steps,
        "must be >= 0 (0: checkpoint at the end of each epoch only)",
    )
    _require(
        cfg.train.gpu_feature_bytes >= -1,
        "train.gpu_feature_bytes",
        cfg.train.gpu_feature_bytes,
        "must be >= 0 bytes, or -1 for what fits after the model",
    )
    _require(
        cfg.loader.num_workers >= 0, "loader.num_workers", cfg.loader.num_workers, "must be >= 0"
    )
    _require(
        cfg.sampler.feature_cache_size >= 0,
        "sampler.feature_cache_size",
        cfg.sampler.feature_cache_size,
        "must be >= 0 (rows of halo features cached per node; 0 turns the cache off)",
    )
    _require(
        cfg.sampler.hot_cache_bytes >= 0,
        "sampler.hot_cache_bytes",
        cfg.sampler.hot_cache_bytes,
        "must be a whole number of bytes >= 0, e.g. 50000000 (0 turns the hot cache off)",
    )
    _check_partition(cfg)
    _require(
        0 < cfg.dataset.train_frac and cfg.dataset.train_frac + cfg.dataset.val_frac < 1,
        "dataset.train_frac",
        cfg.dataset.train_frac,
        "need 0 < train_frac and train_frac + val_frac < 1",
    )
    d = cfg.dataset
    _require(
        0 <= d.test_frac and d.train_frac + d.val_frac + d.test_frac <= 1,
        "dataset.test_frac",
        d.test_frac,
        "need 0 <= test_frac and train_frac + val_frac + test_frac <= 1 (0: the rest)",
    )
    if cfg.task != "partition" and cfg.cluster.num_nodes > 1:
        _require(
            cfg.partition.num_parts == cfg.cluster.num_nodes,
            "partition.num_parts",
            cfg.partition.num_parts,
            f"must equal cluster.num_nodes={cfg.cluster.num_nodes} (one part per node)",
        )
    _check_sizes(cfg)
    _check_heartbeat(cfg.cluster)
    _require(
        cfg.cluster.threads_per_proc >= 0,
        "cluster.threads_per_proc",
        cfg.cluster.threads_per_proc,
        "must be >= 0 (0: the cores split between the processes of a machine)",
    )
    if cfg.cluster.mode == "local":
        check_remote(cfg.cluster.master_addr, "cluster.master_addr", cfg.cluster)
    if cfg.cluster.mode == "ssh":
        _require(
            bool(cfg.cluster.ip_config),
            "cluster.ip_config",
            cfg.cluster.ip_config,
            "ssh mode needs a file with one `host [port]` per line",
        )
    return cfg


def to_config(node: Any) -> Config:
    """Turn a composed DictConfig (or a plain dict) into a validated `Config`."""
    merged = OmegaConf.merge(OmegaConf.structured(Config), node)
    return validate(OmegaConf.to_object(merged))


def save_config(cfg: Config, path: str | os.PathLike) -> None:
    """Write `cfg` as YAML atomically (children of a job read it back with `load_config`)."""
    from app.fsutil import write_text_atomic

    write_text_atomic(Path(path), OmegaConf.to_yaml(OmegaConf.structured(cfg)))


# Groups conf/config.yaml declares as `NAME: null` slots (lightning-hydra-template): selected by
# `NAME=option`; Hydra refuses `+NAME=option` for a group already in the defaults list.
SLOT_GROUPS = ("experiment", "debug")


def normalize_overrides(argv: list[str]) -> list[str]:
    """`+experiment=X` / `+debug=X` as `experiment=X` / `debug=X`: both spellings select the
    option (the README's `+experiment=` predates the `experiment: null` slot);
    `hydra/sweeper=optuna` as the project's Optuna config (conf/hydra/sweeper)."""
    out = []
    for arg in argv:
        key = arg.partition("=")[0]
        if "=" in arg and key.startswith("+") and key.lstrip("+") in SLOT_GROUPS:
            arg = arg.lstrip("+")
        out.append(SWEEPER_ALIASES.get(arg, arg))
    return out


# `hydra/sweeper=optuna` is the plugin's bare schema; the project's config extends it (a
# same-named yaml would be refused by Hydra's schema matching)
SWEEPER_ALIASES = {"hydra/sweeper=optuna": "hydra/sweeper=distgnn_optuna"}


def compose_config(overrides: list[str]) -> Config:
    """`conf/config.yaml` with `overrides`, composed and validated as `python -m app` would."""
    from hydra import compose, initialize_config_dir

    register_configs()
    conf = Path(__file__).resolve().parents[1] / "conf"
    with initialize_config_dir(config_dir=str(conf), version_base="1.3"):
        return to_config(compose(config_name="config", overrides=normalize_overrides(overrides)))


def load_config(path: str | os.PathLike) -> Config:
    return to_config(OmegaConf.load(path))


def _field_names(schema: type) -> list[str]:
    return list(schema.__dataclass_fields__)


def check_override(arg: str, *, check_value: bool = True) -> None:
    """Reject `group.key=value` overrides whose key is unknown or whose value has the wrong type.

    Hydra rejects these too, with a multi-line report; this names the key, the value and a close
    valid key in one line. Group selections (`model=gat`, `+experiment=smoke`) must name a YAML
    file of the group (with a close name suggested); other `+`/`~` overrides and `hydra.*` keys
    are left to Hydra.
    """
    if "=" not in arg or arg.startswith(("~", "hydra")):
        return
    key, value = arg.split("=", 1)
    if check_value:
        _check_not_a_sweep(arg, key, value)
    if key.lstrip("+") in CHOICE_GROUPS:
        _check_choice(key, value, sweep=not check_value)
        return
    if arg[0] == "+":
        return
    path = key.split(".")
    schema: type = Config
    for depth, part in enumerate(path):
        names = _field_names(schema)
        if part not in names:
            import difflib

            close = difflib.get_close_matches(part, names, n=1)
            hint = f"did you mean {'.'.join([*path[:depth], close[0]])}?" if close else ""
            raise ConfigError(
                f"{key}={value}: unknown key {part!r}" + (f"; {hint}" if hint else "")
            )
        schema = GROUPS.get(part) if depth == 0 and part in GROUPS else None
        if schema is None:
            break
    if check_value:
        try:
            OmegaConf.merge(OmegaConf.structured(Config), OmegaConf.from_dotlist([arg]))
        except Exception as err:  # omegaconf.ValidationError; parse errors are Hydra's to report
            if type(err).__name__ == "ValidationError":
                raise ConfigError(f"{key}={value}: {str(err).splitlines()[0]}") from None


def _check_not_a_sweep(arg: str, key: str, value: str) -> None:
    """Outside `-m`, `key=a,b` is neither a list nor a sweep: say how to write each, in one line
    (Hydra's "Ambiguous value" report spans five)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    try:
        sweep = OverridesParser.create().parse_override(arg).is_sweep_override()
    except HydraException as err:  # e.g. a path holding "=": quoting makes it a string
        first = (str(err).strip().splitlines() or [""])[-1]
        raise ConfigError(
            f"{arg}: Hydra cannot parse the value ({first}); quote it: {key}=\"'{value}'\""
        ) from None
    if sweep and key.lstrip("+") in CHOICE_GROUPS:
        raise ConfigError(f"{arg}: {key} selects one option; a sweep over them needs -m")
    if sweep and "(" not in value:
        raise ConfigError(
            f"{arg}: a comma-separated value is ambiguous; a list is written "
            f"{key}=[{value}], a sweep over the values needs -m"
        )
    if sweep:
        raise ConfigError(f"{arg}: a sweep needs -m")


CONF_DIR = Path(__file__).resolve().parents[1] / "conf"
# Config groups chosen by name on the command line (`model=gat`, `experiment=smoke`).
CHOICE_GROUPS = (*GROUPS, *SLOT_GROUPS)


def _check_choice(key: str, value: str, sweep: bool) -> None:
    """`group=name` must name a `conf/<group>/<name>.yaml`; else one line with "did you mean"."""
    import difflib

    group = key.lstrip("+")
    options = sorted(p.stem for p in (CONF_DIR / group).glob("*.yaml") if p.stem != "schema")
    if sweep and "(" in value:  # choice(...), glob(...): Hydra's sweep syntax, Hydra checks it
        return
    names = value.split(",") if sweep else [value]
    for name in names:
        if name in options or name in ("null", "") or not options:
            continue
        close = difflib.get_close_matches(name, options, n=1)
        hint = f"did you mean {key}={close[0]}? " if close else ""
        raise ConfigError(
            f"{key}={name}: no conf/{group}/{name}.yaml; {hint}(options: {', '.join(options)})"
        )


def check_overrides(argv: list[str]) -> None:
    """Pre-check command-line overrides (values too, unless this is a `-m` sweep)."""
    sweep = "-m" in argv or "--multirun" in argv
    for arg in argv:
        if not arg.startswith("-"):
            check_override(arg, check_value=not sweep)
