"""docs/img/report.png: the HTML page of `slurm-marl report --tune` on a synthetic history,
as headless Chromium renders it (issue 34).

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/report_screenshot.py --out docs/img/report.png

The site is the two-partition slurm.conf of tests/sim/test_report.py (``gpu``: one 4-GPU
node, ``big``: two), the history ``--days`` days of GPU jobs (seeded; 1-8 GPUs, 5 min to
3 h, four users in two accounts, waits as if recorded) of which the last day is the period
(``--from``) and the days before it are what ``--tune`` learns on. Chromium's command is the
one of tests/sim/test_report_html.py; the shot is cropped below the page's last content
and saved as a 256-colour PNG to stay small.
"""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
import tempfile
from dataclasses import replace
from datetime import datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "unit"))

from PIL import Image, ImageChops  # noqa: E402
from test_report import T0, job, site  # noqa: E402  (the test slurm.conf and job maker)
from test_report_html import chromium  # noqa: E402

from slurm_marl.cli import app  # noqa: E402
from slurm_marl.history.records import write_history  # noqa: E402

USERS = (("alice", "vision"), ("bob", "vision"), ("carol", "nlp"), ("dave", "nlp"))


def history(days: int, per_day: int, seed: int) -> list:
    """``per_day`` jobs a day for ``days`` days ending at T0 + 1 day (the period's end)."""
    rng = random.Random(seed)
    start = T0 - (days - 1) * 86400
    jobs = []
    for k in range(days * per_day):
        submit = rng.uniform(0, days * 86400)
        big = rng.random() < 0.4
        gpus = rng.choice((1, 2, 4, 8) if big else (1, 1, 1, 2, 4))
        ran = min(10800.0, rng.lognormvariate(6.8, 1.0)) + 300
        user, account = rng.choice(USERS)
        j = job(str(1000 + k), start - T0 + submit, rng.expovariate(1 / 1000), ran, gpus=gpus,
                partition="big" if big else "gpu", user=user)
        jobs.append(replace(j, account=account, name=rng.choice(("train", "eval", "sweep"))))
    return sorted(jobs, key=lambda j: j.submit_s)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "img" / "report.png")
    ap.add_argument("--days", type=int, default=3)
    ap.add_argument("--per-day", type=int, default=60)
    ap.add_argument("--seed", type=int, default=3)
    ap.add_argument("--width", type=int, default=1100)
    ap.add_argument("--height", type=int, default=8000, help="window height before the crop")
    args = ap.parse_args()
    args.out = args.out.resolve()
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        os.chdir(tmp)            # the page names its files as given: short, relative
        site(tmp / "site")
        write_history(tmp / "history.csv", history(args.days, args.per_day, args.seed))
        day = datetime.fromtimestamp(T0)
        app(["report", "--history", "history.csv", "--slurm-conf", "site/slurm.conf",
             "--from", day.isoformat(), "--to", (day + timedelta(days=1)).isoformat(),
             "--tune", "--profiles-out", "tuned-profiles", "--html", "r.html", "--json"],
            standalone_mode=False)
        shot = tmp / "shot.png"
        run = subprocess.run(
            [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
             "--hide-scrollbars", f"--screenshot={shot}",
             f"--window-size={args.width},{args.height}", (tmp / "r.html").as_uri()],
            capture_output=True, text=True, timeout=300)
        if run.returncode != 0:
            sys.exit(f"chromium failed: {run.stderr[-2000:]}")
        with Image.open(shot) as im:
            rgb = im.convert("RGB")
        blank = Image.new("RGB", rgb.size, rgb.getpixel((0, rgb.height - 1)))
        box = ImageChops.difference(rgb, blank).getbbox()
        if box is None:
            sys.exit("the screenshot is blank")
        bottom = min(rgb.height, box[3] + 30)
        if bottom >= rgb.height:
            sys.exit(f"the page is taller than --height {args.height}: raise it")
        page = rgb.crop((0, 0, rgb.width, bottom))
        page.quantize(colors=256, method=Image.Quantize.MEDIANCUT).save(args.out,
                                                                         optimize=True)
    print(f"{args.out}: {page.width}x{page.height}, {args.out.stat().st_size / 1024:.0f} KB")


if __name__ == "__main__":
    main()
