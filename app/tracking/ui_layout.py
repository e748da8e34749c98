"""What MLflow's chart view shows first, by its grouping rule and on the rendered page.

`make ui-check` compares two views of the newest experiment:
- by rule: the metric keys the server returns (REST `runs/search`, what the UI fetches),
  grouped into sections as MLflow 3's UI does (`metric_keys.chart_sections`); the first
  section must be "Model metrics" and hold `loss` and the monitored metric;
- on the page: the section headings and chart titles Chromium drew (`LAYOUT`), in the same
  order as the rule's sections, with the `loss` and monitor charts' titles above the fold
  (inside the first screen, 1440 x 1000 pixels, without scrolling).
"""

from __future__ import annotations

import json
import urllib.request
from typing import Any

from app.tracking.metric_keys import MODEL_SECTION, chart_sections, stored_key
from app.tracking.summary import monitor_for

Sections = list[tuple[str, list[str]]]

# The chart view's section headings and chart titles with their top and bottom on the screen.
LAYOUT = """(() => {
  const box = e => e.getBoundingClientRect();
  const heads = document.querySelectorAll(
    '[data-testid="experiment-view-compare-runs-section-header"]');
  return {
    fold: window.innerHeight,
    sections: [...heads].map(h => ({
      name: [...h.querySelectorAll('div')].find(
        d => !d.children.length && d.textContent.trim()).textContent.trim(),
      top: box(h).top})),
    charts: [...document.querySelectorAll('h4[title]')].map(h => ({
      title: h.getAttribute('title'), top: box(h).top, bottom: box(h).bottom})),
  };
})()"""


def server_sections(url: str, exp_id: str) -> tuple[Sections, str]:
    """(chart sections by MLflow's rule, monitored metric) of the experiment's runs as the
    server at `url` returns them; the monitor is the newest job's `train.monitor`."""
    body = json.dumps({"experiment_ids": [exp_id], "max_results": 1000}).encode()
    request = urllib.request.Request(
        f"{url}/api/2.0/mlflow/runs/search", body, {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=60) as answer:
        runs = json.load(answer).get("runs", [])
    keys = [m["key"] for r in runs for m in r.get("data", {}).get("metrics", [])]
    jobs = [r for r in runs if "train.objective" in _params(r)]  # not a sweep's parent
    newest = max(jobs, key=lambda r: int(r["info"]["start_time"]), default=None)
    params = _params(newest) if newest else {}
    monitor = monitor_for(params.get("train.monitor", ""), params.get("train.objective", "node"))
    return chart_sections(keys), monitor


def _params(run: dict[str, Any]) -> dict[str, str]:
    return {p["key"]: p["value"] for p in run.get("data", {}).get("params", [])}


def _wanted(monitor: str) -> tuple[str, str]:
    return "loss", stored_key(monitor) or monitor


def section_problems(sections: Sections, monitor: str) -> list[str]:
    """What keeps the chart view from opening on the training metrics, by MLflow's rule."""
    first, keys = sections[0]
    problems = [] if first == MODEL_SECTION else [f"first chart section is {first!r}"]
    return problems + [
        f"{k} not in the first section ({first})" for k in _wanted(monitor) if k not in keys
    ]


def page_problems(layout: dict[str, Any], sections: Sections, monitor: str) -> list[str]:
    """Where the drawn page differs from the rule, or shows loss or the monitor below the fold."""
    drawn = [s["name"] for s in layout.get("sections", [])]
    expected = [name for name, _ in sections]
    if drawn != expected:
        return [f"sections drawn {drawn}, by MLflow's rule {expected}"]
    ends = [s["top"] for s in layout["sections"][1:]] + [float("inf")]
    first = [
        c for c in layout.get("charts", []) if layout["sections"][0]["top"] < c["top"] < ends[0]
    ]
    problems = []
    for key in _wanted(monitor):
        title = key.rpartition("/")[2]  # the UI titles a chart by the key's last part
        chart = next((c for c in first if c["title"] == title), None)
        if chart is None:
            problems.append(f"no {title} chart drawn in {drawn[0]} (it draws what is in view)")
        elif chart["bottom"] > layout["fold"]:
            problems.append(f"{title} below the fold ({chart['top']:.0f} px of {layout['fold']})")
    return problems
