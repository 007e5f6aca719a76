"""Text from users, files and tokenizers, made safe for where it is shown.

One function per destination: Plotly's HTML-ish labels (`html_text`), Streamlit markdown
(`markdown_text`, `markdown_code`), spreadsheet cells (`csv_cell`). All of them first make
invisible or reordering characters visible (`visible`): a right-to-left override (U+202E) or a
zero-width space in a token or a file name would otherwise change what a reader sees.
"""

from __future__ import annotations

import html
import re
import unicodedata

# Markdown syntax inside one line: emphasis, code, links/images, HTML, strikethrough, math, tables,
# Streamlit directives (:red[...], :material/x:) and autolinks (http: and www.).
_AUTOLINK = re.compile(r"(?:[A-Za-z][A-Za-z0-9+.-]*:/+|www\.)[^\s`]*|[\w.+-]+@[\w-]+\.[\w.-]+", re.IGNORECASE)
_MD_SPECIAL = re.compile(r"([\\`*_{}\[\]()#!|<>~$:])")
CSV_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def visible(s: str) -> str:
    """Bidi controls, zero-width and control characters replaced by a visible <U+XXXX> marker.

    >>> visible("abc\\u202edef")
    'abc<U+202E>def'
    """
    s = str(s)
    if s.isascii() and s.isprintable():
        return s
    # Cf: format characters (bidi controls, zero-width space/joiners, BOM, soft hyphen); Cc: controls.
    return "".join(f"<U+{ord(c):04X}>" if c not in "\n\t" and unicodedata.category(c) in ("Cf", "Cc") else c
                   for c in s)


def shorten(s: str, n: int = 120) -> str:
    """At most `n` characters, with an ellipsis when cut."""
    s = str(s)
    return s if len(s) <= n else s[:n - 1] + "…"


def html_text(s: str) -> str:
    """Text for Plotly labels, hovers and HTML reports: tags shown as text, never rendered.

    >>> html_text("<b>x</b>")
    '&lt;b&gt;x&lt;/b&gt;'
    """
    return html.escape(visible(s), quote=False)


def markdown_text(s: str) -> str:
    """Text for st.markdown/st.error/st.caption: links, images, emphasis, directives (:red[...],
    :material/...:) and HTML are shown literally. Whitespace runs (newlines too) become one space.

    >>> markdown_text("see [x](http://a.b/c)")
    'see \\\\[x\\\\]\\\\(` http://a.b/c) `'
    """
    s = " ".join(visible(s).split())
    # Autolinks (URLs, www., e-mail addresses) are found after escapes are resolved: only a code
    # span keeps them from becoming links, so those pieces are shown as code.
    parts, last = [], 0
    for m in _AUTOLINK.finditer(s):
        parts.append(_MD_SPECIAL.sub(r"\\\1", s[last:m.start()]))
        parts.append(markdown_code(m.group(), n=len(m.group())))
        last = m.end()
    parts.append(_MD_SPECIAL.sub(r"\\\1", s[last:]))
    s = "".join(parts)
    s = re.sub(r"^(\d+)([.)])", r"\1\\\2", s)  # "1." would start a list
    return "\\" + s if s[:1] in ("-", "+", "=") else s  # nor a bullet or a heading


def markdown_code(s: str, n: int = 120) -> str:
    """A value as an inline code span, whatever backticks it holds (shortened to `n` characters).

    >>> markdown_code("a`b")
    '`` a`b ``'
    """
    s = shorten(" ".join(visible(s).split()), n)
    run = max((len(m) for m in re.findall(r"`+", s)), default=0)
    fence = "`" * (run + 1)
    return f"{fence} {s} {fence}"


def csv_cell(v):
    """A cell that a spreadsheet would run as a formula (=, +, -, @ first) gets a leading '.

    Numbers stay numbers.

    >>> csv_cell("=HYPERLINK(1)"), csv_cell(-1.5)
    ("'=HYPERLINK(1)", -1.5)
    """
    if isinstance(v, str):
        if v.startswith(CSV_FORMULA_START):
            return "'" + v
        return v
    return v

