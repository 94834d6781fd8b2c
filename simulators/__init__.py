"""One widget simulator per lesson (course/syllabus.toml names each lesson's): a pure model plus an ipywidgets view.

How a simulator is built (see ``base.py`` and ``rereading.py`` for a short, complete example):

* a frozen config dataclass whose ``__post_init__`` validates with ``checks.py`` (``check_int``,
  ``check_float``, ``check_choice``), which raise ``InvalidInput`` with a message naming the
  control and its allowed range;
* a model class: state, ``step()``, ``reset()`` and derived numbers as properties, no widgets,
  tested in plain pytest (tests/simulators/test_sim_models.py);
* a ``SimulatorView`` subclass: ``__init__`` makes the controls (``controls.py``: ``int_control``,
  ``float_control``, ``dropdown_control``, ``model_dropdown``, any ipywidget) and calls
  ``super().__init__``; ``build(values)`` returns a fresh model; ``draw(model)`` draws on the
  cleared ``self.axes`` and returns the summary line; ``on_change(name)`` lets controls follow
  one another (a ``Preset`` fills its figures). The base class supplies Step/Reset buttons, the
  message line and the one figure, rendered in place;
* shared tables live once: ``hardware.py`` the cards and whether a model fits on one,
  ``labels.py`` units, the bytes-per-value labels, the model label and plain log ticks;
* where a lab runs the learner's policy in a lesson's simulator (learner_policy.py), the config and
  model sit in ``<name>_model.py`` and the view in ``<name>.py`` (sharing, prefix_cache, paging): the
  learner's twin builds on the model and the view builds the twin, so no two import each other;
* a simulator holds config, model and view only: what a lesson measures on the engine itself
  (a trace served, the event log read back, next-token agreement) is ``kvcourse.kernels.measure``;
* where the model predicts an engine measurement, a test asserts they agree
  (tests/simulators/test_sim_engine.py).

A notebook shows a simulator by leaving the view as the last expression of a cell.
"""
