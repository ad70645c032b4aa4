"""Every view of a study shows one figure per trial: a study on the simulator, one trial re-measured,
then its objective read back from the store, trials.csv, front.csv, the HTML page, `status`, the
export's front list and Optuna's own values (what optuna-dashboard plots).

    python benchmarks/views_agree.py --space search_spaces/glm5-nvfp4-b200-tp4-sim.yaml --trials 10
    python benchmarks/views_agree.py --space search_spaces/dsv32-fp8-h200-sim.yaml --trials 10 --out DIR

Prints one row per measured trial with each view's figure as that view writes it, and the number of
figures that disagree with the store's median (0 is the goal). Exit 1 on any disagreement.
"""

from __future__ import annotations

import argparse
import csv
import html
import json
import re
import sqlite3
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import optuna  # noqa: E402

from tuner.metrics import formatted  # noqa: E402
from tuner.space.loader import load_space  # noqa: E402


def tuner(cwd: Path, *args: str, timeout_s: float = 1800) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [sys.executable, "-m", "tuner", *args], cwd=cwd, capture_output=True, text=True, timeout=timeout_s
    )
    if done.returncode not in (0, 1):  # 1: a constraint missed (a view still answers)
        raise SystemExit(f"tuner {' '.join(args)} exited {done.returncode}:\n{done.stderr[-2000:]}")
    return done


def store_medians(db: Path, metric: str) -> dict[int, tuple[float, int]]:
    """trial number -> (median of its measurements, n): every run of it, re-measurements included."""
    con = sqlite3.connect(db)
    cols = {r[1] for r in con.execute("PRAGMA table_info(tuner_trials)")}
    if metric not in cols:
        return {}
    query = (  # metric is one of the table's own column names (checked above)
        f"SELECT t.trial_number, r.{metric} FROM tuner_trials t JOIN tuner_trials r "
        "ON r.id = t.id OR r.confirm_of = t.id "
        f"WHERE t.confirm_of IS NULL AND t.outcome IN ('ok', 'slo_violation') AND r.{metric} IS NOT NULL"
    )
    rows = con.execute(query).fetchall()
    runs: dict[int, list[float]] = {}
    for number, value in rows:
        runs.setdefault(int(number), []).append(float(value))
    return {n: (statistics.median(v), len(v)) for n, v in runs.items()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--space", type=Path, required=True)
    ap.add_argument("--trials", type=int, default=10)
    ap.add_argument("--seed", type=int, default=2)
    ap.add_argument("--out", type=Path, default=None, help="the study's folder (default: a temporary one)")
    args = ap.parse_args()
    space_path = args.space.resolve()
    metric = load_space(space_path).objectives[0].metric
    work = args.out or Path(tempfile.mkdtemp(prefix="views-agree-"))
    work.mkdir(parents=True, exist_ok=True)
    sp = str(space_path)
    tuner(work, "run", "--space", sp, "--trials", str(args.trials), "--seed", str(args.seed), "--plain")
    db = work / "experiments.db"
    first = min(store_medians(db, metric), default=None)
    if first is not None:
        tuner(work, "confirm", "--space", sp, "--trial", str(first), "--repeats", "2")
    tuner(work, "report", "--out", "rep", "--html", "report.html")
    status = tuner(work, "status").stdout
    export = json.loads(tuner(work, "export", "--best", "--format", "json").stdout)
    trials_csv = {int(r["trial"]): r for r in csv.DictReader((work / "rep" / "trials.csv").open())}
    front_csv = {int(r["trial"]): r for r in csv.DictReader((work / "rep" / "front.csv").open())}
    page = html.unescape((work / "report.html").read_text())
    listed = [c for c in export.get("context", []) if c.startswith("  #")]
    names = optuna.get_all_study_names(f"sqlite:///{db}")
    study = optuna.load_study(study_name=names[0], storage=f"sqlite:///{db}")
    in_optuna = {t.number: t.values[0] for t in study.get_trials(deepcopy=False) if t.values}

    medians = store_medians(db, metric)
    print(f"{space_path.name}: {metric}, {args.trials} launches, trial {first} re-measured twice; {work}")
    head = ("trial", "runs", "store median", "trials.csv", "front.csv", "HTML", "status", "export", "Optuna")
    print(" | ".join(head))
    print("|".join("---" for _ in head))
    bad = 0
    for number, (median, n) in sorted(medians.items()):
        want = formatted(metric, median)
        row = trials_csv.get(number, {})
        cells = [str(number), str(n), want]
        shown_csv = formatted(metric, float(row[metric])) if row.get(metric) else "-"
        cells.append(shown_csv)
        front = front_csv.get(number)
        cells.append(
            formatted(metric, float(front[metric])) if front and front.get(metric) else "(not on front)"
        )
        hit = re.search(
            rf"<td class='num'>{number}</td>.*?<td class='num'>{re.escape(want)}</td>", page, re.S
        )
        cells.append(want if hit else "?")
        line = next((ln for ln in status.splitlines() if re.match(rf"\s*{number}\*?\s", ln)), "")
        cells.append(want if want in line or f"{median:,.0f}" in line else "?")
        mine = [c for c in listed if re.match(rf"  #(\d+,)*{number}[,:]", c)]
        cells.append((want if want in mine[0] else "?") if mine else "(not listed)")
        opt = in_optuna.get(number)
        cells.append(formatted(metric, opt) if opt is not None else "-")
        bad += sum(c not in (want, "(not on front)", "(not listed)") for c in cells[3:])
        print(" | ".join(cells))
    chosen = export.get("trial")
    print(f"export --best chose trial {chosen}: {formatted(metric, export['metrics'].get(metric))}")
    if chosen in medians and formatted(metric, export["metrics"].get(metric)) != formatted(
        metric, medians[chosen][0]
    ):
        bad += 1
    print(f"figures that disagree with the store's median: {bad}")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
