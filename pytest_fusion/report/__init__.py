"""The reports: JSON first (schema.py, the source of truth), HTML rendered from it
(html.py, view.py, svg.py, highlight.py, templates/), profiler traces (traces.py),
and the merge/compare tools behind `python -m pytest_fusion`. hooks.py wires it
into pytest."""
