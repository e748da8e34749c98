"""`distgnn --help`: what a user can run, from the config files themselves.

Hydra's own help names the program `__main__`, lists the typed `schema` entries in every group
and knows nothing of `report` or `experiment=`; this one lists the groups' options as found
under `conf/` (so it never goes stale), the experiments, and the subcommands.
"""

from __future__ import annotations

from pathlib import Path

SCHEMA = "schema"  # the typed default registered in each group (app.config.register_configs)


def group_options(conf_dir: Path) -> dict[str, list[str]]:
    """{group: its option names} for every group dir under `conf_dir`."""
    return {
        d.name: sorted(p.stem for p in d.glob("*.yaml") if p.stem != SCHEMA)
        for d in sorted(conf_dir.iterdir())
        if d.is_dir()
    }


def help_text(conf_dir: Path) -> str:
    groups = group_options(conf_dir)
    experiments = groups.pop("experiment", [])
    lines = [
        "distgnn: distributed GNN training runs, configured with Hydra, tracked in MLflow",
        "",
        "usage:",
        "  distgnn experiment=NAME [key=value ...]       run a job (the summary says where)",
        "  distgnn -m experiment=NAME key=a,b ...        a sweep: one job per combination",
        "  distgnn experiment=NAME --cfg job             print the composed, validated config",
        "  distgnn experiment=NAME debug=fast            one short epoch, no MLflow: does it run?",
        "  distgnn report RUN_DIR|SWEEP_DIR|--experiment NAME [--format md|csv]",
        "                                                results tables from the MLflow store",
        "",
        "experiments (experiment=NAME; +experiment=NAME works too):",
        "  " + ", ".join(experiments),
        "",
        "config groups (group=option):",
        *(f"  {group}: {', '.join(options)}" for group, options in groups.items()),
        "",
        "any key can be overridden (train.epochs=3, cluster.num_nodes=4); --cfg job lists them.",
        "a list is written in brackets: sampler.num_neighbors=[10,5] (a,b without -m is refused)",
        "Hydra's own flags: distgnn --hydra-help",
    ]
    return "\n".join(lines) + "\n"
