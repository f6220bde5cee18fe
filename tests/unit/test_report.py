"""The HTML report (lmsci_mi.cli.report), `lmsci-mi report` and the tour's report and failures."""

from __future__ import annotations

import html
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from tour_args import FAST_TOUR

from lmsci_mi import LensModel, load_model
from lmsci_mi.circuits.attention import attention_html, attention_summary
from lmsci_mi.cli import main
from lmsci_mi.cli.report import CircuitsView, Section, build_report, write_report
from lmsci_mi.cli.tour import FAIL_ENV
from lmsci_mi.results import Result

BUNDLE_START = "var CircuitsVis="
PROMPT = "The Eiffel Tower is located in the city of"


def fetched_urls(page: str) -> list[str]:
    """Every address the page would fetch: src/href attributes, CSS url() and @import, and module
    imports, that point off the page (http, https or protocol-relative)."""
    patterns = [
        r"""\b(?:src|href|srcset|data|poster)\s*=\s*["']?\s*((?:https?:)?//[^"' >]+)""",
        r"""url\(\s*["']?\s*((?:https?:)?//[^)"']+)""",
        r"""@import\s+["']?((?:https?:)?//[^"' ;]+)""",
        r"""\bimport\b[^;'"]*?from\s*["']((?:https?:)?//[^"']+)""",
    ]
    return [m for p in patterns for m in re.findall(p, page, flags=re.IGNORECASE)]


def two_views(lm: LensModel) -> list[CircuitsView]:
    return [
        CircuitsView.from_html(attention_html(lm, PROMPT, [(0, 1), (1, 2)]), caption="two heads"),
        CircuitsView.from_html(attention_html(lm, "The cat sat on the mat", [(1, 0)])),
    ]


@pytest.fixture(scope="module")  # a string, built once: drawing it takes about a second
def page() -> str:
    tiny = load_model("toy-2l", device="cpu")
    summary = attention_summary(tiny, PROMPT)
    sections = [
        Section(
            "Attention",
            "what the heads do",
            {"attention_summary": summary},
            two_views(tiny),
            code="attention_summary(lm, PROMPT)",
        ),
        Section(
            "Predictions",
            "top tokens",
            {"top": tiny.top_tokens(PROMPT, k=5)},
            code="lm.top_tokens(PROMPT)",
        ),
        Section("A step that broke", code="broken(lm)", failed="RuntimeError: the step broke"),
    ]
    return build_report(sections, title="test report")


def test_the_report_inlines_one_circuitsvis_bundle_for_all_views(page: str) -> None:
    assert page.count(BUNDLE_START) == 1
    assert page.count("CircuitsVis.render(") == 2  # two views, one render call each
    assert page.count("data:image/png;base64,") == 2  # one plot per result


def test_the_report_fetches_nothing(page: str) -> None:
    assert fetched_urls(page) == []
    # The checker itself finds what it must.
    assert fetched_urls("<script src='https://cdn.x/a.js'></script><img src=//x.org/a.png>") == [
        "https://cdn.x/a.js",
        "//x.org/a.png",
    ]
    assert fetched_urls(
        '<style>@import "https://f.org/a.css"; b{background:url(http://x/y.png)}</style>'
    )


def test_the_report_shows_numbers_meta_and_code(page: str, tiny: LensModel) -> None:
    assert "Reproduce:" in page and "attention_summary(lm, PROMPT)" in page
    assert '<table class="dataframe numbers"' in page or 'class="dataframe numbers"' in page
    assert f"<td>{tiny.name}</td>" in page  # the meta's model
    assert "all 24 rows" in page  # 3 measures x 2 layers x 4 heads


def test_a_failed_section_shows_its_reason(page: str) -> None:
    section = page[page.index('id="s2"') :]
    assert 'class="failed"' in page[page.index('id="s2"') - 20 : page.index('id="s2"') + 40]
    assert "RuntimeError: the step broke" in section
    assert "3 sections, 1 failed" in page
    assert "A step that broke</a> — failed" in page


def test_size_limit_is_enforced(tiny: LensModel) -> None:
    sections = [Section("views", views=two_views(tiny))]
    assert len(build_report(sections).encode()) < 3_000_000
    with pytest.raises(ValueError, match=r"over the 1\.0 MB limit"):
        build_report(sections, max_bytes=1_000_000)


def test_long_tables_keep_the_largest_values() -> None:
    import torch

    from lmsci_mi.results import Meta
    from lmsci_mi.viz import result_html as report

    values = torch.randn(10, 10)
    values[3, 4] = float("nan")
    result = Result(
        values=values, axes=("layer", "head"), labels=((), ()), meta=Meta("m", sink=None)
    )
    frame = result.to_dataframe()
    shown, note = report.truncate(frame)
    assert len(frame) == 100 and len(shown) == report.TABLE_ROWS
    assert "30 of 100 rows with the largest |value|" in note
    assert shown["value"].abs().min() == pytest.approx(
        float(
            values.abs()
            .nan_to_num(-1)
            .flatten()
            .sort(descending=True)
            .values[report.TABLE_ROWS - 1]
        )
    )
    assert "layer_index" not in shown.columns  # the index repeats the label column
    page = build_report([Section("big", results={"big": result})])
    assert page.count("<tr>") < 60  # the table is cut, the meta has a few rows


def test_a_circuit_shows_the_interactive_viewer_not_a_plot() -> None:
    import torch

    from lmsci_mi.circuits.edges.faithfulness import Circuit
    from lmsci_mi.circuits.edges.graph import EdgeGraph
    from lmsci_mi.circuits.edges.pruning import prune_topn
    from lmsci_mi.results import Meta

    graph = EdgeGraph(model="toy", n_layers=2, n_heads=4, n_kv_heads=4, grouped=False)
    scores = torch.randn(graph.real.shape, generator=torch.Generator().manual_seed(0))
    circuit = Circuit(
        values=prune_topn(graph, scores * graph.real, 30),
        axes=("sender", "receiver"),
        labels=(graph.sender_names, graph.receiver_names),
        meta=Meta(model="toy", sink=None),
        scores=scores,
        graph=graph,
    )
    page = build_report([Section("Edge circuit", results={"circuit": circuit})])
    assert page.count("lmsciCircuitViewer.mount('lmsci-cv-") == 1 and "data:image/png" not in page
    assert not fetched_urls(page)


def test_a_view_must_be_a_circuitsvis_render() -> None:
    with pytest.raises(ValueError, match="not a circuitsvis view"):
        CircuitsView.from_html("<p>hello</p>")
    with pytest.raises(ValueError):  # props that are not JSON would run as script
        CircuitsView.from_html('CircuitsVis.render("x", CircuitsVis.A, alert(1))</script>')


def test_a_steer_highlight_becomes_a_view(tiny: LensModel) -> None:
    from lmsci_mi.steering import LMSteer
    from lmsci_mi.steering.highlight import highlight_keywords

    result = highlight_keywords(tiny, LMSteer.for_model(tiny, ("sentiment",)), "What a lovely day")
    view = CircuitsView.from_html(result.html())
    assert view.element == "ColoredTokens"
    page = build_report([Section("highlight", results={"h": result}, views=[view])])
    assert page.count(BUNDLE_START) == 1 and fetched_urls(page) == []


# ---------------------------------------------------------------------- lmsci-mi report


def test_report_command_reads_results_saved_by_two_commands(tmp_path: Path) -> None:
    toy = ["--model", "toy-2l", "--device", "cpu"]
    heads, trace = tmp_path / "heads.json", tmp_path / "sub" / "trace.json"
    assert (
        main(["heads", *toy, "--n-sequences", "2", "--half-length", "6", "--out", str(heads)]) == 0
    )
    assert (
        main(
            [
                "trace",
                *toy,
                "--prompt",
                PROMPT,
                "--subject",
                "Eiffel Tower",
                "--n-samples",
                "2",
                "--out",
                str(trace),
            ]
        )
        == 0
    )
    out = tmp_path / "shared" / "report.html"
    assert (
        main(["report", str(heads), str(trace.with_suffix(".safetensors")), "--html", str(out)])
        == 0
    )
    page = out.read_text(encoding="utf-8")
    for path in (heads, trace):
        kind = type(Result.load(path)).__name__
        assert f"<span class='kind'>{kind}</span>" in page
    assert "HeadScores" in page and "CausalTrace" in page
    assert page.count("data:image/png;base64,") == 2
    assert 'Result.load("../heads.json")' in html.unescape(page)  # relative to the report
    assert fetched_urls(page) == [] and BUNDLE_START not in page  # no view, no bundle


@pytest.mark.parametrize(
    ("files", "out", "message"),
    [
        (["missing.json"], "r.html", "no result file"),
        (["junk.txt"], "r.html", "not an lmsci-mi result"),
        (["folder"], "r.html", "no result file"),
        (["heads.json"], "r.txt", ".html"),
        (["heads.json"], "folder", "give a file name, not a folder"),
    ],
)
def test_report_command_bad_input_exits_2(
    tmp_path: Path,
    files: list[str],
    out: str,
    message: str,
    tiny: LensModel,
    capsys: pytest.CaptureFixture[str],
) -> None:
    (tmp_path / "junk.txt").write_text("{not json")
    (tmp_path / "folder").mkdir()
    tiny.top_tokens(PROMPT, k=3).save(tmp_path / "heads.json")
    argv = ["report", *[str(tmp_path / f) for f in files], "--html", str(tmp_path / out)]
    if out == "r.html":
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1
    else:  # a bad page path is a usage error, before any result is read
        with pytest.raises(SystemExit) as stop:
            main(argv)
        assert stop.value.code == 2
        err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert not (tmp_path / "r.html").exists()


# ---------------------------------------------------------------------- the tour


@pytest.mark.slow  # a tour; the failing-step tour below is the fast suite's
def test_quick_tour_writes_a_report_and_loadable_results(tmp_path: Path) -> None:
    assert (
        main([*FAST_TOUR, "--model", "toy-2l", "--device", "cpu", "--out-dir", str(tmp_path)]) == 0
    )
    page = (tmp_path / "report.html").read_text(encoding="utf-8")
    assert page.count(BUNDLE_START) == 1 and fetched_urls(page) == []
    assert "attention_summary(lm, " in page  # the reproducing line
    for path in tmp_path.glob("*.json"):
        assert isinstance(Result.load(path), Result)
    assert {p.stem for p in tmp_path.glob("*.json")} >= {"attention_summary", "predictions_eiffel"}


@pytest.mark.slow  # a tour
def test_a_report_elsewhere_links_the_saved_results(tmp_path: Path) -> None:
    out, report = tmp_path / "results", tmp_path / "pages" / "tour.html"
    argv = [*FAST_TOUR, "--model", "toy-2l", "--device", "cpu", "--out-dir", str(out)]
    assert main([*argv, "--report", str(report)]) == 0
    page = html.unescape(report.read_text(encoding="utf-8"))
    links = re.findall(r"href='([^'#]+)'", page)
    assert links and all((report.parent / link).is_file() for link in links)
    assert "../results/attention_summary.json" in links
    assert not (out / "report.html").exists()


@pytest.mark.slow  # a tour with a failing step (3 s); other tests here run the tour in the fast suite
def test_a_failing_step_is_reported_and_the_tour_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv(FAIL_ENV, "predictions")
    code = main([*FAST_TOUR, "--model", "toy-2l", "--device", "cpu", "--out-dir", str(tmp_path)])
    assert code == 1
    err = capsys.readouterr().err
    assert "FAILED" in err and "predictions" in err
    assert (tmp_path / "attention_summary.json").exists()  # the next step still ran
    assert not (tmp_path / "predictions_eiffel.json").exists()
    page = (tmp_path / "report.html").read_text(encoding="utf-8")
    assert "5 sections, 1 failed" in page and "made to fail on purpose" in page


def test_an_unknown_step_to_fail_is_a_clean_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv(FAIL_ENV, "no_such_step")
    assert (
        main([*FAST_TOUR, "--model", "toy-2l", "--device", "cpu", "--out-dir", str(tmp_path)]) == 2
    )
    assert "no_such_step" in capsys.readouterr().err
    assert not (tmp_path / "report.html").exists()


def test_the_full_tour_states_its_time_and_every_step_has_a_line_of_code() -> None:
    from lmsci_mi.cli import _FEATURES
    from lmsci_mi.cli.tour import collect_steps

    full, quick = collect_steps(_FEATURES, quick=False), collect_steps(_FEATURES, quick=True)
    assert {s.name for s in quick} < {s.name for s in full}
    assert sum(s.seconds for s in quick) <= 300  # --quick stays a few minutes
    for step in full:
        assert step.seconds > 0 and step.code and step.title
        compile(step.code, step.name, "exec")  # one line of valid Python


# ---------------------------------------------------------------------- Chromium


@pytest.mark.slow  # starts a browser: seconds
@pytest.mark.chromium
@pytest.mark.skipif(
    shutil.which("chromium") is None, reason="needs Chromium (Debian package chromium)"
)
def test_the_report_renders_in_headless_chromium_offline(tmp_path: Path, tiny: LensModel) -> None:
    from PIL import Image, ImageStat

    summary = attention_summary(tiny, PROMPT)
    report = write_report(
        tmp_path / "report.html",
        [
            Section("Attention", "heads", {"attention_summary": summary}, two_views(tiny)[:1]),
        ],
    )
    # No network: a dead proxy and no name resolution, and its own network namespace when the
    # machine allows one.
    base = [
        "chromium",
        "--headless",
        "--disable-gpu",
        "--no-sandbox",
        "--no-first-run",
        "--proxy-server=127.0.0.1:9",
        "--host-resolver-rules=MAP * ~NOTFOUND",
        "--virtual-time-budget=5000",
        "--window-size=1200,1600",
    ]
    isolated = ["unshare", "-n"] if shutil.which("unshare") and _can_unshare() else []
    shot = tmp_path / "shot.png"
    subprocess.run(
        [*isolated, *base, f"--screenshot={shot}", report.as_uri()],
        capture_output=True,
        timeout=120,
        check=False,
    )
    assert shot.exists() and shot.stat().st_size > 10_000
    image = Image.open(shot).convert("L")
    assert max(ImageStat.Stat(image).stddev) > 10  # not a blank page
    # The attention view was drawn by the inlined script: its head selector is in the DOM.
    dom = subprocess.run(
        [*isolated, *base, "--dump-dom", report.as_uri()],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    ).stdout
    assert "Head Selector" in dom


def _can_unshare() -> bool:
    return (
        subprocess.run(["unshare", "-n", "true"], capture_output=True, check=False).returncode == 0
    )


@pytest.mark.slow  # a tour step (2 s), like the real-model tours
def test_the_probe_step_returns_a_sweep_and_a_summary(tiny: LensModel, tmp_path: Path) -> None:
    from lmsci_mi.cli.probe import _step_probe
    from lmsci_mi.probes.sweep import ProbeSweep

    output = _step_probe(tiny, tmp_path)
    assert isinstance(output.results["probe_country"], ProbeSweep)
    assert "selectivity" in output.summary and "\n" not in output.summary
