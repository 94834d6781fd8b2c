"""The book's Sphinx configuration: the conf.py that `kvcourse site` writes imports everything here.

myst-nb reads the executed notebooks without running them; sphinx-book-theme draws the sidebar (the
syllabus in its parts), the search box and the page's contents. MathJax is served from the book
itself (`_static/mathjax`, copied from npm by kvcourse.site.assets): no page loads from a CDN.
"""

from __future__ import annotations

project = "The KV cache and model memory"
author = "the course's authors"
copyright = "the course's authors, MIT licence"
language = "en"
root_doc = "index"
extensions = ["myst_nb", "kvcourse.site.sphinx_ext"]
exclude_patterns = ["_build", "**.ipynb_checkpoints"]

# Notebooks arrive executed (kvcourse.site.build): never run here. A kernel's stderr (warnings) is left out.
nb_execution_mode = "off"
nb_output_stderr = "remove"
nb_merge_streams = True
nb_ipywidgets_js: dict[str, dict[str, str]] = {}  # widgets are drawn as HTML (kvcourse.site.render): no scripts
myst_enable_extensions = ["dollarmath", "colon_fence"]
myst_heading_anchors = 3
suppress_warnings = ["myst.header", "mystnb.unknown_mime_type", "misc.highlighting_failure"]

html_theme = "sphinx_book_theme"
html_title = "The KV cache and model memory"
html_static_path = ["_assets"]
html_css_files = ["kvcourse.css"]
html_show_sourcelink = False
html_copy_source = False
html_show_sphinx = False
html_last_updated_fmt: str | None = None
# Search shows each hit's page and section without fetching the page for a summary: from file:// the
# browser refuses that fetch (an error on the console), and the book must open from a folder.
html_show_search_summary = False
# The theme reads light or dark from the reader's browser; with nothing saved it needs a default.
html_context = {"default_mode": "auto"}
html_theme_options = {
    "home_page_in_toc": True,
    "show_navbar_depth": 1,
    "show_toc_level": 2,
    "use_download_button": False,
    "use_fullscreen_button": False,
    "use_repository_button": False,
    "navigation_with_keys": False,
}
mathjax_path = "mathjax/es5/tex-chtml-full.js"
