"""The self-learner's quick check: ipywidgets with instant feedback (every lesson; lesson 00 explains).

Nothing about the answer is shown before an attempt. After a wrong attempt a "Show answer"
button appears; using it is recorded as revealed, not as passed. A free response is submitted,
not checked: the model answer appears after it for self-assessment, and progress records the
question as answered, not passed. A lab's question (lessons 18-20) is the lab itself: it shows how
to check the class written in the lesson, in code, where progress records it.
"""

from __future__ import annotations

import html

import ipywidgets as widgets

from kvcourse import feedback

from .bank import load_quiz
from .checking import Verdict, check, expected_number, prompt_for
from .model import Kind, Question
from .progress import Progress
from .units import DESCRIPTIONS, format_quantity

# JupyterLab's widget CSS gives every HTML line the height of an input box (28 px, near double spacing)
# and every radio label one fixed line, so a long option's text ran under the next row's button. Scoped to
# the quick check: prose line height, and long option labels that wrap beside their own radio button.
STYLE = """<style>
.kv-quiz .widget-html-content { line-height: 1.45; }
.kv-quiz .widget-html-content p { margin: 0 0 0.3em 0; }
.kv-quiz .kv-question { margin: 0.5em 0 0.2em 0; }
.kv-quiz .widget-radio-box label { display: flex; align-items: flex-start; height: auto;
  line-height: 1.4; margin: 0 0 0.3em 0; white-space: normal; }
.kv-quiz .widget-radio-box input { order: -1; flex: none; float: none; height: auto;
  margin: 0.2em 0.5em 0 1px; }
</style>"""


def _html(text: str) -> str:
    return html.escape(text).replace("\n", "<br>")


class QuestionView:
    """One question: prompt, an input, a Check button, feedback, and later a Show answer button."""

    def __init__(self, question: Question, progress: Progress, seed: str, number: int = 1, total: int = 1) -> None:
        self.question, self.progress, self.seed = question, progress, seed
        points = f"{question.points} point{'s' if question.points != 1 else ''}"
        # The id stays in the page, out of sight, for the browser tests and progress records.
        self.prompt = widgets.HTML(
            f"<b>Question {number} of {total}</b> ({points}) "
            f'<span style="display:none">{question.id}</span><br>'
            f"{_html(prompt_for(question, seed))}"
        )
        self.input = self._make_input()
        label = "Submit" if question.kind is Kind.FREE else "Check"
        self.check_button = widgets.Button(
            description=label,
            button_style="primary",
            layout=widgets.Layout(display="none" if question.kind is Kind.LAB else None),
        )
        self.reveal_button = widgets.Button(description="Show answer", layout=widgets.Layout(display="none"))
        self.feedback = widgets.HTML("")
        self.check_button.on_click(lambda _: self.submit())
        self.reveal_button.on_click(lambda _: self.reveal())
        self.box = widgets.VBox(
            [self.prompt, self.input, widgets.HBox([self.check_button, self.reveal_button]), self.feedback]
        )
        self.box.add_class("kv-question")
        self.box.add_class(f"kv-question-{question.id}")
        if question.kind is Kind.FREE:
            if question.id in progress.answered(question.lesson) | progress.passed(question.lesson):
                self.feedback.value = feedback.info("Answered before. Write it again if you like.")
        elif question.id in progress.passed(question.lesson):
            self.feedback.value = feedback.info("Passed before. Try it again if you like.")

    def _make_input(self) -> widgets.Widget:
        q = self.question
        wide = widgets.Layout(width="95%")
        if q.kind is Kind.CHOICE:
            labels = [(f"({key}) {text}", key) for key, text in zip(q.option_keys, q.options, strict=True)]
            return widgets.RadioButtons(options=labels, value=None, layout=wide)
        if q.kind in (Kind.NUMERIC, Kind.PARAMETERISED):
            return widgets.Text(placeholder=DESCRIPTIONS[q.unit], layout=wide)
        if q.kind is Kind.CODE:
            return widgets.Textarea(value=q.starter.lstrip("\n"), layout=widgets.Layout(width="95%", height="8em"))
        if q.kind is Kind.LAB:  # the class is written in the lesson's cells, not in a box
            run = f'check("{q.lab}", {q.class_name})'
            record = f'check_answer("{q.lesson}", "{q.id}", {q.class_name})'
            return widgets.HTML(
                feedback.info(
                    f"This question is the lab itself: write <code>{q.class_name}</code> in the lab's cells above "
                    f"and run <code>{run}</code>, which serves the public traces on it. When every trace passes, run "
                    f"<code>{record}</code> (from <code>kvcourse.quizzes</code>) to record it here.",
                    escape=False,
                )
            )
        return widgets.Textarea(
            placeholder=f"Your answer (at least {q.min_chars} characters)",
            layout=widgets.Layout(width="95%", height="6em"),
        )

    def submit(self) -> Verdict:
        """Check what is in the input now, show the feedback and record the attempt."""
        verdict = check(self.question, self.input.value, self.seed)
        if not verdict.malformed:
            self.progress.record(self.question.lesson, self.question.id, verdict.passed, answered=verdict.self_assessed)
        # a self-assessed answer is neither right nor wrong: the learner judges
        look = feedback.info if verdict.self_assessed else feedback.success if verdict.passed else feedback.error
        text = look(_html(verdict.message), escape=False)
        if verdict.self_assessed:
            text += f"<br><b>Model answer:</b><br>{_html(verdict.explanation)}"
        elif verdict.explanation:
            text += f"<br>{_html(verdict.explanation)}"
        if verdict.passed and self.question.kind is Kind.CHOICE:
            others = [
                f"({key}) {self.question.explanations[key]}"
                for key in self.question.option_keys
                if key != self.question.correct
            ]
            text += "<br><i>The other options:</i><br>" + "<br>".join(_html(line) for line in others)
        self.feedback.value = text
        can_reveal = not verdict.passed and not verdict.malformed and self.question.kind is not Kind.FREE
        if can_reveal:
            self.reveal_button.layout.display = None
        return verdict

    def reveal(self) -> None:
        """Show the right answer and why (only offered after a wrong attempt)."""
        self.progress.record(self.question.lesson, self.question.id, False, revealed=True)
        self.feedback.value += "<hr>" + _html(answer_text(self.question, self.seed))


def answer_text(question: Question, seed: str) -> str:
    """The right answer with its explanation, as shown by Show answer."""
    q = question
    if q.kind is Kind.CHOICE:
        lines = [f"The answer is ({q.correct})."]
        lines += [f"({key}) {q.explanations[key]}" for key in q.option_keys]
        return "\n".join(lines)
    if q.kind in (Kind.NUMERIC, Kind.PARAMETERISED):
        expected = expected_number(q, seed)
        verdict = check(q, expected, seed)
        return f"The answer is {format_quantity(expected, q.unit)}.\n{verdict.explanation}"
    if q.kind is Kind.CODE:
        return f"A solution:\n{q.solution.strip()}\n{q.explanation}"
    if q.kind is Kind.LAB:
        from .labs import solution_source

        return f"A solution:\n{solution_source(q.lab).strip()}"
    return q.model_answer


class QuickCheck(widgets.VBox):
    """All the questions of one lesson, one under another."""

    def __init__(self, lesson: str, progress: Progress | None = None) -> None:
        quiz = load_quiz(lesson)
        self.progress = progress or Progress()
        seed = self.progress.seed
        total = len(quiz.questions)
        self.items = [QuestionView(q, self.progress, seed, i + 1, total) for i, q in enumerate(quiz.questions)]
        title = widgets.HTML(f"{STYLE}<h4>Quick check: lesson {quiz.lesson}, {_html(quiz.title)}</h4>")
        notes = [widgets.HTML(feedback.info(note)) for note in self.progress.notes]
        super().__init__([title, *notes, *[item.box for item in self.items]])
        self.add_class("kv-quiz")


def quick_check(lesson: str | int) -> QuickCheck:
    """The quick check of a lesson, as a widget: `quick_check("07")` at the end of a lesson."""
    return QuickCheck(lesson)
