"""The course as a static site: every lesson executed headless and written as HTML (`make site`).

build.py executes the lessons (or reuses executed copies) and writes the site; pages.py lays out
each page and the index; render.py turns widgets, quick checks and formulas into static HTML;
cli.py registers `kvcourse site`.
"""
