"""The text of the reports (jinja2): Markdown with image links, and a self-contained HTML page.

Text only; bench/analysis/report.py decides what goes in. Tables arrive as {"columns", "rows",
"more"} with cells already formatted as strings; figures as {"title", "png", "data_uri"}; a config
as {"config", "findings": [{"text", "evidence"}], "sections": [{"title", "note", "table", "figures"}],
"not_recorded": [what none of its runs measured]}. The HTML is autoescaped; the Markdown quotes
evidence (NCCL's log lines) as code spans.
"""


def md_code(text: str) -> str:
    """text as one Markdown code span, whatever backticks or line breaks it holds."""
    text = " ".join(str(text).split())
    return f"`` {text} ``" if "`" in text else f"`{text}`"


MARKDOWN = """\
# {{ title }}

Generated {{ generated }}{% if source %} from `{{ source }}`{% endif %}: {{ counts.total }} run(s), {{ counts.usable }} in the figures, {{ counts.failed }}, {{ counts.live }} not finished, {{ counts.skipped }} skipped (unreadable or incomplete). {{ not_measured }} in a table: not measured.

{% for line in methods %}- {{ line }}
{% endfor %}{% if kept_apart %}
## Runs kept apart

{{ kept_note }}

{{ kept_apart | md_table }}
{% endif %}
{% for g in groups %}
## {{ g.config }}

**Findings.**{% if not g.findings %}{% if g.not_compared %} None among the comparisons made; some were not made, as the notes below say.{% else %} None: no gap in these runs passes its threshold.{% endif %}{% endif %}
{% for f in g.findings %}
- {{ f.text }}: {{ f.evidence | md_code }}{% endfor %}
{% for s in g.sections %}
{% if s.title %}### {{ s.title }}

{% endif %}{% if s.note %}{{ s.note }}
{% if s.table %}
{% endif %}{% endif %}{% if s.table %}{{ s.table | md_table }}
{% endif %}{% for f in s.figures %}
![{{ f.title }}]({{ f.png }})
{% endfor %}{% endfor %}{% if g.not_recorded %}
_Not recorded by these runs: {{ g.not_recorded | join("; ") }}._
{% endif %}{% else %}
No run has usable figures yet (see the tables below for why).
{% endfor %}{% if stages %}
## The flow, stage by stage

{{ stages.note }}
{% for s in stages.sections %}
### Stage {{ s.name }} ({{ s.workload }})

{% if s.note %}{{ s.note }}

{% endif %}{{ s.table | md_table }}
{% endfor %}
### Time to a chat model (seconds per stage, median over runs)

{% if stages.time_note %}{{ stages.time_note }}

{% endif %}{{ stages.time_to_chat | md_table }}
{% endif %}{% if side_by_side %}
## nanochat and NNTile side by side

Runs of both workloads with the same depth, sequence, total batch, device and ranks (medians over repeats);
runs on another node count, or that differ in another part of their key or in device batch, are rows of their own
(the variant column naming the latter), and tok/s vs nanochat is left out (–) where no nanochat point or more than
one on the same nodes could be the reference.

{{ side_by_side | md_table }}
{% endif %}
{% for t in run_tables %}
## {{ t.title }}

{{ t.table | md_table }}
{% endfor %}
"""

HTML = """\
<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>{{ title }}</title>
<style>
  body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 2rem auto; max-width: 1200px;
         padding: 0 1rem; color: #222; line-height: 1.45; }
  h1 { font-size: 1.8rem; } h2 { margin-top: 2.5rem; border-bottom: 2px solid #ddd; padding-bottom: .3rem; }
  table { border-collapse: collapse; margin: 1rem 0; font-size: .9rem; }
  th, td { border: 1px solid #ccc; padding: .3rem .6rem; text-align: right; vertical-align: top; }
  td { white-space: nowrap; } td:last-child { white-space: normal; }
  th { background: #f2f2f2; } td.text, th.text { text-align: left; }
  tr:nth-child(even) td { background: #fafafa; }
  div.scroll { overflow-x: auto; }
  figure { margin: 1.5rem 0; } figure img { max-width: 100%; height: auto; border: 1px solid #eee; }
  figcaption { color: #555; font-size: .9rem; }
  .meta { color: #555; } ul.methods li { margin: .2rem 0; } .more, .absent { color: #777; font-style: italic; }
  ul.findings li { margin: .35rem 0; } ul.findings code { background: #f4f4f4; padding: 0 .25rem;
         font-size: .85rem; overflow-wrap: anywhere; }
</style>
</head>
<body>
<h1>{{ title }}</h1>
<p class="meta">Generated {{ generated }}{% if source %} from <code>{{ source }}</code>{% endif %}: {{ counts.total }} run(s),
{{ counts.usable }} in the figures, {{ counts.failed }}, {{ counts.live }} not finished,
{{ counts.skipped }} skipped (unreadable or incomplete). {{ not_measured }} in a table: not measured.</p>
<ul class="methods">{% for line in methods %}<li>{{ line }}</li>{% endfor %}</ul>
{% macro table(t) %}
{% if not t.rows %}<p>None.</p>{% else %}
<div class="scroll"><table>
<thead><tr>{% for c in t.columns %}<th class="{{ 'text' if loop.index0 in t.text_cols else '' }}">{{ c }}</th>{% endfor %}</tr></thead>
<tbody>{% for row in t.rows %}<tr>{% for cell in row %}<td class="{{ 'text' if loop.index0 in t.text_cols else '' }}">{{ cell }}</td>{% endfor %}</tr>
{% endfor %}</tbody>
</table></div>
{% if t.more %}<p class="more">… and {{ t.more }} more rows (all of them are in the table file).</p>{% endif %}
{% endif %}
{% endmacro %}
{% if kept_apart %}
<h2>Runs kept apart</h2>
<p>{{ kept_note }}</p>
{{ table(kept_apart) }}
{% endif %}
{% for g in groups %}
<h2>{{ g.config }}</h2>
<p><strong>Findings.</strong>{% if not g.findings %}{% if g.not_compared %} None among the comparisons made; some were not made, as the notes below say.{% else %} None: no gap in these runs passes its threshold.{% endif %}{% endif %}</p>
{% if g.findings %}<ul class="findings">{% for f in g.findings %}<li>{{ f.text }}: <code>{{ f.evidence }}</code></li>{% endfor %}</ul>{% endif %}
{% for s in g.sections %}
{% if s.title %}<h3>{{ s.title }}</h3>{% endif %}
{% if s.note %}<p>{{ s.note }}</p>{% endif %}
{% if s.table %}{{ table(s.table) }}{% endif %}
{% for f in s.figures %}
<figure><img src="{{ f.data_uri }}" alt="{{ f.title }}"><figcaption>{{ f.title }}
(<a href="{{ f.svg }}">SVG</a>)</figcaption></figure>
{% endfor %}
{% endfor %}
{% if g.not_recorded %}<p class="absent">Not recorded by these runs: {{ g.not_recorded | join("; ") }}.</p>{% endif %}
{% else %}
<p>No run has usable figures yet (see the tables below for why).</p>
{% endfor %}
{% if stages %}
<h2>The flow, stage by stage</h2>
<p>{{ stages.note }}</p>
{% for s in stages.sections %}
<h3>Stage {{ s.name }} ({{ s.workload }})</h3>
{% if s.note %}<p>{{ s.note }}</p>{% endif %}
{{ table(s.table) }}
{% endfor %}
<h3>Time to a chat model (seconds per stage, median over runs)</h3>
{% if stages.time_note %}<p>{{ stages.time_note }}</p>{% endif %}
{{ table(stages.time_to_chat) }}
{% endif %}
{% if side_by_side %}
<h2>nanochat and NNTile side by side</h2>
<p>Runs of both workloads with the same depth, sequence, total batch, device and ranks (medians over repeats);
runs on another node count, or that differ in another part of their key or in device batch, are rows of their own
(the variant column naming the latter), and tok/s vs nanochat is left out (–) where no nanochat point or more than
one on the same nodes could be the reference.</p>
{{ table(side_by_side) }}
{% endif %}
{% for t in run_tables %}
<h2>{{ t.title }}</h2>
{{ table(t.table) }}
{% endfor %}
</body>
</html>
"""
