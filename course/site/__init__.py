"""The course as a book: every lesson executed headless, then built with Sphinx and myst-nb (`make site`).

build.py executes the lessons (or reuses executed copies) and builds the book; book.py writes the
Sphinx project (the syllabus as the sidebar, a page per lesson, the glossary) and runs Sphinx;
sphinx_conf.py is its configuration and sphinx_ext.py its extension; glossary.py makes the glossary
page and links the lessons' terms to it; render.py draws widgets and quick checks as static HTML;
assets.py copies MathJax and reveal.js from npm; cli.py registers `kvcourse site`.
"""
