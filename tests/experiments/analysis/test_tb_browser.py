"""The sweep's TensorBoard view in a real browser: TensorBoard serving `DIR/_summary` of a finished
sweep, its pages loaded in headless Chromium, and what they render read from the page (shadow roots
included). Slow; skipped where Debian's `chromium` is not installed (`apt-get install chromium`)."""

from __future__ import annotations

import struct

import pytest
import tb_browser  # the headless-browser driver beside this test (test support, not the analysis)

from tests.experiments.analysis.conftest import AXIS, CELLS, LENGTHS, SEEDS

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not tb_browser.CHROMIUM.exists(), reason=f"{tb_browser.CHROMIUM} not installed"),
]
CHARTS = ["val/loss", *(f"val/loss@{n}" for n in LENGTHS), "train/loss", "val/loss against evaluation length (tokens)"]


def test_cell_comparison_charts_hparams_columns_and_time_series_render(finished_sweep):
    summary = finished_sweep.dir / "_summary"
    expected = tb_browser.series_expected(summary)
    with tb_browser.tensorboard(summary) as url, tb_browser.Chromium() as browser:
        browser.open(f"{url}/#custom_scalars")
        charts = browser.wait_for(tb_browser.MARGIN_CHARTS, lambda c: tb_browser.charts_ready(c, expected))
        assert [c["title"] for c in charts] == CHARTS  # the main metric first, as the layout means
        for chart in charts:
            # one line per cell (with its band); learned positions have no loss at 32
            cells = {"pos_encoding=rope"} if chart["title"] == f"val/loss@{LENGTHS[1]}" else set(CELLS)
            assert {name.rsplit(" (", 1)[1].rstrip(")") for name in chart["series"]} == cells, chart
            assert chart["title"] in chart["text"] and f"Matches ({len(cells)})" in chart["text"], chart
            assert chart["drawn"] and not chart["missing"] and not chart["mismatch"], chart

        browser.open(f"{url}/#hparams")
        table = browser.wait_for(tb_browser.HPARAMS_TABLE, lambda t: bool(t) and t["rows"] == len(CELLS) * len(SEEDS))
        assert table["rows"] == len(CELLS) * len(SEEDS), table  # one session per run, none per cell
        assert table["hparams"][:3] == [AXIS, "cell", "seed"] and table["metrics"][:3] == CHARTS[:3]
        headers = [table["text"].index(name) for name in (AXIS, "cell", "seed", "val/loss")]
        assert headers == sorted(headers), table["text"][:20]  # rendered in that order, swept axis first
        for cell in CELLS:
            assert all(f"{cell}/seed{s}" in table["text"] for s in SEEDS)

        browser.open(f"{url}/#timeseries")
        text = browser.wait_for(tb_browser.PAGE_TEXT, lambda t: "across_seeds/val/loss/mean" in "".join(t))
        # the cells' curves open first (TensorBoard opens the first two groups), beside the runs' own
        assert "across_seeds/val/loss/mean" in "".join(text) and text.index("across_seeds") < text.index("train")


def test_screenshot_script(finished_sweep, tmp_path, capsys):
    out = tmp_path / "tensorboard.png"
    assert tb_browser.main([str(finished_sweep.dir), "--out", str(out)]) == 0
    data = out.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and struct.unpack(">II", data[16:24]) == (1500, 1500)
    assert f"{len(CHARTS)} charts" in capsys.readouterr().out


def test_a_summary_without_its_layout_writes_no_screenshot(finished_sweep, tmp_path, monkeypatch, capsys):
    """A `_summary` made by a report from before the Custom Scalars layout: no empty picture replaces a good one."""
    sweep = tmp_path / "sweep"
    (sweep / "_summary").mkdir(parents=True)
    for run in (finished_sweep.dir / "_summary").iterdir():
        if run.is_dir():  # the cells' curves, without the root run that holds the layout
            (sweep / "_summary" / run.name).symlink_to(run)
    real = tb_browser.screenshot
    monkeypatch.setattr(tb_browser, "screenshot", lambda sweep_dir, out: real(sweep_dir, out, timeout=5))
    out = tmp_path / "tensorboard.png"
    assert tb_browser.main([str(sweep), "--out", str(out)]) == 1
    assert not out.exists() and "did not enable its custom_scalars dashboard" in capsys.readouterr().out


# Images dashboard: every image in the page (shadow roots included) with whether it loaded, and the page's text
IMAGES = tb_browser._script("""
  return {
    images: deep().filter((e) => e.localName === 'img').map((i) => ({src: i.src, width: i.naturalWidth,
                                                                     height: i.naturalHeight})),
    text: texts(),
  };
""")


def test_the_diagnostics_heatmaps_render(tmp_path):
    """A run's diagnostics heatmaps (`lit_modules.diagnostics_callbacks`), as TensorBoard's Images dashboard shows."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[3]
    command = [sys.executable, "cli.py", "fit", "-c", "configs/gpt/base.yaml", "-c", "configs/gpt/tiny.yaml",
               "--trainer.max_steps=4", "--trainer.val_check_interval=4", "--data.val_tokens=2048",
               "--model.sample_tokens=0", "--diagnostics.every_n_steps=2", "--diagnostics.heatmap_every_n_steps=2",
               f"--trainer.logger.init_args.save_dir={tmp_path}"]  # fmt: skip
    done = subprocess.run(command, cwd=root, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    tags = ("diagnostics/attn_entropy", "diagnostics/attn_distance")
    ready = lambda page: page and sum(i["width"] > 0 for i in page["images"]) >= len(tags)  # noqa: E731
    with tb_browser.tensorboard(tmp_path) as url, tb_browser.Chromium() as browser:
        tb_browser.plugin_enabled(url, "images")
        browser.open(f"{url}/#images")
        page = browser.wait_for(IMAGES, ready)
        assert ready(page), page
        assert all(any(tag in text for text in page["text"]) for tag in tags), page["text"][:40]
        drawn = [i for i in page["images"] if "individualImage" in i["src"]]
        assert len(drawn) >= len(tags) and all(i["width"] > 200 and i["height"] > 80 for i in drawn), drawn
        browser.screenshot(tmp_path / "heatmaps.png")
