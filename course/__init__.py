"""The KV-cache course: syllabus, model loading, command line, progress (lesson 00)."""

__version__ = "0.1.0"  # the one place the version is kept: pyproject.toml reads it from here
