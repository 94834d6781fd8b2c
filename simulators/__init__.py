"""One widget simulator per lesson: a pure model plus an ipywidgets view."""
