"""Hydra launcher plugin `distgnn`: runs each job of a sweep as a distributed job, one after another.

Select it with `override hydra/launcher: distgnn` in conf/config.yaml (or
`hydra/launcher=distgnn` on the command line). `config.py` registers the schema, `launcher.py`
is the thin `Launcher`, `_core.py` does the work (the underscore keeps it out of Hydra's scan).
"""
