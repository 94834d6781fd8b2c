"""Quick checks: one question bank, rendered as widgets or as an nbgrader course."""
