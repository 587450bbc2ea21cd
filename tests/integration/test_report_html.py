"""The HTML report opens in a real browser (headless Chromium) with all its embedded images decoded.

python -m pytest tests/integration/test_report_html.py -q
Chromium is the Debian package `chromium` (tests/run installs it); the test skips without it, except in CI.
"""

import os
import re
import shutil
import subprocess

import numpy as np
import pytest

from bench.analysis import summarize_runs
from tests.support.synthetic import SweepSpec, generate_sweep

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(CHROMIUM is None and not os.environ.get("CI"), reason="chromium not installed")

# Appended to a copy of the report: after load, record each image's decoded width in the DOM.
PROBE = """<script>
window.addEventListener("load", () => {
  const widths = [...document.images].map(i => i.complete ? i.naturalWidth : -1);
  document.body.setAttribute("data-image-widths", widths.join(","));
});
</script>"""


def chromium(tmp_path, *args, timeout=60) -> subprocess.CompletedProcess:
    cmd = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
           "--disable-component-update", "--no-first-run", f"--user-data-dir={tmp_path / 'profile'}", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("html")
    generate_sweep(tmp / "runs", SweepSpec(world_sizes=(8, 16), repeats=2, steps=14))
    return summarize_runs(tmp / "runs", tmp / "report")


def image_widths(tmp_path, html: str) -> list[int]:
    """The decoded width of every image once the page has loaded (0 for one that failed)."""
    probe = tmp_path / "probe.html"
    probe.write_text(html.replace("</body>", PROBE + "</body>"))
    out = chromium(tmp_path, "--virtual-time-budget=5000", "--dump-dom", probe.as_uri())
    m = re.search(r'data-image-widths="([^"]*)"', out.stdout)
    assert m, f"the page did not finish loading:\n{out.stderr[-2000:]}"
    return [int(w) for w in m[1].split(",")]


def test_images_load_in_the_browser(tmp_path, report):
    widths = image_widths(tmp_path, report.read_text())
    assert len(widths) == 8 and all(w > 500 for w in widths), widths  # 8 figures (strong scaling), each decoded


def test_the_probe_sees_a_broken_image(tmp_path, report):
    broken = report.read_text().replace("data:image/png;base64,iVBOR", "data:image/png;base64,AAAA", 1)
    assert 0 in image_widths(tmp_path, broken)


def test_screenshot(tmp_path, report):
    shot = tmp_path / "report.png"
    chromium(tmp_path, "--hide-scrollbars", "--window-size=1280,2400", f"--screenshot={shot}", report.as_uri())
    from PIL import Image  # matplotlib's own dependency

    img = np.asarray(Image.open(shot).convert("L"))
    assert img.shape == (2400, 1280)
    assert (img < 128).mean() > 0.005  # text, tables and figures drawn, not a blank page
