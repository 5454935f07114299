"""Renders the HTML report from the report JSON with the Jinja templates in
templates/. The CSS and JS are inlined: the page is one file that works offline."""
from __future__ import annotations

import os
from pathlib import Path

from jinja2 import Environment, FileSystemLoader, Undefined, select_autoescape
from markupsafe import Markup

from .schema import validate, write_atomic
from .view import document_view

TEMPLATES = Path(__file__).parent / "templates"


def _dash(value):
    """Not measured (null or absent) shows as a dash, never as "None"."""
    return "—" if value is None or isinstance(value, Undefined) else value


def _env() -> Environment:
    env = Environment(loader=FileSystemLoader(TEMPLATES), autoescape=select_autoescape(["html", "j2"]),
                      trim_blocks=True, lstrip_blocks=True)
    env.filters["dash"] = _dash
    return env


def render(doc: dict) -> str:
    validate(doc)
    ctx = document_view(doc)
    ctx["css"] = Markup((TEMPLATES / "report.css").read_text(encoding="utf-8"))
    ctx["js"] = Markup((TEMPLATES / "report.js").read_text(encoding="utf-8"))
    return _env().get_template("report.html.j2").render(**ctx)


def write_html(doc: dict, path: str | os.PathLike) -> str:
    return write_atomic(path, lambda f: f.write(render(doc)))
