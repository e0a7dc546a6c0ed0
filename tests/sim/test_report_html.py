"""`slurm-marl report --html` (issue 34): the page rendered in headless Chromium (Debian's
``chromium``, installed by ``bash run.sh setup``). Checked: the page loads (a screenshot,
not of one colour), every image is a ``data:`` PNG of the size its ``<img>`` states and
the code asks for, every string of the history is escaped, and the page requests nothing:
statically (no ``src``/``href``/``url(`` outside ``data:`` and ``#``) and in Chromium,
whose every request goes to a proxy this test listens on."""

from __future__ import annotations

import base64
import json
import shutil
import socket
import struct
import subprocess
import threading
from html import escape
from html.parser import HTMLParser
from pathlib import Path

import pytest
from PIL import Image
from test_report import invoke, job, site

from slurm_marl.history.records import write_history
from slurm_marl.sim.metrics import figure_px
from slurm_marl.sim.perjob_tables import worst_job
from slurm_marl.sim.report_html import render

EVIL = '<script>alert("x")</script>&amp;'
# Chromium's own background requests (clock, component updates, sign-in), not the page's.
CHROMIUM_OWN_HOSTS = {"clients2.google.com", "update.googleapis.com", "redirector.gvt1.com",
                      "accounts.google.com", "www.google.com",
                      "optimizationguide-pa.googleapis.com", "content-autofill.googleapis.com",
                      "safebrowsingohttpgateway.googleapis.com"}


def chromium() -> str:
    found = shutil.which("chromium")
    if found is None:
        pytest.fail("chromium is not installed: run `bash run.sh setup` (it installs "
                    "Debian's chromium package, which this test renders the report with)")
    return found


class Links(HTMLParser):
    """Every attribute that can make a request, and every <img>."""

    URL_ATTRS = {"src", "href", "srcset", "poster", "data", "action", "formaction",
                 "background", "manifest", "cite", "ping"}

    def __init__(self):
        super().__init__()
        self.urls: list[str] = []
        self.imgs: list[dict] = []
        self.tags: set[str] = set()

    def handle_starttag(self, tag, attrs):
        self.tags.add(tag)
        got = dict(attrs)
        self.urls += [v or "" for k, v in attrs if k in self.URL_ATTRS]
        if tag == "img":
            self.imgs.append(got)


def png_size(data: bytes) -> tuple[int, int]:
    """Width and height from a PNG's IHDR."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


class Proxy:
    """A TCP listener on loopback that records the first bytes of each connection (the
    request line an HTTP proxy gets) and closes it. A connection that sends nothing before
    it closes or goes quiet for 5 s (Chromium opens spare sockets to its proxy ahead of need,
    a preconnect) asked for no host and is only counted."""

    def __init__(self):
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.requests: list[str] = []
        self.silent = 0
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                conn.settimeout(5)
                try:
                    first = conn.recv(300).decode("latin-1")
                except OSError:
                    first = ""
                if first:
                    self.requests.append(first)
                else:
                    self.silent += 1

    def hosts(self) -> set[str]:
        """The hosts asked for (``GET http://host/...``, ``CONNECT host:443``)."""
        out = set()
        for r in self.requests:
            parts = r.split(" ")
            target = parts[1] if len(parts) > 1 else r
            out.add(target.split("://")[-1].split("/")[0].split(":")[0])
        return out

    def close(self):
        self.sock.close()


def browse(page: Path, *args: str) -> tuple[set[str], subprocess.CompletedProcess]:
    """Open ``page`` in headless Chromium with every request sent to a ``Proxy`` (loopback
    included): the hosts the page asked for, less Chromium's own, and the run."""
    proxy = Proxy()
    try:
        run = subprocess.run(
            [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
             f"--proxy-server=http://127.0.0.1:{proxy.port}", "--proxy-bypass-list=<-loopback>",
             *args, page.as_uri()], capture_output=True, text=True, timeout=120)
    finally:
        proxy.close()
    return proxy.hosts() - CHROMIUM_OWN_HOSTS, run


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> tuple[Path, dict]:
    tmp = tmp_path_factory.mktemp("report")
    conf = site(tmp)
    # A long 3-GPU job, a 4-GPU job that waited for it, then 1-GPU jobs of three users
    # (one of them named as markup) and a job on the other partition.
    jobs = [job("1", 0, 0, 3000, gpus=3), job("2", 10, 2990, 3000, gpus=4)] + [
        job(str(k), 20 + 40 * k, 5 * k, 300 + 60 * k, user=[EVIL, "bob", "carol"][k % 3])
        for k in range(3, 15)] + [job("20", 30, 0, 900, partition="big", gpus=8)]
    write_history(tmp / "h.csv", jobs)
    r = invoke("--history", str(tmp / "h.csv"), "--slurm-conf", str(conf),
               "--profiles", "fifo-backfill,las-consolidate", "--strengths", "none,medium",
               "--out", str(tmp / "r.json"), "--html", str(tmp / "r.html"))
    assert r.exit_code == 0, r.output
    return tmp / "r.html", json.loads((tmp / "r.json").read_text())


def test_the_html_is_the_json_rendered(report):
    page, doc = report
    assert page.read_text(encoding="utf-8") == render(doc)
    # each what-if row's worst job, by its sacct id (the history's 1..14, 20)
    for r in [r for r in doc["what_if"]["results"] if r["baseline"] is not None]:
        for p in [r["per_job"]] + [g["per_job"] for g in r["by_partition"].values()]:
            assert p["worst_job"]["job_id"] in {"1", "2", "20", *map(str, range(3, 15))}
            assert f"<td class=\"n\">{escape(worst_job(p['worst_job']))}</td>" in \
                page.read_text(encoding="utf-8")


def test_strings_of_the_history_are_escaped(report):
    text = report[0].read_text(encoding="utf-8")
    assert EVIL not in text and "<script" not in text
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;&amp;amp;" in text
    parser = Links()
    parser.feed(text)
    assert parser.tags <= {"html", "head", "meta", "title", "style", "body", "h1", "h2", "h3",
                           "p", "b", "ul", "li", "div", "table", "tr", "th", "td",
                           "img"}


def test_the_page_asks_for_nothing_outside_itself(report):
    text = report[0].read_text(encoding="utf-8")
    parser = Links()
    parser.feed(text)
    assert parser.urls, "no image found"
    assert [u for u in parser.urls if not (u.startswith("data:") or u.startswith("#"))] == []
    assert "url(" not in text and "@import" not in text and "@font-face" not in text


def test_the_plots_are_pngs_of_the_size_asked_for(report):
    page, doc = report
    parser = Links()
    parser.feed(page.read_text(encoding="utf-8"))
    # calibration CDF, GPUs held over time, one ratio CDF per strength
    assert len(parser.imgs) == 2 + len(doc["what_if"]["strengths"])
    for img in parser.imgs:
        head, _, data = img["src"].partition(",")
        assert head == "data:image/png;base64"
        size = png_size(base64.b64decode(data))
        assert size == figure_px() == (int(img["width"]), int(img["height"]))
        assert img["alt"]


def test_chromium_renders_the_page_without_any_request(report, tmp_path):
    page = report[0]
    shot = tmp_path / "shot.png"
    asked, run = browse(page, f"--screenshot={shot}", "--window-size=1200,3000")
    assert run.returncode == 0, run.stderr[-2000:]
    assert asked == set(), f"the page asked for {asked}"
    with Image.open(shot) as im:
        assert im.size == (1200, 3000)
        colours = im.convert("RGB").getcolors(maxcolors=1 << 16)
    assert colours is None or len(colours) > 50, "the screenshot is (nearly) one colour"


def test_the_request_check_sees_a_page_that_asks(tmp_path):
    # The check above is not blind: a page with a remote image and stylesheet is caught.
    page = tmp_path / "remote.html"
    page.write_text('<html><body><img src="http://example.com/x.png">'
                    '<link rel="stylesheet" href="https://cdn.example.org/a.css"></body></html>')
    asked, run = browse(page, "--dump-dom")
    assert run.returncode == 0, run.stderr[-2000:]
    assert asked == {"example.com", "cdn.example.org"}
