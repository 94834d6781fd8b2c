"""One widget simulator per lesson: a pure model plus an ipywidgets view (lessons 01-17).

How a simulator is built (see ``base.py`` and ``rereading.py`` for a short, complete example):

* a frozen config dataclass whose ``__post_init__`` validates with ``check_int`` / ``check_float``,
  which raise ``InvalidInput`` with a message naming the control and its allowed range;
* a model class: state, ``step()``, ``reset()`` and derived numbers as properties, no widgets,
  tested in plain pytest (tests/test_sim_models.py);
* a ``SimulatorView`` subclass: ``__init__`` makes the controls (``int_control``,
  ``float_control``, any ipywidget) and calls ``super().__init__``; ``build(values)`` returns a
  fresh model; ``draw(model)`` redraws ``self.axes`` and returns the summary line. The base
  class supplies Step/Reset buttons, the message line and the one figure, rendered in place;
* where the model predicts an engine measurement, a test asserts they agree
  (tests/test_sim_engine.py).

A notebook shows a simulator by leaving the view as the last expression of a cell.
"""
