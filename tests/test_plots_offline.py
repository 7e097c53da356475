"""`dvc plots show` must draw every plot with no network.

DVC's default page loads vega, vega-lite and vega-embed from a CDN, so it is blank offline.
.dvc/config points plots.html_template at dvc_plots_template.html, which inlines the
vendored copies in vendor/vega/ (written by tools/build_plots_template.py). Here the page
that `dvc plots show` writes is opened in headless Chromium with DNS and proxying sent
nowhere, and a probe script appended to a copy of the page reports from the DOM whether
each vega plot drew an SVG with marks (and dvc.yaml's titles and axis labels) and each PNG
loaded. The same check on DVC's default CDN page must find blank plots, which shows the
network really is off and the check can fail. Skipped where no Chromium is installed.
"""
from __future__ import annotations

import html
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
IMAGE_EXTS = (".png", ".jpg", ".jpeg", ".gif", ".svg")

# Inserted first in <head>: records script errors and failed vegaEmbed promises.
ERROR_HOOK = """<script>
window.__errors = [];
addEventListener("error", e => __errors.push(String(e.message)));
addEventListener("unhandledrejection", e => __errors.push(String(e.reason)));
</script>"""

# Appended to <body>: once every image settled and every div in VEGA_IDS drew (or after 50
# polls, ~5 s of page time), writes what the DOM shows into <pre id="probe"> for --dump-dom.
PROBE = """<script>
(function (VEGA_IDS) {
  let polls = 0;  // counted, not timed: Date.now() is wall time under --virtual-time-budget
  const texts = (el, sel) => [...el.querySelectorAll(sel)].map(t => t.textContent);
  function plot(div) {
    return {svg: !!div.querySelector("svg.marks"), canvas: !!div.querySelector("canvas"),
            marks: [...div.querySelectorAll("g.role-mark path")]
                     .filter(p => (p.getAttribute("d") || "").length > 1).length,
            title: texts(div, "g.role-title-text text").join(" "),
            axis_titles: texts(div, "g.role-axis-title text")};
  }
  function report() {
    const plots = {};
    for (const div of document.querySelectorAll("body div[id]")) plots[div.id] = plot(div);
    const images = [...document.images].map(
      i => ({src: i.getAttribute("src"), complete: i.complete, width: i.naturalWidth}));
    return {plots, images, errors: window.__errors};
  }
  function poll() {
    const r = report();
    const drawn = VEGA_IDS.every(id => r.plots[id] && r.plots[id].marks > 0);
    const settled = r.images.every(i => i.complete);
    if ((document.readyState === "complete" && settled && drawn) || ++polls > 50) {
      const pre = document.createElement("pre");
      pre.id = "probe";
      pre.textContent = JSON.stringify(r);
      document.body.appendChild(pre);
    } else {
      setTimeout(poll, 100);
    }
  }
  addEventListener("load", poll);
})(%s);
</script>"""


def chromium() -> str | None:
    """A Chromium/Chrome binary: $CHROMIUM, else the usual names on PATH."""
    names = [os.environ.get("CHROMIUM", ""), "chromium", "chromium-browser",
             "google-chrome", "google-chrome-stable"]
    return next((shutil.which(n) for n in names if n and shutil.which(n)), None)


needs_chromium = pytest.mark.skipif(chromium() is None,
                                    reason="no chromium binary (apt-get install chromium)")


def declared_plots() -> tuple[dict[str, dict], list[str]]:
    """dvc.yaml's vega plots (id -> props) and image plot paths, top level and per stage."""
    spec = yaml.safe_load((ROOT / "dvc.yaml").read_text(encoding="utf-8"))
    entries = list(spec.get("plots", []))
    for stage in spec.get("stages", {}).values():
        entries += stage.get("plots", [])
    vega: dict[str, dict] = {}
    images: list[str] = []
    for entry in entries:
        pid, props = next(iter(entry.items())) if isinstance(entry, dict) else (entry, {})
        if pid.lower().endswith(IMAGE_EXTS):
            images.append(pid)
        elif (ROOT / pid).is_dir():  # a folder (dvclive's): one plot per data file in it
            for f in sorted(p for p in (ROOT / pid).rglob("*") if p.is_file()):
                vega[f.relative_to(ROOT).as_posix()] = {}
        else:
            vega[pid] = props or {}
    return vega, images


def dvc_plots_show(out: Path, *extra: str) -> Path:
    """Run `dvc plots show` on the workspace into `out`; returns the page."""
    proc = subprocess.run([sys.executable, "-m", "dvc", "plots", "show", "-o", str(out), *extra],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "failed to load" not in proc.stdout + proc.stderr, proc.stdout + proc.stderr
    return out / "index.html"


def probe_offline(page: Path, tmp: Path) -> dict:
    """Render a probed copy of `page` (beside it, so static/ resolves) with no network."""
    text = page.read_text(encoding="utf-8")
    probe = PROBE % json.dumps(vega_ids(page))
    probed = page.with_name("probed.html")
    # The probe goes before the last </body>: the inlined vega-embed has one in a string.
    head, tail = text.replace("<head>", "<head>\n" + ERROR_HOOK, 1).rsplit("</body>", 1)
    probed.write_text(head + probe + "\n</body>" + tail, encoding="utf-8")
    cmd = [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
           "--disable-background-networking", "--disable-component-update", "--disable-sync",
           "--disable-extensions", f"--user-data-dir={tmp / 'chromium-profile'}",
           "--host-resolver-rules=MAP * ~NOTFOUND", "--proxy-server=127.0.0.1:9",
           "--virtual-time-budget=15000", "--dump-dom", probed.as_uri()]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
    found = re.search(r'<pre id="probe">(.*?)</pre>', proc.stdout, re.S)
    assert found, f"probe did not report; chromium rc={proc.returncode}\n{proc.stderr[-3000:]}"
    return json.loads(html.unescape(found.group(1)))


def vega_ids(page: Path) -> list[str]:
    """The element ids DVC asks vegaEmbed to fill."""
    return re.findall(r"vegaEmbed\('#([^']+)'", page.read_text(encoding="utf-8"))


def test_template_is_current() -> None:
    proc = subprocess.run([sys.executable, "tools/build_plots_template.py", "--check"],
                          cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


@needs_chromium
def test_plots_draw_offline(tmp_path: Path) -> None:
    page = dvc_plots_show(tmp_path / "out")
    assert "cdn." not in page.read_text(encoding="utf-8")
    vega, images = declared_plots()
    ids = vega_ids(page)
    assert len(ids) == len(vega), (ids, sorted(vega))
    r = probe_offline(page, tmp_path)
    assert r["errors"] == []
    for pid in ids:
        p = r["plots"][pid]
        assert p["svg"] and p["marks"] > 0, (pid, p)
    by_title = {p["title"]: p for p in r["plots"].values() if p["title"]}
    for pid, props in vega.items():  # titles and labels from dvc.yaml reach the chart
        if "title" in props:
            assert props["title"] in by_title, (pid, sorted(by_title))
            axes = by_title[props["title"]]["axis_titles"]
            assert axes == [props["x_label"], props["y_label"]], (pid, axes)
    assert len(r["images"]) == len(images), (r["images"], images)
    bad = [i for i in r["images"] if not (i["complete"] and i["width"] > 0)]
    assert not bad, bad


@needs_chromium
def test_default_cdn_page_is_blank_offline(tmp_path: Path) -> None:
    """DVC's stock page draws nothing here: the network is off and the probe notices."""
    from dvc_render.html import PAGE_HTML

    stock = tmp_path / "stock.html"
    stock.write_text(PAGE_HTML, encoding="utf-8")
    page = dvc_plots_show(tmp_path / "out", "--html-template", str(stock))
    r = probe_offline(page, tmp_path)
    ids = vega_ids(page)
    assert ids and not any(r["plots"][pid]["svg"] for pid in ids)
    assert any("vegaEmbed" in e for e in r["errors"]), r["errors"]
