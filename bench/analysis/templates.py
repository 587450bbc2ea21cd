"""The text of the reports (jinja2): Markdown with image links, and a self-contained HTML page.

Text only; bench/analysis/report.py decides what goes in. Tables arrive as {"columns", "rows",
"more"} with cells already formatted as strings; figures as {"title", "png", "data_uri"}.
"""

MARKDOWN = """\
# {{ title }}

Generated {{ generated }} from `{{ source }}`: {{ counts.total }} run(s), {{ counts.usable }} in the figures, {{ counts.failed }} failed, {{ counts.live }} not finished, {{ counts.skipped }} skipped (unreadable or incomplete).

{% for line in methods %}- {{ line }}
{% endfor %}
{% for g in groups %}
## {{ g.config }}

{{ g.summary | md_table }}
{% if g.ratios.rows %}
### Steady-state throughput relative to {{ baseline }}

{{ g.ratios | md_table }}
{% endif %}
{% for f in g.figures %}
![{{ f.title }}]({{ f.png }})
{% endfor %}
{% else %}
No run has usable figures yet (see the tables below for why).
{% endfor %}
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
  .meta { color: #555; } ul.methods li { margin: .2rem 0; } .more { color: #777; font-style: italic; }
</style>
</head>
<body>
<h1>{{ title }}</h1>
<p class="meta">Generated {{ generated }} from <code>{{ source }}</code>: {{ counts.total }} run(s),
{{ counts.usable }} in the figures, {{ counts.failed }} failed, {{ counts.live }} not finished,
{{ counts.skipped }} skipped (unreadable or incomplete).</p>
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
{% for g in groups %}
<h2>{{ g.config }}</h2>
{{ table(g.summary) }}
{% if g.ratios.rows %}<h3>Steady-state throughput relative to {{ baseline }}</h3>
{{ table(g.ratios) }}{% endif %}
{% for f in g.figures %}
<figure><img src="{{ f.data_uri }}" alt="{{ f.title }}"><figcaption>{{ f.title }}
(<a href="{{ f.svg }}">SVG</a>)</figcaption></figure>
{% endfor %}
{% else %}
<p>No run has usable figures yet (see the tables below for why).</p>
{% endfor %}
{% for t in run_tables %}
<h2>{{ t.title }}</h2>
{{ table(t.table) }}
{% endfor %}
</body>
</html>
"""
