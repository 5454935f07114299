"""Syntax highlighting for kernel sources, the ATen graph and the wrapper.

Uses Pygments (a dependency of pytest, so always there with the plugin); the
colours live in report.css under the short Pygments token classes. Each source
line is wrapped in <span class="l">, which the CSS numbers."""
from __future__ import annotations

from markupsafe import Markup, escape

try:
    from pygments import highlight as _highlight
    from pygments.formatters import HtmlFormatter
    from pygments.lexers import CppLexer, PythonLexer
except ImportError:  # plain escaped text is still a readable report
    _highlight = None

_LEXERS = {"cpp": "CppLexer", "c++": "CppLexer", "triton": "PythonLexer", "python": "PythonLexer"}


def _lines(html: str) -> Markup:
    lines = html.rstrip("\n").split("\n")
    return Markup("".join(f'<span class="l">{ln}</span>\n' for ln in lines))


def highlight(source: str, language: str) -> Markup:
    """HTML for `source`; `language` is "cpp", "triton", "python" or anything else
    (shown plain)."""
    source = source.strip("\n")
    lexer = _LEXERS.get(language)
    if _highlight is None or lexer is None:
        return _lines(str(escape(source)))
    lexer_cls = CppLexer if lexer == "CppLexer" else PythonLexer
    # nowrap: no <pre>/<div> around it; Pygments closes its spans at each line end
    html = _highlight(source, lexer_cls(stripnl=False, ensurenl=False), HtmlFormatter(nowrap=True))
    return _lines(html)
