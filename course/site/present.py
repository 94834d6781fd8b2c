"""`kvcourse present NN`: a lesson as live slides for a class, its simulators running on a kernel (Voilà).

Voilà runs the lesson top to bottom on a fresh kernel (predictions ask nothing: Voilà has no input box), then
shows it as reveal.js slides cut by the cells' slideshow metadata, the same slides `kvcourse slides` writes, with
every widget live on that kernel. Voilà's own reveal template waits forever offline: it loads jQuery and
reveal.js's style sheets from CDNs. This one (TEMPLATE) drops those and serves the style sheets from the
course's npm copy of reveal.js (assets.copy_reveal), and drops the two Font Awesome style sheets it links from
a CDN (Voilà's own bundle carries Font Awesome 5): nothing is asked of the network. The template is written
under .cache/present/ (on JUPYTER_PATH) before each start. Why Voilà and not jupyterlab-rise: quizzes/INSTRUCTORS.md.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from kvcourse.site.assets import copy_reveal
from kvcourse.syllabus import REPO_ROOT, get_lesson

TEMPLATE_NAME = "kvcourse-reveal"
WIDTH, HEIGHT = 1280, 800  # the deck's size, scaled to the screen (as `kvcourse slides`)
# Voilà 0.5's reveal template (which loads Voilà's widget manager and its own reveal.js bundle) less what it would
# fetch from CDNs: jQuery, mermaid, the html-manager (Voilà's manager draws the widgets) and reveal.js's style
# sheets (url_prefix, below: the template's static/reveal-npm; not static/reveal.js, which would hide Voilà's own
# /voila/static/reveal.js). Larger type for a room.
_FONT_AWESOME = "https://cdn.jsdelivr.net/npm/@fortawesome/fontawesome-free@^5/css/{}.min.css"
# Voilà's reveal template links these two from a CDN; its bundle (static/*.voila.js) holds Font Awesome already.
FONT_AWESOME = [
    f'<link rel="stylesheet" href="{_FONT_AWESOME.format(name)}" type="text/css" />' for name in ("all", "v4-shims")
]
TEMPLATE = r"""{%- extends 'voila/templates/reveal/index.html.j2' -%}
{%- block html_head_js_jquery -%}{%- endblock html_head_js_jquery -%}
{%- block html_head_js_mermaidjs -%}{%- endblock html_head_js_mermaidjs -%}
{% block jupyter_widgets %}{% endblock jupyter_widgets %}
{%- block html_head_js_logs -%}
<script>
  /* Voilà streams heartbeats while the lesson runs, before its own helpers define the function; and its reveal
     bundle re-typesets with MathJax 2's API on every slide change, while no MathJax is loaded here. */
  window.voila_heartbeat = function () {};
  window.MathJax = window.MathJax || {Hub: {getAllJax: () => null, Rerender: () => null, Queue: () => null}};
</script>
{{ super() }}
{%- endblock html_head_js_logs -%}
{%- block notebook_css -%}
{%- set css %}{{ super() }}{% endset -%}
{{ css | replace(FONT_AWESOME_ALL, "") | replace(FONT_AWESOME_SHIMS, "") }}
{%- endblock notebook_css -%}
{%- block html_head_css -%}
<style>
  .reveal .slides { text-align: left; }
  .reveal .jp-RenderedHTMLCommon { font-size: 24px; line-height: 1.45; }
  .reveal .jp-InputArea-editor pre, .reveal .jp-OutputArea-output pre { font-size: 18px; }
  .reveal .widget-label, .reveal .widget-html, .reveal .widget-button, .reveal .widget-text input { font-size: 18px; }
</style>
{%- endblock html_head_css -%}
"""


def write_template(root: Path) -> Path:
    """The template (index.html.j2, conf.json, reveal.js under static/) in ``root``/voila/templates; its folder."""
    folder = root / "voila" / "templates" / TEMPLATE_NAME
    (folder / "static").mkdir(parents=True, exist_ok=True)
    text = TEMPLATE.replace("FONT_AWESOME_ALL", repr(FONT_AWESOME[0]))
    text = text.replace("FONT_AWESOME_SHIMS", repr(FONT_AWESOME[1]))
    (folder / "index.html.j2").write_text(text, encoding="utf-8")
    (folder / "conf.json").write_text(json.dumps({"base_template": "reveal"}) + "\n", encoding="utf-8")
    copy_reveal(folder / "static" / "reveal-npm", needed_by="`kvcourse present`")
    return folder


def voila_command(notebook: str, extra_args: list[str] | None = None) -> list[str]:
    """The command line that serves ``notebook`` (a path under the repository) as live slides."""
    reveal = {"url_prefix": f"voila/templates/{TEMPLATE_NAME}/static/reveal-npm", "width": WIDTH, "height": HEIGHT}
    return [
        sys.executable,
        "-m",
        "voila",
        notebook,
        f"--template={TEMPLATE_NAME}",
        "--strip_sources=False",  # the code is what the class reads
        f"--VoilaConfiguration.resources={json.dumps({'reveal': reveal})}",
        *(extra_args or []),
    ]


def present_env(root: Path) -> dict[str, str]:
    """This environment with ``root`` first on JUPYTER_PATH (where the template lies) and no model hub."""
    path = os.pathsep.join(p for p in (str(root), os.environ.get("JUPYTER_PATH", "")) if p)
    return {**os.environ, "JUPYTER_PATH": path, "HF_HUB_OFFLINE": os.environ.get("HF_HUB_OFFLINE", "1")}


def _present_command(args: argparse.Namespace) -> int:
    lesson = get_lesson(args.lesson.zfill(2))
    root = REPO_ROOT / ".cache" / "present"
    write_template(root)
    extra = [f"--port={args.port}"] if args.port else []
    if args.no_browser:
        extra.append("--no-browser")
    command = voila_command(lesson.notebook, extra + [a for a in args.voila_args if a != "--"])
    print(f"present: lesson {lesson.number} as live slides; the page shows them once the lesson has run")
    os.chdir(REPO_ROOT)
    os.execve(command[0], command, present_env(root))  # replaces this process, as `kvcourse lab` does


def add_present(sub: argparse._SubParsersAction) -> None:
    """Register `kvcourse present` (quizzes/INSTRUCTORS.md, "Teaching from the slides")."""
    p = sub.add_parser("present", help="show a lesson as live slides, simulators running (Voila)")
    p.add_argument("lesson", help="lesson number, e.g. 13")
    p.add_argument("--port", type=int, default=None, help="port to serve on (default: Voila's, 8866)")
    p.add_argument("--no-browser", action="store_true", help="do not open a browser")
    p.add_argument("voila_args", nargs=argparse.REMAINDER, help="after --, passed on to voila unchanged")
    p.set_defaults(func=_present_command)
